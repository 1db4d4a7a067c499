"""PURE schedule logic: due runs, queue progress, restore (messageTimeup / timer convert)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import properties_strings

from rmq_spark.broker.schedule_records import (
    DELETE_MARKER_PREFIX,
    Discard,
    property_value,
    restore_delayed,
    restore_timer,
    target_delete_key,
    timer_due_ms,
)
from rmq_spark.delay.schedule import (
    DueEntry,
    QueueProgress,
    StopReason,
    fingerprint,
    percentile,
    plan_level,
    plan_timer,
)
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.properties import encode_properties, java_hashmap_order, parse_properties


def entry(offset: int, due_ms: int, queue_id: int = 0) -> DueEntry:
    return DueEntry(queue_id, offset, 1000 + offset * 100, 100, due_ms)


def schedule_record(**props: str) -> MessageRecord:
    properties = {"UNIQ_KEY": "AC1100010000", "DELAY": "3", "REAL_TOPIC": "orders"}
    properties["REAL_QID"] = "5"
    properties.update(props)
    return MessageRecord(
        topic=RMQ_SYS_SCHEDULE_TOPIC,
        body=b"payload",
        properties=encode_properties(properties),
        queue_id=2,
        flag=7,
        queue_offset=41,
        physical_offset=9000,
        sys_flag=0x8,
        born_timestamp_ms=1_700_000_000_000,
        born_host=HostAddress("10.0.0.1", 5555),
        store_timestamp_ms=1_700_000_000_500,
        store_host=HostAddress("10.0.0.2", 10911),
        reconsume_times=3,
        prepared_transaction_offset=77,
        body_crc=123,
    )


# --- plan_level --------------------------------------------------------------------------


def test_plan_level_takes_the_due_run_and_stops_at_the_first_entry_not_due() -> None:
    entries = [entry(0, 100), entry(1, 200), entry(2, 300), entry(3, 150)]
    plan = plan_level(entries, QueueProgress(), now_ms=250, limit=10)
    assert [e.queue_offset for e in plan.entries] == [0, 1]
    assert plan.stop == StopReason.NOT_DUE
    assert plan.next_due_ms == 300


def test_plan_level_starts_at_the_low_water_mark_and_respects_the_limit() -> None:
    entries = [entry(q, 10) for q in range(10)]
    plan = plan_level(entries, QueueProgress(low_water=4), now_ms=50, limit=3)
    assert [e.queue_offset for e in plan.entries] == [4, 5, 6]
    assert plan.stop == StopReason.LIMIT


def test_plan_level_steps_over_done_and_blocked_offsets() -> None:
    entries = [entry(q, 10) for q in range(8)]
    progress = QueueProgress(low_water=1, done_ranges=((2, 4),))
    plan = plan_level(entries, progress, now_ms=50, limit=10, skip={5})
    assert [e.queue_offset for e in plan.entries] == [1, 4, 6, 7]
    assert plan.stop == StopReason.END


def test_plan_level_reports_a_gap_of_missing_offsets() -> None:
    entries = [entry(0, 10), entry(1, 10), entry(5, 10)]
    plan = plan_level(entries, QueueProgress(), now_ms=50, limit=10)
    assert [e.queue_offset for e in plan.entries] == [0, 1]
    assert plan.stop == StopReason.GAP
    assert plan.gap == (2, 5)


def test_plan_level_with_a_missing_head_reports_the_gap_from_the_low_water_mark() -> None:
    plan = plan_level([entry(7, 10)], QueueProgress(low_water=3), now_ms=50, limit=10)
    assert plan.entries == ()
    assert plan.gap == (3, 7)


def test_plan_level_never_takes_an_entry_due_after_now() -> None:
    plan = plan_level([entry(0, 1001)], QueueProgress(), now_ms=1000, limit=10)
    assert plan.entries == ()
    assert plan.stop == StopReason.NOT_DUE


# --- QueueProgress -----------------------------------------------------------------------


def test_queue_progress_mark_merges_runs_and_raises_the_low_water_mark() -> None:
    progress = QueueProgress().mark([3, 4, 7])
    assert progress == QueueProgress(0, ((3, 5), (7, 8)))
    progress = progress.mark([0, 1, 2])
    assert progress == QueueProgress(5, ((7, 8),))
    assert progress.done_count_above_low_water == 1
    assert progress.next_not_done(0) == 5
    assert progress.next_not_done(7) == 8
    assert progress.raise_low_water(6) == QueueProgress(6, ((7, 8),))
    assert progress.raise_low_water(7) == QueueProgress(8, ())


@given(
    st.lists(st.sets(st.integers(min_value=0, max_value=60), max_size=20), max_size=6),
    st.integers(min_value=0, max_value=30),
)
def test_queue_progress_agrees_with_a_set_model(batches: list[set[int]], raise_to: int) -> None:
    progress, model = QueueProgress(), set()
    for batch in batches:
        progress = progress.mark(batch)
        model |= batch
    progress = progress.raise_low_water(raise_to)
    model |= set(range(raise_to))
    for offset in range(70):
        assert progress.is_done(offset) == (offset in model)
    first_missing = next(q for q in range(100) if q not in model)
    assert progress.low_water == first_missing
    assert progress.next_not_done(0) == first_missing
    starts = [a for a, _ in progress.done_ranges]
    assert starts == sorted(starts)
    assert all(a < b for a, b in progress.done_ranges)


# --- plan_timer --------------------------------------------------------------------------


def test_plan_timer_takes_due_entries_not_done_earliest_first() -> None:
    entries = [entry(0, 500), entry(1, 100), entry(2, 900), entry(3, 100), entry(4, 50)]
    progress = QueueProgress().mark([4])
    picked = plan_timer(entries, progress, now_ms=600, limit=10, skip={3})
    assert [e.queue_offset for e in picked] == [1, 0]
    assert [e.queue_offset for e in plan_timer(entries, QueueProgress(), 600, 2)] == [4, 1]


# --- restore -----------------------------------------------------------------------------


def test_restore_delayed_keeps_the_stale_properties_string_and_copies_the_fields() -> None:
    record = schedule_record()
    restored = restore_delayed(record)
    assert isinstance(restored, MessageRecord)
    assert restored.topic == "orders" and restored.queue_id == 5
    assert restored.properties == record.properties  # DELAY, REAL_TOPIC, REAL_QID stay
    assert parse_properties(restored.properties)["DELAY"] == "3"
    assert (restored.body, restored.flag, restored.sys_flag) == (b"payload", 7, 0x8)
    assert restored.born_timestamp_ms == record.born_timestamp_ms
    assert restored.born_host == record.born_host
    assert restored.reconsume_times == 3
    assert restored.prepared_transaction_offset == 0
    assert (restored.queue_offset, restored.physical_offset, restored.store_timestamp_ms) == (
        0,
        0,
        0,
    )


def test_restore_delayed_discards_half_topic_and_missing_real_topic() -> None:
    assert isinstance(
        restore_delayed(schedule_record(REAL_TOPIC="RMQ_SYS_TRANS_HALF_TOPIC")), Discard
    )
    no_topic = MessageRecord(RMQ_SYS_SCHEDULE_TOPIC, b"x", encode_properties({"DELAY": "1"}))
    assert "REAL_TOPIC" in restore_delayed(no_topic).reason  # type: ignore[union-attr]
    assert isinstance(restore_delayed(schedule_record(REAL_QID="x")), Discard)


def test_restore_timer_adds_enqueue_and_dequeue_times_in_java_hashmap_order() -> None:
    props = {
        "UNIQ_KEY": "AC11",
        "TIMER_DELIVER_MS": "1700000003500",
        "TIMER_OUT_MS": "1700000003000",
    }
    props.update({"REAL_TOPIC": "orders", "REAL_QID": "1", "TAGS": "t"})
    record = MessageRecord(RMQ_SYS_WHEEL_TIMER_TOPIC, b"b", encode_properties(props), queue_id=0)
    restored = restore_timer(record, enqueue_ms=11, dequeue_ms=22)
    assert isinstance(restored, MessageRecord)
    assert (restored.topic, restored.queue_id) == ("orders", 1)
    parsed = parse_properties(restored.properties)
    assert parsed["TIMER_ENQUEUE_MS"] == "11" and parsed["TIMER_DEQUEUE_MS"] == "22"
    assert parsed["REAL_TOPIC"] == "orders" and parsed["TIMER_OUT_MS"] == "1700000003000"
    expected_order = java_hashmap_order([*props, "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"], 128)
    assert list(parsed) == expected_order
    assert restored.properties.endswith("\x02")


def test_restore_timer_never_delivers_a_delete_marker() -> None:
    props = {"TIMER_DEL_UNIQKEY": "orders+AC11", "REAL_TOPIC": "orders", "REAL_QID": "0"}
    record = MessageRecord(RMQ_SYS_WHEEL_TIMER_TOPIC, b"b", encode_properties(props))
    result = restore_timer(record, enqueue_ms=1, dequeue_ms=2)
    assert result == Discard(DELETE_MARKER_PREFIX + "orders+AC11")
    target = MessageRecord(
        "orders", b"b", encode_properties({"REAL_TOPIC": "orders", "UNIQ_KEY": "AC11"})
    )
    assert target_delete_key(target) == "orders+AC11"


def test_timer_due_is_never_before_the_time_the_client_asked_for() -> None:
    assert timer_due_ms({"TIMER_OUT_MS": "3000", "TIMER_DELIVER_MS": "3500"}, 100) == 3500
    assert timer_due_ms({"TIMER_OUT_MS": "3000"}, 100) == 3000
    assert timer_due_ms({"TIMER_DELAY_SEC": "2"}, 100) == 2100
    assert timer_due_ms({"TIMER_DELAY_MS": "250"}, 100) == 350
    assert timer_due_ms({"TIMER_OUT_MS": "junk"}, 100) == 100


def test_fingerprint_tells_two_retries_of_one_message_apart() -> None:
    first = restore_delayed(schedule_record())
    again = restore_delayed(schedule_record(DELAY="4"))
    assert isinstance(first, MessageRecord) and isinstance(again, MessageRecord)
    assert fingerprint(first) != fingerprint(again)
    assert fingerprint(first, exact=False) == fingerprint(again, exact=False)
    bare = MessageRecord("t", b"x", "")
    assert fingerprint(bare, exact=False, message_id="M1") == ("t", "M1", fingerprint(bare)[3])


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([], 0.5) is None


@given(
    properties_strings()
    | st.lists(st.sampled_from(["DELAY", "\x01", "\x02", "1", "UNIQ_KEY", "xDELAY"])).map("".join),
    st.sampled_from(["DELAY", "UNIQ_KEY", "REAL_TOPIC", "K"]),
)
def test_property_value_reads_like_the_full_parser(text: str, key: str) -> None:
    assert property_value(text, key) == (parse_properties(text).get(key) or None)
    assert property_value("DELAY\x011\x02DELAY\x01\x02", "DELAY") == "1"
