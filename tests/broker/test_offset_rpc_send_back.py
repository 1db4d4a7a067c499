"""Send-back (``spark/retry.py``): a failed message's retry or DLQ copy, exactly once.

Embedded and through a real broker process: the copy is RocketMQ's (delay level 3 +
reconsume times through SCHEDULE_TOPIC_XXXX, RECONSUME_TIME, RETRY_TOPIC, ORIGIN_MESSAGE_ID),
comes back into ``%RETRY%<group>`` when due, goes to ``%DLQ%<group>`` after the group's max
reconsume times, and a replayed send-back stores nothing more.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from broker_harness import props, read_records, start_broker

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config_files import SubscriptionGroups
from rmq_spark.broker.embedded import Broker
from rmq_spark.broker.producer import Producer
from rmq_spark.errors import GroupOffsetError, SendRejectedError
from rmq_spark.spark.retry import send_to_retry
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message import MessageRecord

_FAST = " ".join(["1s"] * 18)
_GROUP = "billing"


def _store_config() -> StoreConfig:
    return StoreConfig(message_delay_level=_FAST)


def _topic(root: Path, topic: str) -> list[tuple[int, MessageRecord]]:
    return [(r.physical_offset, r) for r in read_records(root) if r.topic == topic]


def _offset_of(root: Path, topic: str, body: bytes) -> int:
    [offset] = [o for o, r in _topic(root, topic) if r.body == body]
    return offset


def test_embedded_send_back_retries_then_dead_letters_exactly_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Broker(root, broker_config=BrokerConfig(default_queue_count=1)) as broker:
        broker.send("orders", b"bad", tag="TagF")
        broker.send("orders", b"good", tag="TagG")
    SubscriptionGroups(root).update(_GROUP, retry_max_times=1)
    failed = [_offset_of(root, "orders", b"bad")]
    first = send_to_retry(failed, _GROUP, store=root, store_config=_store_config())
    again = send_to_retry(failed, _GROUP, store=root, store_config=_store_config())
    assert (first.retried, again.retried, again.duplicates) == (1, 0, 1)
    [(_, copy)] = _topic(root, "SCHEDULE_TOPIC_XXXX")
    p = props(copy)
    assert p["REAL_TOPIC"] == f"%RETRY%{_GROUP}" and p["DELAY"] == "3"
    assert p["RECONSUME_TIME"] == "1" and p["RETRY_TOPIC"] == "orders"
    assert p["MAX_RECONSUME_TIMES"] == "1" and len(p["ORIGIN_MESSAGE_ID"]) == 32
    time.sleep(1.2)  # level 3 is 1 s here
    assert send_to_retry([], _GROUP, store=root, store_config=_store_config()).revived == 1
    [(retry_offset, retry)] = _topic(root, f"%RETRY%{_GROUP}")
    assert retry.reconsume_times == 1 and retry.body == b"bad"
    # Reconsumed once, the group's max: the next failure goes to the DLQ, once.
    dead = send_to_retry([retry_offset], _GROUP, store=root, store_config=_store_config())
    replay = send_to_retry([retry_offset], _GROUP, store=root, store_config=_store_config())
    assert (dead.dead_lettered, replay.duplicates) == (1, 1)
    [(_, dlq)] = _topic(root, f"%DLQ%{_GROUP}")
    d = props(dlq)
    assert d["DLQ_ORIGIN_TOPIC"] == "orders" and d["RECONSUME_TIME"] == "2"
    assert d["DLQ_ORIGIN_MESSAGE_ID"] == p["ORIGIN_MESSAGE_ID"]
    assert len(_topic(root, "SCHEDULE_TOPIC_XXXX")) == 1


def test_send_back_through_a_broker_comes_back_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    broker = start_broker(
        root, tmp_path / "work", "broker.topics=orders:1", f"store.message_delay_level={_FAST}"
    )
    try:
        with Producer(broker.address) as producer:
            producer.send("orders", b"bad", tag="TagF")
        deadline = time.monotonic() + 10
        while not _topic(root, "orders"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        failed = [_offset_of(root, "orders", b"bad")]
        with pytest.raises(GroupOffsetError, match="needs store="):
            send_to_retry(failed, _GROUP, brokers=broker.address)
        through = {"store": root, "brokers": broker.address}
        assert send_to_retry(failed, _GROUP, **through).retried == 1
        assert send_to_retry(failed, _GROUP, **through).retried == 1  # replayed
        with pytest.raises(SendRejectedError, match="FORBIDDEN.*: send-back refused "):
            send_to_retry([failed[0] + 1], _GROUP, **through)
        deadline = time.monotonic() + 15
        while not _topic(root, f"%RETRY%{_GROUP}"):  # the broker's reviver, when due
            assert time.monotonic() < deadline, "the retry copy never came back"
            time.sleep(0.1)
        time.sleep(1.5)
        assert len(_topic(root, "SCHEDULE_TOPIC_XXXX")) == 1
        assert len(_topic(root, f"%RETRY%{_GROUP}")) == 1
    finally:
        broker.stop()
