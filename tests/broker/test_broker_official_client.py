"""The official rocketmq-python-client 5.1.2 produces to a broker subprocess, unchanged.

After each run the broker is stopped (SIGTERM) and the CommitLog is read back with the codec:
topic, queue, properties, UNIQ_KEY (= the client's message id) and body must match.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from broker_harness import BrokerProcess, by_uniq_key, props, read_records

from rmq_spark.broker.topics import group_queue_id


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_normal_tagged_keyed_messages_with_properties_are_stored_as_sent(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
    loop: str,
) -> None:
    broker = broker_factory("broker.default_queue_count=4", f"broker.event_loop={loop}")
    assert f"loop {loop}" in broker.log_text()
    producer = official_producer(broker.address, ("orders",))
    sent = {}
    for i in range(12):
        message = rocketmq.Message()
        message.topic = "orders"
        message.body = f"order {i}".encode()
        if i % 2 == 0:
            message.tag = "TagA"
        if i % 3 == 0:
            message.keys = f"key-{i}"
            message.keys = f"alt-{i}"
        message.add_property("seq", str(i))
        receipt = producer.send(message)
        sent[receipt.message_id] = (message, receipt)
    producer.shutdown()
    assert broker.stop() == 0

    stored = by_uniq_key(read_records(broker.store_dir))
    assert set(stored) == set(sent)
    queues_used = set()
    for message_id, (message, receipt) in sent.items():
        [record] = stored[message_id]
        p = props(record)
        assert record.topic == "orders"
        assert record.body == message.body
        assert p["UNIQ_KEY"] == message_id == receipt.message_id
        assert p.get("TAGS") == message.tag
        assert set(p.get("KEYS", "").split()) == set(message.keys)
        assert p["seq"] == message.properties["seq"]
        assert record.queue_offset == receipt.offset
        assert record.born_host.ip == "127.0.0.1"
        queues_used.add(record.queue_id)
    assert queues_used == {0, 1, 2, 3}


def test_fifo_messages_of_one_group_share_a_queue_in_send_order(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.default_queue_count=4")
    producer = official_producer(broker.address, ("fifo",))
    ids_by_group: dict[str, list[str]] = {"g-a": [], "g-b": []}
    for i in range(10):
        group = "g-a" if i % 2 else "g-b"
        message = rocketmq.Message()
        message.topic = "fifo"
        message.body = f"{group}-{i}".encode()
        message.message_group = group
        ids_by_group[group].append(producer.send(message).message_id)
    producer.shutdown()
    assert broker.stop() == 0

    records = [r for r in read_records(broker.store_dir) if r.topic == "fifo"]
    for group, ids in ids_by_group.items():
        mine = [r for r in records if props(r).get("__SHARDINGKEY") == group]
        assert [props(r)["UNIQ_KEY"] for r in mine] == ids
        assert {r.queue_id for r in mine} == {group_queue_id(group, 4)}
        offsets = [r.queue_offset for r in mine]
        assert offsets == sorted(offsets)


def test_delayed_messages_in_seconds_or_milliseconds_become_timer_messages(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory()
    producer = official_producer(broker.address, ("later",))
    in_seconds = int(time.time()) + 600  # the client's example passes seconds
    in_ms = int(time.time() * 1000) + 600_000  # its docstring and tests pass milliseconds
    expected_ms = {}
    for deliver, as_ms in ((in_seconds, in_seconds * 1000), (in_ms, in_ms)):
        message = rocketmq.Message()
        message.topic = "later"
        message.body = b"wake me later"
        message.delivery_timestamp = deliver
        expected_ms[producer.send(message).message_id] = as_ms
    producer.shutdown()
    assert broker.stop() == 0

    stored = by_uniq_key(read_records(broker.store_dir))
    for message_id, deliver_ms in expected_ms.items():
        [record] = stored[message_id]
        p = props(record)
        assert (record.topic, record.queue_id) == ("rmq_sys_wheel_timer", 0)
        assert p["REAL_TOPIC"] == "later"
        assert p["TIMER_DELIVER_MS"] == str(deliver_ms)
        out_ms = int(p["TIMER_OUT_MS"])
        assert deliver_ms - 1000 <= out_ms < deliver_ms and out_ms % 1000 == 0
        assert record.body == b"wake me later"


def test_a_body_of_exactly_the_size_limit_is_accepted_above_grpc_default_limit(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("store.segment_size_bytes=16777216")
    producer = official_producer(broker.address, ("big",))
    message = rocketmq.Message()
    message.topic = "big"
    message.body = bytes(range(256)) * (4 * 1024 * 1024 // 256)  # 4 MiB: the default limit
    message_id = producer.send(message).message_id
    producer.shutdown()
    assert broker.stop() == 0
    [record] = by_uniq_key(read_records(broker.store_dir))[message_id]
    assert record.body == message.body


def test_an_unknown_topic_fails_the_route_when_auto_creation_is_off(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    broker = broker_factory("broker.auto_create_topics=false", "broker.topics=known:2")
    producer = official_producer(broker.address, ())
    known = rocketmq.Message()
    known.topic = "known"
    known.body = b"ok"
    producer.send(known)
    unknown = rocketmq.Message()
    unknown.topic = "unknown"
    unknown.body = b"nope"
    with pytest.raises(Exception, match="failed to fetch topic:unknown route"):
        producer.send(unknown)
    producer.shutdown()
    assert broker.stop() == 0
    assert {r.topic for r in read_records(broker.store_dir)} == {"known"}
