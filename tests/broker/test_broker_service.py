"""BrokerService over a real MessageStore, driven in-process through the embedded Broker.

Checks what gets stored (topic, queue, properties, UNIQ_KEY), the timer transform of delayed
messages under a ManualClock, idempotent retries, every rejection code, and shutdown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.service import MessageKind, SendCode, SendCommand
from rmq_spark.broker.topics import group_queue_id
from rmq_spark.clock import ManualClock
from rmq_spark.errors import BrokerError, SendRejectedError
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.properties import parse_properties

NOW_MS = 1_700_000_000_250


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


def _open(tmp_path: Path, clock: ManualClock, **broker: object) -> Broker:
    return Broker(
        tmp_path / "store",
        broker_config=BrokerConfig(default_queue_count=4, **broker),  # type: ignore[arg-type]
        store_config=StoreConfig(
            segment_size_bytes=64 * 1024,
            flush_policy=FlushPolicy.ASYNC,
            max_message_size_bytes=4096,
        ),
        clock=clock,
    )


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Iterator[Broker]:
    with _open(tmp_path, clock) as opened:
        yield opened


def _stored(broker: Broker, physical_offset: int) -> tuple[object, dict[str, str]]:
    record = broker.store.read(physical_offset)
    return record, parse_properties(record.properties)


def test_send_stores_tag_keys_user_properties_and_the_message_id_as_uniq_key(
    broker: Broker,
) -> None:
    outcome = broker.send(
        "orders",
        b"hello",
        tag="TagA",
        keys=("k1", "k2"),
        properties={"color": "red"},
        message_id="01AABBCC",
    )
    assert outcome.ok and not outcome.duplicate
    record, props = _stored(broker, outcome.physical_offset)
    assert (record.topic, record.queue_id, record.body) == ("orders", outcome.queue_id, b"hello")
    assert props["TAGS"] == "TagA"
    assert props["KEYS"] == "k1 k2"
    assert props["UNIQ_KEY"] == "01AABBCC"
    assert props["color"] == "red"
    assert props["CLUSTER"] == "DefaultCluster"
    assert record.born_timestamp_ms == NOW_MS


def test_messages_without_a_group_visit_every_queue_in_turn(broker: Broker) -> None:
    queues = [broker.send("spread", b"x").queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_fifo_group_always_lands_in_one_queue_in_send_order(broker: Broker) -> None:
    outcomes = [broker.send("fifo", f"{i}".encode(), message_group="order-7") for i in range(6)]
    assert {o.queue_id for o in outcomes} == {group_queue_id("order-7", 4)}
    assert [o.queue_offset for o in outcomes] == list(range(6))
    _record, props = _stored(broker, outcomes[0].physical_offset)
    assert props["__SHARDINGKEY"] == "order-7"


def test_a_delayed_message_waits_in_the_timer_topic_with_its_real_topic_and_queue(
    broker: Broker,
) -> None:
    deliver_ms = NOW_MS + 10_500
    outcome = broker.send("later", b"soon", delivery_timestamp_ms=deliver_ms)
    assert outcome.ok
    record, props = _stored(broker, outcome.physical_offset)
    assert (record.topic, record.queue_id) == ("rmq_sys_wheel_timer", 0)
    assert props["REAL_TOPIC"] == "later"
    assert 0 <= int(props["REAL_QID"]) < 4
    assert props["TIMER_DELIVER_MS"] == str(deliver_ms)
    assert props["TIMER_OUT_MS"] == str(deliver_ms // 1000 * 1000)  # rounded down to 1 s


def test_an_embedded_delay_level_send_goes_to_the_schedule_topic_of_its_level(
    broker: Broker,
) -> None:
    outcome = broker.send("later", b"level 3", tag="TagA", delay_level=3, message_id="0A0B")
    assert outcome.ok
    record, props = _stored(broker, outcome.physical_offset)
    assert (record.topic, record.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
    assert props["DELAY"] == "3" and props["REAL_TOPIC"] == "later"
    assert 0 <= int(props["REAL_QID"]) < 4
    assert props["UNIQ_KEY"] == "0A0B" and props["TAGS"] == "TagA"
    again = broker.send("later", b"level 3", tag="TagA", delay_level=3, message_id="0A0B")
    assert again.ok and again.duplicate and again.physical_offset == outcome.physical_offset


def test_a_delay_level_below_one_or_with_a_delivery_time_is_refused(broker: Broker) -> None:
    assert broker.send("later", b"x", delay_level=0).code is SendCode.BAD_REQUEST
    both = broker.send("later", b"x", delay_level=2, delivery_timestamp_ms=NOW_MS + 5000)
    assert both.code is SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_delivery_time_on_a_precision_step_is_moved_one_step_earlier(broker: Broker) -> None:
    deliver_ms = (NOW_MS // 1000 + 5) * 1000
    outcome = broker.send("later", b"x", delivery_timestamp_ms=deliver_ms)
    _record, props = _stored(broker, outcome.physical_offset)
    assert props["TIMER_OUT_MS"] == str(deliver_ms - 1000)  # as RocketMQ's transformTimerMessage


def test_a_delivery_time_already_past_is_stored_in_the_real_topic_at_once(
    broker: Broker,
) -> None:
    outcome = broker.send("later", b"x", delivery_timestamp_ms=NOW_MS - 1)
    record, props = _stored(broker, outcome.physical_offset)
    assert record.topic == "later"
    assert "TIMER_OUT_MS" not in props and props["TIMER_DELIVER_MS"] == str(NOW_MS - 1)


def test_a_retried_message_id_is_stored_once(broker: Broker) -> None:
    first = broker.send("retry", b"once", message_group="g", message_id="01RETRY")
    end_after_first = broker.store.max_offset
    again = broker.send("retry", b"once", message_group="g", message_id="01RETRY")
    assert first.ok and again.ok and again.duplicate
    assert (again.physical_offset, again.queue_offset) == (
        first.physical_offset,
        first.queue_offset,
    )
    assert broker.store.max_offset == end_after_first
    next_one = broker.send("retry", b"other", message_group="g")
    assert next_one.physical_offset == end_after_first
    assert next_one.queue_offset == first.queue_offset + 1


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (SendCommand("t", b"", "01A"), SendCode.MESSAGE_BODY_EMPTY),
        (SendCommand("t", b"x" * 4097, "01A"), SendCode.MESSAGE_BODY_TOO_LARGE),
        (SendCommand("bad topic", b"x", "01A"), SendCode.ILLEGAL_TOPIC),
        (SendCommand("rmq_sys_wheel_timer", b"x", "01A"), SendCode.ILLEGAL_TOPIC),
        (SendCommand("t", b"x", ""), SendCode.ILLEGAL_MESSAGE_ID),
        (SendCommand("t", b"x", "01A", tag="a|b"), SendCode.ILLEGAL_MESSAGE_TAG),
        (SendCommand("t", b"x", "01A", tag="a\x01b"), SendCode.ILLEGAL_MESSAGE_TAG),
        (SendCommand("t", b"x", "01A", keys=(" ",)), SendCode.ILLEGAL_MESSAGE_KEY),
        (SendCommand("t", b"x", "01A", message_group="g" * 65), SendCode.ILLEGAL_MESSAGE_GROUP),
        (
            SendCommand("t", b"x", "01A", user_properties={"UNIQ_KEY": "forged"}),
            SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
        ),
        (
            SendCommand("t", b"x", "01A", user_properties={"k": "v\x02"}),
            SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
        ),
        (
            SendCommand("t", b"x", "01A", user_properties={f"k{i}": "v" for i in range(129)}),
            SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
        ),
        (
            SendCommand("t", b"x", "01A", kind=MessageKind.TRANSACTION, message_group="g"),
            SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            SendCommand("t", b"x", "01A", kind=MessageKind.FIFO),
            SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            SendCommand("t", b"x", "01A", delivery_timestamp_ms=NOW_MS + 86_400_001),
            SendCode.ILLEGAL_DELIVERY_TIME,
        ),
    ],
)
def test_bad_messages_are_refused_with_the_matching_code_and_nothing_is_stored(
    broker: Broker, command: SendCommand, code: SendCode
) -> None:
    before = broker.store.max_offset
    outcome = broker.service.send(command)
    assert outcome.code is code, outcome
    assert outcome.reason
    assert broker.store.max_offset == before


def test_unknown_topics_are_refused_when_auto_creation_is_off(
    tmp_path: Path, clock: ManualClock
) -> None:
    with _open(tmp_path, clock, auto_create_topics=False, topics=("known:2",)) as broker:
        assert broker.send("known", b"x").ok
        outcome = broker.send("unknown", b"x")
        assert outcome.code is SendCode.TOPIC_NOT_FOUND
        assert "unknown" in outcome.reason


def test_after_shutdown_begins_sends_are_refused(broker: Broker) -> None:
    broker.service.begin_shutdown()
    outcome = broker.send("t", b"x")
    assert outcome.code is SendCode.SHUTTING_DOWN
    assert broker.service.wait_idle(timeout_s=1.0)


def test_the_thin_producer_sends_through_an_embedded_broker(broker: Broker) -> None:
    producer = Producer(broker)
    receipt = producer.send("thin", b"hi", tag="T", keys=["k"])
    assert len(receipt.message_id) == 34
    with pytest.raises(SendRejectedError) as caught:
        producer.send("bad topic", b"hi")
    assert caught.value.code_name == "ILLEGAL_TOPIC"


def test_a_closed_embedded_broker_refuses_sends(tmp_path: Path, clock: ManualClock) -> None:
    broker = _open(tmp_path, clock)
    broker.close()
    with pytest.raises(BrokerError, match="closed"):
        broker.send("t", b"x")
