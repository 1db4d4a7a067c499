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
nothing for ``handshake_timeout_ms``, refusing plaintext under ``tls_mode=enforcing`` (every
call answered UNAVAILABLE "this port requires TLS" until the client hangs up or the handshake
timeout passes), and the client address behind each spliced
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

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.tls import TlsFiles, server_credentials
from rmq_spark.errors import BrokerError

__all__ = ["Front", "FrontSettings", "TLS_RECORD_HANDSHAKE", "open_front"]

log = logging.getLogger("rmq_spark.broker")

TLS_RECORD_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello
_LOOPBACK = "127.0.0.1"
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


_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_H2_HEADERS, _H2_SETTINGS = 0x1, 0x4
_GRPC_UNAVAILABLE = 14


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    # HPACK literal header field without indexing, new name; both shorter than 127 bytes.
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


class _PlaintextRefusal:
    """Answers every call of a plaintext HTTP/2 client with a gRPC status saying why.

    A bare close or GOAWAY reaches the user as "Failed parsing HTTP/2" or a deadline; a
    trailers-only response (``grpc-status`` 14, ``grpc-message``) is shown as it is.
    """

    def __init__(self, reason: str) -> None:
        self._buffer = bytearray()
        self._preface_seen = False
        self._trailers = (
            b"\x88"  # :status 200 (HPACK static table entry 8)
            + _literal(b"content-type", b"application/grpc")
            + _literal(b"grpc-status", str(_GRPC_UNAVAILABLE).encode())
            + _literal(b"grpc-message", reason.encode())
        )

    def feed(self, data: bytes) -> bytes:
        """The client's bytes in, our answer out (settings, then one status per call)."""
        self._buffer += data
        out = bytearray()
        if not self._preface_seen:
            if len(self._buffer) < len(_H2_PREFACE):
                return b""
            self._preface_seen = True
            del self._buffer[: len(_H2_PREFACE)]
            out += _h2_frame(_H2_SETTINGS, 0, 0, b"")
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            del self._buffer[: 9 + length]
            if kind == _H2_SETTINGS and not flags & 0x1:
                out += _h2_frame(_H2_SETTINGS, 0x1, 0, b"")  # ACK
            elif kind == _H2_HEADERS:
                out += _h2_frame(_H2_HEADERS, 0x5, stream, self._trailers)  # END_STREAM|HEADERS
        return bytes(out)


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

    def stop_accepting(self) -> None:
        """Close the listening socket; spliced connections go on (their calls finish)."""
        if self._server is not None:
            self._server.close()

    def close(self) -> None:
        """Stop accepting and close every spliced connection."""
        self.stop_accepting()
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
        self._refusal: _PlaintextRefusal | None = None
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
        if self._refusal is not None:
            self.transport.write(self._refusal.feed(data))
            return
        self._pending += data
        if self._connecting or self._closed:
            return
        self._connecting = True
        self.front.spoke(self)
        if self._timer is not None:
            self._timer.cancel()  # grpc's handshake timeout takes over
        s = self.front.settings
        is_tls = data[0] == TLS_RECORD_HANDSHAKE
        port = s.tls_port if is_tls else s.plain_port
        if port is None and is_tls:  # no certificate: the TLS client's handshake fails
            self.close()
            return
        if port is None:  # plaintext under tls_mode=enforcing: answered until it hangs up
            self._refusal = _PlaintextRefusal(
                "rmq-spark: this port requires TLS (broker.tls_mode=enforcing)"
            )
            self.transport.write(self._refusal.feed(bytes(self._pending)))
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.front.settings.handshake_timeout_s, self.close)
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


async def open_front(
    server: Any, config: BrokerConfig, host: str, port: int, tls: TlsFiles | None
) -> Front:
    """Add grpc's listeners on 127.0.0.1 to ``server`` (plaintext unless ``enforcing``, TLS
    with a certificate) and bind a ``Front`` to ``host:port`` (serving once ``serve()``).

    Raises
    ------
    BrokerError
        A port cannot be bound, or ``enforcing`` without a certificate.
    """
    if tls is None and config.tls_mode == "enforcing":
        raise BrokerError("broker.tls_mode=enforcing: no certificate given to this endpoint")
    try:
        plain_port = None
        if tls is None or config.tls_mode != "enforcing":
            plain_port = server.add_insecure_port(f"{_LOOPBACK}:0")
        tls_port = None
        if tls is not None:
            tls_port = server.add_secure_port(f"{_LOOPBACK}:0", server_credentials(tls))
    except RuntimeError as err:
        raise BrokerError(f"cannot listen on {_LOOPBACK} for the front: {err}") from err
    front = Front(
        FrontSettings(
            host=host,
            port=port,
            plain_port=plain_port,
            tls_port=tls_port,
            max_connections=config.max_connections,
            handshake_timeout_s=config.handshake_timeout_ms / 1000,
        )
    )
    try:
        await front.bind()
    except OSError as err:
        raise BrokerError(f"cannot listen on {config.listen}: {err.strerror}") from err
    mode = "plaintext only"
    if tls is not None:
        kind = "self-signed certificate" if tls.self_signed else "certificate"
        mode = "TLS only" if plain_port is None else "TLS and plaintext"
        mode += f" ({kind} {tls.cert_file})"
    log.info("broker: port %d serves %s", front.port, mode)
    return front
