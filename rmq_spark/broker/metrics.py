"""The broker's Prometheus metrics: collectors that read the broker's state at scrape time.

Owns the metric names (docs/BROKER.md, "Metrics") and the HTTP endpoint that serves them
(``broker.metrics_listen``; off by default). Every value is read when Prometheus scrapes:
the send and consume paths only count into ``traffic.TrafficStats`` and the store only times
its fsyncs (``store/latency.py``), so neither imports ``prometheus_client`` and a broker
without metrics pays no more than those counters.

Does not own: the counting itself (``traffic.py``, ``store/durability.py``), the consumer
groups' offsets (``consumer/groups.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer.groups import retry_topic
from rmq_spark.broker.consumer.revive import REVIVE_GROUP
from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.metrics_http import MetricsServer, is_loopback
from rmq_spark.broker.metrics_rocketmq import RocketMQCollector
from rmq_spark.broker.service import BrokerService
from rmq_spark.errors import BrokerError
from rmq_spark.store.latency import LatencySnapshot

__all__ = ["BrokerCollector", "MetricsEndpoint", "group_lags", "is_loopback"]


class BrokerCollector:
    """A ``prometheus_client`` collector over one broker: service, consumers and store."""

    def __init__(self, service: BrokerService, consume: ConsumeService | None, store: Any) -> None:
        self._service = service
        self._consume = consume
        self._store = store

    def describe(self) -> list[Metric]:
        return []  # names are not checked against other collectors: one broker per registry

    def collect(self) -> Iterator[Metric]:
        yield from self._traffic()
        yield from self._store_metrics()
        yield from _replication(self._service)
        topics = self._service.topics.snapshot()
        gauge = GaugeMetricFamily("rmq_topics", "Topics in the broker's table (internal too)")
        gauge.add_metric([], len(topics))
        yield gauge
        if self._consume is not None:
            yield from self._groups(topics)

    def _traffic(self) -> Iterator[Metric]:
        traffic = self._service.traffic.snapshot()
        messages = CounterMetricFamily(
            "rmq_put_messages", "Messages stored by the broker", labels=["topic"]
        )
        size = CounterMetricFamily(
            "rmq_put_bytes", "Bytes of stored records (CommitLog record size)", labels=["topic"]
        )
        for topic, (count, total) in sorted(traffic.puts.items()):
            messages.add_metric([topic], count)
            size.add_metric([topic], total)
        yield messages
        yield size
        yield _histogram(
            "rmq_put_latency_seconds",
            "Store put time of a send, fsync wait included under SYNC",
            traffic.put_latency,
        )
        for name, help_text, table in (
            ("rmq_consumer_received_messages", "Messages delivered to consumers", "received"),
            ("rmq_consumer_acked_messages", "Messages acknowledged by consumers", "acked"),
        ):
            family = CounterMetricFamily(name, help_text, labels=["group"])
            for group, count in sorted(getattr(traffic, table).items()):
                family.add_metric([group], count)
            yield family

    def _store_metrics(self) -> Iterator[Metric]:
        store = self._store
        for name, help_text, value in (
            ("rmq_commitlog_max_offset_bytes", "End of the last written record", "max_offset"),
            ("rmq_commitlog_min_offset_bytes", "Oldest readable byte of the log", "min_offset"),
        ):
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], getattr(store, value))
            yield gauge
        gauge = GaugeMetricFamily("rmq_store_disk_bytes", "Disk space the store directory uses")
        gauge.add_metric([], disk_usage(Path(store.root_dir)))
        yield gauge
        stats = getattr(store, "fsync_stats", None)
        if stats is not None:
            yield _histogram(
                "rmq_store_fsync_seconds", "fsyncs that made new records durable", stats
            )

    def _groups(self, topics: dict[str, int]) -> Iterator[Metric]:
        assert self._consume is not None
        lags = group_lags(self._consume, topics)
        groups = GaugeMetricFamily("rmq_consumer_groups", "Consumer groups with progress")
        groups.add_metric([], len({group for group, _topic in lags}))
        yield groups
        lag = GaugeMetricFamily(
            "rmq_consumer_lag_messages",
            "Messages stored but not acknowledged by the group (all queues of the topic)",
            labels=["group", "topic"],
        )
        for (group, topic), value in sorted(lags.items()):
            lag.add_metric([group, topic], value)
        yield lag


def group_lags(consume: ConsumeService, topics: dict[str, int]) -> dict[tuple[str, str], int]:
    """(group, topic) -> messages past the group's committed offsets, over every queue of the
    topic (a queue the group never read counts from its oldest message, where it would start).
    The broker's retry reviver and the groups' ``%RETRY%`` topics are left out."""
    offsets, _extra = consume.groups.snapshot()
    lags: dict[tuple[str, str], int] = {}
    for (topic, group), committed in offsets.items():
        if group == REVIVE_GROUP or topic == retry_topic(group):
            continue
        total = 0
        for queue_id in set(committed) | set(range(topics.get(topic, 0))):
            low, high = consume.queue_bounds(topic, queue_id)
            total += max(0, high - max(low, committed.get(queue_id, low)))
        lags[(group, topic)] = total
    return lags


def _replication(service: BrokerService) -> Iterator[Metric]:
    """Replication lag as this broker sees it (docs/REPLICATION.md): a master, behind its best
    slave's confirmed offset; a slave, behind what its master has shown it."""
    replication = getattr(service, "replication", None)
    if replication is None:
        return
    lag = replication.lag()
    for name, help_text, value in (
        ("rmq_replication_lag_bytes", "Log bytes the peer has not confirmed", lag.bytes),
        ("rmq_replication_lag_seconds", "How long the peer has been behind", lag.seconds),
        ("rmq_replication_peers", "Connected replication peers", lag.connections),
        ("rmq_replication_confirmed_offset_bytes", "Offset confirmed by the peer(s)",
         lag.acked_offset),
    ):  # fmt: skip
        gauge = GaugeMetricFamily(name, help_text, labels=["role"])
        gauge.add_metric([replication.role], value)
        yield gauge


def disk_usage(root: Path) -> int:
    """Bytes allocated to the files under ``root`` (segments are preallocated: their whole
    size counts, as ``du`` says); files removed meanwhile are skipped."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _histogram(name: str, help_text: str, stats: LatencySnapshot) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(stats.bounds, stats.counts, strict=False):
        running += count
        buckets.append((repr(bound), running))
    buckets.append(("+Inf", stats.count))
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=stats.sum_s)


class MetricsEndpoint(MetricsServer):
    """The broker's ``/metrics`` (``broker.metrics_listen``): its ``rmq_*`` metrics, the same
    state under RocketMQ 5's names (``metrics_rocketmq.py``) and the process's, from a
    registry of its own (one per broker)."""

    def __init__(
        self,
        listen: str,
        service: BrokerService,
        consume: ConsumeService | None,
        store: Any,
        config: BrokerConfig | None = None,
    ) -> None:
        registry = CollectorRegistry()
        registry.register(BrokerCollector(service, consume, store))
        registry.register(RocketMQCollector(service, consume, config or BrokerConfig()))
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, memory, fds
        super().__init__(listen, registry, "broker", BrokerError)
