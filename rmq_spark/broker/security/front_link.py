"""One client connection through the front: first byte, TLS, the splice to grpc, its timer.

Owns ``Link``: it waits for the connection's first byte without reading it (``MSG_PEEK``),
then hands the socket to the event loop as TLS (``0x16``, a ClientHello: the front ends TLS
with the broker's certificate, ALPN ``h2``) or plaintext, opens a plaintext connection to
grpc's listener on 127.0.0.1 and relays both ways: the client's bytes through a
``RequestGate`` (request sizes booked in the front's budget before grpc buffers them), grpc's
through a ``ResponseWatch`` (the first answered call proves the connection; ended streams
give their bookings back). A connection that has neither sent a whole request (a long-polling
receive is answered late) nor been answered within ``handshake_timeout_s`` of its accept is
closed, whatever it sent (silent, a TLS or HTTP/2 handshake held open, requests never
finished). Under ``tls_mode=enforcing`` a plaintext client is answered
``PlaintextRefusal`` until that timer closes it.

Does not own admission, the per-address count or the budget (``front.py``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from functools import partial
from typing import TYPE_CHECKING, Any

from rmq_spark.broker.security.h2frames import PlaintextRefusal
from rmq_spark.broker.security.h2watch import RequestGate, ResponseWatch

if TYPE_CHECKING:
    from rmq_spark.broker.security.front import Front

__all__ = ["Link", "TLS_RECORD_HANDSHAKE"]

log = logging.getLogger("rmq_spark.broker")

TLS_RECORD_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello
_LOOPBACK = "127.0.0.1"


class Link(asyncio.Protocol):
    """A client connection from accept to close; the asyncio protocol of its client side."""

    def __init__(self, front: Front, sock: socket.socket, host: str, peer: str) -> None:
        self.front, self.host, self.peer = front, host, peer
        self.grpc_peer: str | None = None  # grpc's name for our connection to it
        self.answered = False
        self._sock: socket.socket | None = sock  # until the loop owns it
        self._handed = False  # the socket is the loop's (connect_accepted_socket)
        self._client: Any = None
        self._backend: Any = None
        self._pending = bytearray()
        self._refusal: PlaintextRefusal | None = None
        self._closed = False
        s = front.settings
        self.gate = RequestGate(
            partial(front.book, host), partial(front.give, host), s.message_bytes_max
        )
        self.last_data = 0.0  # the loop's time of the client's last bytes
        self._watch = ResponseWatch()
        self._loop = loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            s.handshake_timeout_s, self._expired
        )
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._first_byte)

    def _expired(self) -> None:
        self._timer = None
        if not self.answered:
            self.front.note_expired()
            self.close()

    def _first_byte(self) -> None:
        sock = self._sock
        assert sock is not None
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        tls = bool(first) and first[0] == TLS_RECORD_HANDSHAKE
        if not first or (tls and self.front.settings.tls is None):
            self.close()  # hung up, or TLS without a certificate: its handshake fails
            return
        asyncio.get_running_loop().remove_reader(sock.fileno())
        self._handed = True
        asyncio.ensure_future(self._open(sock, tls))

    async def _open(self, sock: socket.socket, tls: bool) -> None:
        s = self.front.settings
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: self,
                sock,
                ssl=s.tls if tls else None,
                ssl_handshake_timeout=s.handshake_timeout_s if tls else None,
            )
        except OSError:  # TimeoutError and ssl.SSLError included
            self._sock = None
            self.close()

    # --- the client side (asyncio.Protocol) ------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._sock = None
        self._client = transport
        if self._closed:
            transport.abort()
            return
        if not self.front.settings.plaintext and transport.get_extra_info("ssl_object") is None:
            self._refusal = PlaintextRefusal(
                "rmq-spark: this port requires TLS (broker.tls_mode=enforcing)"
            )
            return
        transport.pause_reading()
        asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        s = self.front.settings
        try:
            if s.plain_path is None:
                await loop.create_connection(lambda: _Backend(self), _LOOPBACK, s.plain_port)
                return
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.bind(self.front.backend_name())
                await loop.sock_connect(sock, s.plain_path)
            except BaseException:
                sock.close()
                raise
            await loop.create_unix_connection(lambda: _Backend(self), sock=sock)
        except OSError as err:
            where = repr(s.plain_path) if s.plain_path else f"port {s.plain_port}"
            log.error("broker error: the front cannot reach grpc on %s: %s", where, err)
            self.close()

    def data_received(self, data: bytes) -> None:
        self.last_data = self._loop.time()
        if self._refusal is not None:
            self._client.write(self._refusal.feed(data))
            return
        if self._backend is None:
            self._pending += data
            return
        gate = self.gate
        try:
            out = gate.feed(data)
        except ValueError as err:
            log.info("broker: closed a connection from %s: %s", self.peer, err)
            self.close()
            return
        if gate.to_client:
            self._pass_on(out)
        elif out:
            self._backend.write(out)
        if gate.waiting:
            self.front.wait_for_budget(self)
        if not self.answered and gate.request_sent:
            self._proven()

    def _pass_on(self, out: bytes) -> None:
        if out:
            self._backend.write(out)
        if self.gate.to_client:
            now = self._watch.inject(bytes(self.gate.to_client))
            self.gate.to_client.clear()
            if now:
                self._client.write(now)

    def budget_freed(self) -> None:
        """The front's budget has room again: pass on what the gate can let through now."""
        if self._backend is not None and not self._closed:
            self._pass_on(self.gate.retry())
            if self.gate.request_sent and not self.answered:
                self._proven()

    def pause_writing(self) -> None:  # the client reads slower than grpc writes
        if self._backend is not None:
            self._backend.pause_reading()

    def resume_writing(self) -> None:
        if self._backend is not None:
            self._backend.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    # --- the grpc side -----------------------------------------------------------------------

    def backend_made(self, transport: Any) -> None:
        if self._closed:
            transport.close()
            return
        self._backend = transport
        name = transport.get_extra_info("sockname")
        if isinstance(name, tuple):
            self.grpc_peer = f"ipv4:{_LOOPBACK}:{name[1]}"
        else:  # an abstract Unix address: a NUL, then the name
            self.grpc_peer = f"unix-abstract:{name[1:].decode()}"
        self.front.backend_opened(self)
        pending, self._pending = bytes(self._pending), bytearray()
        if pending:
            self.data_received(pending)
        if not self._closed:
            self._client.resume_reading()

    def backend_data(self, data: bytes) -> None:
        data, ended = self._watch.feed(data)
        self._client.write(data)
        if ended:
            self.gate.streams_ended(ended)
        if not self.answered and self._watch.answered:
            self._proven()

    def _proven(self) -> None:
        """A whole request reached grpc, or grpc answered one: no longer evictable."""
        self.answered = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.front.answered(self)

    def close(self) -> None:
        """Close both sides and give back what the connection had booked (idempotent)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._closed:
            return
        self._closed = True
        sock, self._sock = self._sock, None
        if sock is not None and self._handed:  # a TLS handshake under way fails at once
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        elif sock is not None:  # still waiting for its first byte
            asyncio.get_running_loop().remove_reader(sock.fileno())
            try:
                sock.recv(65536)  # read what came: a close with unread bytes is a reset
            except OSError:
                pass
            sock.close()
        if self._client is not None:
            self._client.close()
        if self._backend is not None:
            self._backend.close()
        self.gate.close()
        self.front.forget(self)


class _Backend(asyncio.Protocol):
    """The front's connection to grpc's plaintext listener, carrying one client's bytes."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.data_received = link.backend_data  # type: ignore[method-assign]  # one call less

    def connection_made(self, transport: Any) -> None:
        self.link.backend_made(transport)

    def data_received(self, data: bytes) -> None:
        self.link.backend_data(data)

    def pause_writing(self) -> None:  # grpc reads slower than the client writes
        if self.link._client is not None:
            self.link._client.pause_reading()
        self.link.last_data = float("inf")  # not the client's stall while we do not read

    def resume_writing(self) -> None:
        if self.link._client is not None:
            self.link._client.resume_reading()
        self.link.last_data = asyncio.get_running_loop().time()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()
