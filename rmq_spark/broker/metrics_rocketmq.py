"""The broker's metrics under RocketMQ 5's names and labels, so RocketMQ's own dashboards and
alerts work on an rmq-spark broker.

RocketMQ 5 exports its broker metrics through OpenTelemetry (``BrokerMetricsConstant``):
``rocketmq_messages_in_total{topic,message_type}``, ``rocketmq_consumer_lag_messages``
``{topic,consumer_group,is_retry}`` and so on, every series with ``cluster``, ``node_type``
and ``node_id``. This collector serves those names from the same state the ``rmq_*``
metrics read (``metrics.py``), at scrape time. Where this broker does not count what
RocketMQ counts, the label is left out rather than made up (``rocketmq_messages_out_total``
has no ``topic``: deliveries are counted per group). Does not own the ``rmq_*`` names or the
HTTP endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer.groups import RETRY_PREFIX
from rmq_spark.broker.consumer.revive import REVIVE_GROUP
from rmq_spark.broker.consumer.service import ConsumeService, dlq_topic
from rmq_spark.broker.service import BrokerService
from rmq_spark.broker.traffic import RpcKey
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import RmqError
from rmq_spark.store.latency import LatencySnapshot
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)

__all__ = ["RocketMQCollector", "message_type_of"]

_DELAY_TOPICS = frozenset({RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC})
_NODE = ["cluster", "node_type", "node_id"]
_QUEUE = [*_NODE, "topic", "consumer_group", "is_retry"]


def message_type_of(stored_topic: str) -> str:
    """RocketMQ's ``message_type`` label (``TopicMessageType.getMetricsValue``) of a message
    stored under ``stored_topic``: a delayed or timer message is stored under its schedule
    topic, a transaction's half under the half topic. FIFO is not told apart (the count is
    kept per stored topic, not per message property): it counts as ``normal``."""
    if stored_topic in _DELAY_TOPICS:
        return "delay"
    if stored_topic == RMQ_SYS_TRANS_HALF_TOPIC:
        return "transaction"
    return "normal"


class RocketMQCollector:
    """A ``prometheus_client`` collector of one broker under RocketMQ 5's metric names."""

    def __init__(
        self,
        service: BrokerService,
        consume: ConsumeService | None,
        config: BrokerConfig,
        clock: Clock | None = None,
    ) -> None:
        self._service = service
        self._consume = consume
        self._node = [config.cluster_name, "broker", config.broker_name]
        self._clock = clock or SystemClock()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        traffic = self._service.traffic.snapshot()
        messages = CounterMetricFamily(
            "rocketmq_messages_in_total",
            "Messages stored",
            labels=[*_NODE, "topic", "message_type"],
        )
        size = CounterMetricFamily(
            "rocketmq_throughput_in_total",
            "Bytes stored (whole CommitLog records)",
            labels=[*_NODE, "topic", "message_type"],
        )
        for topic, (count, total) in sorted(traffic.puts.items()):
            labels = [*self._node, topic, message_type_of(topic)]
            messages.add_metric(labels, count)
            size.add_metric(labels, total)
        out = CounterMetricFamily(
            "rocketmq_messages_out_total",
            "Messages delivered to consumers",
            labels=[*_NODE, "consumer_group"],
        )
        for group, count in sorted(traffic.received.items()):
            out.add_metric([*self._node, group], count)
        topics = self._service.topics.snapshot()
        active = GaugeMetricFamily("rocketmq_active_topic_number", "Topics", labels=_NODE)
        active.add_metric(self._node, len(topics))
        yield from (messages, size, out, active, self._rpc(traffic.rpc))
        if self._consume is not None:
            yield from self._consumers(self._consume, topics)

    def _rpc(self, rpc: dict[RpcKey, LatencySnapshot]) -> Metric:
        """``rocketmq_rpc_latency``: a histogram in milliseconds, as RocketMQ's."""
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time to answer a request, ms (unary gRPC calls, remoting requests)",
            labels=[
                *_NODE,
                "protocol_type",
                "request_code",
                "response_code",
                "is_long_polling",
                "result",
            ],
        )
        for (protocol, method, code, result), stats in sorted(rpc.items()):
            running, buckets = 0, []
            for bound, count in zip(stats.bounds, stats.counts, strict=False):
                running += count
                buckets.append((repr(round(bound * 1000, 6)), running))
            buckets.append(("+Inf", stats.count))
            labels = [*self._node, protocol, method, code, "false", result]
            family.add_metric(labels, buckets, sum_value=stats.sum_s * 1000)
        return family

    def _consumers(self, consume: ConsumeService, topics: dict[str, int]) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(name, help_text, labels=_QUEUE)
            for name, help_text in (
                ("rocketmq_consumer_lag_messages", "Messages stored, not acknowledged"),
                ("rocketmq_consumer_lag_latency", "Age of the oldest unacknowledged message, ms"),
                ("rocketmq_consumer_inflight_messages", "Delivered, not acknowledged yet"),
                ("rocketmq_consumer_ready_messages", "Stored, not delivered yet"),
            )
        }
        now_ms = self._clock.now_ms()
        groups: set[str] = set()
        for (group, topic), row in sorted(consumer_rows(consume, topics).items()):
            groups.add(group)
            lag, inflight, oldest_ms = row
            labels = [*self._node, topic, group, str(topic.startswith(RETRY_PREFIX)).lower()]
            latency = 0 if oldest_ms is None else max(0, now_ms - oldest_ms)
            for name, value in (
                ("rocketmq_consumer_lag_messages", lag),
                ("rocketmq_consumer_lag_latency", latency),
                ("rocketmq_consumer_inflight_messages", inflight),
                ("rocketmq_consumer_ready_messages", max(0, lag - inflight)),
            ):
                families[name].add_metric(labels, value)
        yield from families.values()
        subscriptions = GaugeMetricFamily(
            "rocketmq_active_subscription_number", "Consumer groups with progress", labels=_NODE
        )
        subscriptions.add_metric(self._node, len(groups))
        yield subscriptions
        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to the group's dead-letter topic (%DLQ%<group>) since it exists",
            labels=[*_NODE, "consumer_group"],
        )
        for group in sorted(groups):  # 0 for a group without a DLQ topic yet
            queues = range(topics.get(dlq_topic(group), 0))
            total = sum(consume.queue_bounds(dlq_topic(group), q)[1] for q in queues)
            dlq.add_metric([*self._node, group], total)
        yield dlq


