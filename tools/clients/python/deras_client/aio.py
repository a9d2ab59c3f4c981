# SPDX-License-Identifier: Apache-2.0
"""aio.py - the deras client for asyncio: AsyncClient, the same calls as Client, awaited.

    async with AsyncClient("tcp://127.0.0.1:5555") as c:
        done = await c.complete("Hello", max_tokens=32)
        async for ev in await c.stream("Hello", max_tokens=32):
            ...
        answers = await asyncio.gather(*(c.chat(m) for m in conversations))

Design: one DEALER socket (link.make_socket, as Client) and one reader task, started with
the first request, that files each message from the router in its request's queue, so any
number of coroutines may wait on their own requests at once. The reader also watches the
link (link.LinkWatch): when no connection has been up for connect_timeout, every waiter
gets DerasUnavailable. Waits have the request timeout of Client (the longest silence
between two messages of one request); a timed-out request is cancelled at the router.
Requests, parameters, events and errors are Client's (client.py builds and reads them).

The socket is a pyzmq asyncio shadow of an ordinary socket (pyzmq 19 or later), bound to
the event loop that first uses it; an AsyncClient is not thread-safe. Costs: a message is
read, decoded and queued once, O(its size); nothing polls while nothing is asked.
"""

import asyncio
import collections
import time
import uuid
from typing import Any, AsyncIterator, Deque, Dict, List, Optional, Sequence, Tuple

import msgpack
import zmq
import zmq.asyncio

from .client import (DEFAULT_ADDRESS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Event, Message,
                     _StreamState, _build_params, _chat_fields, _collect, _event,
                     _prompt_fields)
from .link import Key, LinkWatch, make_socket
from .types import PROTOCOL_VERSION, Completion, DerasError, DerasTimeout, DerasUnavailable, Final

SEND_TIMEOUT = 5.0


