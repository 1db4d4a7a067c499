"""A real RocketMQ 5.3.3 broker takes over a store our broker wrote, without ``updateTopic``.

Our embedded ``Broker`` writes NORMAL and FIFO messages to two auto-created topics, and
delayed ones (two timer messages, two delay-level ones) to a third; our schedule job delivers
the first of each kind, which is due, and records it in ``delayOffset.json`` and
``timercheck``. ``subscriptionGroup.json`` gives group ``G1`` a retry max of 3 and
``consumerOffset.json`` marks all but the last message of every NORMAL and FIFO queue consumed
by ``G1``. RocketMQ's name server and proxy (broker in-process, ``bench/peers/rocketmq_peer.py``)
then start on a copy of the store, and with the official Python client:

* a send of each type to its topic succeeds (the topics route from ``topics.json``);
* ``G1`` receives exactly what its offsets left unconsumed and the new ones, and every delayed
  message exactly once: the two our job delivered (RocketMQ's schedule service and timer do
  not deliver them again) and the two it had not (RocketMQ delivers them);
* the ConsumeQueue units RocketMQ serves begin with ours, unit for unit;
* on stop RocketMQ has rewritten ``subscriptionGroup.json`` with ``G1``'s retry max still 3,
  and ``consumerOffset.json`` with ``G1``'s offsets moved on from ours.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.service import SendOutcome
from rmq_spark.clock import SystemClock
from rmq_spark.delay.config import DelayConfig
from rmq_spark.delay.job import open_redeliverer
from rmq_spark.delay.sink import StoreSink
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import CQ_UNIT_SIZE_BYTES, decode_cq_unit
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level

pytestmark = pytest.mark.slow

NORMAL, FIFO, DELAY = "HandNormal", "HandFifo", "HandDelay"
GROUP = "G1"
QUEUES = 8  # our auto-created topics' queue count (RocketMQ's default too)
SEGMENT_BYTES = 16 << 20  # small CommitLog segments; RocketMQ is told the same size
ROUTE_WAIT_S = 30.0
RECEIVE_WAIT_S = 120.0
Units = dict[tuple[str, int], list[tuple[int, int, int]]]


def _write_our_store(store: Path) -> set[str]:
    """The store and its config files; returns the bodies ``G1`` has yet to receive."""
    config = StoreConfig(segment_size_bytes=SEGMENT_BYTES)
    with Broker(store, store_config=config) as broker:
        sent: dict[str, SendOutcome] = {}
        for i in range(20):
            sent[f"normal-{i}"] = broker.send(NORMAL, f"normal-{i}".encode(), tag="T")
        for i in range(12):
            group = f"order-{i % 5}"
            body = f"fifo-{i}"
            sent[body] = broker.send(FIFO, body.encode(), tag="T", message_group=group)
        delayed = _send_delayed_and_deliver_the_due_ones(broker)
    assert all(outcome.ok for outcome in sent.values()), sent
    offsets: dict[tuple[str, str], dict[int, int]] = {}
    for topic in (NORMAL, FIFO, DELAY):
        offsets[(topic, GROUP)] = dict.fromkeys(range(QUEUES), 0)
    for outcome in sent.values():
        queues = offsets[(outcome.topic, GROUP)]
        queues[outcome.queue_id] = max(queues[outcome.queue_id], outcome.queue_offset)
    write_consumer_offsets(store, offsets)
    SubscriptionGroups(store).update(GROUP, retry_max_times=3)
    unconsumed = {
        body
        for body, outcome in sent.items()
        if outcome.queue_offset >= offsets[(outcome.topic, GROUP)][outcome.queue_id]
    }  # fmt: skip
    assert len(unconsumed) < len(sent)  # the offsets leave something consumed
    return unconsumed | delayed


def _send_delayed_and_deliver_the_due_ones(broker: Broker) -> set[str]:
    """A timer and a delay-level message due now, delivered by our schedule job, and one of
    each due later (after the job's pass, before RocketMQ is up); returns their bodies."""
    now_ms = int(time.time() * 1000)
    outcomes = [
        broker.send(DELAY, b"timer-done", tag="T", delivery_timestamp_ms=now_ms + 1_000),
        broker.send(DELAY, b"timer-later", tag="T", delivery_timestamp_ms=now_ms + 6_000),
        broker.send(DELAY, b"level-done", tag="T", delay_level=1),  # 1 s
        broker.send(DELAY, b"level-later", tag="T", delay_level=2),  # 5 s
    ]
    assert all(outcome.ok for outcome in outcomes), outcomes
    time.sleep(1.5)
    redeliverer = open_redeliverer(
        broker.store.root_dir,
        StoreSink(broker),
        config=DelayConfig(),
        delay_levels_ms=parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL),
        clock=SystemClock(),
    )
    try:
        assert redeliverer.run_pass().delivered == 2
    finally:
        redeliverer.close()
    return {"timer-done", "timer-later", "level-done", "level-later"}


