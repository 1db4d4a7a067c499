"""The consume path in-process: ``Broker.consumer`` over a real store, time from a ManualClock.

Receipt handles, redelivery after the invisible time, stale handles (acknowledged, redelivered,
from an earlier broker run), FIFO message groups, the DLQ after the group's attempts, TAG
filters, and the progress files a restart reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_harness import props, read_records, wait_for

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config import GroupSettings
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConsumeRejectedError

_WAIT_MS = 5_000  # a receive long-polls this long at most (new messages wake it at once)
_INVISIBLE_MS = 10_000
_LEVEL_3_MS = 10_000  # RocketMQ's delay levels 3 and 4: a first and a second retry
_LEVEL_4_MS = 30_000


def _broker(path: Path, clock: ManualClock, *topics: str, **settings: GroupSettings) -> Broker:
    groups = SubscriptionGroups(path / "store")  # config/subscriptionGroup.json, as an operator
    for group, wanted in settings.items():
        groups.update(group, retry_max_times=wanted.retry_max_times, fifo=wanted.fifo)
    config = BrokerConfig(topics=topics, default_queue_count=2)
    return Broker(path / "store", broker_config=config, clock=clock)


def test_received_messages_are_invisible_until_acked_or_their_time_passes(tmp_path: Path) -> None:
    clock = ManualClock()
    with _broker(tmp_path, clock) as broker:
        sent = [broker.send("orders", f"o{i}".encode(), tag="TagA").message_id for i in range(4)]
        consumer = broker.consumer("billing", "orders")
        got = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        while len(got) < 4:
            got += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert sorted(m.message_id for m in got) == sorted(sent)
        assert {m.delivery_attempt for m in got} == {1}
        assert consumer.receive(wait_ms=0) == []  # all invisible
        for message in got[1:]:
            consumer.ack(message)

        clock.advance(_INVISIBLE_MS)
        # Unacknowledged: a copy goes to %RETRY%billing with delay level 3 (10 s).
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        clock.advance(_LEVEL_3_MS)
        [again] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert again.message_id == got[0].message_id and again.delivery_attempt == 2
        assert again.topic == "orders"
        assert again.receipt_handle != got[0].receipt_handle
        with pytest.raises(ConsumeRejectedError) as stale:
            consumer.ack(got[0])
        assert stale.value.code_name == "INVALID_RECEIPT_HANDLE"
        with pytest.raises(ConsumeRejectedError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack(got[1])  # acknowledged already
        consumer.change_invisible_duration(again, 0)  # a nack: to retry at once (level 4)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        clock.advance(_LEVEL_4_MS)
        [third] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert third.delivery_attempt == 3
        consumer.ack(third)
        clock.advance(10 * _INVISIBLE_MS)
        assert consumer.receive(wait_ms=0) == []


def test_each_group_gets_every_message_and_a_tag_filter_selects(tmp_path: Path) -> None:
    with _broker(tmp_path, ManualClock()) as broker:
        for i, tag in enumerate(["TagA", "TagB", "TagC", None, "TagA"]):
            broker.send("mixed", f"m{i}".encode(), tag=tag)
        every = broker.consumer("all", "mixed")
        some = broker.consumer("some", "mixed", "TagA || TagC")
        bodies_all: list[bytes] = []
        bodies_some: list[bytes] = []
        while len(bodies_all) < 5:
            bodies_all += [
                m.body for m in every.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
            ]
        while len(bodies_some) < 3:
            got = some.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
            bodies_some += [m.body for m in got]
        assert sorted(bodies_all) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert sorted(bodies_some) == [b"m0", b"m2", b"m4"]
        bad = broker.consumer("bad", "mixed", "a >", filter_kind="SQL92")
        with pytest.raises(ConsumeRejectedError, match="ILLEGAL_FILTER_EXPRESSION"):
            bad.receive(invisible_ms=_INVISIBLE_MS)
        with pytest.raises(ConsumeRejectedError, match="ILLEGAL_INVISIBLE_TIME"):
            every.receive(invisible_ms=1_000)


def test_an_sql92_filter_selects_on_user_properties_and_tags(tmp_path: Path) -> None:
    with _broker(tmp_path, ManualClock()) as broker:
        for i in range(6):
            region = "eu" if i % 2 else "us"
            broker.send("orders", f"o{i}".encode(), tag=f"T{i % 3}",
                        properties={"amount": str(i * 10), "region": region})  # fmt: skip
        big_eu = broker.consumer(
            "big-eu", "orders", "amount >= 20 AND region = 'eu' AND TAGS <> 'T2'",
            filter_kind="SQL92",
        )  # fmt: skip
        every = broker.consumer("every", "orders", "amount IS NOT NULL", filter_kind="SQL92")
        got = [m.body for m in every.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)]
        while len(got) < 6:
            got += [m.body for m in every.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)]
        selected = [m.body for m in big_eu.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)]
        # o3 (30, eu, T0) only: o1 is too small, o5 has T2, the even ones are us.
        assert selected == [b"o3"]
        assert big_eu.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []


def test_a_fifo_group_gets_a_message_group_in_order_one_delivery_at_a_time(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with _broker(tmp_path, clock, "fifo:1", fifo=GroupSettings(fifo=True)) as broker:
        for body, group in (("a1", "A"), ("b1", "B"), ("a2", "A"), ("a3", "A")):
            broker.send("fifo", body.encode(), message_group=group)
        wait_for(lambda: broker.consume.source.max_offset("fifo", 0) == 4, 10, "the index")
        consumer = broker.consumer("fifo", "fifo")
        [a1] = consumer.receive(1, _INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert a1.body == b"a1" and a1.message_group == "A"
        rest = consumer.receive(32, _INVISIBLE_MS, wait_ms=0)
        assert [m.body for m in rest] == [b"b1"]  # a2 waits while a1 is invisible
        clock.advance(_INVISIBLE_MS)  # a1 comes back first, then the rest of A, in order
        again = consumer.receive(32, _INVISIBLE_MS, wait_ms=0)
        of_a = [(m.body, m.delivery_attempt) for m in again if m.message_group == "A"]
        assert of_a == [(b"a1", 2), (b"a2", 1), (b"a3", 1)]


def test_a_message_out_of_attempts_goes_to_the_groups_dlq(tmp_path: Path) -> None:
    clock = ManualClock()
    with _broker(tmp_path, clock, strict=GroupSettings(retry_max_times=1)) as broker:
        message_id = broker.send("tasks", b"poison", tag="T", properties={"k": "v"}).message_id
        consumer = broker.consumer("strict", "tasks")
        [message] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert message.delivery_attempt == 1
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # to retry
        clock.advance(_LEVEL_3_MS)
        [message] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert message.delivery_attempt == 2
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # to the DLQ
    [dlq] = [r for r in read_records(tmp_path / "store") if r.topic == "%DLQ%strict"]
    p = props(dlq)
    assert dlq.body == b"poison" and dlq.queue_id == 0 and dlq.reconsume_times == 2
    assert p["UNIQ_KEY"] == message_id and p["RETRY_TOPIC"] == "tasks"
    assert p["RECONSUME_TIME"] == "2" and p["MAX_RECONSUME_TIMES"] == "1"
    assert p["DLQ_ORIGIN_TOPIC"] == "tasks" and p["DLQ_ORIGIN_MESSAGE_ID"] == message_id
    assert len(p["ORIGIN_MESSAGE_ID"]) == 32 and p["TAGS"] == "T" and p["k"] == "v"


def test_progress_survives_a_restart_and_old_handles_are_stale(tmp_path: Path) -> None:
    clock = ManualClock()
    with _broker(tmp_path, clock) as broker:
        for i in range(6):
            broker.send("ledger", f"e{i}".encode())
        consumer = broker.consumer("books", "ledger")
        got = []
        while len(got) < 6:
            got += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        kept = [m for m in got if m.body in (b"e1", b"e4")]
        for message in got:
            if message not in kept:
                consumer.ack(message)
    offsets = set(read_consumer_offsets(tmp_path / "store"))
    assert offsets == {("ledger", "books"), ("%RETRY%books", "books")}  # as RocketMQ keeps

    with _broker(tmp_path, clock) as broker:
        consumer = broker.consumer("books", "ledger")
        with pytest.raises(ConsumeRejectedError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack(kept[0])  # a handle of the earlier broker run
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []  # to retry
        clock.advance(_LEVEL_3_MS)
        again = []
        while len(again) < 2:
            again += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert sorted(m.body for m in again) == [b"e1", b"e4"]
        assert {m.delivery_attempt for m in again} == {2}
        for message in again:
            consumer.ack(message)
        assert consumer.receive(wait_ms=0) == []


def test_a_forwarded_message_is_in_the_dlq_and_consumed(tmp_path: Path) -> None:
    clock = ManualClock()
    with _broker(tmp_path, clock) as broker:
        message_id = broker.send("orders", b"give up").message_id
        consumer = broker.consumer("fifo-app", "orders")
        [message] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=_WAIT_MS)
        assert (
            broker.consume.forward_to_dlq("fifo-app", "orders", message.receipt_handle, 3) is None
        )
        again = broker.consume.forward_to_dlq("fifo-app", "orders", message.receipt_handle, 3)
        assert again is not None and again.code.name == "INVALID_RECEIPT_HANDLE"
        clock.advance(10 * _INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
    [dlq] = [r for r in read_records(tmp_path / "store") if r.topic == "%DLQ%fifo-app"]
    assert props(dlq)["UNIQ_KEY"] == message_id and props(dlq)["RECONSUME_TIME"] == "3"
