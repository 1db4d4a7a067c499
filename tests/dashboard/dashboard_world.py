"""A real store for the dashboard tests: messages written by the embedded broker, a consumer
group that acknowledged some of them, a delayed message, a registered reader."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.spark.query import record_at
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.reader_progress import publish_reader_progress

START_MS = 1_764_000_000_000  # 2025-11-24T16:00:00Z, a whole minute
ORDERS = 12  # 4 in the first minute, 8 two minutes later
PAYMENTS = 9
ACKED = 3  # billing acknowledged payments 0..2 (queue offsets 0..2): its lag is 6
READER = "reput:/data/tables"


@dataclass(frozen=True)
class World:
    root: Path
    msg_id: str  # offset message id of orders' message 5
    body: str  # its body
    reader_offset: int  # where READER says it is


def build_world(root: Path) -> World:
    clock = ManualClock(START_MS)
    config = BrokerConfig(topics=("orders:2", "payments:1"), default_queue_count=1)
    offsets = []
    with Broker(root, broker_config=config, clock=clock) as broker:
        for i in range(ORDERS):
            if i == 4:
                clock.advance(120_000)
            outcome = broker.send("orders", f"order body {i}".encode(), keys=(f"order-{i}",))
            assert outcome.ok, outcome
            offsets.append(outcome.physical_offset)
            clock.advance(1_000)
        for i in range(PAYMENTS):
            assert broker.send("payments", f"payment {i}".encode()).ok
        assert broker.send("later", b"delayed", delay_level=2).ok
        assert broker.store.consume_queues.wait_dispatched(broker.store.confirmed_offset, 10)
        consumer = broker.consumer("billing", "payments")
        got = []
        while len(got) < PAYMENTS:
            got += consumer.receive(max_messages=PAYMENTS, invisible_ms=600_000, wait_ms=5_000)
        for message in sorted(got, key=lambda m: m.body)[:ACKED]:
            consumer.ack(message)
        consumer.close()
    publish_reader_progress(root, READER, offsets[5], START_MS)
    decoded = record_at(root, offsets[5])
    msg_id = offset_msg_id(decoded.record.store_host, offsets[5])
    return World(root, msg_id, "order body 5", offsets[5])


DLQ_GROUP = "strict"  # retry_max_times 0: a message it fails once is a dead letter
DLQ_TOPIC = "tasks"
DEAD = 3  # dead letters in %DLQ%strict, queue offsets 0..2


def build_dlq_world(root: Path) -> Path:
    """A store where group ``strict`` failed every message of ``tasks`` once: ``DEAD`` dead
    letters in ``%DLQ%strict``, each with a tag, a key and a user property."""
    from rmq_spark.broker.config_files.rocketmq_config_files import SubscriptionGroups

    clock = ManualClock(START_MS)
    SubscriptionGroups(root).update(DLQ_GROUP, retry_max_times=0)
    config = BrokerConfig(topics=(f"{DLQ_TOPIC}:1",), default_queue_count=1)
    with Broker(root, broker_config=config, clock=clock) as broker:
        for i in range(DEAD):
            body, keys, props = f"task {i}".encode(), (f"task-{i}",), {"attempt": str(i)}
            assert broker.send(DLQ_TOPIC, body, tag="T", keys=keys, properties=props).ok
        consumer = broker.consumer(DLQ_GROUP, DLQ_TOPIC)
        got: list[object] = []
        while len(got) < DEAD:
            got += consumer.receive(max_messages=DEAD, invisible_ms=10_000, wait_ms=5_000)
        clock.advance(10_000)  # never acknowledged: each goes to the DLQ on the next receive
        assert consumer.receive(max_messages=DEAD, invisible_ms=10_000, wait_ms=0) == []
        consumer.close()
        dlq = f"%DLQ%{DLQ_GROUP}"
        deadline = broker.store.confirmed_offset
        assert broker.store.consume_queues.wait_dispatched(deadline, 10)
        assert broker.consume.source.max_offset(dlq, 0) == DEAD
    return root
