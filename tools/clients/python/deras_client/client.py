# SPDX-License-Identifier: Apache-2.0
"""client.py - the deras client: one ZeroMQ DEALER socket, msgpack frames, many requests.

Design: every message from the router names the request it belongs to ("id"), so one
socket carries any number of requests. Whoever waits for request A reads the socket;
messages for other live requests are queued per id and handed out when their owner asks,
messages for ids this client no longer tracks (after a timeout or close) are dropped.
Nothing runs in the background: all work happens inside the calls, which keeps the client
a single small object with no threads to start or stop.

Every wait has a deadline (the `timeout`: the longest silence tolerated between two
messages of one request), so a router that died surfaces as DerasTimeout instead of a
hang; a timed-out request is cancelled on the router (best effort) and forgotten here.
Nothing answering at all is told sooner: while no connection to the router is up (the
socket's monitor says whether a handshake completed), a wait ends after connect_timeout
with DerasUnavailable, which names the address (link.py).

Thread safety: a Client is NOT thread-safe (ZeroMQ sockets are not). Use one Client per
thread - they are cheap and may share a zmq.Context - or serialize every call on a Client
with your own lock, including iterating its streams.
"""

import collections
import time
import uuid
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union)

import msgpack
import zmq

from .link import Key, LinkWatch, make_socket
from .types import (PROTOCOL_VERSION, Choice, Chunk, Completion, DerasError, DerasTimeout,
                    Final, Usage)

DEFAULT_ADDRESS = "tcp://127.0.0.1:5555"
DEFAULT_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0

Event = Union[Chunk, Final]
Message = Dict[str, Any]

# Request fields by wire name (common/wire/protocol.h, docs/protocol.md) and the Python type
# they must have. Anything else passed to complete()/stream() is a TypeError, raised before
# a byte is sent.
INT_PARAMS = ("max_tokens", "n", "top_k", "logprobs", "seed", "deadline_ms",
              "num_speculative_tokens", "min_tokens")
FLOAT_PARAMS = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                "frequency_penalty")
BOOL_PARAMS = ("ignore_eos", "add_special_tokens", "json_object")
LIST_PARAMS = ("stop", "stop_token_ids")
MAP_PARAMS = ("logit_bias",)  # {token id: bias}; ids as ints or decimal strings (OpenAI's)
# Structured output (at most one): json_schema a dict (or its JSON text, or a bool), regex
# and grammar (GBNF) strings, json_object True for any JSON object.
STR_PARAMS = ("regex", "grammar")
SCHEMA_PARAMS = ("json_schema",)
PARAMS = (INT_PARAMS + FLOAT_PARAMS + BOOL_PARAMS + LIST_PARAMS + MAP_PARAMS + STR_PARAMS +
          SCHEMA_PARAMS)


def _build_params(params):
    """Check **params against the wire schema; returns a new dict ready to pack."""
    out = {}
    for k, v in params.items():
        if k not in PARAMS:
            raise TypeError("unknown request parameter %r (known: %s)" % (k, ", ".join(PARAMS)))
        if v is None:
            continue
        if k in INT_PARAMS:
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError("%s: expected an int, got %r" % (k, v))
        elif k in FLOAT_PARAMS:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError("%s: expected a number, got %r" % (k, v))
            v = float(v)
        elif k in BOOL_PARAMS:
            if not isinstance(v, bool):
                raise TypeError("%s: expected a bool, got %r" % (k, v))
        elif k == "stop":
            v = [v] if isinstance(v, str) else list(v)
            if not all(isinstance(s, str) for s in v):
                raise TypeError("stop: expected a string or a list of strings")
        elif k == "stop_token_ids":
            v = list(v)
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
                raise TypeError("stop_token_ids: expected a list of ints")
        elif k == "logit_bias":
            v = _logit_bias(v)
        elif k in STR_PARAMS:
            if not isinstance(v, str):
                raise TypeError("%s: expected a str" % k)
        elif k == "json_schema":
            if not isinstance(v, (dict, str, bool)):
                raise TypeError("json_schema: expected a dict, its JSON text or a bool")
        out[k] = v
    return out


def _prompt_fields(prompt, prompt_ids):
    """The request's prompt as the wire has it: {"prompt": str} or {"prompt_ids": [...]}."""
    if (prompt is None) == (prompt_ids is None):
        raise ValueError("give exactly one of prompt (str) or prompt_ids (list of ints)")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise TypeError("prompt: expected a str (use prompt_ids for token ids)")
        return {"prompt": prompt}
    ids = list(prompt_ids)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise TypeError("prompt_ids: expected a list of ints")
    return {"prompt_ids": ids}


