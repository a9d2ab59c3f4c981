# SPDX-License-Identifier: Apache-2.0
"""load.py - one load generator for any server of the OpenAI completions API (deras serve,
llama-server): C concurrent clients, each sending streaming /v1/completions requests back
to back until R requests are done, and the aggregate output tokens per second.

    python3 bench/llamacpp/load.py --url http://127.0.0.1:9400 [--concurrency 16]
        [--requests 48] [--prompt-tokens 100] [--max-tokens 64] [--vocab 49152]
        [--extra '{"cache_prompt": false}'] [--seed 1]

Prompts are arrays of token ids (both servers take them, so both see exactly the same
tokens): request i gets --prompt-tokens ids drawn with a fixed seed from [1000, vocab -
1000) (clear of the special tokens at the low end), distinct from its first token on, so
no prefix cache can help. Every request asks greedy, max_tokens, ignore_eos, stream, and
stream_options.include_usage; a request's output tokens are its usage.completion_tokens
(the number of streamed token chunks where a server sends no usage). Aggregate output
tokens/s = all output tokens / wall time from the first send to the last byte. Also TTFT
and per-request inter-token latency. Plain asyncio sockets (HTTP/1.1, chunked), no
dependency. Prints one JSON line on stdout. Cost: what the server does; the client is a
few percent of one core.
"""
import argparse
import asyncio
import json
import random
import sys
import time
from urllib.parse import urlparse


async def read_chunked_or_plain(reader, headers):
    """Yields body pieces as they arrive."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            line = await reader.readline()
            if not line:
                return
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def one_request(host, port, body, t_start):
    reader, writer = await asyncio.open_connection(host, port)
    payload = json.dumps(body).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                 b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (host.encode(), port, len(payload))
                 + payload)
    await writer.drain()
    t0 = time.perf_counter()
    status = await reader.readline()
    code = int(status.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    buf, chunks, usage, stamps, err = b"", 0, None, [], None
    async for piece in read_chunked_or_plain(reader, headers):
        buf += piece
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                msg = json.loads(data)
                if "error" in msg:
                    err = msg["error"]
                if msg.get("usage"):
                    usage = msg["usage"]
                if msg.get("choices"):
                    chunks += 1
                    stamps.append(time.perf_counter())
    writer.close()
    if code != 200 or err:
        raise RuntimeError("HTTP %d: %s" % (code, err or buf[:300]))
    out = usage["completion_tokens"] if usage and "completion_tokens" in usage else chunks
    ttft = stamps[0] - t0 if stamps else None
    itl = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None
    return {"out": out, "chunks": chunks, "ttft": ttft, "itl": itl,
            "prompt": usage.get("prompt_tokens") if usage else None}


async def run(args):
    u = urlparse(args.url)
    host, port = u.hostname, u.port or 80
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(1000, args.vocab - 1000) for _ in range(args.prompt_tokens)]
               for _ in range(args.requests)]
    extra = json.loads(args.extra) if args.extra else {}
    queue = list(range(args.requests))
    results = []
    t_start = time.perf_counter()

    async def client():
        while queue:
            i = queue.pop(0)
            body = {"prompt": prompts[i], "max_tokens": args.max_tokens, "temperature": 0,
                    "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True}}
            body.update(extra)
            results.append(await one_request(host, port, body, t_start))

    await asyncio.gather(*[client() for _ in range(args.concurrency)])
    wall = time.perf_counter() - t_start
    out = sum(r["out"] for r in results)
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    itls = sorted(r["itl"] for r in results if r["itl"] is not None)
    med = lambda v: v[len(v) // 2] if v else None
    return {"bench": "load", "url": args.url, "concurrency": args.concurrency,
            "requests": len(results), "prompt_tokens": args.prompt_tokens,
            "max_tokens": args.max_tokens, "output_tokens": out,
            "short_requests": sum(r["out"] < args.max_tokens for r in results),
            "wall_s": round(wall, 3), "output_tokens_per_s": round(out / wall, 2),
            "p50_ttft_s": med(ttfts) and round(med(ttfts), 4),
            "p50_itl_ms": med(itls) and round(1e3 * med(itls), 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--prompt-tokens", type=int, default=100)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--extra", default="", help="JSON object merged into every request body")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    sys.exit(main())
