"""Any group reads dead letters and other groups' retry records back (issue 25, item 12).

A group's attempts count a record's RECONSUMETIMES only for its own ``%RETRY%<group>`` copies.
A ``%DLQ%billing`` record (RECONSUME_TIME 17: billing tried it 17 times) or a retry record of
another group is a new message to the group reading it: delivered with attempt 1, retried
through the reader's own ``%RETRY%`` topic as the topic it was read from, acknowledged there.
The dead letter here is made by the broker's own send-back path; the retry records are a
real RocketMQ 5.3.3 broker's (``tests/golden/rocketmq_broker/pop_retry.hex``: its POP retry
topic ``%RETRY%G1_Jobs``) and one RocketMQ's encoder wrote
(``tests/golden/java/v2_topic_140_chars_ipv6.hex``).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from broker_harness import BrokerProcess, props, read_records, wait_for

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer import send_back
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.store.config import StoreConfig

_GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_INVISIBLE_MS = 10_000
_DAY_MS = 24 * 3_600_000
_SEGMENT = 16 * 1024 * 1024


def _broker(root: Path, clock: ManualClock) -> Broker:
    config = StoreConfig(root_dir=root, segment_size_bytes=_SEGMENT)
    return Broker(
        root, broker_config=BrokerConfig(default_queue_count=1), store_config=config, clock=clock
    )


def _unit(broker: Broker, topic: str, queue_offset: int) -> int:
    """The CommitLog offset of the message at ``queue_offset`` of queue 0, once there (a retry
    copy: once the reviver, also run here, put it back)."""

    def unit() -> Any:
        broker.consume.reviver.revive_due()
        return broker.consume.source.units(topic, 0, queue_offset, 1)

    return int(wait_for(unit, 10, f"{topic} at {queue_offset}")[0].physical_offset)


def _dead_letter(root: Path) -> str:
    """Billing fails ``poison`` 17 times (send-back, RocketMQ's default max of 16 retries):
    the message ends in ``%DLQ%billing``; returns the dead letter's message id."""
    clock = ManualClock()
    with _broker(root, clock) as broker:
        sent = broker.send("orders", b"poison")
        offset = sent.physical_offset
        for attempt in range(17):
            result = send_back.by_offset(broker.consume, "billing", offset)
            assert not isinstance(result, send_back.Refused) and result.ok, result
            if result.topic == "%DLQ%billing":
                break
            clock.advance(_DAY_MS)  # the retry copy is due
            offset = _unit(broker, "%RETRY%billing", attempt)
        assert result.topic == "%DLQ%billing"
    [dead] = [r for r in read_records(root) if r.topic == "%DLQ%billing"]
    assert dead.reconsume_times == 17 and props(dead)["RECONSUME_TIME"] == "17"
    assert props(dead)["DLQ_ORIGIN_MESSAGE_ID"] and dead.body == b"poison"
    return props(dead)["UNIQ_KEY"]


def test_a_new_group_reads_a_dead_letter_and_retries_it_through_its_own_retry_topic(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    message_id = _dead_letter(root)
    clock = ManualClock()
    with _broker(root, clock) as broker:
        reader = broker.consumer("ops", "%DLQ%billing")
        [dead] = reader.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0)
        assert (dead.message_id, dead.body, dead.delivery_attempt) == (message_id, b"poison", 1)
        assert dead.topic == "%DLQ%billing"
        clock.advance(_INVISIBLE_MS)  # not acknowledged: ops retries it, attempt 1 of 17
        assert reader.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        clock.advance(_DAY_MS)
        _unit(broker, "%RETRY%ops", 0)
        [again] = reader.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0)
        assert (again.body, again.delivery_attempt, again.topic) == (b"poison", 2, "%DLQ%billing")
        reader.ack(again)
    topics = {r.topic for r in read_records(root)}
    assert "%DLQ%ops" not in topics
    [retry] = [r for r in read_records(root) if r.topic == "%RETRY%ops"]
    assert props(retry)["RETRY_TOPIC"] == "%DLQ%billing" and retry.reconsume_times == 1


