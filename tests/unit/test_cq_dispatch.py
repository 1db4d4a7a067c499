"""The broker's ConsumeQueue: what the dispatcher writes into consumequeue/ (FORMAT.md 6),
its files, its read API, retention of its files and a clean reopen."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from cq_helpers import actual_units, expected_units
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConsumeQueueCorruptError, StoreError
from rmq_spark.store import cq_dispatch
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.consume_queue import PRE_BLANK_UNIT, CqUnit
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_dispatch import tags_of
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR, CQ_FILE_UNITS, CqQueueFiles
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest

POLICIES = [FlushPolicy.ASYNC, FlushPolicy.SYNC]
HOUR_MS = 3_600_000
TAGS = ["TagA", None, "TagA || TagB", "中文"]


def _settle(store: MessageStore) -> None:
    assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)


def _queue_files(root: Path, topic: str, queue_id: int) -> list[str]:
    return sorted(p.name for p in (root / CONSUME_QUEUE_DIR / topic / str(queue_id)).iterdir())


@pytest.mark.parametrize("policy", POLICIES)
def test_every_acknowledged_put_gets_the_unit_its_record_says(
    tmp_path: Path, policy: FlushPolicy
) -> None:
    store = open_store(tmp_path, flush_policy=policy)
    try:
        results = []
        for i in range(40):
            tags = TAGS[i % len(TAGS)]
            request = PutRequest("T", b"body-%d" % i, queue_id=i % 3, tags=tags)
            results.append((store.put(request), tags))
        store.put_batch([PutRequest("T", b"batch-%d" % i, queue_id=1) for i in range(5)])
        store.put_columns("T", [b"c1", b"c2"], queue_id=2, tags="TagC")
        _settle(store)
        queues = store.consume_queues
        for result, tags in results:
            assert result.ok
            unit = queues.units("T", result.queue_id, result.queue_offset, 1)
            assert unit == [CqUnit(result.physical_offset, result.total_size, tags_code(tags))]
        assert actual_units(store) == expected_units(store)
        assert queues.queues() == {"T": [0, 1, 2]}
        assert [queues.max_offset("T", q) for q in range(3)] == [14, 18, 15]
        assert queues.dispatched_offset == store.confirmed_offset == store.max_offset
    finally:
        store.close()


def test_a_delayed_message_unit_holds_its_delivery_time(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock)
    try:
        three = store.put(PutRequest("T", b"x", properties={"DELAY": "3"}, tags="TagA"))
        beyond = store.put(PutRequest("T", b"y", properties={"DELAY": "99"}))
        assert (three.topic, three.queue_id) == (RMQ_SYS_SCHEDULE_TOPIC, 2)
        assert (beyond.topic, beyond.queue_id) == (RMQ_SYS_SCHEDULE_TOPIC, 17)
        _settle(store)
        queues = store.consume_queues
        [unit] = queues.units(RMQ_SYS_SCHEDULE_TOPIC, 2, 0, 10)
        assert unit.tags_code == three.store_timestamp_ms + 10_000  # level 3 is 10 s
        [unit] = queues.units(RMQ_SYS_SCHEDULE_TOPIC, 17, 0, 10)
        assert unit.tags_code == beyond.store_timestamp_ms + 2 * HOUR_MS  # clamped to 18
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_a_timer_message_unit_holds_its_timer_out_time(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        properties = {"TIMER_OUT_MS": "1700000123000", "REAL_TOPIC": "T", "REAL_QID": "0"}
        store.put(PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"x", properties=properties, tags="A"))
        store.put(PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"y", properties={"TIMER_DELIVER_MS": "7"}))
        _settle(store)
        units = store.consume_queues.units(RMQ_SYS_WHEEL_TIMER_TOPIC, 0, 0, 10)
        assert [unit.tags_code for unit in units] == [1700000123000, 7]
    finally:
        store.close()


def test_prepared_and_rollback_records_get_no_unit(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        kinds = [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]
        results = [store.put(PutRequest("Tx", b"m", sys_flag=kind)) for kind in kinds]
        assert all(result.ok for result in results)
        _settle(store)
        units = store.consume_queues.units("Tx", 0, 0, 10)
        assert [unit.physical_offset for unit in units] == [
            results[0].physical_offset,
            results[2].physical_offset,
        ]
        assert store.consume_queues.max_offset("Tx", 0) == 2
    finally:
        store.close()


def test_files_roll_every_file_units_named_by_their_byte_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, consume_queue_file_units=5)
    try:
        put_many(store, 12, body_size=20)
        _settle(store)
        assert _queue_files(tmp_path, "TopicTest", 0) == [
            "00000000000000000000",
            "00000000000000000100",
            "00000000000000000200",
        ]
        directory = tmp_path / CONSUME_QUEUE_DIR / "TopicTest" / "0"
        assert {p.stat().st_size for p in directory.iterdir()} == {100}
        units = store.consume_queues.units("TopicTest", 0, 3, 100)
        assert len(units) == 9  # across both file boundaries
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_default_files_are_rocketmqs_300000_units_of_20_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        assert store.config.consume_queue_file_units == CQ_FILE_UNITS == 300_000
        put_many(store, 1)
        _settle(store)
        path = tmp_path / CONSUME_QUEUE_DIR / "TopicTest" / "0" / "00000000000000000000"
        assert path.stat().st_size == 6_000_000
        files = CqQueueFiles(path.parent, CQ_FILE_UNITS)
        assert files.path_of(files.base_of(300_000)).name == "00000000000006000000"
        assert files.path_of(files.base_of(899_999)).name == "00000000000012000000"
    finally:
        store.close()


def test_reads_outside_the_queue_are_empty(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        put_many(store, 3)
        _settle(store)
        queues = store.consume_queues
        assert queues.units("TopicTest", 0, 3, 10) == []
        assert queues.units("TopicTest", 0, -1, 10) == []
        assert queues.units("Nope", 0, 0, 10) == []
        assert (queues.min_offset("Nope", 0), queues.max_offset("Nope", 0)) == (0, 0)
        assert len(queues.units("TopicTest", 0, 1, 10)) == 2
    finally:
        store.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_listeners_hear_which_queues_grew(tmp_path: Path, policy: FlushPolicy) -> None:
    store = open_store(tmp_path, flush_policy=policy)
    heard: list[set[tuple[str, int]]] = []
    grew = threading.Event()

    def listener(queues: set[tuple[str, int]]) -> None:
        heard.append(queues)
        grew.set()

    try:
        store.consume_queues.add_listener(listener)
        result = store.put(PutRequest("L", b"x", queue_id=4))
        assert grew.wait(10)
        assert heard[0] == {("L", 4)}
        assert store.consume_queues.wait_dispatched(result.physical_offset + 1, 10)
        assert not store.consume_queues.wait_dispatched(store.max_offset + 1, 0.05)
    finally:
        store.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_clean_reopen_keeps_every_unit_and_dispatches_nothing_again(
    tmp_path: Path, policy: FlushPolicy
) -> None:
    store = open_store(tmp_path, flush_policy=policy, consume_queue_file_units=7)
    for i in range(30):
        store.put(PutRequest("T", b"m%d" % i, queue_id=i % 2, tags=TAGS[i % len(TAGS)]))
    _settle(store)
    before = actual_units(store)
    end = store.max_offset
    store.close()
    store = open_store(tmp_path, flush_policy=policy, consume_queue_file_units=7)
    try:
        report = store.consume_queue_recovery
        assert (report.start_offset, report.end_offset, report.rebuilt) == (end, end, False)
        assert report.truncated_units == 0
        assert actual_units(store) == before == expected_units(store)
        store.put(PutRequest("T", b"after", queue_id=1))
        _settle(store)
        assert store.consume_queues.max_offset("T", 1) == 16
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_the_consume_queue_can_be_turned_off(tmp_path: Path) -> None:
    store = open_store(tmp_path, consume_queue=False)
    try:
        put_many(store, 3)
        with pytest.raises(StoreError, match="consume_queue is off"):
            _ = store.consume_queues
    finally:
        store.close()
    assert not (tmp_path / CONSUME_QUEUE_DIR).exists()


def test_retention_deletes_the_files_whose_units_all_point_below_the_log(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(
        tmp_path, clock=clock, file_reserved_time_hours=1, consume_queue_file_units=3
    )
    try:
        old = put_many(store, 30, body_size=300)
        clock.advance(2 * HOUR_MS)
        recent = put_many(store, 6, body_size=300, start=30)
        _settle(store)
        assert store.delete_expired()
        queues = store.consume_queues
        first = queues.min_offset("TopicTest", 0)
        files = _queue_files(tmp_path, "TopicTest", 0)
        assert int(files[0]) // 20 <= first < int(files[0]) // 20 + 3  # older files gone
        assert len(files) < 12
        units = queues.units("TopicTest", 0, first, 100)
        assert units[0].physical_offset >= store.min_offset
        assert units[-1].physical_offset == recent[-1].physical_offset
        assert old[first - 1].physical_offset < store.min_offset <= old[first].physical_offset
        assert queues.max_offset("TopicTest", 0) == 36
    finally:
        store.close()
    assert len(segment_paths(tmp_path)) >= 1


def test_placing_is_idempotent_and_refuses_a_unit_naming_another_record(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path, 4)
    try:
        first = {("T", 0): [(0, 100, 50, 1), (1, 150, 60, 2)]}
        queues.place(first, fill_gaps=False)
        queues.place(first, fill_gaps=False)  # a re-dispatch: kept
        assert queues.units("T", 0, 0, 10) == [CqUnit(100, 50, 1), CqUnit(150, 60, 2)]
        with pytest.raises(ConsumeQueueCorruptError) as caught:
            queues.place({("T", 0): [(1, 151, 60, 2)]}, fill_gaps=False)
        assert caught.value.path == str(tmp_path / "consumequeue/T/0/00000000000000000000")
        assert caught.value.position == 20
    finally:
        queues.close()


def test_a_hole_is_refused_or_filled_with_pre_blank_units(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path, 4)
    try:
        queues.place({("T", 0): [(0, 100, 50, 1)]}, fill_gaps=False)
        with pytest.raises(ConsumeQueueCorruptError, match="units 1..2 of T/0 are missing"):
            queues.place({("T", 0): [(3, 200, 50, 2)]}, fill_gaps=False)
        queues.place({("T", 0): [(3, 200, 50, 2)]}, fill_gaps=True)
        units = queues.units("T", 0, 0, 10)
        assert units == [CqUnit(100, 50, 1), PRE_BLANK_UNIT, PRE_BLANK_UNIT, CqUnit(200, 50, 2)]
        # A queue whose first record is past 0: pre-blank only in the file holding it.
        queues.place({("U", 1): [(9, 300, 50, 3)]}, fill_gaps=True)
        assert (queues.min_offset("U", 1), queues.max_offset("U", 1)) == (9, 10)
        assert queues.units("U", 1, 8, 5) == []
        assert queues.units("U", 1, 9, 5) == [CqUnit(300, 50, 3)]
        files = sorted(p.name for p in (tmp_path / "consumequeue/U/1").iterdir())
        assert files == ["00000000000000000160"]  # units 8..11
    finally:
        queues.close()


def test_offset_for_time_finds_the_first_message_stored_at_or_after_it(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock)
    try:
        for _ in range(10):
            put_many(store, 1)
            clock.advance(1000)
        _settle(store)
        queues = store.consume_queues

        def stamp(offset: int) -> int:
            return store.read(offset).store_timestamp_ms

        at = [queues.offset_for_time("TopicTest", 0, 1_700_000_000_000 + d, stamp) for d in
              (-5, 0, 1, 1000, 4500, 9000, 9001)]  # fmt: skip
        assert at == [0, 0, 1, 1, 5, 9, 10]
    finally:
        store.close()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("how", ["put", "put_batch", "put_columns", "put_async"])
def test_the_put_path_wakes_the_dispatcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: FlushPolicy, how: str
) -> None:
    # With the safety-net wake-up an hour away, only the put path can wake the dispatcher.
    monkeypatch.setattr(cq_dispatch, "_IDLE_WAIT_S", 3600.0)
    store = open_store(tmp_path, flush_policy=policy)
    try:
        request = PutRequest("W", b"x", queue_id=1)
        if how == "put":
            store.put(request)
        elif how == "put_batch":
            store.put_batch([request, request])
        elif how == "put_columns":
            store.put_columns("W", [b"x"], queue_id=1)
        else:
            asyncio.run(store.put_async(request))
        assert store.consume_queues.wait_dispatched(store.max_offset, 30)
        assert store.consume_queues.max_offset("W", 1) >= 1
    finally:
        store.close()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "TAGS\x01A",
        "TAGS\x01A\x02",
        "UNIQ_KEY\x01u\x02TAGS\x01TagA || TagB\x02KEYS\x01k",
        "TAGS\x01first\x02TAGS\x01second\x02",
        "TAGS\x01first\x02TAGS\x01\x02",
        "X\x01fooTAGS\x01bar\x02",
        "TAGS\x01a\x01b\x02",
        "NOTTAGS\x01x\x02",
        "TAGS\x01",
    ],
)
def test_tags_of_reads_tags_as_parse_properties_does(text: str) -> None:
    assert tags_of(text) == parse_properties(text).get("TAGS")
