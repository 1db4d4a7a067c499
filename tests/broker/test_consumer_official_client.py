"""The official rocketmq-python-client 5.1.2 consumes from a broker subprocess, unchanged.

SimpleConsumer (receive, ack, change invisible duration, redelivery after the invisible time
with attempt 2, stale receipt handles, long polling), PushConsumer (listener success and
failure), groups sharing and not sharing a topic, and progress across a broker restart.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess, wait_for

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker

_INVISIBLE_S = 10  # the smallest invisible time a receive may ask for (as the Java proxy)
# Retries come back through delay levels 3, 4, ... (10 s, 30 s, ...): 1 s each in these tests.
_FAST_RETRY = "store.message_delay_level=" + " ".join(["1s"] * 18)


@pytest.fixture
def clients(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    """``clients(kind, address, group, topics, **kw)``: started SimpleConsumer/PushConsumer."""
    started: list[Any] = []

    def make(kind: str, address: str, group: str, topics: dict[str, str], **kw: Any) -> Any:
        config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=5)
        subscription = {t: rocketmq.FilterExpression(e) for t, e in topics.items()}
        if kind == "simple":
            client = rocketmq.SimpleConsumer(config, group, subscription, **kw)
        else:
            client = rocketmq.PushConsumer(config, group, kw.pop("listener"), subscription, **kw)
        client.startup()
        started.append(client)
        return client

    yield make
    for client in started:
        if client.is_running:
            client.shutdown()


def _send(rocketmq: ModuleType, producer: Any, topic: str, body: str, **kw: Any) -> str:
    message = rocketmq.Message()
    message.topic = topic
    message.body = body.encode()
    for key, value in kw.items():
        setattr(message, key, value)
    return str(producer.send(message).message_id)


def _receive(consumer: Any, count: int, deadline_s: float = 30.0) -> list[Any]:
    """Receive until ``count`` messages came (each receive long-polls)."""
    got: list[Any] = []
    end = time.monotonic() + deadline_s
    while len(got) < count:
        assert time.monotonic() < end, f"received {len(got)} of {count} messages"
        got += consumer.receive(32, _INVISIBLE_S)
    return got


def test_simple_consumer_receives_acks_and_gets_an_expired_message_again(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=2", _FAST_RETRY)
    producer = official_producer(broker.address, ("orders",))
    sent = {
        _send(rocketmq, producer, "orders", f"order {i}", tag="TagA", keys=f"k{i}"): i
        for i in range(3)
    }
    consumer = clients("simple", broker.address, "billing", {"orders": "*"}, await_duration=5)
    first = _receive(consumer, 3)
    assert {m.message_id for m in first} == set(sent)
    by_body = {m.body: m for m in first}
    for message in first:
        assert message.delivery_attempt == 1
        assert message.topic == "orders" and message.tag == "TagA"
        assert message.body == f"order {sent[message.message_id]}".encode()
        assert message.keys == {f"k{sent[message.message_id]}"}
        assert not message.corrupted
    acked, retried, last = by_body[b"order 0"], by_body[b"order 1"], by_body[b"order 2"]
    consumer.ack(acked)
    handle_before = retried.receipt_handle
    consumer.change_invisible_duration(retried, 1)  # back in 1 s instead of 10
    assert retried.receipt_handle != handle_before

    [again] = _receive(consumer, 1)
    assert again.message_id == retried.message_id
    assert again.delivery_attempt == 2
    with pytest.raises(rocketmq.v5.exception.BadRequestException, match="40013"):
        consumer.ack(retried)  # attempt 1's handle: stale since attempt 2
    with pytest.raises(rocketmq.v5.exception.BadRequestException, match="40013"):
        consumer.ack(acked)  # acknowledged already
    consumer.ack(again)
    consumer.ack(last)
    consumer.await_duration = 1
    assert consumer.receive(32, _INVISIBLE_S) == []


def test_long_polling_receive_returns_when_a_message_is_stored(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory()
    producer = official_producer(broker.address, ("events",))
    consumer = clients("simple", broker.address, "watchers", {"events": "*"}, await_duration=1)
    assert consumer.receive(32, _INVISIBLE_S) == []  # the queues exist now; nothing in them
    consumer.await_duration = 15
    result: list[Any] = []
    polling = threading.Thread(target=lambda: result.extend(consumer.receive(32, _INVISIBLE_S)))
    started = time.monotonic()
    polling.start()
    time.sleep(0.5)  # let the receive reach the broker and wait there
    message_id = _send(rocketmq, producer, "events", "wake up")
    polling.join(timeout=30)
    assert [m.message_id for m in result] == [message_id]
    assert time.monotonic() - started < 15  # woken by the put, not by the polling timeout


def test_two_groups_each_get_every_message_and_three_consumers_share_one_group(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=4")
    producer = official_producer(broker.address, ("shared",))
    sent = {_send(rocketmq, producer, "shared", f"m{i}") for i in range(40)}

    audit = clients("simple", broker.address, "audit", {"shared": "*"}, await_duration=2)
    audit_got = _receive(audit, 40)
    assert {m.message_id for m in audit_got} == sent
    for message in audit_got:
        audit.ack(message)

    workers = [
        clients("simple", broker.address, "workers", {"shared": "*"}, await_duration=2)
        for _ in range(3)
    ]
    acked: list[str] = []
    lock = threading.Lock()

    def work(consumer: Any) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with lock:
                if len(acked) >= 40:
                    return
            for message in consumer.receive(4, _INVISIBLE_S):
                consumer.ack(message)
                with lock:
                    acked.append(message.message_id)

    threads = [threading.Thread(target=work, args=(c,)) for c in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(acked) == sorted(sent)  # each message acknowledged exactly once


class _Listener:
    """A PushConsumer listener that records every call and answers from ``outcome``."""

    def __init__(self, rocketmq: ModuleType, outcome: Callable[[Any], bool]) -> None:
        self._rocketmq = rocketmq
        self._outcome = outcome
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.calls.append((message.message_id, message.delivery_attempt))
        ok = self._outcome(message)
        return self._rocketmq.ConsumeResult.SUCCESS if ok else self._rocketmq.ConsumeResult.FAILURE


def test_push_consumer_acks_on_success_and_gets_a_failed_message_again(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=2", _FAST_RETRY)
    producer = official_producer(broker.address, ("jobs",))
    good = _send(rocketmq, producer, "jobs", "fine")
    bad = _send(rocketmq, producer, "jobs", "fails once")
    base = type("L", (_Listener, rocketmq.MessageListener), {})
    listener = base(rocketmq, lambda m: m.body == b"fine" or m.delivery_attempt > 1)
    clients("push", broker.address, "runners", {"jobs": "*"}, listener=listener)

    def seen() -> bool:
        with listener.lock:
            return (bad, 2) in listener.calls

    wait_for(seen, 30, "the failed message to come back with attempt 2")
    time.sleep(1.5)  # acknowledged messages must not come back
    with listener.lock:
        calls = list(listener.calls)
    assert calls.count((good, 1)) == 1 and (good, 2) not in calls
    assert calls.count((bad, 1)) == 1 and calls.count((bad, 2)) == 1


def test_a_restarted_broker_redelivers_only_what_was_not_acknowledged(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=2")
    producer = official_producer(broker.address, ("ledger",))
    sent = [_send(rocketmq, producer, "ledger", f"entry {i}") for i in range(10)]
    consumer = clients("simple", broker.address, "books", {"ledger": "*"}, await_duration=2)
    received = _receive(consumer, 10)
    kept = {m.message_id for m in received if m.body in (b"entry 3", b"entry 7")}
    for message in received:
        if message.message_id not in kept:
            consumer.ack(message)  # out of order around the two kept ones
    consumer.shutdown()
    producer.shutdown()
    assert broker.stop() == 0

    again = broker_factory("broker.default_queue_count=2", _FAST_RETRY, store_dir=broker.store_dir)
    consumer = clients("simple", again.address, "books", {"ledger": "*"}, await_duration=2)
    redelivered = _receive(consumer, 2)
    assert {m.message_id for m in redelivered} == kept
    assert all(m.delivery_attempt == 2 for m in redelivered)
    for message in redelivered:
        consumer.ack(message)
    consumer.await_duration = 1
    assert consumer.receive(32, _INVISIBLE_S) == []
    assert len(sent) == 10


def _acknowledged_on_disk(store_dir: Path, topic: str, group: str) -> int:
    """How many messages of (topic, group) the broker's saved progress counts as done."""
    config = store_dir / "config"
    try:
        extra = json.loads((config / "consumerInflight.json").read_text())["inflightTable"]
    except FileNotFoundError:
        return 0
    committed = sum(read_consumer_offsets(store_dir).get((topic, group), {}).values())
    return committed + sum(len(q["done"]) for q in extra.get(f"{topic}@{group}", {}).values())


