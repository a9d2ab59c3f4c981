# SPDX-License-Identifier: Apache-2.0
"""fake_router.py - a tiny stand-in for deras-router, for testing clients.

Speaks the client protocol (common/wire/protocol.h) on a ZeroMQ ROUTER socket from a thread:
requests, cancels and pings in; chunks, finals, errors and pongs out. It generates no real
text: sample k of a request yields token ids 100 + 10*k + i with text "w<i> ". Prompts steer
it, so tests can reach every path:

    "error:CODE"   the request fails with that error code
    "silent"       never answered (client timeouts)
    "slow"         a token every 20 ms (interleaving)
    "hold:K"       K tokens at once, then nothing until cancelled (a request that lasts
                   exactly as long as the test wants, however fast or slow the machine)
    "stop:K"       sample ends after K tokens with finish_reason "stop"
    anything else  max_tokens tokens (default 256), finish_reason "length"

Like the router it is strict about what arrives: unknown keys, wrong types, a missing or
double prompt, duplicate live ids and unknown cancels get the protocol's error codes. Every
decoded client message is kept in `received` for assertions.

Run standalone to try a client by hand:
    python3 tests/integration/fake_router.py --address tcp://127.0.0.1:5599 [--delay 0.001]
"""

import argparse
import threading
import time

import msgpack
import zmq

INT_FIELDS = {"max_tokens", "n", "top_k", "logprobs", "seed", "deadline_ms", "v",
              "num_speculative_tokens", "min_tokens"}
