"""Serving a Prometheus registry over HTTP, and pushing it to a Pushgateway.

Owns the one ``/metrics`` server every process of the project uses (the broker's
``broker.metrics_listen``, the reput and schedule jobs' ``metrics_listen``): the official
``prometheus_client`` threaded server over a registry of the caller's, a warning when it
listens beyond loopback (the endpoint has no TLS and no authentication), and the push of a
``spark-submit`` job's registry (``push``). Does not own any metric (``metrics.py``,
``spark/job_metrics.py``, ``delay/metrics.py``).
"""

from __future__ import annotations

import logging
import threading
import urllib.error
from collections.abc import Callable
from typing import Any, Self

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server

from rmq_spark.broker.config import parse_listen
from rmq_spark.errors import RmqError

__all__ = ["MetricsServer", "is_loopback", "push"]

log = logging.getLogger("rmq_spark.metrics")


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class MetricsServer:
    """``/metrics`` over HTTP on ``listen`` (``host:port``; port 0: any free port) from
    ``registry``. ``who`` names the process in log lines; ``error`` is raised (with the
    address and the reason) when the port cannot be bound."""

    def __init__(
        self, listen: str, registry: CollectorRegistry, who: str, error: Callable[[str], RmqError]
    ) -> None:
        self._host, self._requested_port = parse_listen(listen)
        self.registry = registry
        self._who = who
        self._error = error
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> Self:
        """Bind and serve (raises ``error`` naming the address if it cannot bind)."""
        try:
            self._server, self._thread = start_http_server(
                self._requested_port, addr=self._host, registry=self.registry
            )
        except OSError as err:
            raise self._error(
                f"cannot serve metrics on {self._host}:{self._requested_port}: {err.strerror}"
            ) from err
        self.port = int(self._server.server_port)
        if not is_loopback(self._host):
            log.warning(
                "%s: metrics on %s are readable by anyone who can reach it (no auth)",
                self._who,
                self.url,
            )
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def push(url: str, job: str, registry: CollectorRegistry, grouping: dict[str, str]) -> bool:
    """PUT ``registry`` to the Pushgateway at ``url`` under ``job`` and ``grouping`` (which
    replaces that group's previous push). A failure is logged, not raised: a job must not stop
    because its monitoring is down. Returns whether the push went through."""
    try:
        push_to_gateway(url, job=job, registry=registry, grouping_key=grouping, timeout=10)
    except (OSError, urllib.error.URLError, ValueError) as err:
        log.warning("%s: cannot push metrics to %s: %s", job, url, err)
        return False
    return True
