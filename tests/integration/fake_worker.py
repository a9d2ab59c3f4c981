#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fake_worker.py - a deras worker without a model, for testing the router.

Speaks common/wire/worker_proto.h over ZeroMQ like deras-worker does (DEALER, routing id =
name, HELLO -> WELCOME, HEARTBEAT, SUBMIT/ABORT/DRAIN, STEP, REJECT), but instead of
running a model it "generates" each sample by replaying the request's prompt ids in a
loop, one token per sample per step, every --step-ms. So the router's detokenized output
is the prompt text repeated, which makes stop strings and chunking easy to check.

KV accounting is simulated: each live request holds ceil((prompt + generated) / 16)
blocks per sample out of --kv-blocks; aborts and finishes give them back, so a router
test can watch kv_blocks_free return to the total through ping.

--stuck-after N plays a worker whose engine hangs inside its (N+1)-th step: from then on
it computes nothing and its own socket goes quiet, but its pulse (routing id
"<name>/hb", as worker/pulse.c) keeps heartbeating, so the router hears it alive while
it makes no progress; --stuck-after-requests K hangs the same way once K requests have
arrived (however many steps that took: a test decides when, not the clock).
--starting-ms T reports phase "starting" for T ms after WELCOME (a slow warm-up);
--starting-until PATH reports it until the file PATH exists (a warm-up that ends when the
test says so).

    fake_worker.py --router ipc:///tmp/deras-$UID/workers.sock --name w0 --model tiny-chat

Plain python3 with python3-zmq and python3-msgpack (Debian packages).
"""
import argparse
import os
import sys
import time

import msgpack
import zmq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    ap.add_argument("--name", default="fake0")
    ap.add_argument("--model", default="tiny-chat")
    ap.add_argument("--vocab", type=int, default=1005)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--kv-blocks", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--eos", type=int, default=-1, help="end a sample after this many tokens with reason stop")
    ap.add_argument("--stuck-after", type=int, default=-1, help="hang after this many steps (pulses only)")
    ap.add_argument("--stuck-after-requests", type=int, default=0,
                    help="hang once this many requests arrived (pulses only)")
    ap.add_argument("--starting-ms", type=float, default=0, help="report phase starting this long")
    ap.add_argument("--starting-until", default=None,
                    help="report phase starting until this file exists")
    args = ap.parse_args()

    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.ROUTING_ID, args.name.encode())
    s.setsockopt(zmq.LINGER, 0)
    s.connect(args.router)

    hello = {"type": "hello", "v": 1, "name": args.name, "device": "fake", "model": args.model,
             "vocab_size": args.vocab, "max_model_len": args.max_model_len, "tp_size": 1,
             "kv_blocks_total": args.kv_blocks, "block_size": 16, "max_seqs": args.max_seqs,
             "pid": os.getpid()}
    live = {}  # rid -> {"prompt": [...], "n", "max_tokens", "gen": [count per sample], "done": [bool]}
    draining = False
    heartbeat_ms = 1000
    registered = False
    last_hb = 0.0
    last_hello = 0.0
    steps = 0
    n_received = 0
    welcomed_at = None
    pulse = None  # the "<name>/hb" socket, once stuck

    def blocks_used():
        used = 0
        for r in live.values():
            for k in range(r["n"]):
                if not r["done"][k]:
                    used += (len(r["prompt"]) + r["gen"][k] + 15) // 16
        return used

    def phase():
        if welcomed_at is None or time.monotonic() - welcomed_at < args.starting_ms / 1000:
            return "starting"
        if args.starting_until and not os.path.exists(args.starting_until):
            return "starting"
        return "draining" if draining else "ready"

    def load():
        running = sum(1 for r in live.values() for k in range(r["n"]) if not r["done"][k])
        return {"phase": phase(), "running": running, "waiting": 0,
                "queued_tokens": 0,
                "running_tokens": sum(len(r["prompt"]) + sum(r["gen"]) for r in live.values()),
                "kv_blocks_free": max(0, args.kv_blocks - blocks_used()),
                "kv_blocks_total": args.kv_blocks, "tokens_per_s": 0.0, "steps": steps,
                "preemptions": 0, "prefix_hit_tokens": 0, "prefix_query_tokens": 0,
                "prompt_tokens": 0, "generated_tokens": 0}

    def send(obj):
        s.send(msgpack.packb(obj))

    while True:
        now = time.monotonic()
        if 0 <= args.stuck_after <= steps or 0 < args.stuck_after_requests <= n_received:
            if pulse is None:
                print(f"{args.name}: stuck after {steps} steps and {n_received} requests "
                      f"(pulses only)", file=sys.stderr, flush=True)
                pulse = ctx.socket(zmq.DEALER)
                pulse.setsockopt(zmq.ROUTING_ID, (args.name + "/hb").encode())
                pulse.setsockopt(zmq.LINGER, 0)
                pulse.connect(args.router)
            pulse.send(msgpack.packb({"type": "heartbeat", "load": load()}))
            time.sleep(heartbeat_ms / 1000)
            continue
        if not registered and now - last_hello > 1.0:
            send(hello)
            last_hello = now
        if registered and now - last_hb > heartbeat_ms / 1000:
            send({"type": "heartbeat", "load": load()})
            last_hb = now
        timeout = args.step_ms if live else 50
        if s.poll(timeout):
            while True:
                try:
                    m = msgpack.unpackb(s.recv(zmq.NOBLOCK), raw=False)
                except zmq.Again:
                    break
                t = m.get("type")
                if t == "welcome":
                    registered = True
                    welcomed_at = time.monotonic()
                    heartbeat_ms = m.get("heartbeat_ms", 1000)
                    print(f"{args.name}: welcome (heartbeat {heartbeat_ms} ms)", file=sys.stderr, flush=True)
                elif t == "refuse":
                    print(f"{args.name}: refused: {m.get('reason')}", file=sys.stderr, flush=True)
                    if not registered:
                        sys.exit(3)
                    live.clear()
                    registered = False
                    last_hello = 0
                elif t == "submit":
                    rid = m["rid"]
                    raw = m["prompt_ids"]
                    prompt = [int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, len(raw), 4)]
                    if draining:
                        send({"type": "reject", "rid": rid, "code": "busy", "message": "draining"})
                        continue
                    n_received += 1
                    live[rid] = {"prompt": prompt, "n": m["n"], "max_tokens": m["max_tokens"],
                                 "gen": [0] * m["n"], "done": [False] * m["n"]}
                elif t == "abort":
                    live.pop(m["rid"], None)
                elif t == "drain":
                    draining = True
                elif t == "shutdown":
                    sys.exit(0)
        if not live or not registered:
            continue
        tokens, finishes = [], []
        for rid, r in list(live.items()):
            for k in range(r["n"]):
                if r["done"][k]:
                    continue
                g = r["gen"][k]
                tokens.append([rid, k, r["prompt"][g % len(r["prompt"])]])
                r["gen"][k] = g + 1
                reason = None
                if args.eos > 0 and g + 1 >= args.eos:
                    reason = 0
                elif g + 1 >= r["max_tokens"]:
                    reason = 1
                if reason is not None:
                    r["done"][k] = True
                    finishes.append([rid, k, reason, len(r["prompt"]), g + 1])
            if all(r["done"]):
                del live[rid]
        steps += 1
        send({"type": "step", "tokens": tokens, "finishes": finishes, "load": load()})


if __name__ == "__main__":
    main()