def test_acknowledgements_saved_before_a_kill_9_are_kept_and_the_rest_comes_back(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=2")
    producer = official_producer(broker.address, ("audit",))
    for i in range(8):
        _send(rocketmq, producer, "audit", f"line {i}")
    consumer = clients("simple", broker.address, "auditors", {"audit": "*"}, await_duration=2)
    received = _receive(consumer, 8)
    unacked = {m.message_id for m in received if m.body in (b"line 2", b"line 5")}
    for message in received:
        if message.message_id not in unacked:
            consumer.ack(message)
    # Progress is saved every second: wait for the save that has the six acks, then kill.
    wait_for(
        lambda: _acknowledged_on_disk(broker.store_dir, "audit", "auditors") == 6,
        10,
        "the acknowledgements to be saved",
    )
    broker.kill()
    consumer.shutdown()
    producer.shutdown()

    again = broker_factory("broker.default_queue_count=2", _FAST_RETRY, store_dir=broker.store_dir)
    consumer = clients("simple", again.address, "auditors", {"audit": "*"}, await_duration=2)
    redelivered = _receive(consumer, 2)
    assert {m.message_id for m in redelivered} == unacked
    consumer.await_duration = 1
    assert consumer.receive(32, _INVISIBLE_S) == []


def test_a_fifo_push_consumer_keeps_each_message_groups_order_across_a_failure(
    tmp_path: Path, clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    # The group is FIFO: subscriptionGroup.json's consumeMessageOrderly.
    SubscriptionGroups(tmp_path / "store").update("ordered", fifo=True)
    config = BrokerConfig(default_queue_count=2)
    with Broker(tmp_path / "store", broker_config=config, listen="127.0.0.1:0") as broker:
        for seq in range(4):
            for group in ("A", "B", "C"):
                outcome = broker.send("fifo-orders", f"{group}{seq}".encode(), message_group=group)
                assert outcome.ok

        failed: set[str] = set()
        bodies: dict[str, bytes] = {}

        def fail_seq_1_once(message: Any) -> bool:
            # A FIFO PushConsumer retries locally with the same message (same attempt).
            bodies[message.message_id] = message.body
            if message.body.endswith(b"1") and message.message_id not in failed:
                failed.add(message.message_id)
                return False
            return True

        listener = type("L", (_Listener, rocketmq.MessageListener), {})(rocketmq, fail_seq_1_once)
        push = clients("push", broker.address, "ordered", {"fifo-orders": "*"}, listener=listener)

        def consumed() -> list[bytes]:
            with listener.lock:
                return [bodies[mid] for mid, _attempt in listener.calls]

        try:
            wait_for(lambda: len(consumed()) >= 15, 30, "12 messages and 3 retries consumed")
        finally:
            push.shutdown()  # before the broker stops
        for group in (b"A", b"B", b"C"):
            mine = [body for body in consumed() if body.startswith(group)]
            assert mine == [group + b"0", group + b"1", group + b"1", group + b"2", group + b"3"]
