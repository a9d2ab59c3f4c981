# SPDX-License-Identifier: Apache-2.0
"""link.py - the client's socket and whether its connection is up.

make_socket() builds the DEALER socket both clients use (options, CURVE keys, connect);
LinkWatch reads the socket's monitor so that a client can tell "nothing answers" (no ZMTP
handshake completed within connect_timeout: no router at the address, the wrong address,
a CURVE key the router refuses) from "the router is slow" (a request's own timeout).
ZeroMQ connects lazily and retries forever, so without this a wrong address looks like a
silent router until the request timeout (120 s by default) runs out.
"""

import time
from typing import Optional, Tuple, Union

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from .types import DerasUnavailable

Key = Union[str, bytes]

MONITOR_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
                  | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def curve_key(key: Key, what: str) -> bytes:
    """A CURVE key as Z85 bytes: accepts 40-character Z85 (str or bytes) or 32 raw bytes."""
    if isinstance(key, str):
        key = key.encode("ascii")
    if not isinstance(key, bytes):
        raise TypeError("%s: expected a Z85 string or 32 raw bytes" % what)
    if len(key) == 32:
        return z85.encode(key)
    if len(key) == 40:
        return key
    raise ValueError("%s: expected 40 Z85 characters or 32 raw bytes, got %d" % (what, len(key)))


def make_socket(ctx: zmq.Context, address: str, curve_server_key: Optional[Key],
                curve_client_keys: Optional[Tuple[Key, Key]]) -> Tuple[zmq.Socket, zmq.Socket]:
    """The client's DEALER socket, connected, and its monitor socket (made before the
    connect, so no event is missed)."""
    sock = ctx.socket(zmq.DEALER)
    mon = None
    try:
        sock.setsockopt(zmq.LINGER, 200)   # let a last cancel leave on close
        sock.setsockopt(zmq.RCVHWM, 0)     # never drop tokens on our side
        sock.setsockopt(zmq.SNDTIMEO, 5000)
        if curve_server_key is not None:
            if curve_client_keys is None:
                pub, sec = zmq.curve_keypair()
            else:
                pub = curve_key(curve_client_keys[0], "curve_client_keys[0]")
                sec = curve_key(curve_client_keys[1], "curve_client_keys[1]")
            sock.setsockopt(zmq.CURVE_SERVERKEY, curve_key(curve_server_key, "curve_server_key"))
            sock.setsockopt(zmq.CURVE_PUBLICKEY, pub)
            sock.setsockopt(zmq.CURVE_SECRETKEY, sec)
        mon = sock.get_monitor_socket(MONITOR_EVENTS)
        sock.connect(address)
    except Exception:
        if mon is not None:
            sock.disable_monitor()
            mon.close(0)
        sock.close(0)
        raise
    return sock, mon


class LinkWatch:
    """The connection's state from the monitor's events: up after a handshake, down after
    a disconnect (and at the start). check() raises DerasUnavailable when the link has been
    down for connect_timeout seconds (None: never), or at once after the router refused
    this client's CURVE key (ZAP's answer: final). Other failed handshakes may pass (a
    router restarting), so they only explain the timeout's error."""

    def __init__(self, mon: zmq.Socket, address: str, connect_timeout: Optional[float]):
        self.mon, self.address, self.connect_timeout = mon, address, connect_timeout
        self.up = False
        self.down_since = time.monotonic()
        self.refused = None  # (code, message) once the router refused our CURVE key
        self.hint = ""       # why the last handshake failed, for the "nothing answers" error

    def on_event(self, frames) -> None:
        ev = parse_monitor_message(frames)["event"]
        if ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.up, self.refused, self.hint = True, None, ""
        elif ev == zmq.EVENT_DISCONNECTED:
            if self.up:
                self.down_since = time.monotonic()
            self.up = False
        elif ev == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.refused = ("unauthenticated", "the router at %s refused this client's CURVE "
                            "key (its --curve-allow does not list it)" % self.address)
        else:  # may pass (a router restarting): it only explains a timeout that follows
            self.hint = ("; handshakes there fail: a CURVE server key that is not the "
                         "router's, a plain client to a CURVE router, or not a deras-router")

    def drain(self) -> None:
        """Take every pending monitor event (never blocks)."""
        while True:
            try:
                frames = self.mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.on_event(frames)

    def deadline(self) -> Optional[float]:
        """When check() will raise if the link stays down (monotonic seconds), or None."""
        if self.up or self.connect_timeout is None:
            return None
        return self.down_since + self.connect_timeout

    def check(self) -> None:
        if self.up:
            return
        if self.refused:
            raise DerasUnavailable(*self.refused)
        d = self.deadline()
        if d is not None and time.monotonic() >= d:
            raise DerasUnavailable("unavailable", "nothing answers at %s (no connection within "
                                   "%g s): is deras-router running, and is this its --listen "
                                   "address?%s" % (self.address, self.connect_timeout,
                                                   self.hint))

    def close(self, sock: zmq.Socket) -> None:
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.mon.close(0)
