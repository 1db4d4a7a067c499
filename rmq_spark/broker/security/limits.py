"""Bounded resources of the gRPC server: request bytes in flight, keepalive, file descriptors.

Owns ``InflightBytes`` (a budget of SendMessage request bytes being served at once: a request
that would overrun it is answered ``TOO_MANY_REQUESTS`` before it is parsed), the grpc channel
options that drop dead or idle peers (``connection_options``) and the file-descriptor check at
start-up. The connection cap and the handshake timeout are the front's (``front.py``).

Does not own: the wire status of a refusal (``grpc_api.py`` builds it from the reason given
here), the TLS/plaintext split (``front.py``, ``tls.py``). See docs/BROKER.md, "TLS and
resource limits".
"""

from __future__ import annotations

import logging
import resource
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from rmq_spark.broker.config import BrokerConfig

__all__ = [
    "Admitted",
    "InflightBytes",
    "connection_options",
    "ensure_fd_limit",
    "handle_loop_exception",
]

log = logging.getLogger("rmq_spark.broker")

# File descriptors one client connection costs: its socket, the front's socket to grpc and
# grpc's side of that socket. Plus a reserve for the store's files and the process.
_FDS_PER_CONNECTION = 3
_FD_RESERVE = 256


class InflightBytes:
    """A budget of request bytes being served at once (thread-safe).

    ``take(n)`` books ``n`` bytes or returns ``False`` when the budget would be overrun (a
    request larger than the whole budget never fits); ``give(n)`` returns them.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    def take(self, nbytes: int) -> bool:
        with self._lock:
            if self._used + nbytes > self.limit_bytes:
                return False
            self._used += nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes

    def admit(
        self, deserialize: Callable[[bytes], Any], refuse: Callable[[str], Any]
    ) -> Callable[[bytes], Any]:
        """A request deserializer that books the request's bytes first: ``Admitted`` (the
        parsed request holding its booking), or ``refuse(reason)`` without parsing."""

        def admitted(data: bytes) -> Any:
            nbytes = len(data)
            if not self.take(nbytes):
                log.warning(
                    "broker: refused a %d-byte request: %d of %d request bytes in flight",
                    nbytes,
                    self._used,
                    self.limit_bytes,
                )
                return refuse(
                    f"the broker is serving {self._used} request bytes, this request of "
                    f"{nbytes} would pass broker.inflight_request_bytes_max={self.limit_bytes}; "
                    "retry later"
                )
            return Admitted(deserialize(data), self, nbytes)

        return admitted

    @staticmethod
    def release_after(
        handler: Callable[[Any, Any], Awaitable[Any]],
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        """Wrap a unary handler: unwrap an ``Admitted`` request, give its bytes back after."""

        async def handle(request: Any, context: Any) -> Any:
            if not isinstance(request, Admitted):
                return await handler(request, context)
            try:
                return await handler(request.message, context)
            finally:
                request.release()

        return handle

    @staticmethod
    def release_after_wave(
        run: Callable[[list[tuple[Any, Any]]], Awaitable[list[Any]]],
    ) -> Callable[[list[tuple[Any, Any]]], Awaitable[list[Any]]]:
        """``release_after`` for a wave handler: every call's booking given back after."""

        async def handle(calls: list[tuple[Any, Any]]) -> list[Any]:
            booked = [request for request, _ in calls if isinstance(request, Admitted)]
            try:
                unwrapped = [
                    (request.message if isinstance(request, Admitted) else request, context)
                    for request, context in calls
                ]
                return await run(unwrapped)
            finally:
                for request in booked:
                    request.release()

        return handle


class Admitted:
    """A parsed request and its booking in an ``InflightBytes``; released once, at the
    latest when dropped (a call cancelled before its handler ran)."""

    __slots__ = ("_budget", "_nbytes", "message")

    def __init__(self, message: Any, budget: InflightBytes, nbytes: int) -> None:
        self.message = message
        self._budget: InflightBytes | None = budget
        self._nbytes = nbytes

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.give(self._nbytes)

    def __del__(self) -> None:
        self.release()


def connection_options(config: BrokerConfig) -> list[tuple[str, Any]]:
    """grpc server options that bound a connection's life.

    Keepalive pings find dead peers (no ack in ``keepalive_timeout_ms``: closed, even with
    no call open); a connection without any call for ``connection_idle_timeout_ms`` is closed
    (clients reconnect on their next call; a client's Telemetry stream keeps it open); a
    peer that does not finish its TLS/HTTP/2 handshake in ``handshake_timeout_ms`` is closed.
    Clients' own keepalive pings are allowed every 10 s.
    """
    return [
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.max_connection_idle_ms", config.connection_idle_timeout_ms),
        ("grpc.server_handshake_timeout_ms", config.handshake_timeout_ms),
    ] + (
        # Without the front (tls_mode=disabled) grpc caps connections itself.
        [("grpc.max_allowed_incoming_connections", config.max_connections)]
        if config.tls_mode == "disabled"
        else []
    )


def ensure_fd_limit(max_connections: int) -> None:
    """Raise the soft open-files limit so ``max_connections`` fit (up to the hard limit); log
    a warning when they cannot: past it new connections would fail as EMFILE, for everyone."""
    needed = max_connections * _FDS_PER_CONNECTION + _FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "broker: open-files limit %d is below the %d that broker.max_connections=%d needs "
            "(ulimit -n); lower max_connections",
            soft,
            needed,
            max_connections,
        )


def handle_loop_exception(loop: Any, context: dict[str, Any]) -> None:
    """The event loop's exception handler: an accept that failed for want of descriptors is
    one warning line (asyncio logs it with a traceback, once per queued connection, and
    retries in 1 s); anything else goes to asyncio's default handler."""
    error = context.get("exception")
    if context.get("message") == "socket.accept() out of system resource" and isinstance(
        error, OSError
    ):
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.warning(
            "broker: cannot accept connections: %s (open-files limit %d, ulimit -n); "
            "accepting again in 1 s",
            error.strerror,
            soft,
        )
        return
    loop.default_exception_handler(context)
