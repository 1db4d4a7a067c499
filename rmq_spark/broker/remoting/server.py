"""The broker's remoting server: RocketMQ 4.x clients and tools on ``broker.remoting_listen``.

Owns ``RemotingServer`` (on an event loop: accept, admission, TLS or plaintext by the first
byte, timeouts, dispatch of each request to its handler) and ``RemotingEndpoint`` (that
server on its own event-loop thread, as ``server.GrpcEndpoint`` runs gRPC; started by
``assembly.open_remoting`` for the broker process and the embedded broker).

The rules are the gRPC port's, from the same ``[broker]`` keys: at most ``max_connections``
connections and ``max_connections_per_address`` from one address (at a cap the oldest
connection without a whole frame yet is closed to make room, else the new one); a connection
without a whole frame ``handshake_timeout_ms`` after its accept, or stalled that long inside a
frame, is closed; one idle (nothing in or out, nothing running) for
``connection_idle_timeout_ms`` is closed (clients reconnect on demand); request bytes are
booked in an ``InflightBytes`` of ``inflight_request_bytes_max`` before they are buffered;
``tls_mode`` decides TLS and plaintext as on the gRPC port, with the same certificate.

A request then goes: authentication and ACL (``gate``) -> its handler (``routes``); no handler:
REQUEST_CODE_NOT_SUPPORTED; a ``HeaderError``: its code and message; any other exception:
SYSTEM_ERROR and one log line. A oneway request is never answered.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from enum import IntEnum

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import (
    Call,
    Deps,
    Handler,
    HeaderError,
    WaveHandler,
    response_to,
)
from rmq_spark.broker.remoting.codec import FRAME_MAX_BYTES, RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.connection import Connection
from rmq_spark.broker.security.front_link import TLS_RECORD_HANDSHAKE
from rmq_spark.broker.security.limits import InflightBytes
from rmq_spark.broker.traffic import TrafficStats
from rmq_spark.errors import BrokerError, RemotingFrameError

__all__ = ["Gate", "RemotingServer", "code_name"]

log = logging.getLogger("rmq_spark.broker")

# (refusal or None, principal): the authentication/ACL check of one call
Gate = Callable[[Call], tuple[RemotingCommand | None, object | None]]

_ACCEPTS_PER_WAKE = 64
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_WARN_EVERY_S = 10.0


def code_name(code: int, names: type[IntEnum] = RequestCode) -> str:
    """``code``'s name in ``names`` (a request code by default), or its number."""
    try:
        return names(code).name
    except ValueError:
        return str(code)


