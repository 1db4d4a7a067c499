"""Prometheus metrics of the Spark jobs: served from the job's driver, or pushed.

Spark 4.2 never asks a Python streaming source for its ``metrics()``, so
``StreamingQueryProgress.sources[].metrics`` stays empty and tools that watch Spark see no
lag. The jobs publish their own instead: ``JobMetrics`` is one job's registry, served on
``metrics_listen`` (``/metrics``, the broker's server: ``broker/metrics_http.py``) and/or
pushed to a Pushgateway at ``metrics_push_url`` after each batch and at the end (for
``spark-submit`` jobs that no Prometheus can reach). ``ReputMetrics`` are the reput job's:
counters fed by its per-batch reports, and the lag read when Prometheus scrapes: the store's
durable end against the position the job published as its reader progress
(``store/reader_progress.py``), so the lag keeps growing while the job is stuck.
The schedule job's metrics are ``delay/metrics.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from rmq_spark.broker.metrics_http import MetricsServer, push
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import ConfigError, RmqError
from rmq_spark.spark.reput_progress import ReputLag, reput_lag
from rmq_spark.spark.tables import CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES
from rmq_spark.store.reader_progress import read_reader_progress

if TYPE_CHECKING:
    from rmq_spark.spark.reput import BatchReport
    from rmq_spark.spark.reput_config import ReputConfig

__all__ = [
    "BATCH_SECONDS_BUCKETS",
    "JobMetrics",
    "LAG_REUSE_MS",
    "ReputMetrics",
    "publish_store_brokers",
]

log = logging.getLogger("rmq_spark.metrics")

LAG_REUSE_MS = 1000  # scrapes this close together share one walk of the log
BATCH_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class JobMetrics:
    """One job's registry (the process collector included), its ``/metrics`` server when
    ``listen`` is set and its Pushgateway pushes when ``push_url`` is set.

    Raises ``ConfigError`` naming ``setting`` when ``listen`` cannot be bound.
    """

    def __init__(
        self, job: str, *, listen: str = "", push_url: str = "", grouping: dict[str, str]
    ) -> None:
        self.job = job
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._push_url = push_url
        self._grouping = grouping
        self._pusher: ThreadPoolExecutor | None = None
        self._pushing = threading.Lock()
        self.server = MetricsServer(listen, self.registry, job, _listen_error) if listen else None

    @property
    def enabled(self) -> bool:
        return self.server is not None or bool(self._push_url)

    def start(self) -> JobMetrics:
        if self.server is not None:
            self.server.start()
            log.info("%s: metrics %s", self.job, self.server.url)
        if self._push_url:
            self._pusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-push")
        return self

    def push_soon(self) -> None:
        """Push in the background, unless a push is still under way (the next one carries
        the newer values): a slow Pushgateway never holds a batch up."""
        if self._pusher is not None and self._pushing.acquire(blocking=False):
            self._pusher.submit(self._push_and_release)

    def _push_and_release(self) -> None:
        try:
            push(self._push_url, self.job, self.registry, self._grouping)
        finally:
            self._pushing.release()

    def stop(self) -> None:
        """A last push of the final values (waited for), then the server stops."""
        if self._pusher is not None:
            self._pusher.shutdown(wait=True)
            self._pusher = None
            push(self._push_url, self.job, self.registry, self._grouping)
        if self.server is not None:
            self.server.stop()


def publish_store_brokers(
    registry: CollectorRegistry, name: str, brokers: Mapping[str, str]
) -> None:
    """``name{store, broker} 1`` for each store a job reads from a cluster's broker (store
    path -> broker name; nothing without ``--namesrv``). Prometheus's info-metric pattern: the
    job's series stay labelled by ``store`` and a query names their brokers with
    ``* on(store) group_left(broker) name``."""
    if not brokers:
        return
    info = Gauge(name, "The broker whose store this is (1 per store)", ["store", "broker"],
                 registry=registry)  # fmt: skip
    for store, broker in sorted(brokers.items()):
        info.labels(store, broker).set(1)


def _listen_error(message: str) -> RmqError:
    return ConfigError("metrics_listen", message)


class ReputMetrics:
    """The reput job's metrics in ``metrics.registry``: ``on_batch`` is the job's per-batch
    callback (``run_reput(on_batch=...)``); the lag is a collector read at scrape time.

    ``stores``: the absolute store paths the job reads (a one-store job's reports carry no
    store: its one store is meant). Labels: ``store`` and ``tables`` (the tables directory).
    """

    def __init__(
        self,
        metrics: JobMetrics,
        stores: Sequence[str],
        config: ReputConfig,
        clock: Clock | None = None,
    ) -> None:
        self._metrics = metrics
        self._stores = tuple(stores)
        self._tables = str(Path(config.tables_dir).absolute())
        self._reader = config.reader_name
        self._scan_max = config.lag_scan_messages_max
        self._clock = clock or SystemClock()
        self._lag_lock = threading.Lock()
        self._lag_at: float | None = None
        self._lag_cache: dict[str, ReputLag] = {}
        labels = ["store", "tables"]
        registry = metrics.registry
        self.batches = Counter(
            "rmq_reput_batches", "Micro-batches committed", labels, registry=registry
        )
        self.log_bytes = Counter(
            "rmq_reput_log_bytes", "CommitLog bytes turned into rows", labels, registry=registry
        )
        self.rows = Counter(
            "rmq_reput_rows_written",
            "Rows committed, per table",
            [*labels, "table"],
            registry=registry,
        )
        self.duration = Histogram(
            "rmq_reput_batch_duration_seconds",
            "Time of a micro-batch: finding its log range, writing and committing the tables",
            labels,
            buckets=BATCH_SECONDS_BUCKETS,
            registry=registry,
        )
        for store in self._stores:  # every series from the start: 0 before the first batch
            for family in (self.batches, self.log_bytes, self.duration):
                family.labels(store, self._tables)
            for table in (CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES):
                self.rows.labels(store, self._tables, table)
        registry.register(_LagCollector(self))

    def stop(self) -> None:
        self._metrics.stop()

    def on_batch(self, report: BatchReport) -> None:
        store = report.store or self._stores[0]
        labels = (store, self._tables)
        self.batches.labels(*labels).inc()
        self.log_bytes.labels(*labels).inc(report.log_bytes)
        rows = {MESSAGES: report.message_count, **report.row_counts}
        for table in (CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES):
            self.rows.labels(*labels, table).inc(rows.get(table, 0))
        self.duration.labels(*labels).observe((report.stats_ms + report.write_ms) / 1000)
        self._metrics.push_soon()

    def lag_families(self) -> Iterator[Metric]:
        names = (
            ("rmq_reput_lag_bytes", "Log bytes not in the tables yet"),
            ("rmq_reput_lag_messages", "Messages not in the tables yet (see _exact)"),
            ("rmq_reput_lag_messages_exact", "1: the lag count is exact; 0: a lower bound"),
            ("rmq_reput_lag_seconds", "Age of the oldest message not in the tables (0: none)"),
            ("rmq_reput_committed_offset_bytes", "Log position the tables are complete up to"),
            ("rmq_reput_log_end_offset_bytes", "Durable end of the store's log"),
        )
        families = {
            name: GaugeMetricFamily(name, text, labels=["store", "tables"]) for name, text in names
        }
        for store, lag in self.lags().items():
            for name, value in (
                ("rmq_reput_lag_bytes", lag.behind_bytes),
                ("rmq_reput_lag_messages", lag.behind_messages),
                ("rmq_reput_lag_messages_exact", int(lag.messages_exact)),
                ("rmq_reput_lag_seconds", lag.behind_ms / 1000),
                ("rmq_reput_committed_offset_bytes", lag.reput_offset),
                ("rmq_reput_log_end_offset_bytes", lag.durable_offset),
            ):
                families[name].add_metric([store, self._tables], value)
        yield from families.values()

    def lags(self) -> dict[str, ReputLag]:
        """Each readable store's lag now; scrapes within ``LAG_REUSE_MS`` of the last walk
        (or waiting for it) get its answer, so scrapes cannot make the driver walk the log
        more than once per interval however many arrive."""
        with self._lag_lock:
            now = self._clock.monotonic_ms()
            if self._lag_at is not None and now - self._lag_at < LAG_REUSE_MS:
                return self._lag_cache
            lags: dict[str, ReputLag] = {}
            for store in self._stores:
                try:
                    lags[store] = reput_lag(
                        store,
                        self.committed(store),
                        clock=self._clock,
                        scan_messages_max=self._scan_max,
                    )
                except (OSError, RmqError) as err:  # unreadable now: no sample this time
                    log.debug("reput metrics: no lag for %s: %s", store, err)
            self._lag_at, self._lag_cache = now, lags
            return lags

    def committed(self, store: str) -> int:
        """The position this job published in ``store`` (0 before its first publication)."""
        for reader in read_reader_progress(store):
            if reader.name == self._reader:
                return reader.physical_offset
        return 0


class _LagCollector:
    def __init__(self, owner: ReputMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return self._owner.lag_families()