FLOAT_FIELDS = {"temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                "frequency_penalty"}
BOOL_FIELDS = {"stream", "ignore_eos", "add_special_tokens", "add_generation_prompt",
               "json_object"}
OTHER_FIELDS = {"type", "id", "prompt", "prompt_ids", "stop", "stop_token_ids", "logit_bias",
                "messages", "tools", "chat_template_kwargs", "json_schema", "regex", "grammar"}
REQUEST_FIELDS = INT_FIELDS | FLOAT_FIELDS | BOOL_FIELDS | OTHER_FIELDS


class _Req:
    def __init__(self, ident, msg, delay):
        self.ident, self.id = ident, msg["id"]
        self.n = msg.get("n", 1)
        self.max_tokens = msg.get("max_tokens", 256)
        self.stream = msg.get("stream", False)
        self.logprobs = msg.get("logprobs", 0)
        prompt = msg.get("prompt")
        if "messages" in msg:  # a chat: one prompt token per message, as a stand-in
            self.prompt_tokens = len(msg["messages"])
        elif "prompt_ids" in msg:
            self.prompt_tokens = len(msg["prompt_ids"])
        else:
            self.prompt_tokens = len(prompt.split())
        self.limit, self.finish = self.max_tokens, "length"
        if prompt and prompt.startswith("stop:"):
            self.limit, self.finish = min(int(prompt[5:]), self.max_tokens), "stop"
        self.delay = 0.02 if prompt == "slow" else delay
        self.hold = int(prompt[5:]) if prompt and prompt.startswith("hold:") else None
        self.generated = [0] * self.n
        self.done = [False] * self.n
        self.t0 = time.monotonic()
        self.t_first = None
        self.next_at = self.t0


class FakeRouter(threading.Thread):
    """Start with start(), stop with stop(); `address` is where clients connect."""

    def __init__(self, address="tcp://127.0.0.1:*", delay=0.0, curve_secret_key=None):
        super().__init__(daemon=True)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, 0)
        if curve_secret_key is not None:
            self._sock.setsockopt(zmq.CURVE_SERVER, 1)
            self._sock.setsockopt(zmq.CURVE_SECRETKEY, curve_secret_key)
        self._sock.bind(address)
        self.address = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.delay = delay
        self.received = []
        self._live = {}       # (identity, id) -> _Req
        self._quit = threading.Event()

    def stop(self):
        self._quit.set()
        self.join(5)
        self._sock.close(0)
        self._ctx.term()

    # ---- replies ----

    def _send(self, ident, msg):
        self._sock.send_multipart([ident, msgpack.packb(msg, use_bin_type=True)])

    def _error(self, ident, rid, code, message):
        self._send(ident, {"type": "error", "id": rid, "code": code, "message": message})

    def _final(self, r, k, reason, abort_reason=None):
        now = time.monotonic()
        msg = {"type": "final", "id": r.id, "index": k, "finish_reason": reason,
               "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.generated[k],
                         "queue_ms": 0.1,
                         "ttft_ms": ((r.t_first or now) - r.t0) * 1e3,
                         "total_ms": (now - r.t0) * 1e3}}
        if abort_reason:
            msg["abort_reason"] = abort_reason
        if not r.stream:
            g = r.generated[k]
            msg["text"] = "".join("w%d " % i for i in range(g))
            msg["token_ids"] = [100 + 10 * k + i for i in range(g)]
            if r.logprobs:
                msg["logprobs"] = [self._lp(r, 100 + 10 * k + i) for i in range(g)]
        r.done[k] = True
        self._send(r.ident, msg)

    def _lp(self, r, tok):
        return {"token_id": tok, "logprob": -0.5,
                "top": [[tok + j, -0.5 - j] for j in range(r.logprobs)]}

    # ---- requests ----

    def _check(self, msg):
        """(code, message) for the first violation, or None."""
        for k, v in msg.items():
            if k not in REQUEST_FIELDS:
                return "invalid_field", "unknown key '%s'" % k
            if k in INT_FIELDS and (isinstance(v, bool) or not isinstance(v, int)):
                return "invalid_field", "%s: expected an integer" % k
            if k in FLOAT_FIELDS and (isinstance(v, bool) or not isinstance(v, (int, float))):
                return "invalid_field", "%s: expected a number" % k
            if k in BOOL_FIELDS and not isinstance(v, bool):
                return "invalid_field", "%s: expected a boolean" % k
            if k == "logit_bias" and not (isinstance(v, dict) and all(
                    isinstance(t, int) and isinstance(b, float) for t, b in v.items())):
                return "invalid_field", "logit_bias: expected a map of int to float"
        if msg.get("v", 1) != 1:
            return "unsupported_version", "v: expected 1"
        if not isinstance(msg.get("id"), str) or not msg["id"] or len(msg["id"]) > 64:
            return "missing_field" if "id" not in msg else "invalid_field", "id: 1..64 bytes"
        if sum(k in msg for k in ("prompt", "prompt_ids", "messages")) != 1:
            return "missing_field", "exactly one of prompt, prompt_ids, messages"
        if not 1 <= msg.get("n", 1) <= 16:
            return "limit_exceeded", "n: at most 16"
        return None

    def _on_request(self, ident, msg):
        bad = self._check(msg)
        rid = msg.get("id", "") if isinstance(msg.get("id"), str) else ""
        if bad:
            return self._error(ident, rid, *bad)
        if (ident, rid) in self._live:
            return self._error(ident, "", "duplicate_id", "id '%s' is already live" % rid)
        prompt = msg.get("prompt")
        if prompt and prompt.startswith("error:"):
            return self._error(ident, rid, prompt[6:], "fake failure requested by the prompt")
        if prompt == "silent":
            return
        self._live[(ident, rid)] = _Req(ident, msg, self.delay)

    def _on_cancel(self, ident, msg):
        r = self._live.pop((ident, msg.get("id")), None)
        if r is None:
            return self._error(ident, msg.get("id", ""), "unknown_request",
                               "no live request '%s'" % msg.get("id"))
        for k in range(r.n):
            if not r.done[k]:
                self._final(r, k, "abort", "cancelled")

    def _on_ping(self, ident):
        self._send(ident, {"type": "pong", "v": 1, "workers": [
            {"name": "fake0", "state": "ready", "running": len(self._live), "waiting": 0,
             "kv_blocks_free": 100, "kv_blocks_total": 128, "served": len(self.received)}]})

    def _step(self):
        """One token for every request that is due."""
        now = time.monotonic()
        for key, r in list(self._live.items()):
            if now < r.next_at:
                continue
            r.next_at = now + r.delay
            if r.t_first is None:
                r.t_first = now
            for k in range(r.n):
                if r.done[k]:
                    continue
                if r.hold is not None and r.generated[k] >= r.hold:
                    continue  # held: only a cancel ends it
                if r.generated[k] >= r.limit:
                    self._final(r, k, r.finish)
                    continue
                i = r.generated[k]
                r.generated[k] += 1
                if r.stream:
                    chunk = {"type": "chunk", "id": r.id, "index": k,
                             "token_ids": [100 + 10 * k + i], "text": "w%d " % i}
                    if r.logprobs:
                        chunk["logprobs"] = [self._lp(r, 100 + 10 * k + i)]
                    self._send(r.ident, chunk)
            if all(r.done):
                del self._live[key]

    def run(self):
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._quit.is_set():
            timeout = 20
            if self._live:
                nxt = min(r.next_at for r in self._live.values())
                timeout = max(0, min(20, int((nxt - time.monotonic()) * 1000)))
            if poller.poll(timeout):
                frames = self._sock.recv_multipart()
                ident, body = frames[0], frames[-1]
                try:
                    # logit_bias has int keys, which msgpack refuses by default
                    msg = msgpack.unpackb(body, raw=False, strict_map_key=False)
                except Exception:
                    self._error(ident, "", "malformed", "not msgpack")
                    continue
                self.received.append(msg)
                t = msg.get("type") if isinstance(msg, dict) else None
                if t == "request":
                    self._on_request(ident, msg)
                elif t == "cancel":
                    self._on_cancel(ident, msg)
                elif t == "ping":
                    self._on_ping(ident)
                else:
                    self._error(ident, "", "unknown_type", "type %r" % (t,))
            self._step()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default="tcp://127.0.0.1:5599")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between tokens")
    a = ap.parse_args()
    r = FakeRouter(a.address, a.delay)
    r.start()
    print("fake router on", r.address, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        r.stop()


if __name__ == "__main__":
    main()