def _chat_fields(messages, tools, add_generation_prompt, chat_template_kwargs):
    """A chat's fields on the wire. The shapes are checked by the router (its error names
    the place); here only what Python would otherwise pack as something else."""
    messages = list(messages)
    if not messages or not all(isinstance(m, dict) for m in messages):
        raise TypeError("messages: expected a non-empty list of dicts")
    out = {"messages": messages}
    if tools is not None:
        out["tools"] = list(tools)
    if not isinstance(add_generation_prompt, bool):
        raise TypeError("add_generation_prompt: expected a bool")
    if not add_generation_prompt:
        out["add_generation_prompt"] = False
    if chat_template_kwargs is not None:
        if not isinstance(chat_template_kwargs, dict):
            raise TypeError("chat_template_kwargs: expected a dict")
        out["chat_template_kwargs"] = dict(chat_template_kwargs)
    return out


def _logit_bias(v):
    """{token id: bias} with int keys (the wire's) and float values."""
    if not isinstance(v, dict):
        raise TypeError("logit_bias: expected a dict of token id to bias, got %r" % (v,))
    out = {}
    for t, b in v.items():
        if isinstance(t, str) and t.isdigit():
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError("logit_bias: token ids must be ints, got %r" % (t,))
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise TypeError("logit_bias: biases must be numbers, got %r" % (b,))
        if t in out:
            raise TypeError("logit_bias: token %d given twice" % t)
        out[t] = float(b)
    return out


def _usage(d):
    d = d or {}
    return Usage(prompt_tokens=d.get("prompt_tokens", 0),
                 completion_tokens=d.get("completion_tokens", 0),
                 queue_ms=float(d.get("queue_ms", 0.0)), ttft_ms=float(d.get("ttft_ms", 0.0)),
                 total_ms=float(d.get("total_ms", 0.0)),
                 spec_proposed=d.get("spec_proposed", 0), spec_accepted=d.get("spec_accepted", 0),
                 spec_verifications=d.get("spec_verifications", 0))


def _event(msg):
    """A decoded chunk/final as its event object; raises DerasError for an error message."""
    t = msg.get("type")
    if t == "chunk":
        return Chunk(id=msg.get("id", ""), index=msg.get("index", 0), text=msg.get("text", ""),
                     token_ids=list(msg.get("token_ids", ())), logprobs=msg.get("logprobs"))
    if t == "final":
        ids = msg.get("token_ids")
        return Final(id=msg.get("id", ""), index=msg.get("index", 0),
                     finish_reason=msg.get("finish_reason", ""), usage=_usage(msg.get("usage")),
                     abort_reason=msg.get("abort_reason"), text=msg.get("text"),
                     token_ids=list(ids) if ids is not None else None,
                     logprobs=msg.get("logprobs"))
    if t == "error":
        raise DerasError(msg.get("code", "internal"), msg.get("message", ""), msg.get("id", ""))
    raise DerasError("malformed", "unexpected message type %r from the router" % (t,))


class _StreamState:
    """What Stream and aio.AsyncStream share: the request, its Finals counted, done once
    the last one came or an error ended it."""

    def __init__(self, client, rid, n, timeout):
        self._client, self.id, self._n, self._timeout = client, rid, n, timeout
        self._finals = 0
        self.done = False

    def _counted(self, ev):
        if isinstance(ev, Final):
            self._finals += 1
            if self._finals == self._n:
                self._finish()
        return ev

    def _finish(self):
        self.done = True
        self._client._forget(self.id)


class Stream(_StreamState):
    """The events of one streaming request, in arrival order: Chunk(index, text, token_ids,
    logprobs) as tokens come, then one Final per sample. Iteration ends after the last
    Final; an error from the router is raised as DerasError. close() (or leaving a `with`
    block early) cancels the request if it has not finished."""

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        try:
            ev = _event(self._client._next_message(self.id, self._timeout))
        except DerasError:
            self._finish()
            raise
        return self._counted(ev)

    def cancel(self):
        """Ask the router to stop this request; its Finals (finish_reason "abort") follow."""
        if not self.done:
            self._client.cancel(self.id)

    def collect(self):
        """Consume the rest of the stream into a Completion (texts joined from the chunks)."""
        return _collect(self.id, self._n, self)

    def close(self):
        if not self.done:
            try:
                self._client.cancel(self.id)
            except zmq.ZMQError:
                pass
            self._finish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _collect(rid, n, events):
    texts = [[] for _ in range(n)]
    ids = [[] for _ in range(n)]
    lps = [[] for _ in range(n)]
    choices = [None] * n
    for ev in events:
        if not 0 <= ev.index < n:
            raise DerasError("malformed", "sample index %d outside [0, %d)" % (ev.index, n), rid)
        if isinstance(ev, Chunk):
            texts[ev.index].append(ev.text)
            ids[ev.index].extend(ev.token_ids)
            if ev.logprobs:
                lps[ev.index].extend(ev.logprobs)
        else:
            i = ev.index
            choices[i] = Choice(
                index=i,
                text=ev.text if ev.text is not None else "".join(texts[i]),
                token_ids=ev.token_ids if ev.token_ids is not None else ids[i],
                finish_reason=ev.finish_reason, abort_reason=ev.abort_reason,
                logprobs=ev.logprobs if ev.logprobs is not None else (lps[i] or None),
                usage=ev.usage)
    if any(c is None for c in choices):
        raise DerasError("malformed", "request ended without a final for every sample", rid)
    return Completion(id=rid, choices=choices)