def test_the_official_client_reads_dead_letters_through_another_group(
    tmp_path: Path,
    broker_factory: Callable[..., BrokerProcess],
    rocketmq: ModuleType,
) -> None:
    store = tmp_path / "store"
    message_id = _dead_letter(store)
    broker = broker_factory(f"store.segment_size_bytes={_SEGMENT}", store_dir=store)
    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    reader = rocketmq.SimpleConsumer(
        config, "ops", {"%DLQ%billing": rocketmq.FilterExpression("*")}, await_duration=5
    )
    reader.startup()
    try:
        [dead] = wait_for(lambda: reader.receive(1, 10), 30, "the dead letter")
        assert (dead.message_id, dead.body) == (message_id, b"poison")
        assert dead.delivery_attempt == 1
        reader.ack(dead)
    finally:
        reader.shutdown()
    assert "%DLQ%ops" not in {r.topic for r in read_records(store)}


def _store_of(root: Path, hex_file: Path) -> None:
    """A store whose CommitLog starts with the bytes of ``hex_file`` (its ConsumeQueues are
    rebuilt from them when the store opens)."""
    sys.path.insert(0, str(_GOLDEN))
    from make_golden import read_hex

    (root / "commitlog").mkdir(parents=True)
    with (root / "commitlog" / "00000000000000000000").open("wb") as segment:
        segment.write(read_hex(hex_file))
        segment.truncate(_SEGMENT)


def _rocketmq_retry_store(root: Path) -> str:
    """A store whose CommitLog holds a %RETRY% record RocketMQ 5.3.3 encoded (RECONSUMETIMES
    3, RETRY_TOPIC TopicTest); returns its group."""
    _store_of(root, _GOLDEN / "java" / "v2_topic_140_chars_ipv6.hex")
    return "G" * 133


def test_a_real_rocketmq_brokers_retry_records_are_new_to_another_group(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_of(root, _GOLDEN / "rocketmq_broker" / "pop_retry.hex")
    (root / "config").mkdir()
    shutil.copy(
        _GOLDEN / "rocketmq_broker" / "pop_retry_topics.json", root / "config" / "topics.json"
    )
    retries = [r for r in read_records(root) if r.topic == "%RETRY%G1_Jobs"]
    assert [r.reconsume_times for r in retries] == [1, 2]  # G1 failed it twice
    with _broker(root, ManualClock()) as broker:
        audit = broker.consumer("audit", "%RETRY%G1_Jobs")
        got = audit.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0)
        assert [(m.body, m.delivery_attempt, m.topic) for m in got] == [
            (b"poison", 1, "%RETRY%G1_Jobs")
        ] * 2
        for message in got:
            audit.ack(message)
    assert not any(r.topic.startswith("%DLQ%") for r in read_records(root))


def test_a_rocketmq_retry_record_counts_its_reconsume_times_for_its_group(tmp_path: Path) -> None:
    root = tmp_path / "store"
    group = _rocketmq_retry_store(root)
    clock = ManualClock()
    with _broker(root, clock) as broker:
        own = broker.consumer(group, "TopicTest")  # reads %RETRY%<group> beside TopicTest
        [mine] = own.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0)
        assert (mine.topic, mine.delivery_attempt) == ("TopicTest", 4)  # 3 before + this one
        own.ack(mine)
        offset = _unit(broker, f"%RETRY%{group}", 0)
        again = send_back.by_offset(broker.consume, group, offset)  # its 4th failure
        assert not isinstance(again, send_back.Refused) and again.ok
        refused = send_back.by_offset(broker.consume, "audit", offset)
        assert isinstance(refused, send_back.Refused)  # another group's retries: not audit's
    [copy] = [r for r in read_records(root) if r.topic == "SCHEDULE_TOPIC_XXXX"]
    assert props(copy)["RECONSUME_TIME"] == "4" and props(copy)["RETRY_TOPIC"] == "TopicTest"
    assert props(copy)["DELAY"] == "6"  # level 3 + 3 earlier reconsumes


def test_send_back_of_a_dead_letter_by_another_group_is_a_first_retry(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _dead_letter(root)
    with _broker(root, ManualClock()) as broker:
        offset = _unit(broker, "%DLQ%billing", 0)
        result = send_back.by_offset(broker.consume, "ops", offset)
        assert not isinstance(result, send_back.Refused) and result.ok
        assert result.topic == "SCHEDULE_TOPIC_XXXX"  # a retry (delayed), not %DLQ%ops
    [copy] = [r for r in read_records(root) if props(r).get("REAL_TOPIC") == "%RETRY%ops"]
    assert props(copy)["RECONSUME_TIME"] == "1"
    assert props(copy)["RETRY_TOPIC"] == "%DLQ%billing"
