"""The public gRPC port: TLS and plaintext on one port, a connection cap, a handshake timeout.

RocketMQ's proxy serves TLS and plaintext gRPC on one port (``ProxyAndTlsProtocolNegotiator``,
``tlsMode=permissive``): it looks at the first bytes of a connection and installs a TLS or a
plaintext handler. grpc's Python server cannot do that on one listener, so the front does it
on asyncio: it accepts on the public port, reads the first byte (a TLS ClientHello record
starts with 0x16, HTTP/2's plaintext preface with ``P``) and splices the connection to one of
two grpc listeners on 127.0.0.1 (TLS, plaintext), each with a port of its own. Every byte then
passes through the front once per direction; the cost is measured by ``bench/bench_grpc.py
--tls-compare``.

Owns: admission (``max_connections``; at the cap the oldest connection that has sent nothing
yet is closed to make room, else the new one is closed), closing a connection that sends
nothing for ``handshake_timeout_ms``, refusing plaintext under ``tls_mode=enforcing`` (an
HTTP/2 GOAWAY ``INADEQUATE_SECURITY`` saying why), and the client address behind each spliced
connection (``client_peer``: grpc only sees the front's address).

Does not own: TLS itself and HTTP/2 (grpc), idle and dead connections after the handshake
(grpc's keepalive options, ``limits.py``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["Front", "FrontSettings", "TLS_RECORD_HANDSHAKE"]

log = logging.getLogger("rmq_spark.broker")

TLS_RECORD_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello
_LOOPBACK = "127.0.0.1"
_H2_GOAWAY, _H2_SETTINGS, _H2_INADEQUATE_SECURITY = 0x7, 0x4, 0xC
_WARN_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class FrontSettings:
    """Where the front listens and splices to; ``None`` port: that kind is not served."""

    host: str
    port: int
    plain_port: int | None
    tls_port: int | None
    max_connections: int
    handshake_timeout_s: float


def _goaway(reason: str) -> bytes:
    """An HTTP/2 server preface (empty SETTINGS) and a GOAWAY INADEQUATE_SECURITY frame."""
    settings = struct.pack(">I", 0)[1:] + bytes([_H2_SETTINGS, 0]) + struct.pack(">I", 0)
    payload = struct.pack(">II", 0, _H2_INADEQUATE_SECURITY) + reason.encode()
    goaway = struct.pack(">I", len(payload))[1:] + bytes([_H2_GOAWAY, 0]) + struct.pack(">I", 0)
    return settings + goaway + payload


class Front:
    """The asyncio server on the public port; lives on the grpc server's loop."""

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self.port = 0
        self._server: asyncio.Server | None = None
        self._clients: set[_Client] = set()
        self._silent: OrderedDict[_Client, None] = OrderedDict()  # no byte received yet
        self._peers: dict[int, str] = {}  # the front's local port towards grpc -> client peer
        self._refused = 0
        self._warned_s = 0.0

    @property
    def connections(self) -> int:
        return len(self._clients)

    async def bind(self) -> int:
        """Bind and listen on the public port (accepting starts with ``serve``)."""
        s = self.settings
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Client(self), s.host, s.port, start_serving=False, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def serve(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    def close(self) -> None:
        """Stop accepting and close every spliced connection."""
        if self._server is not None:
            self._server.close()
        for client in list(self._clients):
            client.close()

    def client_peer(self, peer: str) -> str:
        """grpc's ``context.peer()`` of a spliced connection -> the client's own address."""
        prefix = f"ipv4:{_LOOPBACK}:"
        if peer.startswith(prefix) and peer[len(prefix) :].isdigit():
            return self._peers.get(int(peer[len(prefix) :]), peer)
        return peer

    # --- used by _Client -----------------------------------------------------------------

    def admit(self, client: _Client) -> bool:
        if len(self._clients) >= self.settings.max_connections:
            if not self._silent:
                self._refused += 1
                self._warn("refused a connection")
                return False
            victim, _ = self._silent.popitem(last=False)
            victim.close()
            self._warn("closed the oldest connection that had sent nothing")
        self._clients.add(client)
        self._silent[client] = None
        return True

    def spoke(self, client: _Client) -> None:
        self._silent.pop(client, None)

    def forget(self, client: _Client) -> None:
        self._clients.discard(client)
        self._silent.pop(client, None)
        if client.local_port is not None:
            self._peers.pop(client.local_port, None)

    def _warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned_s >= _WARN_EVERY_S:
            self._warned_s = now
            log.warning(
                "broker: %s: %d connections is broker.max_connections (%d refused so far)",
                what,
                self.settings.max_connections,
                self._refused,
            )


class _Client(asyncio.Protocol):
    """One client connection: waits for the first byte, then splices to grpc."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: Any = None
        self.backend: Any = None
        self.local_port: int | None = None
        self.peer = ""
        self._pending = bytearray()
        self._connecting = False
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if not self.front.admit(self):
            self._closed = True
            transport.abort()
            return
        host, port = transport.get_extra_info("peername")[:2]
        if host.startswith("::ffff:") and "." in host:
            host = host[len("::ffff:") :]  # grpc names IPv4-mapped peers ipv4:
        self.peer = f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.front.settings.handshake_timeout_s, self.close)

    def data_received(self, data: bytes) -> None:
        if self.backend is not None:
            self.backend.write(data)
            return
        self._pending += data
        if self._connecting or self._closed:
            return
        self._connecting = True
        self.front.spoke(self)
        if self._timer is not None:
            self._timer.cancel()  # grpc's handshake timeout takes over
        s = self.front.settings
        port = s.tls_port if data[0] == TLS_RECORD_HANDSHAKE else s.plain_port
        if port is None:  # plaintext under tls_mode=enforcing
            self.transport.write(_goaway("rmq-spark: this port requires TLS (tls_mode=enforcing)"))
            self.close()
            return
        self.transport.pause_reading()
        asyncio.ensure_future(self._connect(port))

    async def _connect(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: _Backend(self), _LOOPBACK, port)
        except OSError as err:
            log.error("broker error: the front cannot reach grpc on port %d: %s", port, err)
            self.close()

    def backend_made(self, transport: Any) -> None:
        if self._closed:
            transport.close()
            return
        self.backend = transport
        self.local_port = transport.get_extra_info("sockname")[1]
        self.front._peers[self.local_port] = self.peer
        transport.write(bytes(self._pending))
        self._pending.clear()
        self.transport.resume_reading()

    def pause_writing(self) -> None:  # the client reads slower than grpc writes
        if self.backend is not None:
            self.backend.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None:
            self.backend.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.front.forget(self)
        if self._closed:
            return
        self._closed = True
        self.transport.close()
        if self.backend is not None:
            self.backend.close()


class _Backend(asyncio.Protocol):
    """The front's connection to a grpc listener, carrying one client's bytes."""

    def __init__(self, client: _Client) -> None:
        self.client = client

    def connection_made(self, transport: Any) -> None:
        self.client.backend_made(transport)

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def pause_writing(self) -> None:  # grpc reads slower than the client writes
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()
