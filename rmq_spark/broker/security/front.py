"""The public gRPC port: TLS and plaintext on one port, admission, a budget of request bytes.

RocketMQ's proxy serves TLS and plaintext gRPC on one port (``ProxyAndTlsProtocolNegotiator``,
``tlsMode=permissive``): it looks at the first bytes of a connection and installs a TLS or a
plaintext handler. grpc's Python server cannot do that on one listener, so the front does it
on asyncio: it accepts on the public port, looks at the first byte (a TLS ClientHello record
starts with 0x16, HTTP/2's plaintext preface with ``P``), ends TLS itself when it is TLS, and
relays the HTTP/2 to grpc's plaintext listener (``front_link.py``): on Linux an abstract Unix
socket (a relayed byte costs the kernel less than over TCP loopback; nothing left on disk),
elsewhere 127.0.0.1; either is reachable by local processes, as grpc's loopback port always
was. Every byte passes through the front once per direction; ``bench/bench_grpc.py
--tls-compare`` measures it.

Owns admission: at most ``max_connections`` connections, at most
``max_connections_per_address`` from one client address (loopback included); at either cap,
or when accept fails for want of file descriptors, the oldest connection that has not yet
sent a whole request or been answered one (``Link``: "unproven") is closed to make room,
else the new one is closed. Owns the budget
of request bytes (``inflight_request_bytes_max``): a gRPC message's declared length is booked
before grpc buffers it (``h2watch.RequestGate``); and the client address behind each relayed
connection (``client_peer``: grpc only sees the front's address). One address may book at
most half the budget (or one maximal message), and a connection whose booked message has
had no byte for ``handshake_timeout_ms`` (while the front was reading it) is closed: a
stalled sender cannot sit on the budget.

Does not own HTTP/2 itself and idle or dead connections once answered (grpc's keepalive
options, ``limits.py``).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import secrets
import socket
import ssl
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.security.front_link import TLS_RECORD_HANDSHAKE, Link
from rmq_spark.broker.security.tls import TlsFiles
from rmq_spark.errors import BrokerError

__all__ = ["Front", "FrontSettings", "TLS_RECORD_HANDSHAKE", "open_front", "tls_context"]

log = logging.getLogger("rmq_spark.broker")

_LOOPBACK = "127.0.0.1"
_WARN_EVERY_S = 10.0
_ACCEPTS_PER_WAKE = 64
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FrontSettings:
    """Where the front listens and relays to. ``tls``: ``None``, a TLS client is closed;
    ``plaintext``: ``False`` (``enforcing``), a plaintext client's calls are refused."""

    host: str
    port: int
    plain_port: int
    tls: ssl.SSLContext | None
    plaintext: bool
    max_connections: int
    handshake_timeout_s: float
    max_connections_per_address: int = 100
    inflight_bytes: int = 256 * _MIB
    message_bytes_max: int = 130 * _MIB  # grpc's receive limit: longer ones it refuses
    plain_path: bytes | None = None  # grpc's listener, an abstract Unix address (not the port)


