"""Broker process lifecycle: bind the port, open the store, serve gRPC, stop cleanly on a signal.

Owns ``GrpcEndpoint`` (a ``grpc.aio`` server on its own event-loop thread, used by the broker
process and by the embedded broker), ``run_broker`` (the long-running process: SIGTERM/SIGINT
stop it gracefully) and ``main`` for ``python -m rmq_spark.broker.server``. Logs one line per
start, stop and error.

Does not own: message logic (``service.py``), wire translation (``grpc_api.py``), the store's
flush/checkpoint/abort handling (``MessageStore.close`` does that).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc

from rmq_spark.broker.assembly import OpenBroker, open_broker, open_remoting
from rmq_spark.broker.collector import settle_collector
from rmq_spark.broker.config import BrokerConfig, parse_listen
from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.cpu_share import take_own_cpu_share
from rmq_spark.broker.grpc.consume_grpc import ConsumerRpcs
from rmq_spark.broker.grpc.grpc_api import (
    MessagingServicer,
    add_servicer_to_server,
    endpoints_of,
    grpc_server_options,
)
from rmq_spark.broker.grpc.native_front import NativeServer
from rmq_spark.broker.grpc.native_front import built as native_built
from rmq_spark.broker.grpc.rpc_timer import RpcTimer
from rmq_spark.broker.metrics import MetricsEndpoint
from rmq_spark.broker.remoting.endpoint import RemotingEndpoint, remoting_bind
from rmq_spark.broker.remoting.registration import (
    add_namesrv_arguments,
    namesrv_overrides,
    start_registration,
)
from rmq_spark.broker.security.auth import authenticator_for, open_listener_warning
from rmq_spark.broker.security.auth_grpc import AuthInterceptor
from rmq_spark.broker.security.front import Front, open_front
from rmq_spark.broker.security.limits import (
    InflightBytes,
    connection_options,
    ensure_fd_limit,
    handle_loop_exception,
)
from rmq_spark.broker.security.lograte import install_repeat_limiter
from rmq_spark.broker.security.tls import TlsFiles, resolve_tls
from rmq_spark.broker.service import BrokerService
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import BrokerError, RmqError
from rmq_spark.eventloop import new_event_loop
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message import HostAddress

__all__ = ["GrpcEndpoint", "check_port_free", "main", "run_broker"]

log = logging.getLogger("rmq_spark.broker")

EXIT_ERROR = 2
_DEFAULT_STORE_HOST = StoreConfig().store_host


def check_port_free(host: str, port: int) -> None:
    """Raise ``BrokerError`` if ``host:port`` cannot be bound (taken, or not our address).

    grpc would only log a C-level line and raise a bare RuntimeError; this gives the reason.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc does
        probe.bind((host, port))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise BrokerError(
                f"cannot listen on {host}:{port}: the port is already in use "
                "(another broker running?)"
            ) from err
        raise BrokerError(f"cannot listen on {host}:{port}: {err.strerror}") from err
    finally:
        probe.close()


def store_config_for(store_config: StoreConfig, listen_host: str, listen_port: int) -> StoreConfig:
    """Record the broker's own address as STOREHOST unless the config names one."""
    if store_config.store_host != _DEFAULT_STORE_HOST or listen_port == 0:
        return store_config
    try:
        host = HostAddress(listen_host, listen_port)
    except ValueError:
        return store_config  # a host name: keep the configured address
    return dataclasses.replace(store_config, store_host=str(host))


