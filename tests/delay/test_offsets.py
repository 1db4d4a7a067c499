"""PURE progress formats: delayOffset.json in fastjson's dialect, and our journal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.delay.offsets import (
    DataVersion,
    DelayOffsets,
    Intent,
    IntentEntry,
    Journal,
    format_delay_offsets,
    format_journal,
    parse_delay_offsets,
    parse_fastjson,
    parse_journal,
)
from rmq_spark.delay.schedule import DueEntry, QueueProgress
from rmq_spark.errors import ProgressFormatError

# What RocketMQ 4.9 writes (fastjson pretty format, tab indented, integer keys unquoted).
ROCKETMQ_4X = (
    '{\n\t"offsetTable":{1:1,2:1,3:11,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,12:1,13:1,14:1,'
    "15:0,16:0,17:0,18:0\n\t}\n}"
)
# What RocketMQ 5.x writes: dataVersion first (fastjson sorts fields by name).
ROCKETMQ_5X = (
    '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n'
    '\t},\n\t"offsetTable":{1:1,2:0\n\t}\n}'
)


def test_format_writes_the_4x_text_byte_for_byte() -> None:
    table = {level: 1 for level in range(1, 15)} | {3: 11, 15: 0, 16: 0, 17: 0, 18: 0}
    assert format_delay_offsets(DelayOffsets(table)) == ROCKETMQ_4X


def test_format_writes_the_5x_text_with_data_version_byte_for_byte() -> None:
    offsets = DelayOffsets({2: 0, 1: 1}, DataVersion(3, 0, 1_700_000_000_000))
    assert format_delay_offsets(offsets) == ROCKETMQ_5X


def test_parse_reads_unquoted_keys_and_the_data_version() -> None:
    parsed = parse_delay_offsets(ROCKETMQ_5X)
    assert parsed.offset_table == {1: 1, 2: 0}
    assert parsed.data_version == DataVersion(3, 0, 1_700_000_000_000)
    assert parse_delay_offsets(ROCKETMQ_4X).offset_table[3] == 11


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{"1":5,"2":6}}',
        "{'offsetTable':{1:5,2:6}}",
        '{"offsetTable":{1:5,2:6}}',
        ' \ufeff{ "offsetTable" : { 1 : 5 ,\n 2:6 } , "extra": [1, "x", null, true, 1.5] } ',
    ],
)
def test_parse_accepts_quoted_unquoted_and_strict_json(text: str) -> None:
    assert parse_delay_offsets(text).offset_table == {1: 5, 2: 6}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"offsetTable":{1:5,}}',
        '{"offsetTable":{1:"x"}}',
        '{"offsetTable":[1]}',
        '{"other":{}}',
        '{"offsetTable":{1:5}} trailing',
        '{"offsetTable":{1:true}}',
    ],
)
def test_parse_rejects_what_is_not_a_delay_offset_table(text: str) -> None:
    with pytest.raises(ProgressFormatError):
        parse_delay_offsets(text)


def test_parse_fastjson_keeps_string_escapes() -> None:
    assert parse_fastjson('{"a\\tb":"x\\"y", k:\'it\\\'s "q"\'}') == {
        "a\tb": 'x"y',
        "k": 'it\'s "q"',
    }


@given(
    st.dictionaries(st.integers(1, 200), st.integers(0, 2**62), max_size=30),
    st.none()
    | st.builds(DataVersion, st.integers(0, 10**9), st.integers(0, 9), st.integers(0, 2**41)),
)
def test_format_and_parse_round_trip(table: dict[int, int], version: DataVersion | None) -> None:
    parsed = parse_delay_offsets(format_delay_offsets(DelayOffsets(table, version)))
    assert dict(parsed.offset_table) == table
    assert parsed.data_version == version


def test_journal_round_trips_with_an_intent() -> None:
    journal = Journal(
        levels={1: QueueProgress(4, ((6, 9),)), 3: QueueProgress(0)},
        timer=QueueProgress(2, ((5, 6),)),
        intent=Intent(
            4096,
            1_700_000_000_123,
            (
                IntentEntry("level", DueEntry(0, 4, 100, 200, 1_700_000_000_000, 99)),
                IntentEntry("timer", DueEntry(0, 3, 300, 210, 1_700_000_000_100, 98)),
            ),
        ),
        log_scan_from=77,
        passes=12,
    )
    assert parse_journal(format_journal(journal)) == journal
    assert parse_journal(format_journal(Journal())) == Journal()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"version": 99}',
        '{"version": 1}',
        '{"version": 1, "levels": {"x": {"low_water": 0, "done_ranges": []}}, '
        '"timer": {"low_water": 0, "done_ranges": []}}',
        '{"version": 1, "levels": {}, "timer": {"low_water": 0, "done_ranges": [[5, 5]]}}',
    ],
)
def test_parse_journal_rejects_bad_text(text: str) -> None:
    with pytest.raises(ProgressFormatError):
        parse_journal(text)
