"""The remoting server on its own event-loop thread, and where it listens.

``remoting_bind`` reads ``broker.remoting_listen``: ``host:port``; ``auto`` (the default):
the gRPC listen host and the gRPC port - 1, as RocketMQ's proxy serves remoting on 8080 next
to gRPC on 8081 (an OS-chosen port when the gRPC port is 0 or when port - 1 is taken: then
one log line names it); empty: off. ``RemotingEndpoint`` runs a ``RemotingServer`` with the
routes of ``routes.build_routes`` and the ``gate.RemotingGate``, like ``GrpcEndpoint``:
``start()`` returns once it accepts, ``stop()`` lets running requests finish (the grace) and
joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from rmq_spark.broker.config import BrokerConfig, parse_listen
from rmq_spark.broker.remoting.calls import Deps
from rmq_spark.broker.remoting.codec import FRAME_MAX_BYTES
from rmq_spark.broker.remoting.gate import RemotingGate
from rmq_spark.broker.remoting.routes import build_routes
from rmq_spark.broker.remoting.server import RemotingServer
from rmq_spark.broker.security.front import tls_context
from rmq_spark.broker.security.limits import handle_loop_exception
from rmq_spark.broker.security.tls import TlsFiles
from rmq_spark.errors import BrokerError
from rmq_spark.eventloop import new_event_loop

__all__ = ["RemotingEndpoint", "remoting_bind"]

log = logging.getLogger("rmq_spark.broker")

AUTO = "auto"


def remoting_bind(config: BrokerConfig, grpc_port: int) -> tuple[str, int, bool] | None:
    """``(host, port, fallback)`` to listen on, ``None`` when off; ``fallback``: the port was
    derived (``auto``) and another one may be used if it is taken."""
    text = config.remoting_listen.strip()
    if not text:
        return None
    if text == AUTO:
        host, _ = parse_listen(config.listen)
        return host, max(grpc_port - 1, 0), grpc_port > 1
    host, port = parse_listen(text)
    return host, port, False


class RemotingEndpoint:
    """A ``RemotingServer`` over ``deps`` on a private loop thread."""

    def __init__(self, deps: Deps, tls: TlsFiles | None, host: str, port: int, fallback: bool):
        self._deps = deps
        self._config = deps.config
        self._tls = tls
        self._host, self._requested_port, self._fallback = host, port, fallback
        self.port = 0
        self._server: RemotingServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def address(self) -> str:
        """``host:port`` a client dials (the advertised host, the bound port)."""
        host = self._config.route_host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def start(self) -> RemotingEndpoint:
        if self._tls is None and self._config.tls_mode == "enforcing":
            raise BrokerError("broker.tls_mode=enforcing: no certificate for the remoting port")
        self._thread = threading.Thread(target=self._run, name="broker-remoting", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        return self

    def _run(self) -> None:
        try:
            loop = new_event_loop(self._config.event_loop)
        except ValueError as err:
            self._start_error = BrokerError(str(err))
            self._started.set()
            return
        self._loop = loop
        loop.set_exception_handler(handle_loop_exception)
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            server = self._bind()
            self._deps.broker_addr = self.address
            server.serve(self._deps, build_routes(self._deps), RemotingGate(self._config))
            server.start()
        except BaseException as err:
            self._start_error = err
            self._started.set()
            return
        self._server = server
        mode = "plaintext only"
        if self._tls is not None:
            mode = "TLS only" if self._config.tls_mode == "enforcing" else "TLS and plaintext"
        log.info("broker: remoting port %d serves %s (RocketMQ 4.x clients)", self.port, mode)
        self._started.set()
        await self._stop.wait()
        await server.close(self._config.shutdown_grace_ms / 1000)

    def _bind(self) -> RemotingServer:
        frame_max = max(FRAME_MAX_BYTES, self._deps.service.max_message_size_bytes + (1 << 20))
        context = tls_context(self._tls) if self._tls is not None else None
        server = RemotingServer(
            self._config, self._host, self._requested_port, tls=context, frame_max_bytes=frame_max
        )
        try:
            self.port = server.bind()
        except BrokerError as err:
            if not self._fallback:
                raise
            server.requested_port = 0
            self.port = server.bind()
            log.warning("broker: %s; remoting serves port %d instead", err, self.port)
        return server

    def stop(self) -> None:
        """Refuse nothing new itself (the service does), finish running requests, close."""
        loop, stop = self._loop, self._stop
        if loop is None or stop is None or self._thread is None:
            return
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:
            pass  # the loop already ended
        self._thread.join(timeout=self._config.shutdown_grace_ms / 1000 + 30)