class RemotingServer:
    """Listens on one address; lives on one event loop (``start``/``close`` on it)."""

    def __init__(
        self,
        config: BrokerConfig,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        frame_max_bytes: int = FRAME_MAX_BYTES,
    ) -> None:
        self.config = config
        self.host, self.requested_port = host, port
        self.port = 0
        self.frame_max_bytes = frame_max_bytes
        self._tls = tls
        self._plaintext = config.tls_mode != "enforcing"
        self.routes: dict[int, Handler] = {}
        self.gate: Gate = lambda call: (None, None)
        self._traffic: TrafficStats | None = None
        self.budget = InflightBytes(max(config.inflight_request_bytes_max, frame_max_bytes))
        self.connections: OrderedDict[Connection, None] = OrderedDict()  # oldest first
        self._per_address: dict[str, int] = {}
        # accepted, first byte not seen yet (oldest first): the first to give way at a cap
        self._pending_sockets: OrderedDict[socket.socket, str] = OrderedDict()
        self._waiting: OrderedDict[Connection, None] = OrderedDict()  # for budget
        self._sock: socket.socket | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._counts = {"refused": 0, "evicted": 0, "expired": 0, "idle": 0, "bad": 0}
        self._warned_s = 0.0
        self.stopping = False

    def serve(self, deps: Deps, routes: dict[int, Handler], gate: Gate | None = None) -> None:
        self.routes = routes
        if gate is not None:
            self.gate = gate
        self._traffic = deps.service.traffic  # rocketmq_rpc_latency, as the gRPC port's

    # --- listening -----------------------------------------------------------------------

    def bind(self) -> int:
        infos = socket.getaddrinfo(
            self.host, self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        try:
            sock = socket.create_server(infos[0][4][:2], family=infos[0][0], backlog=1024)
        except OSError as err:
            raise BrokerError(
                f"cannot listen on {self.host}:{self.requested_port} (broker.remoting_listen): "
                f"{err.strerror}"
            ) from err
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    def start(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        loop.add_reader(self._sock.fileno(), self._accept)
        self._sweeper = loop.call_later(1.0, self._sweep)

    def stop_accepting(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def close(self, grace_s: float) -> None:
        """Stop accepting, let running requests finish (up to ``grace_s``), close all."""
        self.stopping = True
        self.stop_accepting()
        tasks = [t for c in self.connections for t in c.tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        for sock in list(self._pending_sockets):
            self._drop_socket(sock)
        for connection in list(self.connections):
            connection.close()

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
                self._accept_failed(err)
                return
            self._admit(conn, address)

    def _accept_failed(self, err: OSError) -> None:
        if err.errno not in _OUT_OF_DESCRIPTORS:
            log.warning("remoting: accepting a connection failed: %s", err)
            return
        if self._evict_unproven(None, f"accept failed ({err.strerror})"):
            return
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        loop.remove_reader(self._sock.fileno())
        self._warn(f"cannot accept connections: {err.strerror}; accepting again in 1 s")
        loop.call_later(1.0, self._resume_accepting)

    def _resume_accepting(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().add_reader(self._sock.fileno(), self._accept)

    def _admit(self, conn: socket.socket, address: tuple[str, int]) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host = address[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[len("::ffff:") :]
        c = self.config
        if self._per_address.get(host, 0) >= c.max_connections_per_address:
            if not self._make_room(host, conn, "broker.max_connections_per_address"):
                return
        if len(self.connections) + len(self._pending_sockets) >= c.max_connections:
            if not self._make_room(None, conn, "broker.max_connections"):
                return
        self._per_address[host] = self._per_address.get(host, 0) + 1
        conn.setblocking(False)
        self._pending_sockets[conn] = host
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(c.handshake_timeout_ms / 1000, self._first_byte_late, conn, host)
        loop.add_reader(conn.fileno(), self._first_byte, conn, host, address[1], deadline)

    def _first_byte(
        self, conn: socket.socket, host: str, port: int, deadline: asyncio.TimerHandle
    ) -> None:
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        deadline.cancel()
        asyncio.get_running_loop().remove_reader(conn.fileno())
        self._pending_sockets.pop(conn, None)
        tls = bool(first) and first[0] == TLS_RECORD_HANDSHAKE
        if not first or (tls and self._tls is None) or (not tls and not self._plaintext):
            why = "sent TLS but the port has no certificate" if tls else "sent plaintext"
            if first and (tls or not self._plaintext):
                self._warn(f"closed a connection from {host} that {why} (broker.tls_mode)")
            self._release_address(host)
            conn.close()
            return
        asyncio.get_running_loop().create_task(self._hand_over(conn, host, port, tls))

    def _first_byte_late(self, conn: socket.socket, host: str) -> None:
        if conn in self._pending_sockets:
            self._counts["expired"] += 1
            self._drop_socket(conn)

    def _drop_socket(self, conn: socket.socket) -> None:
        """Close an accepted socket whose first byte was not seen; its address count too."""
        host = self._pending_sockets.pop(conn, None)
        if host is None:
            return
        self._release_address(host)
        try:
            asyncio.get_running_loop().remove_reader(conn.fileno())
        except (ValueError, OSError):
            pass
        conn.close()

    async def _hand_over(self, conn: socket.socket, host: str, port: int, tls: bool) -> None:
        loop = asyncio.get_running_loop()
        connection = Connection(self, host, port, tls)
        self.connections[connection] = None
        try:
            await loop.connect_accepted_socket(
                lambda: connection,
                conn,
                ssl=self._tls if tls else None,
                ssl_handshake_timeout=self.config.handshake_timeout_ms / 1000 if tls else None,
            )
        except (TimeoutError, OSError, ssl.SSLError) as err:  # a failed handshake
            self._warn(f"TLS handshake with {host} failed: {err}")
            if connection in self.connections:
                self.forget(connection)
            conn.close()

    def forget(self, connection: Connection) -> None:
        """A connection closed (``Connection.connection_lost``)."""
        if connection not in self.connections:
            return  # already forgotten (evicted)
        del self.connections[connection]
        self._waiting.pop(connection, None)
        self._release_address(connection.peer_host)

    def _release_address(self, host: str) -> None:
        left = self._per_address.get(host, 1) - 1
        if left > 0:
            self._per_address[host] = left
        else:
            self._per_address.pop(host, None)

    def _evict_unproven(self, host: str | None, why: str) -> bool:
        """Close the oldest connection (of ``host``) without a whole frame yet, if any."""
        sock = next((s for s, h in self._pending_sockets.items() if host in (None, h)), None)
        victim = next(
            (c for c in self.connections if not c.proven and host in (None, c.peer_host)), None
        )
        if sock is None and victim is None:
            return False
        self._counts["evicted"] += 1
        if sock is not None:
            self._drop_socket(sock)
        elif victim is not None:
            victim.abort()
            self.forget(victim)  # its count is free now, before the loop reports the close
        self._warn(f"{why}: closed the oldest connection without a whole frame yet")
        return True

    def _make_room(self, host: str | None, conn: socket.socket, cap: str) -> bool:
        if self._evict_unproven(host, f"{cap} reached"):
            return True
        self._counts["refused"] += 1
        conn.close()
        self._warn(f"refused a connection at {cap}")
        return False

    def _sweep(self) -> None:
        """Once a second: close connections past the handshake, stall or idle timeouts."""
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(1.0, self._sweep)
        now = loop.time()
        handshake_s = self.config.handshake_timeout_ms / 1000
        idle_s = self.config.connection_idle_timeout_ms / 1000
        for connection in list(self.connections):
            if not connection.proven and now - connection.accepted_at > handshake_s:
                self._counts["expired"] += 1
                connection.close()
            elif connection.partial and now - connection.last_data > handshake_s:
                self._counts["expired"] += 1
                self._warn(f"closed a connection from {connection.peer} stalled inside a frame")
                connection.close()
            elif not connection.tasks and now - connection.last_activity > idle_s:
                self._counts["idle"] += 1
                connection.close()

    # --- the budget of request bytes -----------------------------------------------------

    def book(self, connection: Connection, nbytes: int) -> bool:
        if self.budget.take(nbytes):
            return True
        self._waiting[connection] = None
        return False

    def give(self, nbytes: int) -> None:
        if not nbytes:
            return
        self.budget.give(nbytes)
        while self._waiting:
            connection, _ = self._waiting.popitem(last=False)
            connection.budget_freed()
            if connection in self._waiting:  # still no room
                self._waiting.move_to_end(connection, last=False)
                return

    # --- requests ------------------------------------------------------------------------

    def note_bad_frame(self, connection: Connection, why: str) -> None:
        self._counts["bad"] += 1
        log.warning("remoting: closed the connection from %s: %s", connection.peer, why)

    def wave_handler(self, code: int) -> WaveHandler | None:
        """The handler of ``code`` when it serves waves of requests (``dispatch_wave``)."""
        handler = self.routes.get(code)
        return handler if isinstance(handler, WaveHandler) else None

    async def dispatch(self, connection: Connection, command: RemotingCommand) -> None:
        started = time.perf_counter()
        try:
            response = await self._answer(Call(command, connection))
        except BaseException as err:  # cancelled, or a bug: counted, then raised
            self._timed(command, None, err, started)
            raise
        self._timed(command, response, None, started)
        self._write(connection, command, response)

    async def dispatch_wave(
        self, connection: Connection, handler: WaveHandler, commands: list[RemotingCommand]
    ) -> None:
        """``dispatch`` of requests of ``handler``'s codes that came in one read: each gated
        on its own, the admitted ones served by one ``handler.wave``, each answered and
        timed as ``dispatch`` answers and times it."""
        started = time.perf_counter()
        try:
            responses = await self._answer_wave(connection, handler, commands)
        except BaseException as err:
            for command in commands:
                self._timed(command, None, err, started)
            raise
        for command, response in zip(commands, responses, strict=True):
            self._timed(command, response, None, started)
            self._write(connection, command, response)

    def _timed(
        self,
        command: RemotingCommand,
        response: RemotingCommand | None,
        raised: BaseException | None,
        started: float,
    ) -> None:
        if self._traffic is None:
            return
        if raised is not None:
            cancelled = isinstance(raised, asyncio.CancelledError)
            result = "cancelled" if cancelled else "process_request_failed"
        else:
            result = "success"
        answered = "NONE" if response is None else code_name(response.code, ResponseCode)
        elapsed = time.perf_counter() - started
        self._traffic.rpc_done("remoting", code_name(command.code), answered, result, elapsed)

    @staticmethod
    def _write(
        connection: Connection, command: RemotingCommand, response: RemotingCommand | None
    ) -> None:
        if response is None or command.is_oneway:
            return
        try:
            connection.write(response)
        except RemotingFrameError as err:  # the handler's answer cannot be framed
            log.warning("remoting: answer to %s: %s", code_name(command.code), err)
            connection.write(response_to(command, ResponseCode.SYSTEM_ERROR, str(err)))

    async def _answer(self, call: Call) -> RemotingCommand | None:
        command = call.command
        refusal, principal = self.gate(call)
        if refusal is not None:
            return refusal
        handler = self.routes.get(command.code)
        if handler is None:
            return response_to(
                command,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {command.code} not supported",
            )
        if principal is not None:
            call = Call(command, call.link, principal)  # type: ignore[arg-type]
        try:
            return await handler(call)
        except Exception as err:
            return _failed(call, err)

    async def _answer_wave(
        self, connection: Connection, handler: WaveHandler, commands: list[RemotingCommand]
    ) -> list[RemotingCommand | None]:
        answers: list[RemotingCommand | None] = [None] * len(commands)
        admitted, places = [], []
        for at, command in enumerate(commands):
            call = Call(command, connection)
            refusal, principal = self.gate(call)
            if refusal is not None:
                answers[at] = refusal
                continue
            admitted.append(call if principal is None else Call(command, connection, principal))
            places.append(at)
        if admitted:
            try:
                results = await handler.wave(admitted)
            except Exception as err:  # the wave as a whole: each of its requests answered so
                results = [err] * len(admitted)
            for at, call, result in zip(places, admitted, results, strict=True):
                answers[at] = _failed(call, result) if isinstance(result, Exception) else result
        return answers

    def _warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned_s >= _WARN_EVERY_S:
            self._warned_s = now
            c = self._counts
            log.warning(
                "remoting: %s (%d connections; so far %d refused, %d closed to make room, "
                "%d closed by broker.handshake_timeout_ms, %d idle, %d bad frames)",
                what,
                len(self.connections),
                c["refused"],
                c["evicted"],
                c["expired"],
                c["idle"],
                c["bad"],
            )


def _failed(call: Call, err: Exception) -> RemotingCommand:
    """The answer to a request whose handler raised ``err``: a ``HeaderError`` its own code,
    anything else SYSTEM_ERROR, logged."""
    command = call.command
    if isinstance(err, HeaderError):
        return response_to(command, err.code, str(err))
    log.warning(
        "remoting: %s from %s failed: %s: %s",
        code_name(command.code),
        call.link.peer_host,
        type(err).__name__,
        err,
    )
    return response_to(command, ResponseCode.SYSTEM_ERROR, f"{type(err).__name__}: {err}"[:1000])
