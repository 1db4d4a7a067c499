"""The table rows a batch of source rows turns into: ConsumeQueue and IndexFile placement.

PURE: ``reput_rows`` works on Arrow batches, checked here against the reference code
(``hashing.py``, ``delay_levels.py``) through ``reput_rows.expected_*``; no Spark.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from reput_rows import LEVELS_MS, expected_consume_queue, expected_index, message, plain_rows

from rmq_spark.spark.reput_rows import (
    consume_queue_rows,
    java_hash_codes,
    map_value,
    message_index_rows,
)
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.hashing import java_string_hash

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


def _arrow(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=ARROW_SCHEMA)


def _tuples(table: pa.Table) -> list[tuple]:
    return plain_rows([tuple(row.values()) for row in table.to_pylist()])


def test_java_hash_codes_equal_java_hash_code_for_every_kind_of_string() -> None:
    words = ["TagA", "TagA || TagB", "中文", "😀", "TopicTest#KEY1", "polygenelubricants", ""]
    words += ["x" * 300, "a中", "k" * 31, "\x7f\x00"]
    strings = pa.array([*words, None, *words])
    assert java_hash_codes(strings).tolist() == [java_string_hash(w) for w in words] + [0] + [
        java_string_hash(w) for w in words
    ]
    sliced = strings.slice(3, 5)  # an Arrow slice: offsets not starting at 0
    assert java_hash_codes(sliced).tolist() == [java_string_hash(w) for w in words[3:8]]
    assert java_hash_codes(pa.array([], pa.string())).tolist() == []


def test_map_value_takes_the_first_entry_and_null_where_absent() -> None:
    maps = pa.array(
        [[("A", "1"), ("DELAY", "3")], [], [("DELAY", "x"), ("DELAY", "y")], [("B", "2")]],
        pa.map_(pa.string(), pa.string()),
    )
    assert map_value(maps, "DELAY").to_pylist() == ["3", None, "x", None]
    assert map_value(maps.slice(1), "DELAY").to_pylist() == [None, "x", None]
    assert map_value(maps, "NONE").to_pylist() == [None] * 4


def test_consume_queue_rows_follow_spec_for_tags_delay_timer_and_transactions() -> None:
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
    got = consume_queue_rows(_arrow(rows), LEVELS_MS)

    assert _tuples(got) == plain_rows(expected_consume_queue(rows))
    by_offset = dict(
        zip(got["physical_offset"].to_pylist(), got["tags_code"].to_pylist(), strict=True)
    )
    assert 400 not in by_offset and 500 not in by_offset
    assert by_offset[0] == 2598919 and by_offset[100] == 1359775119
    assert by_offset[700] == 1_700_000_000_000 + 10_000  # level 3 = 10s
    assert by_offset[800] == 1_700_000_000_000 + 2 * 3_600_000  # clamped to level 18 = 2h
    assert by_offset[1000] == NOW_MS + 5000


def test_consume_queue_delay_and_timer_values_are_read_as_the_broker_reads_them() -> None:
    rows = [
        message(0, topic="SCHEDULE_TOPIC_XXXX", tags="T", extra={"DELAY": " 2 "}),
        message(100, topic="SCHEDULE_TOPIC_XXXX", tags="T", extra={"DELAY": "2.5"}),
        message(200, topic="SCHEDULE_TOPIC_XXXX", tags="T", extra={"DELAY": "-1"}),
        message(300, topic="SCHEDULE_TOPIC_XXXX", tags="T", extra={"DELAY": "99999999999"}),
        message(
            400, topic="rmq_sys_wheel_timer", extra={"TIMER_OUT_MS": "x", "TIMER_DELIVER_MS": "7"}
        ),
        message(500, topic="rmq_sys_wheel_timer", tags="W", extra={"TIMER_OUT_MS": "1e3"}),
    ]
    rows[3]["delay_level"] = None  # the source's delay_level is an int too
    got = consume_queue_rows(_arrow(rows), LEVELS_MS)
    codes = dict(zip(got["physical_offset"].to_pylist(), got["tags_code"].to_pylist(), strict=True))
    tag = java_string_hash("T")
    assert codes == {
        0: tag,  # Java's Integer.parseInt refuses blanks, so the broker keeps the TAGS hash
        100: tag,  # not an int: the TAGS hash
        200: tag,  # level <= 0
        300: tag,  # out of int range
        400: 7,
        500: java_string_hash("W"),
    }


def test_message_index_rows_hold_uniq_key_and_every_key_and_skip_rollback() -> None:
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
    got = message_index_rows(_arrow(rows))

    assert _tuples(got) == plain_rows(expected_index(rows))
    offsets = got["physical_offset"].to_pylist()
    assert offsets.count(100) == 42
    assert [h for o, h in zip(offsets, got["key_hash"].to_pylist(), strict=True) if o == 500] == [0]
    assert 200 not in offsets
    assert message_index_rows(_arrow([])).num_rows == 0
    assert consume_queue_rows(_arrow([]), LEVELS_MS).num_rows == 0
