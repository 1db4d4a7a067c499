"""Option parsing (rmq_spark.spark.options) and offset/partition planning (offsets.py): PURE."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.errors import SourceError
from rmq_spark.spark.offsets import (
    SegmentSlice,
    SegmentSpan,
    missing_ranges,
    offset_dict,
    parse_offset,
    partition_count,
    plan_partitions,
    plan_slices,
)
from rmq_spark.spark.options import (
    OPTION_NAMES,
    EndingMode,
    SourceOptions,
    StartingMode,
    parse_options,
)
from rmq_spark.spark.schema import ARROW_SCHEMA, COLUMN_NAMES, spark_schema


def parse(streaming: bool = True, **options: str) -> SourceOptions:
    return parse_options({"path": "/store", **options}, streaming=streaming)


def test_defaults_follow_spark_kafka_source():
    assert parse(streaming=True).starting_mode is StartingMode.LATEST
    assert parse(streaming=False).starting_mode is StartingMode.EARLIEST
    options = parse()
    assert options.fail_on_data_loss and options.include_body and options.check_crc
    assert options.max_bytes_per_trigger == 0 and options.max_messages_per_trigger == 0


def test_byte_options_take_units_like_spark():
    assert parse(maxBytesPerTrigger="64m").max_bytes_per_trigger == 64 << 20
    assert parse(maxBytesPerTrigger="1g").max_bytes_per_trigger == 1 << 30
    assert parse(maxBytesPerPartition="512KB").max_bytes_per_partition == 512 << 10
    assert parse(maxBytesPerTrigger="4096").max_bytes_per_trigger == 4096
    with pytest.raises(SourceError, match="not a byte count"):
        parse(maxBytesPerTrigger="1.5g")


def test_option_names_are_case_insensitive():
    options = parse_options(
        {"PATH": "/s", "maxmessagespertrigger": "5", "FailOnDataLoss": "FALSE"}, streaming=True
    )
    assert options.max_messages_per_trigger == 5
    assert options.fail_on_data_loss is False


def test_unknown_option_names_it_and_lists_the_valid_ones():
    with pytest.raises(SourceError) as info:
        parse(subscribe="TopicA")
    message = str(info.value)
    assert "'subscribe'" in message
    assert all(name in message for name in OPTION_NAMES)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("maxBytesPerTrigger", "0", ">= 1"),
        ("maxMessagesPerTrigger", "ten", "not an integer"),
        ("maxBytesPerTrigger", "lots", "not a byte count"),
        ("startingOffsets", "oldest", "earliest, latest"),
        ("startingOffsets", '{"physical_offset": -4}', "integer >= 0"),
        ("startingOffsets", '{"offset": 4}', "exactly the key"),
        ("startingOffsets", "{nope", "not JSON"),
        ("startingTimestamp", "-1", ">= 0"),
        ("failOnDataLoss", "yes", "true or false"),
        ("minPartitions", "-1", ">= 1"),
        ("topicPattern", "(", "not a regular expression"),
        ("topics", " , ", "no topic"),
    ],
)
def test_bad_values_name_the_option_and_the_expected_syntax(name, value, expected):
    with pytest.raises(SourceError) as info:
        parse(**{name: value})
    assert name in str(info.value)
    assert expected in str(info.value)


def test_batch_only_and_stream_only_options_are_refused_in_the_other_mode():
    with pytest.raises(SourceError, match="batch queries only"):
        parse(streaming=True, endingOffsets="latest")
    with pytest.raises(SourceError, match="streaming queries only"):
        parse(streaming=False, maxBytesPerTrigger="10")
    with pytest.raises(SourceError, match="streaming queries only"):
        parse(streaming=False, startingOffsets="latest")
    with pytest.raises(SourceError, match="streaming queries only"):
        parse(streaming=False, driverReadMaxBytes="4m")


def test_driver_read_max_bytes_is_off_by_default_and_takes_units():
    assert parse().driver_read_max_bytes == 0
    assert parse(driverReadMaxBytes="4m").driver_read_max_bytes == 4 << 20
    assert parse(driverReadMaxBytes="0").driver_read_max_bytes == 0
    with pytest.raises(SourceError, match="driverReadMaxBytes.*not a byte count"):
        parse(driverReadMaxBytes="-1")


def test_missing_path_is_explained():
    with pytest.raises(SourceError, match='load\\("/path/to/store"\\)'):
        parse_options({}, streaming=False)


def test_topics_and_offsets_parse():
    options = parse(
        streaming=False,
        topics=" A, B ,A",
        startingOffsets='{"physical_offset": 4096}',
        endingOffsets='{"physical_offset": 8192}',
    )
    assert options.topics == ("A", "B")
    assert options.starting_mode is StartingMode.OFFSET
    assert options.starting_physical_offset == 4096
    assert options.ending_mode is EndingMode.OFFSET and options.ending_physical_offset == 8192
    with pytest.raises(SourceError, match="exclude each other"):
        parse(topics="A", topicPattern="B.*")


def test_timestamps_take_precedence_over_offsets():
    options = parse(streaming=False, startingOffsets="earliest", startingTimestamp="17")
    assert options.starting_mode is StartingMode.TIMESTAMP
    assert options.starting_timestamp_ms == 17


def test_offsets_are_canonical():
    assert offset_dict(7) == {"physical_offset": 7}
    assert parse_offset({"physical_offset": 7}) == 7
    for bad in ({"physical_offset": "7"}, {"physical_offset": -1}, {}, None, {"a": 1}):
        with pytest.raises(SourceError):
            parse_offset(bad)  # type: ignore[arg-type]


def test_missing_ranges_and_slices_follow_segments():
    spans = [SegmentSpan(100, 100), SegmentSpan(200, 100), SegmentSpan(400, 100)]
    assert missing_ranges(spans, 0, 450) == [(0, 100), (300, 400)]
    assert missing_ranges(spans, 150, 250) == []
    slices = plan_slices(spans, 150, 450)
    assert [(s.base_offset, s.start_position, s.end_position) for s in slices] == [
        (100, 50, 100),
        (200, 0, 100),
        (400, 0, 50),
    ]
    assert all(s.start_exact and s.end_exact for s in slices)


def test_partition_count_uses_both_cores_but_not_for_tiny_ranges():
    kw = {"min_partitions": 2, "max_bytes_per_partition": 100, "min_split_bytes": 10}
    assert partition_count(0, **kw) == 0
    assert partition_count(5, **kw) == 1
    assert partition_count(30, **kw) == 2
    assert partition_count(1000, **kw) == 10
    assert partition_count(1100, **kw) == 12  # a multiple of the cores


@given(
    st.lists(st.integers(1, 500), min_size=1, max_size=6),
    st.integers(1, 9),
)
def test_partitions_tile_the_range_exactly(sizes, count):
    slices, base = [], 0
    for size in sizes:
        slices.append(SegmentSlice(base, 0, size, size))
        base += 1000
    parts = plan_partitions(slices, count)
    pieces = [p for part in parts for p in part]
    assert len(parts) <= count
    assert sum(p.size_bytes for p in pieces) == sum(sizes)
    by_segment: dict[int, list[SegmentSlice]] = {}
    for piece in pieces:
        by_segment.setdefault(piece.base_offset, []).append(piece)
    for base_offset, group in by_segment.items():
        assert group[0].start_position == 0 and group[0].start_exact
        assert group[-1].end_exact
        for left, right in zip(group, group[1:], strict=False):
            assert left.end_position == right.start_position
            assert not left.end_exact and not right.start_exact
        assert base_offset % 1000 == 0


def test_arrow_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)
    assert tuple(spark_schema().fieldNames()) == COLUMN_NAMES
    assert pa.types.is_map(ARROW_SCHEMA.field("properties").type)
