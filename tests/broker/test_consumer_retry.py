"""Retry through ``%RETRY%<group>`` and then the DLQ (spec 11, seed 004).

In-process with a ManualClock: the copy a failed delivery leaves in SCHEDULE_TOPIC_XXXX
(delay level 3 + reconsume times, RocketMQ's properties), the broker's reviver putting it back
only once due, the group's position passing the original once the copy is stored, FIFO groups
redelivering in place. Against a broker process with the official Python PushConsumer: a
listener that always fails sees attempts 1, 2, 3, then the message is in ``%DLQ%<group>``, as
``rmq-spark dump`` shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, props, read_records, wait_for

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock

_INVISIBLE_MS = 10_000
_WAIT_MS = 5_000
_FAST_RETRY = "store.message_delay_level=" + " ".join(["1s"] * 18)


def _broker(root: Path, clock: ManualClock) -> Broker:
    return Broker(root, broker_config=BrokerConfig(default_queue_count=1), clock=clock)


def _schedule_copies(root: Path) -> list[Any]:
    return [r for r in read_records(root) if r.topic == "SCHEDULE_TOPIC_XXXX"]


def test_a_failed_delivery_goes_through_the_retry_topic_with_rocketmqs_delay_levels(
    tmp_path: Path,
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    with _broker(root, clock) as broker:
        message_id = broker.send("orders", b"o1", tag="TagA", properties={"k": "v"}).message_id
        consumer = broker.consumer("billing", "orders")
        [first] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # handed to retry
        [copy] = _schedule_copies(root)
        p = props(copy)
        assert copy.queue_id == 2 and p["DELAY"] == "3"  # level 3 + 0 reconsume times
        assert p["REAL_TOPIC"] == "%RETRY%billing" and p["RETRY_TOPIC"] == "orders"
        assert p["RECONSUME_TIME"] == "1" and copy.reconsume_times == 1
        assert p["UNIQ_KEY"] == message_id and len(p["ORIGIN_MESSAGE_ID"]) == 32
        assert p["TAGS"] == "TagA" and p["k"] == "v"
        # The copy is durable, so the group's position passes the original.
        broker.consume.close()  # saves progress
    assert read_consumer_offsets(root)[("orders", "billing")] == {0: 1}

    with _broker(root, clock) as broker:
        consumer = broker.consumer("billing", "orders")
        clock.advance(9_999)
        broker.consume.reviver.revive_due()
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # not due yet
        clock.advance(1)
        [second] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert second.message_id == message_id and second.delivery_attempt == 2
        assert second.topic == "orders" and second.tag == "TagA"
        consumer.change_invisible_duration(second, 0)  # a nack
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        later = _schedule_copies(root)[1]
        assert props(later)["DELAY"] == "4" and props(later)["RECONSUME_TIME"] == "2"
        assert props(later)["ORIGIN_MESSAGE_ID"] == p["ORIGIN_MESSAGE_ID"]
        clock.advance(30_000)
        [third] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert third.delivery_attempt == 3
        consumer.ack(third)
        clock.advance(10 * _INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
    assert first.message_id == message_id


def test_a_fifo_group_redelivers_in_place_without_the_retry_topic(tmp_path: Path) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    SubscriptionGroups(root).update("ordered", fifo=True)
    with _broker(root, clock) as broker:
        broker.send("orders", b"g1", message_group="g")
        consumer = broker.consumer("ordered", "orders")
        [first] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        clock.advance(_INVISIBLE_MS)
        [again] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0)
        assert again.message_id == first.message_id and again.delivery_attempt == 2
    assert _schedule_copies(root) == []


def test_a_groups_dlq_is_readable_by_consumers_but_not_writable_by_producers(
    tmp_path: Path,
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    SubscriptionGroups(root).update("strict", retry_max_times=0)
    with _broker(root, clock) as broker:
        refused = broker.send("%DLQ%strict", b"forged")
        assert refused.code.name == "ILLEGAL_TOPIC"
        assert broker.service.route("%DLQ%strict", reading=True).code.name == "ILLEGAL_TOPIC"
        message_id = broker.send("tasks", b"poison").message_id
        consumer = broker.consumer("strict", "tasks")
        consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # to the DLQ
        assert broker.service.route("%DLQ%strict", reading=True).queue_count == 1
        assert broker.send("%DLQ%strict", b"forged").code.name == "ILLEGAL_TOPIC"
        reader = broker.consumer("ops", "%DLQ%strict")
        [dead] = reader.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert dead.message_id == message_id and dead.body == b"poison"
        reader.ack(dead)
    topics = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert "%DLQ%strict" in topics


class _AlwaysFails:
    def __init__(self, rocketmq: ModuleType) -> None:
        self._failure = rocketmq.ConsumeResult.FAILURE
        self.calls: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.calls.append((message.message_id, message.delivery_attempt, message.topic))
        return self._failure


def test_an_always_failing_listener_sees_each_attempt_then_the_message_is_in_the_dlq(
    tmp_path: Path,
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    store = tmp_path / "store"
    SubscriptionGroups(store).update("runners", retry_max_times=2)
    broker = broker_factory("broker.default_queue_count=2", _FAST_RETRY, store_dir=store)
    producer = official_producer(broker.address, ("jobs",))
    message = rocketmq.Message()
    message.topic, message.body = "jobs", b"poison"
    message_id = str(producer.send(message).message_id)
    listener = type("L", (_AlwaysFails, rocketmq.MessageListener), {})(rocketmq)
    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    push = rocketmq.PushConsumer(
        config, "runners", listener, {"jobs": rocketmq.FilterExpression("*")}
    )
    push.startup()
    try:

        def in_dlq() -> list[dict[str, Any]]:
            out = subprocess.run(
                [sys.executable, "-m", "rmq_spark.cli.main", "dump", "--store", str(store)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows = [json.loads(line) for line in out.splitlines() if line.strip()]
            return [r for r in rows if r["topic"] == "%DLQ%runners"]

        [dlq] = wait_for(in_dlq, 60, "the message in %DLQ%runners")
        with listener.lock:
            calls = list(listener.calls)
    finally:
        push.shutdown()
    assert calls == [(message_id, attempt, "jobs") for attempt in (1, 2, 3)]
    p = dlq["properties"]
    assert p["RECONSUME_TIME"] == "3" and p["MAX_RECONSUME_TIMES"] == "2"
    assert p["RETRY_TOPIC"] == "jobs" and len(p["ORIGIN_MESSAGE_ID"]) == 32
    assert p["UNIQ_KEY"] == message_id and dlq["reconsume_times"] == 3

    # QueryRoute answers for the DLQ: an operator's consumer reads it with the official client.
    reader = rocketmq.SimpleConsumer(
        config, "ops", {"%DLQ%runners": rocketmq.FilterExpression("*")}, await_duration=5
    )
    reader.startup()
    try:
        [dead] = wait_for(lambda: reader.receive(1, 10), 30, "the DLQ message")
        assert dead.message_id == message_id and dead.body == b"poison"
        reader.ack(dead)
    finally:
        reader.shutdown()