def _consume_queue_units(store: Path) -> Units:
    """Every valid unit of every ``consumequeue/<topic>/<queue>/`` file, in order."""
    units: Units = {}
    for queue_dir in sorted(p for p in (store / "consumequeue").glob("*/*") if p.is_dir()):
        found = []
        for cq_file in sorted(queue_dir.iterdir()):
            data = cq_file.read_bytes()
            for position in range(0, len(data), CQ_UNIT_SIZE_BYTES):
                unit = decode_cq_unit(data, position)
                if unit.is_valid:
                    found.append((unit.physical_offset, unit.size, unit.tags_code))
        units[(queue_dir.parent.name, int(queue_dir.name))] = found
    return units


def _send_one_of_each(rocketmq: ModuleType, config: object) -> set[str]:
    producer = rocketmq.Producer(config, (NORMAL, FIFO))
    producer.startup()
    try:
        for topic, body in ((NORMAL, "new-normal"), (FIFO, "new-fifo")):
            message = rocketmq.Message()
            message.topic, message.body, message.tag = topic, body.encode(), "T"
            if topic == FIFO:
                message.message_group = "order-1"
            assert _send_when_routed(producer, message).message_id
    finally:
        producer.shutdown()
    return {"new-normal", "new-fifo"}


def _send_when_routed(producer: Any, message: Any) -> Any:
    """Send, retrying while the name server has no route yet: the proxy's port opens before
    the broker in it has registered its topics (then the route comes from topics.json)."""
    deadline = time.monotonic() + ROUTE_WAIT_S
    while True:
        try:
            return producer.send(message)
        except Exception as err:  # the client raises its own exception types
            if "route" not in str(err).lower() or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _receive_batch(consumer: Any, deadline: float) -> list[Any]:
    """One receive, retried while the proxy has no settings for the client yet: it answers
    receives only after the client's Telemetry settings arrived (a NullPointerException on
    ``settings`` before), which the client sends in the background after ``startup``."""
    while True:
        try:
            return list(consumer.receive(32, 30) or [])
        except Exception as err:  # the client raises its own exception types
            if '"settings" is null' not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _receive(rocketmq: ModuleType, config: object, expected: set[str]) -> list[str]:
    subscription = {topic: rocketmq.FilterExpression("*") for topic in (NORMAL, FIFO, DELAY)}
    consumer = rocketmq.SimpleConsumer(config, GROUP, subscription, await_duration=3)
    consumer.startup()
    received: list[str] = []
    try:
        deadline = time.monotonic() + RECEIVE_WAIT_S
        while time.monotonic() < deadline and set(received) != expected:
            for message in _receive_batch(consumer, deadline):
                received.append(message.body.decode())
                consumer.ack(message)
        # a last empty round: nothing beyond the expected messages is waiting
        for message in _receive_batch(consumer, deadline):
            received.append(message.body.decode())
            consumer.ack(message)
    finally:
        consumer.shutdown()
    return received


def test_rocketmq_5_3_3_serves_our_store_without_update_topic(
    rocketmq: ModuleType, tmp_path: Path
) -> None:
    from rocketmq_peer import RocketMQBroker  # bench/peers is on sys.path (conftest.py)

    ours, copy = tmp_path / "ours", tmp_path / "copy"
    expected = _write_our_store(ours)
    shutil.copytree(ours, copy)
    our_units = _consume_queue_units(ours)
    assert {topic for topic, _ in our_units} >= {NORMAL, FIFO, DELAY, "rmq_sys_wheel_timer"}
    assert (copy / "config" / "timercheck").exists()

    with RocketMQBroker(
        store_dir=copy,
        heap="384m",
        namesrv_heap="128m",
        broker_properties={"mappedFileSizeCommitLog": SEGMENT_BYTES},
    ) as peer:
        config = rocketmq.ClientConfiguration(
            peer.endpoint, rocketmq.Credentials(), request_timeout=10
        )
        expected |= _send_one_of_each(rocketmq, config)
        received = _receive(rocketmq, config, expected)
    assert sorted(received) == sorted(expected)  # each exactly once, none consumed before

    served = _consume_queue_units(copy)
    for key, units in our_units.items():
        assert served[key][: len(units)] == units, key
    # RocketMQ rewrote both files (its own system groups, offsets past ours) and kept ours.
    groups = SubscriptionGroups(copy).snapshot()
    assert "TOOLS_CONSUMER" in groups and groups[GROUP].retry_max_times == 3
    before, after = read_consumer_offsets(ours), read_consumer_offsets(copy)
    for topic in (NORMAL, FIFO):
        queues = after[(topic, GROUP)]
        assert all(queues[q] >= offset for q, offset in before[(topic, GROUP)].items())
        assert sum(queues.values()) > sum(before[(topic, GROUP)].values())
