"""GET_CONSUME_STATS (``mqadmin consumerProgress``): a group's offsets against each queue's end.

The topics are those the group committed offsets in (the consume service's table, both
fronts) and those its live 4.x clients subscribe to, or the one ``topic`` the request names.
Per queue, as RocketMQ's ``AdminBrokerProcessor#getConsumeStats``: ``brokerOffset`` (the
queue's max offset), ``consumerOffset`` (committed; 0 when none), ``pullOffset`` (the same:
this broker keeps no separate pull position) and ``lastTimestamp`` (store time of the last
consumed message, 0 when none). The body is fastjson's: the ``offsetTable`` is keyed by
``MessageQueue`` objects (``format_consume_stats``).
"""

from __future__ import annotations

import json

from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.consume import RemoteConsumers, remote_consumers
from rmq_spark.errors import RmqError

__all__ = ["QueueStats", "format_consume_stats", "handlers"]

QueueStats = tuple[str, int, int, int, int]  # topic, queue id, broker, consumer, last ms


def format_consume_stats(broker_name: str, rows: list[QueueStats]) -> bytes:
    """``ConsumeStats`` as fastjson writes it (object-valued map keys)."""
    entries = []
    for topic, queue_id, broker_offset, consumer_offset, last_ms in rows:
        key = json.dumps(
            {"brokerName": broker_name, "queueId": queue_id, "topic": topic},
            separators=(",", ":"),
        )
        value = json.dumps(
            {
                "brokerOffset": broker_offset,
                "consumerOffset": consumer_offset,
                "lastTimestamp": last_ms,
                "pullOffset": consumer_offset,
            },
            separators=(",", ":"),
        )
        entries.append(f"{key}:{value}")
    return ('{"consumeTps":0.0,"offsetTable":{' + ",".join(entries) + "}}").encode()


def _topics(consume: ConsumeService, consumers: RemoteConsumers, group: str) -> set[str]:
    offsets, _extra = consume.groups.snapshot()
    topics = {topic for topic, g in offsets if g == group}
    for entry in consumers.links.members(group, consumers.now_ms()):
        topics.update(sub.topic for sub in entry.data.subscriptions)
    return topics


def _last_ms(consume: ConsumeService, topic: str, queue_id: int, committed: int) -> int:
    if committed <= 0:
        return 0
    try:
        physical = consume.source.view(topic, queue_id).physical_at(committed - 1)
        if physical is None:
            return 0
        return consume.read_record(physical).record.store_timestamp_ms
    except (RmqError, OSError):
        return 0


def _rows(deps: Deps, consume: ConsumeService, group: str, topics: set[str]) -> list[QueueStats]:
    rows = []
    for topic in sorted(topics):
        count = deps.service.topics.queue_count(topic)
        for queue_id in range(count or 0):
            high = consume.queue_bounds(topic, queue_id)[1]
            committed = max(0, consume.groups.committed_offset(group, topic, queue_id) or 0)
            last = _last_ms(consume, topic, queue_id, committed)
            rows.append((topic, queue_id, high, committed, last))
    return rows


def handlers(deps: Deps) -> dict[int, Handler]:
    consume = deps.consume
    if consume is None:
        return {}
    consumers = remote_consumers(deps)

    async def consume_stats(call: Call) -> RemotingCommand:
        group = call.required("consumerGroup")
        topic = call.field("topic")
        topics = {topic} if topic else _topics(consume, consumers, group)
        rows = _rows(deps, consume, group, topics)
        return call.reply(body=format_consume_stats(deps.config.broker_name, rows))

    return {RequestCode.GET_CONSUME_STATS: consume_stats}