class Client:
    """A connection to deras-router.

    address: the router's client endpoint. curve_server_key: the router's CURVE public key
    (Z85 text or 32 raw bytes) to encrypt the connection; the client then uses
    curve_client_keys=(public, secret) or a fresh key pair. timeout: default longest wait,
    in seconds, for the next message of a request (None waits forever). connect_timeout:
    how long a wait tolerates having no connection to the router before DerasUnavailable
    (None: the request timeout alone). context: a zmq.Context to share (default: the
    process-wide instance).
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, curve_server_key: Optional[Key] = None,
                 curve_client_keys: Optional[Tuple[Key, Key]] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 context: Optional[zmq.Context] = None,
                 connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout
        self._ctx = context or zmq.Context.instance()
        self._sock, mon = make_socket(self._ctx, address, curve_server_key, curve_client_keys)
        self._link = LinkWatch(mon, address, connect_timeout)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(mon, zmq.POLLIN)
        self._queues: Dict[str, collections.deque] = {}  # live request id -> its messages
        self._pongs: collections.deque = collections.deque()
        self.dropped = 0                       # messages for ids no longer tracked

    # ---- requests ----

    def complete(self, prompt: Optional[str] = None, *,
                 prompt_ids: Optional[Sequence[int]] = None, id: Optional[str] = None,
                 timeout: Optional[float] = None, **params: Any) -> Completion:
        """Run one request to the end and return its Completion (texts, token ids, finish
        reasons, usage per sample). Raises DerasError(code, message) when the router
        refuses or fails it and DerasTimeout when the router stays silent for `timeout`."""
        return self._complete(_prompt_fields(prompt, prompt_ids), id, timeout, params)

    def stream(self, prompt: Optional[str] = None, *,
               prompt_ids: Optional[Sequence[int]] = None, id: Optional[str] = None,
               timeout: Optional[float] = None, **params: Any) -> "Stream":
        """Start a streaming request; returns its Stream (iterate it for Chunk and Final
        events). Several streams may be open at once on one client."""
        rid, n = self._send_request(_prompt_fields(prompt, prompt_ids), id, True, params)
        return Stream(self, rid, n, self.timeout if timeout is None else timeout)

    def chat(self, messages: Sequence[Message], *, tools: Optional[Sequence[Message]] = None,
             add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[Message] = None, id: Optional[str] = None,
             timeout: Optional[float] = None, **params: Any) -> Completion:
        """A chat: the router renders `messages` ([{"role": "system" | "user" |
        "assistant" | "tool", "content": str or [{"type": "text", "text": str}], ...}])
        with the model's own chat template (with `tools`, `add_generation_prompt` and
        `chat_template_kwargs` as transformers' apply_chat_template takes them) and the
        answer ends at the model's end of turn. Otherwise as complete()."""
        fields = _chat_fields(messages, tools, add_generation_prompt, chat_template_kwargs)
        return self._complete(fields, id, timeout, params)

    def chat_stream(self, messages: Sequence[Message], *,
                    tools: Optional[Sequence[Message]] = None,
                    add_generation_prompt: bool = True,
                    chat_template_kwargs: Optional[Message] = None, id: Optional[str] = None,
                    timeout: Optional[float] = None, **params: Any) -> "Stream":
        """chat() as a Stream."""
        fields = _chat_fields(messages, tools, add_generation_prompt, chat_template_kwargs)
        rid, n = self._send_request(fields, id, True, params)
        return Stream(self, rid, n, self.timeout if timeout is None else timeout)

    def cancel(self, id: str) -> None:
        """Ask the router to stop request `id` (fire and forget). A live request then ends
        with finish_reason "abort"; the router answers an id it does not know with an
        unknown_request error, which this client drops if it no longer tracks the id."""
        self._send({"type": "cancel", "id": id})

    def ping(self, timeout: Optional[float] = 5.0) -> Message:
        """Round trip to the router; returns the pong as a dict: {"type": "pong", "v": ...,
        "workers": [{"name", "state", "running", "waiting", "kv_blocks_free",
        "kv_blocks_total", "served"}, ...]}. Raises DerasTimeout after `timeout` seconds."""
        self._pongs.clear()
        self._send({"type": "ping"})
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pongs:
            self._pump(deadline, "ping")
        return self._pongs.popleft()

    def close(self) -> None:
        """Close the socket (pending cancels get 200 ms to leave). Idempotent."""
        if not self._sock.closed:
            self._link.close(self._sock)
            self._sock.close()
        self._queues.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def in_flight(self) -> List[str]:
        """Ids of the requests this client is still tracking."""
        return list(self._queues)

    # ---- internals ----

    def _send(self, msg):
        try:
            self._sock.send(msgpack.packb(msg, use_bin_type=True))
        except zmq.Again:
            raise DerasTimeout("timeout", "could not queue a message to %s within 5 s"
                               % self.address) from None

    def _complete(self, fields, rid, timeout, params):
        rid, n = self._send_request(fields, rid, False, params)
        t = self.timeout if timeout is None else timeout
        events = _RequestEvents(self, rid, t)
        try:
            return _collect(rid, n, _events_until_finals(events, n))
        finally:
            self._forget(rid)

    def _send_request(self, fields, rid, stream, params):
        if "stream" in params:
            raise TypeError("use complete() or stream() instead of the stream parameter")
        msg = {"type": "request", "v": PROTOCOL_VERSION}
        if rid is None:
            rid = uuid.uuid4().hex
        if not isinstance(rid, str) or not rid:
            raise TypeError("id: expected a non-empty string")
        if rid in self._queues:
            raise ValueError("id %r is already in flight on this client" % rid)
        msg["id"] = rid
        msg.update(fields)
        msg.update(_build_params(params))
        if stream:
            msg["stream"] = True
        self._queues[rid] = collections.deque()
        try:
            self._send(msg)
        except BaseException:
            del self._queues[rid]
            raise
        return rid, msg.get("n", 1)

    def _forget(self, rid):
        self._queues.pop(rid, None)

    def _pump(self, deadline, what):
        """Read one message from the socket (waiting until `deadline`, monotonic seconds, or
        forever if None) and file it under its request id."""
        self._link.drain()
        now = time.monotonic()
        ready = dict(self._poller.poll(0))  # what already came is read, link up or not
        if self._sock not in ready:
            self._link.check()
            until = deadline
            link_deadline = self._link.deadline()
            if link_deadline is not None and (until is None or link_deadline < until):
                until = link_deadline
            wait = None if until is None else max(0.0, until - now)
            ready = dict(self._poller.poll(None if wait is None else int(wait * 1000) + 1))
            self._link.drain()
        if self._sock not in ready:
            self._link.check()
            if deadline is not None and time.monotonic() >= deadline:
                raise DerasTimeout("timeout", "no reply from %s for %s within %.3g s"
                                   % (self.address, what, max(0.0, deadline - now)))
            return
        frames = self._sock.recv_multipart()
        frame = frames[-1]   # a single frame; tolerate a leading empty delimiter
        try:
            msg = msgpack.unpackb(frame, raw=False)
        except Exception as e:
            raise DerasError("malformed", "undecodable reply from the router: %s" % e) from None
        if not isinstance(msg, dict):
            raise DerasError("malformed", "reply from the router is not a map")
        if msg.get("type") == "pong":
            self._pongs.append(msg)
            return
        rid = msg.get("id", "")
        q = self._queues.get(rid)
        if q is not None:
            q.append(msg)
        elif rid == "" and msg.get("type") == "error":
            # An error the router could not attribute to a request (e.g. a malformed frame):
            # the caller that is waiting now is the likeliest cause.
            raise DerasError(msg.get("code", "internal"), msg.get("message", ""), "")
        else:
            self.dropped += 1

    def _next_message(self, rid, timeout):
        """The next message of request `rid`; DerasTimeout (after a best-effort cancel) when
        none comes within `timeout` seconds."""
        q = self._queues.get(rid)
        if q is None:
            raise DerasError("unknown_request", "request %r is not in flight on this client" % rid,
                             rid)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not q:
            try:
                self._pump(deadline, "request %s" % rid)
            except DerasTimeout:
                try:
                    self.cancel(rid)
                except (zmq.ZMQError, DerasError):
                    pass
                self._forget(rid)
                raise
        return q.popleft()


class _RequestEvents:
    """Iterator over the events of one request (used by complete())."""

    def __init__(self, client, rid, timeout):
        self._client, self._rid, self._timeout = client, rid, timeout

    def __iter__(self):
        return self

    def __next__(self):
        return _event(self._client._next_message(self._rid, self._timeout))


def _events_until_finals(events, n):
    finals = 0
    for ev in events:
        yield ev
        if isinstance(ev, Final):
            finals += 1
            if finals == n:
                return