def consumer_rows(
    consume: ConsumeService, topics: dict[str, int]
) -> dict[tuple[str, str], tuple[int, int, int | None]]:
    """(group, topic) -> (lag, in flight, store time of the oldest unacknowledged message)
    over every queue of the topic; ``%RETRY%`` topics included, the retry reviver left out.
    A queue the group never read counts from its oldest message."""
    offsets, _extra = consume.groups.snapshot()
    inflight: dict[tuple[str, str], int] = {}
    for (group, topic, _queue), (_committed, flying) in consume.groups.positions().items():
        inflight[(group, topic)] = inflight.get((group, topic), 0) + flying
    rows: dict[tuple[str, str], tuple[int, int, int | None]] = {}
    for (topic, group), committed in offsets.items():
        if group == REVIVE_GROUP:
            continue
        lag, oldest = 0, None
        for queue_id in set(committed) | set(range(topics.get(topic, 0))):
            low, high = consume.queue_bounds(topic, queue_id)
            start = max(low, committed.get(queue_id, low))
            if high > start:
                lag += high - start
                stamp = _store_time(consume, topic, queue_id, start)
                if stamp is not None and (oldest is None or stamp < oldest):
                    oldest = stamp
        rows[(group, topic)] = (lag, inflight.get((group, topic), 0), oldest)
    return rows


def _store_time(consume: ConsumeService, topic: str, queue_id: int, offset: int) -> int | None:
    """Store time of the message at ``offset`` of the queue (``None``: unreadable now, e.g.
    deleted by retention meanwhile)."""
    try:
        physical = consume.source.view(topic, queue_id).physical_at(offset)
        if physical is None:
            return None
        record: Any = consume.read_record(physical)
        return int(record.record.store_timestamp_ms)
    except (OSError, RmqError):
        return None