class Front:
    """The listening socket on the public port; lives on the grpc server's loop."""

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self.port = 0
        self.booked_bytes = 0  # of the budget; only the loop's thread books (no lock)
        self._sock: socket.socket | None = None
        self._links: set[Link] = set()
        self._unproven: OrderedDict[Link, None] = OrderedDict()  # not answered yet, oldest first
        self._per_address: dict[str, int] = {}
        self._peers: dict[str, str] = {}  # grpc's peer of a relayed connection -> the client's
        self._names = (
            f"rmq-spark-front-{os.getpid()}-{secrets.token_hex(4)}-{n}" for n in itertools.count()
        )
        self._waiting: OrderedDict[Link, None] = OrderedDict()  # streams held for the budget
        self._wake_scheduled = False
        self._booked_by: dict[str, int] = {}  # budget bytes booked per client address
        self._limit = settings.inflight_bytes
        self._share = max(settings.inflight_bytes // 2, settings.message_bytes_max)
        self._watchdog: asyncio.TimerHandle | None = None
        self._counts = {"refused": 0, "evicted": 0, "expired": 0}
        self._warned_s = 0.0

    @property
    def connections(self) -> int:
        return len(self._links)

    async def bind(self) -> int:
        """Bind and listen on the public port (accepting starts with ``serve``)."""
        s = self.settings
        infos = socket.getaddrinfo(s.host, s.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        self._sock = socket.create_server(infos[0][4][:2], family=infos[0][0], backlog=1024)
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        return self.port

    async def serve(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        loop.add_reader(self._sock.fileno(), self._accept)
        self._watchdog = loop.call_later(1.0, self._watch_stalls)

    def stop_accepting(self) -> None:
        """Close the listening socket; relayed connections go on (their calls finish)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def close(self) -> None:
        """Stop accepting and close every relayed connection."""
        self.stop_accepting()
        for link in list(self._links):
            link.close()

    def client_peer(self, peer: str) -> str:
        """grpc's ``context.peer()`` of a relayed connection -> the client's own address."""
        return self._peers.get(peer, peer)

    def backend_name(self) -> bytes:
        """An abstract Unix address (Linux) for the front's end of a connection to grpc: grpc
        names the connection by it (``unix-abstract:...``), which ``client_peer`` maps."""
        return b"\0" + next(self._names).encode()

    # --- admission -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            if self._sock is None:
                return
            try:
                conn, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as err:
                if err.errno in _OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(err)
                else:  # one line (repeats are collapsed by the log's limiter), no traceback
                    log.warning("broker: accepting a connection failed: %s", err)
                return
            self._admit(conn, address)

    def _out_of_descriptors(self, err: OSError) -> None:
        """Close the oldest unproven connection and accept again once it is gone; with none,
        wait a second (the listening socket stays readable: no busy loop)."""
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        loop.remove_reader(self._sock.fileno())
        victim = next(iter(self._unproven), None)
        if victim is not None:
            self._evict(victim, f"accept failed ({err.strerror})")
            loop.call_soon(self._resume_accepting)  # after the victim's sockets closed
        else:
            log.warning(
                "broker: cannot accept connections: %s (ulimit -n; every connection has been "
                "answered); accepting again in 1 s",
                err.strerror,
            )
            loop.call_later(1.0, self._resume_accepting)

    def _resume_accepting(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().add_reader(self._sock.fileno(), self._accept)

    def _admit(self, conn: socket.socket, address: Any) -> None:
        # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and an accepted
        # socket of socket.create_server has proto 0: without it, Nagle delays every answer.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host, port = address[:2]
        if host.startswith("::ffff:") and "." in host:
            host = host[len("::ffff:") :]  # grpc names IPv4-mapped peers ipv4:
        s = self.settings
        if self._per_address.get(host, 0) >= s.max_connections_per_address:
            victim = next((link for link in self._unproven if link.host == host), None)
            if not self._make_room(victim, conn, "broker.max_connections_per_address"):
                return
        if len(self._links) >= s.max_connections:
            victim = next(iter(self._unproven), None)
            if not self._make_room(victim, conn, "broker.max_connections"):
                return
        peer = f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
        link = Link(self, conn, host, peer)
        self._links.add(link)
        self._unproven[link] = None
        self._per_address[host] = self._per_address.get(host, 0) + 1

    def _make_room(self, victim: Link | None, conn: socket.socket, cap: str) -> bool:
        if victim is None:
            self._counts["refused"] += 1
            conn.close()
            self._warn(f"refused a connection at {cap}")
            return False
        self._evict(victim, f"{cap} reached")
        return True

    def _evict(self, victim: Link, why: str) -> None:
        self._counts["evicted"] += 1
        victim.close()
        self._warn(f"{why}: closed the oldest connection without a whole call yet")

    def _warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned_s >= _WARN_EVERY_S:
            self._warned_s = now
            c = self._counts
            log.warning(
                "broker: %s (%d connections; so far %d refused, %d closed to make room, "
                "%d closed without a whole call after broker.handshake_timeout_ms)",
                what,
                len(self._links),
                c["refused"],
                c["evicted"],
                c["expired"],
            )

    # --- used by Link --------------------------------------------------------------------

    def note_expired(self) -> None:
        self._counts["expired"] += 1

    def answered(self, link: Link) -> None:
        self._unproven.pop(link, None)

    def backend_opened(self, link: Link) -> None:
        assert link.grpc_peer is not None
        self._peers[link.grpc_peer] = link.peer

    def forget(self, link: Link) -> None:
        if link not in self._links:
            return
        self._links.discard(link)
        self._unproven.pop(link, None)
        self._waiting.pop(link, None)
        left = self._per_address[link.host] - 1
        if left:
            self._per_address[link.host] = left
        else:
            del self._per_address[link.host]
        if link.grpc_peer is not None:
            self._peers.pop(link.grpc_peer, None)

    def wait_for_budget(self, link: Link) -> None:
        self._waiting[link] = None

    def book(self, host: str, nbytes: int) -> bool:
        """Book ``nbytes`` for a connection from ``host``: within its address's share and
        the budget, else ``False`` (the message waits)."""
        booked = self._booked_by.get(host, 0)
        if booked + nbytes > self._share or self.booked_bytes + nbytes > self._limit:
            return False
        self.booked_bytes += nbytes
        self._booked_by[host] = booked + nbytes
        return True

    def give(self, host: str, nbytes: int) -> None:
        """Bytes given back to the budget: the links waiting for it retry, soon, in order."""
        self.booked_bytes -= nbytes
        left = self._booked_by.pop(host) - nbytes
        if left:
            self._booked_by[host] = left
        if self._waiting and not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _watch_stalls(self) -> None:
        """Once a second, while bytes are booked: close the connections whose booked message
        stopped arriving ``handshake_timeout_s`` ago (time spent waiting on grpc excluded)."""
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(1.0, self._watch_stalls)
        if not self.booked_bytes:
            return
        limit = loop.time() - self.settings.handshake_timeout_s
        for link in [x for x in self._links if x.gate.incomplete and x.last_data < limit]:
            self._counts["expired"] += 1
            link.close()
            self._warn(f"closed a connection from {link.peer} whose booked request stalled")

    def _wake(self) -> None:
        self._wake_scheduled = False
        for link in list(self._waiting):
            link.budget_freed()
            if not link.gate.waiting:
                self._waiting.pop(link, None)


def tls_context(files: TlsFiles) -> ssl.SSLContext:
    """The front's server-side TLS: the pair, ALPN ``h2`` (gRPC needs it), TLS 1.2 or later,
    no client certificate asked for (as the RocketMQ proxy's ``ClientAuth.NONE``).

    Raises
    ------
    BrokerError
        A file cannot be read or the pair does not match.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    try:
        context.load_cert_chain(files.cert_file, files.key_file)
    except (OSError, ssl.SSLError) as err:
        raise BrokerError(f"broker.tls: cannot load {files.cert_file}: {err}") from err
    return context


async def open_front(
    server: Any,
    config: BrokerConfig,
    host: str,
    port: int,
    tls: TlsFiles | None,
    receive_limit: int,
) -> Front:
    """Add grpc's plaintext listener (abstract Unix on Linux, else 127.0.0.1) to ``server``
    and bind a ``Front`` to ``host:port`` (serving once ``serve()``); ``receive_limit``:
    grpc's, in bytes.

    Raises
    ------
    BrokerError
        A port cannot be bound, or ``enforcing`` without a certificate.
    """
    if tls is None and config.tls_mode == "enforcing":
        raise BrokerError("broker.tls_mode=enforcing: no certificate given to this endpoint")
    plain_path, plain_port = _grpc_listener(server)
    front = Front(
        FrontSettings(
            host=host,
            port=port,
            plain_port=plain_port,
            plain_path=plain_path,
            tls=tls_context(tls) if tls is not None else None,
            plaintext=config.tls_mode != "enforcing",
            max_connections=config.max_connections,
            handshake_timeout_s=config.handshake_timeout_ms / 1000,
            max_connections_per_address=config.max_connections_per_address,
            inflight_bytes=config.inflight_request_bytes_max,
            message_bytes_max=receive_limit,
        )
    )
    try:
        await front.bind()
    except OSError as err:
        raise BrokerError(f"cannot listen on {config.listen}: {err.strerror}") from err
    mode = "plaintext only"
    if tls is not None:
        kind = "self-signed certificate" if tls.self_signed else "certificate"
        mode = "TLS only" if config.tls_mode == "enforcing" else "TLS and plaintext"
        mode += f" ({kind} {tls.cert_file})"
    log.info("broker: port %d serves %s", front.port, mode)
    return front


def _grpc_listener(server: Any) -> tuple[bytes | None, int]:
    """grpc's plaintext listener for the front: (its abstract Unix address, 0) on Linux where
    grpc can bind one, else (``None``, its port on 127.0.0.1)."""
    if sys.platform == "linux":
        name = f"rmq-spark-grpc-{os.getpid()}-{secrets.token_hex(8)}"
        try:
            server.add_insecure_port(f"unix-abstract:{name}")
            return b"\0" + name.encode(), 0
        except RuntimeError as err:  # e.g. a sandbox without abstract sockets
            log.info("broker: grpc cannot listen on an abstract Unix socket (%s): loopback", err)
    try:
        return None, server.add_insecure_port(f"{_LOOPBACK}:0")
    except RuntimeError as err:
        raise BrokerError(f"cannot listen on {_LOOPBACK} for the front: {err}") from err
