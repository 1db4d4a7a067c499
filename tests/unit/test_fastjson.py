"""The fastjson-dialect reader (rmq_spark/broker/fastjson.py) and, through it, delayOffset.json
as RocketMQ 4.x and 5.x write it (the schedule job's mirror, rmq_spark.delay.progress)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.broker.config_files import rocketmq_config as rc
from rmq_spark.broker.fastjson import FastjsonError, parse_fastjson
from rmq_spark.errors import StoreMetadataError

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


def test_encode_writes_the_4x_delay_offsets_byte_for_byte() -> None:
    table = {level: 1 for level in range(1, 15)} | {3: 11, 15: 0, 16: 0, 17: 0, 18: 0}
    assert rc.encode_delay_offsets(table) == ROCKETMQ_4X


def test_encode_writes_the_5x_delay_offsets_with_data_version_byte_for_byte() -> None:
    version = rc.DataVersion(3, 0, 1_700_000_000_000)
    assert rc.encode_delay_offsets({2: 0, 1: 1}, version) == ROCKETMQ_5X


def test_decode_reads_unquoted_keys_and_the_data_version() -> None:
    table, version = rc.decode_delay_offsets(ROCKETMQ_5X)
    assert table == {1: 1, 2: 0}
    assert version == rc.DataVersion(3, 0, 1_700_000_000_000)
    assert rc.decode_delay_offsets(ROCKETMQ_4X)[0][3] == 11


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{"1":5,"2":6}}',
        "{'offsetTable':{1:5,2:6}}",
        '{"offsetTable":{1:5,2:6}}',
        ' \ufeff{ "offsetTable" : { 1 : 5 ,\n 2:6 } , "extra": [1, "x", null, true, 1.5] } ',
    ],
)
def test_decode_accepts_quoted_unquoted_and_strict_json(text: str) -> None:
    assert rc.decode_delay_offsets(text)[0] == {1: 5, 2: 6}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"offsetTable":{1:5,}}',
        '{"offsetTable":{1:"x"}}',
        '{"offsetTable":[1]}',
        '{"offsetTable":{1:5}} trailing',
        '{"offsetTable":{1:true}}',
    ],
)
def test_decode_rejects_what_is_not_a_delay_offset_table_naming_the_file(text: str) -> None:
    with pytest.raises(StoreMetadataError, match="delayOffset.json"):
        rc.decode_delay_offsets(text)


def test_parse_fastjson_keeps_string_escapes() -> None:
    assert parse_fastjson('{"a\\tb":"x\\"y", k:\'it\\\'s "q"\'}') == {
        "a\tb": 'x"y',
        "k": 'it\'s "q"',
    }


def test_parse_fastjson_says_where_it_stopped() -> None:
    with pytest.raises(FastjsonError, match="expected ':' at character 5"):
        parse_fastjson('{"a" 1}')


@given(
    st.dictionaries(st.integers(1, 200), st.integers(0, 2**62), max_size=30),
    st.none()
    | st.builds(rc.DataVersion, st.integers(0, 10**9), st.integers(0, 9), st.integers(0, 2**41)),
)
def test_delay_offsets_round_trip(table: dict[int, int], version: rc.DataVersion | None) -> None:
    assert rc.decode_delay_offsets(rc.encode_delay_offsets(table, version)) == (table, version)