class GrpcEndpoint:
    """The gRPC face of a ``BrokerService``: a ``grpc.aio`` server on a private loop thread.

    ``start()`` returns once the port is bound and the server accepts calls (``port`` is the
    bound port, useful with ``:0``); ``stop()`` ends Telemetry streams, stops accepting,
    waits up to ``grace_s`` for in-flight calls and joins the thread.
    """

    def __init__(
        self,
        service: BrokerService,
        config: BrokerConfig,
        consume: ConsumeService | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self._tls = tls  # None: plaintext only (tls.resolve_tls decides)
        self._front: Front | None = None
        self._service = service
        self._consume = consume
        self._config = config
        self._host, self._requested_port = parse_listen(config.listen)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._shutdown: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._executor = ThreadPoolExecutor(
            max_workers=config.grpc_worker_threads, thread_name_prefix="broker-put"
        )
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._stopped = threading.Event()
        self._grace_s = config.shutdown_grace_ms / 1000

    @property
    def address(self) -> str:
        """``host:port`` clients use as the endpoint (the advertised host, the bound port)."""
        host = self._config.route_host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The serving event loop (its own thread), once started."""
        assert self._loop is not None, "the endpoint is not started"
        return self._loop

    @property
    def loop_name(self) -> str:
        """The kind of event loop serving (``uvloop`` or ``asyncio``), once started."""
        loop = self._loop
        if loop is None:
            return "none"
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"

    def start(self) -> GrpcEndpoint:
        check_port_free(self._host, self._requested_port)
        self._thread = threading.Thread(target=self._run, name="broker-grpc", daemon=True)
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
            self._stopped.set()
            self._started.set()
            return
        self._loop = loop
        loop.set_exception_handler(handle_loop_exception)
        try:
            loop.run_until_complete(self._serve())
            _end_left_tasks(loop)  # the HA port's, served on this loop
        finally:
            loop.close()
            self._stopped.set()

    async def _serve(self) -> None:
        self._shutdown = asyncio.Event()
        try:
            authenticator = authenticator_for(
                self._config, self._service.store_root, self._service.clock
            )
            receive_limit = max(
                self._config.grpc_receive_limit_bytes,
                self._service.max_message_size_bytes + 1024 * 1024,
            )
            server = self._open_server(receive_limit)
            if isinstance(server, NativeServer):
                self.port = server.port
            elif self._config.tls_mode == "disabled":  # grpc on the public port, no front
                self.port = self._bind_direct(server)
            else:
                self.port = await self._bind_front(server, receive_limit)
            consumers = None
            if self._consume is not None:
                consumers = ConsumerRpcs(
                    self._consume,
                    endpoints=endpoints_of(self._config.route_host, self.port),
                    broker_name=self._config.broker_name,
                )
            servicer = MessagingServicer(
                self._service,
                self._executor,
                client_peer=self._front.client_peer if self._front else None,
                route_host=self._config.route_host,
                route_port=self.port,
                shutdown=self._shutdown,
                consumers=consumers,
            )
            inflight = InflightBytes(self._config.inflight_request_bytes_max)
            # Timing first, so it covers authentication; applied per method, not per call.
            edge = (RpcTimer(self._service.traffic), AuthInterceptor(authenticator))
            add_servicer_to_server(servicer, server, inflight, edge)
            await server.start()
            if self._front is not None:
                await self._front.serve()
        except BaseException as err:
            if self._front is not None:
                self._front.close()
            self._start_error = err
            self._started.set()
            return
        self._server = server
        self._started.set()
        await self._shutdown.wait()
        if self._front is not None:
            self._front.stop_accepting()
        # Telemetry handlers watch the same event and return; unary calls get the grace.
        await server.stop(self._grace_s)
        if self._front is not None:
            self._front.close()

    def _open_server(self, receive_limit: int) -> Any:
        """grpc.aio's server, or the native front's (``broker.grpc_front``), not yet serving."""
        config = self._config
        front = config.grpc_front
        if front == "auto":
            front = "native" if native_built() else "python"
            log.info("broker: gRPC front %s (broker.grpc_front=auto)", front)
        if front == "native":
            return NativeServer(config, self._host, self._requested_port, self._tls, receive_limit)
        return grpc.aio.server(
            options=grpc_server_options(receive_limit) + connection_options(config),
        )

    def _bind_direct(self, server: Any) -> int:
        """``tls_mode=disabled``: grpc itself on the public port (no front: no byte copied;
        its own cap, ``grpc.max_allowed_incoming_connections``, refuses at the cap)."""
        bind_host = f"[{self._host}]" if ":" in self._host else self._host
        try:
            port: int = server.add_insecure_port(f"{bind_host}:{self._requested_port}")
        except RuntimeError as err:
            raise BrokerError(f"cannot listen on {self._config.listen}: {err}") from err
        log.info("broker: port %d serves plaintext only (tls_mode=disabled)", port)
        return port

    async def _bind_front(self, server: Any, receive_limit: int) -> int:
        """grpc on 127.0.0.1, the front on the public port; returns the public port."""
        self._front = await open_front(
            server, self._config, self._host, self._requested_port, self._tls, receive_limit
        )
        return self._front.port

    def stop(self, grace_s: float | None = None) -> None:
        """Stop serving: refuse sends, end streams, wait for in-flight calls, join the thread."""
        if self._loop is None or self._stopped.is_set():
            self._executor.shutdown(wait=True)
            return
        if grace_s is not None:
            self._grace_s = grace_s
        loop, shutdown = self._loop, self._shutdown
        assert shutdown is not None
        try:
            loop.call_soon_threadsafe(shutdown.set)
        except RuntimeError:
            pass  # the loop already ended
        if self._thread is not None:
            self._thread.join(timeout=self._grace_s + 30)
        self._executor.shutdown(wait=True)


def _end_left_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still on ``loop`` and let them end (their ``finally`` blocks), as
    ``asyncio.run`` does before it closes its loop."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def run_broker(
    store_config: StoreConfig,
    broker_config: BrokerConfig,
    *,
    clock: Clock | None = None,
    ready_file: Path | None = None,
) -> int:
    """Run the broker until SIGTERM or SIGINT, then stop gracefully. Returns the exit code.

    Graceful stop: refuse new sends, end Telemetry streams, stop accepting, let in-flight
    sends finish (``shutdown_grace_ms``), then close the store (flush, clean checkpoint,
    ``abort`` removed).

    Raises
    ------
    BrokerError
        The port or the store is taken.
    """
    clock = clock or SystemClock()
    host, port = parse_listen(broker_config.listen)
    install_repeat_limiter(broker_config.log_repeat_interval_ms / 1000)
    take_own_cpu_share()
    stop_requested = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stop_requested.set()

    with ExitStack() as process:
        # Installed first: a signal during start-up still ends in a clean close.
        for sig in (signal.SIGTERM, signal.SIGINT):
            process.callback(signal.signal, sig, signal.signal(sig, on_signal))
        check_port_free(host, port)
        # STOREHOST: where tools dial an offset message id (the remoting port when served).
        remoting_at = remoting_bind(broker_config, port)
        config = store_config_for(store_config, host, remoting_at[1] if remoting_at else port)
        broker = process.enter_context(open_broker(config, broker_config, clock))
        endpoint, metrics, remoting = _serve(broker, broker_config, store_config.root_dir)
        started_s = time.monotonic()
        _log_started(endpoint, metrics, store_config, broker_config)
        # Name servers hand out the remoting address (4.x clients and tools dial it).
        registered = remoting.port if remoting is not None else endpoint.port
        replication = broker.replication.start(endpoint.port, endpoint.loop)
        ha_port = replication.server.port if replication.server is not None else None
        namesrv = start_registration(
            broker_config,
            registered,
            broker.service.topics.snapshot,
            endpoint.port,
            broker_id=replication.broker_id,
            ha_port=ha_port,
        )
        if namesrv is not None:
            broker.announcers.callback(namesrv.stop)
        open_warning = open_listener_warning(broker_config)
        if open_warning is not None:
            log.warning("broker: %s", open_warning)
        settle_collector()
        if ready_file is not None:
            ready_file.write_text(f"{endpoint.address}\n", encoding="utf-8")
        while not stop_requested.wait(timeout=1.0):
            pass
        broker.close()
    log.info(
        "broker stopped: %s after %.1f s; store closed cleanly%s",
        received[0] if received else "stop",
        time.monotonic() - started_s,
        "" if broker.idle else " (some sends were still running at the deadline)",
    )
    return 0


def _serve(
    broker: OpenBroker, config: BrokerConfig, root_dir: Path
) -> tuple[GrpcEndpoint, MetricsEndpoint | None, RemotingEndpoint | None]:
    """Start the network parts over ``broker`` (its ``fronts``: stopped when it closes)."""
    ensure_fd_limit(config.max_connections)
    tls = resolve_tls(config, root_dir)
    endpoint = GrpcEndpoint(broker.service, config, broker.consume, tls).start()
    broker.fronts.callback(endpoint.stop)
    remoting = open_remoting(broker, config, tls, endpoint.port)
    metrics = None
    if config.metrics_listen:
        metrics = MetricsEndpoint(
            config.metrics_listen, broker.service, broker.consume, broker.store, config
        ).start()
        broker.fronts.callback(metrics.stop)
    return endpoint, metrics, remoting


def _log_started(
    endpoint: GrpcEndpoint,
    metrics: MetricsEndpoint | None,
    store_config: StoreConfig,
    broker_config: BrokerConfig,
) -> None:
    log.info(
        "broker started: listening on %s (pid %d), store %s, flush %s, topics %s, loop %s, "
        "metrics %s",
        endpoint.address,
        os.getpid(),
        store_config.root_dir,
        store_config.flush_policy.name,
        f"auto-created with {broker_config.default_queue_count} queues"
        if broker_config.auto_create_topics
        else "must exist",
        endpoint.loop_name,
        metrics.url if metrics is not None else "off",
    )


def build_parser(prog: str = "python -m rmq_spark.broker.server") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the RocketMQ 5 gRPC broker over a store directory.",
    )
    add_broker_arguments(parser)
    return parser


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store``, ``--listen``, ``--ready-file``, the name-server options (``--config``/``--set``
    come from the CLI)."""
    parser.add_argument("--store", metavar="DIR", help="store root directory (store.root_dir)")
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="address to serve gRPC on (broker.listen)"
    )
    parser.add_argument(
        "--ready-file",
        metavar="FILE",
        type=Path,
        help="write the served host:port here once the broker accepts calls",
    )
    add_namesrv_arguments(parser)


def configs_from_args(
    args: argparse.Namespace, default_path: Path | None = None
) -> tuple[StoreConfig, BrokerConfig]:
    """Store and broker sections from ``--config``/``--set`` plus ``--store``/``--listen``.

    ``default_path`` is read when ``--config`` is not given (``None``: built-in defaults).
    """
    from rmq_spark.config import load_config, parse_override

    overrides = dict(parse_override(item) for item in getattr(args, "overrides", None) or [])
    if args.store:
        overrides["store.root_dir"] = args.store
    if args.listen:
        overrides["broker.listen"] = args.listen
    overrides.update(namesrv_overrides(args))
    config = load_config(getattr(args, "config", None) or default_path, overrides)
    return config.store, config.broker


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("--config", metavar="FILE", help="TOML config file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        store_config, broker_config = configs_from_args(args)
        return run_broker(store_config, broker_config, ready_file=args.ready_file)
    except RmqError as err:
        log.error("broker error: %s", err)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