class AsyncStream(_StreamState):
    """The events of one streaming request (`async for`): Chunk as tokens come, then one
    Final per sample; an error from the router is raised as DerasError. aclose() (or
    leaving `async with` early) cancels the request if it has not finished."""

    _client: "AsyncClient"

    def __aiter__(self) -> "AsyncStream":
        return self

    async def __anext__(self) -> Event:
        if self.done:
            raise StopAsyncIteration
        try:
            ev = _event(await self._client._next_message(self.id, self._timeout))
        except DerasError:
            self._finish()
            raise
        return self._counted(ev)

    async def cancel(self) -> None:
        """Ask the router to stop this request; its Finals (finish_reason "abort") follow."""
        if not self.done:
            await self._client.cancel(self.id)

    async def collect(self) -> Completion:
        """The rest of the stream as a Completion (texts joined from the chunks)."""
        return _collect(self.id, self._n, [ev async for ev in self])

    async def aclose(self) -> None:
        if not self.done:
            try:
                await self._client.cancel(self.id)
            except (zmq.ZMQError, DerasError):
                pass
            self._finish()

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncClient:
    """A connection to deras-router for asyncio code; the arguments are Client's."""

    def __init__(self, address: str = DEFAULT_ADDRESS, curve_server_key: Optional[Key] = None,
                 curve_client_keys: Optional[Tuple[Key, Key]] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 context: Optional[zmq.Context] = None,
                 connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT) -> None:
        self.address, self.timeout = address, timeout
        ctx = context or zmq.Context.instance()
        self._plain, mon = make_socket(ctx, address, curve_server_key, curve_client_keys)
        self._link = LinkWatch(mon, address, connect_timeout)
        self._sock = zmq.asyncio.Socket.shadow(self._plain.underlying)
        self._mon = zmq.asyncio.Socket.shadow(mon.underlying)
        self._queues: Dict[str, asyncio.Queue] = {}
        self._pongs: Deque[asyncio.Future] = collections.deque()
        self._last_sent: Optional[str] = None
        self._reader: Optional[asyncio.Task] = None
        self._closed = False
        self.dropped = 0

    # ---- requests ----

    async def complete(self, prompt: Optional[str] = None, *,
                       prompt_ids: Optional[Sequence[int]] = None, id: Optional[str] = None,
                       timeout: Optional[float] = None, **params: Any) -> Completion:
        """Client.complete, awaited."""
        return await self._complete(_prompt_fields(prompt, prompt_ids), id, timeout, params)

    async def stream(self, prompt: Optional[str] = None, *,
                     prompt_ids: Optional[Sequence[int]] = None, id: Optional[str] = None,
                     timeout: Optional[float] = None, **params: Any) -> AsyncStream:
        """Client.stream: the request is sent when this returns; iterate with `async for`."""
        rid, n = await self._send_request(_prompt_fields(prompt, prompt_ids), id, True, params)
        return AsyncStream(self, rid, n, self.timeout if timeout is None else timeout)

    async def chat(self, messages: Sequence[Message], *,
                   tools: Optional[Sequence[Message]] = None, add_generation_prompt: bool = True,
                   chat_template_kwargs: Optional[Message] = None, id: Optional[str] = None,
                   timeout: Optional[float] = None, **params: Any) -> Completion:
        """Client.chat, awaited."""
        fields = _chat_fields(messages, tools, add_generation_prompt, chat_template_kwargs)
        return await self._complete(fields, id, timeout, params)

    async def chat_stream(self, messages: Sequence[Message], *,
                          tools: Optional[Sequence[Message]] = None,
                          add_generation_prompt: bool = True,
                          chat_template_kwargs: Optional[Message] = None,
                          id: Optional[str] = None, timeout: Optional[float] = None,
                          **params: Any) -> AsyncStream:
        """Client.chat_stream, as an AsyncStream."""
        fields = _chat_fields(messages, tools, add_generation_prompt, chat_template_kwargs)
        rid, n = await self._send_request(fields, id, True, params)
        return AsyncStream(self, rid, n, self.timeout if timeout is None else timeout)

    async def cancel(self, id: str) -> None:
        """Client.cancel."""
        await self._send({"type": "cancel", "id": id})

    async def ping(self, timeout: Optional[float] = 5.0) -> Message:
        """Client.ping, awaited; DerasTimeout after `timeout` seconds."""
        self._start()
        fut = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        await self._send({"type": "ping"})
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise DerasTimeout("timeout", "no pong from %s within %.3g s"
                               % (self.address, timeout)) from None
        finally:
            if fut in self._pongs:
                self._pongs.remove(fut)

    async def close(self) -> None:
        """Stop the reader and close the socket (pending cancels get 200 ms). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._link.close(self._plain)
        self._plain.close()
        self._queues.clear()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def in_flight(self) -> List[str]:
        """Ids of the requests this client is still tracking."""
        return list(self._queues)

    # ---- internals ----

    def _start(self) -> None:
        if self._closed:
            raise DerasError("closed", "this AsyncClient is closed")
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _send(self, msg: Message) -> None:
        try:
            await asyncio.wait_for(self._sock.send(msgpack.packb(msg, use_bin_type=True)),
                                   SEND_TIMEOUT)
        except asyncio.TimeoutError:
            raise DerasTimeout("timeout", "could not queue a message to %s within %g s"
                               % (self.address, SEND_TIMEOUT)) from None

    async def _complete(self, fields: Message, rid: Optional[str], timeout: Optional[float],
                        params: Dict[str, Any]) -> Completion:
        rid, n = await self._send_request(fields, rid, False, params)
        t = self.timeout if timeout is None else timeout
        events: List[Event] = []
        try:
            finals = 0
            while finals < n:
                ev = _event(await self._next_message(rid, t))
                events.append(ev)
                finals += isinstance(ev, Final)
            return _collect(rid, n, events)
        finally:
            self._forget(rid)

    async def _send_request(self, fields: Message, rid: Optional[str], stream: bool,
                            params: Dict[str, Any]) -> Tuple[str, int]:
        if "stream" in params:
            raise TypeError("use complete() or stream() instead of the stream parameter")
        if rid is None:
            rid = uuid.uuid4().hex
        if not isinstance(rid, str) or not rid:
            raise TypeError("id: expected a non-empty string")
        if rid in self._queues:
            raise ValueError("id %r is already in flight on this client" % rid)
        msg: Message = {"type": "request", "v": PROTOCOL_VERSION, "id": rid}
        msg.update(fields)
        msg.update(_build_params(params))
        if stream:
            msg["stream"] = True
        self._start()
        self._queues[rid] = asyncio.Queue()
        try:
            await self._send(msg)
        except BaseException:
            del self._queues[rid]
            raise
        self._last_sent = rid
        return rid, msg.get("n", 1)

    def _forget(self, rid: str) -> None:
        self._queues.pop(rid, None)

    async def _next_message(self, rid: str, timeout: Optional[float]) -> Message:
        q = self._queues.get(rid)
        if q is None:
            raise DerasError("unknown_request",
                             "request %r is not in flight on this client" % rid, rid)
        try:
            item = await asyncio.wait_for(q.get(), timeout)
        except asyncio.TimeoutError:
            item = DerasTimeout("timeout", "no reply from %s for request %s within %.3g s"
                                % (self.address, rid, timeout))
        if isinstance(item, DerasError):
            self._forget(rid)
            try:
                await self.cancel(rid)
            except (zmq.ZMQError, DerasError):
                pass
            raise item
        return item

    def _fail_all(self, err: DerasError) -> None:
        for q in self._queues.values():
            q.put_nowait(err)
        while self._pongs:
            fut = self._pongs.popleft()
            if not fut.done():
                fut.set_exception(err)

    def _file(self, frames: List[bytes]) -> None:
        try:
            msg = msgpack.unpackb(frames[-1], raw=False)
        except Exception as e:
            msg = {"type": "error", "id": "", "code": "malformed",
                   "message": "undecodable reply from the router: %s" % e}
        if not isinstance(msg, dict):
            msg = {"type": "error", "id": "", "code": "malformed",
                   "message": "reply from the router is not a map"}
        if msg.get("type") == "pong":
            while self._pongs:
                fut = self._pongs.popleft()
                if not fut.done():
                    fut.set_result(msg)
                    break
            return
        rid = msg.get("id", "")
        q = self._queues.get(rid)
        if q is None and rid == "" and msg.get("type") == "error":
            # an error the router could not attribute: the latest request is its likeliest
            # cause (as Client raises it in the call that is waiting)
            q = self._queues.get(self._last_sent or "")
        if q is not None:
            q.put_nowait(msg)
        else:
            self.dropped += 1

    async def _read(self) -> None:
        """The reader task: file messages, watch the link, until close()."""
        poller = zmq.asyncio.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._mon, zmq.POLLIN)
        while True:
            self._link.drain()
            try:
                self._link.check()
            except DerasUnavailable as e:
                if self._queues or self._pongs:
                    self._fail_all(e)
            deadline = self._link.deadline()
            wait = None
            if deadline is not None:
                wait = max(0.0, deadline - time.monotonic())
                if wait == 0.0:
                    wait = 0.25  # down past its deadline: each new waiter is failed within this
            ready = dict(await poller.poll(None if wait is None else int(wait * 1000) + 1))
            if self._sock in ready:
                while True:
                    try:
                        frames = self._plain.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._file(frames)

