# SPDX-License-Identifier: Apache-2.0
"""example.py - the deras Python client in a few lines.

    python3 example.py [tcp://127.0.0.1:5555] ["prompt"]
"""
import sys

from deras_client import Chunk, Client, DerasError

address = sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:5555"
prompt = sys.argv[2] if len(sys.argv) > 2 else "The capital of France is"

with Client(address, timeout=30) as client:
    try:
        print("router:", client.ping()["workers"])

        # blocking: the whole completion at once
        c = client.complete(prompt, max_tokens=32, temperature=0)
        print(repr(c.text), c.finish_reasons, c.usage)

        # streaming: text as it is generated
        for ev in client.stream(prompt, max_tokens=32, temperature=0.8, seed=1, stop=["\n"]):
            if isinstance(ev, Chunk):
                print(ev.text, end="", flush=True)
            else:
                print("\n[%s, %d tokens]" % (ev.finish_reason, ev.usage.completion_tokens))

        # several requests in flight on one client
        streams = [client.stream(prompt, max_tokens=16, seed=i) for i in range(4)]
        for s in streams:
            print(s.id, repr(s.collect().text))
    except DerasError as e:
        sys.exit("deras: %s (%s)" % (e.message, e.code))
