"""The table rows a batch of source rows turns into: ConsumeQueue and IndexFile placement."""

from __future__ import annotations

import itertools

import pytest
from reput_rows import LEVELS_MS, expected_consume_queue, expected_index, message, plain_rows

from rmq_spark.spark.tables import consume_queue_rows, java_string_hash_column, message_index_rows
from rmq_spark.store.hashing import java_string_hash

pytestmark = pytest.mark.spark

NOW_MS = 1_700_000_000_123


def _key_hashing_to_int_min(topic: str) -> str:
    """A key with hashCode(topic + "#" + key) == Integer.MIN_VALUE (keyHash must be 0)."""
    for n in itertools.count():
        prefix = f"k{n}"
        base = java_string_hash(f"{topic}#{prefix}") & 0xFFFFFFFF
        rest = (0x80000000 - base * 31 * 31) & 0xFFFFFFFF
        high, low = divmod(rest, 31)
        if 0x21 <= high < 0xD800 and low > 0:
            key = prefix + chr(high) + chr(low + 0x20 - 0x20)
            if java_string_hash(f"{topic}#{key}") == -(1 << 31):
                return key
    raise AssertionError("unreachable")


def test_java_string_hash_column_equals_java_hash_code(spark) -> None:
    words = ["TagA", "TagA || TagB", "中文", "😀", "TopicTest#KEY1", "polygenelubricants", ""]
    df = spark.createDataFrame([(w,) for w in words] + [(None,)], "s string")
    got = [row.h for row in df.select(java_string_hash_column(df.s).alias("h")).collect()]
    assert got == [java_string_hash(w) for w in words] + [0]


def test_consume_queue_rows_follow_spec_for_tags_delay_timer_and_transactions(
    spark, make_source_rows
) -> None:
    rows = [
        message(0, tags="TagA", store_ms=NOW_MS),
        message(100, tags="TagA || TagB", queue_offset=1),
        message(200, tags="中文😀", queue_id=3, queue_offset=7),
        message(300),  # no TAGS: tagsCode 0
        message(400, tags="TagP", sys_flag=0x4),  # PREPARED: no CQ unit
        message(500, tags="TagR", sys_flag=0xC),  # ROLLBACK: no CQ unit
        message(600, tags="TagC", sys_flag=0x8, queue_offset=2),  # COMMIT: a unit
        message(700, topic="SCHEDULE_TOPIC_XXXX", queue_id=2, tags="T", extra={"DELAY": "3"}),
        message(800, topic="SCHEDULE_TOPIC_XXXX", queue_id=17, extra={"DELAY": "99"}),
        message(900, topic="SCHEDULE_TOPIC_XXXX", tags="T0", extra={"DELAY": "0"}),
        message(1000, topic="rmq_sys_wheel_timer", extra={"TIMER_OUT_MS": str(NOW_MS + 5000)}),
        message(1100, topic="rmq_sys_wheel_timer", extra={"TIMER_DELIVER_MS": "1700000009000"}),
    ]
    got = consume_queue_rows(make_source_rows(rows), LEVELS_MS).collect()

    assert plain_rows(got) == plain_rows(expected_consume_queue(rows))
    by_offset = {r.physical_offset: r.tags_code for r in got}
    assert 400 not in by_offset and 500 not in by_offset
    assert by_offset[0] == 2598919 and by_offset[100] == 1359775119
    assert by_offset[700] == 1_700_000_000_000 + 10_000  # level 3 = 10s
    assert by_offset[800] == 1_700_000_000_000 + 2 * 3_600_000  # clamped to level 18 = 2h
    assert by_offset[1000] == NOW_MS + 5000


def test_message_index_rows_hold_uniq_key_and_every_key_and_skip_rollback(
    spark, make_source_rows
) -> None:
    many = " ".join(f"order-{i}" for i in range(40))
    rows = [
        message(0, uniq_key="7F000001000018B4AAC2", keys="KEY1"),
        message(100, keys=f"  {many}  dup dup "),  # empty tokens dropped, duplicates kept
        message(200, uniq_key="AB", keys="k", sys_flag=0xC),  # ROLLBACK: not indexed
        message(300, uniq_key="CD", keys="p", sys_flag=0x4),  # PREPARED: indexed (spec 7.6)
        message(400, topic="中文", keys="键 😀"),
        message(500, topic="T", uniq_key=_key_hashing_to_int_min("T")),
        message(600),  # neither: no rows
    ]
    got = message_index_rows(make_source_rows(rows)).collect()

    assert plain_rows(got) == plain_rows(expected_index(rows))
    assert sum(1 for r in got if r.physical_offset == 100) == 42
    assert [r.key_hash for r in got if r.physical_offset == 500] == [0]
    assert not [r for r in got if r.physical_offset == 200]
