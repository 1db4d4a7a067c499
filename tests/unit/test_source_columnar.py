"""Columnar decoding (rmq_spark.spark.columnar) against the per-record codec, without Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from source_support import LogWriter, make_record, reference_rows
from strategies import bodies, host_addresses, properties_strings, topics

from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.columnar import DecodeSettings, read_slice
from rmq_spark.spark.offsets import SegmentSlice
from rmq_spark.spark.record_starts import hop, is_record_start, sync_forward
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.codec import encode_record
from rmq_spark.store.message import HostAddress


def rows_of(batches: list[pa.RecordBatch]) -> list[dict[str, object]]:
    rows = []
    for batch in batches:
        assert batch.schema.equals(ARROW_SCHEMA)
        for row in batch.to_pylist():
            row["properties"] = dict(row["properties"])
            rows.append(row)
    return rows


def read_all(
    writer: LogWriter, base: int, start: int = 0, end: int | None = None, **kw: object
) -> list[dict[str, object]]:
    data = writer.segment_path(base).read_bytes()
    limit = min(len(data), writer.end_offset - base)
    piece = SegmentSlice(base, start, limit if end is None else end, limit, **kw)  # type: ignore[arg-type]
    return rows_of(list(read_slice(data, len(data), piece, DecodeSettings(path="seg"))))


def test_decode_equals_per_record_codec_across_a_segment(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    records = writer.extend(make_record(i) for i in range(500))
    assert read_all(writer, 0) == reference_rows(records)


def test_decode_stops_at_blank_and_next_segment_starts_fresh(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=4096)
    records = writer.extend(make_record(i) for i in range(60))
    bases = sorted({r.physical_offset - r.physical_offset % 4096 for r in records})
    assert len(bases) > 2
    got = []
    for base in bases:
        data = writer.segment_path(base).read_bytes()
        limit = min(4096, writer.end_offset - base)
        piece = SegmentSlice(base, 0, limit, limit)
        got += rows_of(list(read_slice(data, len(data), piece, DecodeSettings())))
    assert got == reference_rows(records)


@pytest.mark.parametrize("chunk_records", [1, 7, 1000])
def test_small_chunks_give_the_same_rows(tmp_path, monkeypatch, chunk_records):
    import rmq_spark.spark.columnar as columnar

    monkeypatch.setattr(columnar, "CHUNK_RECORDS_MAX", chunk_records)
    monkeypatch.setattr(columnar.hop, "__defaults__", (chunk_records, columnar.CHUNK_BYTES_MAX))
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(40))
    assert read_all(writer, 0) == reference_rows(records)


def test_mixed_ipv6_hosts_and_v2_topics_keep_log_order(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    v6 = HostAddress("2001:db8::1", 8080)
    long_topic = "T" * 200
    records = writer.extend(
        make_record(
            i,
            born_host=v6 if i % 3 == 0 else HostAddress("1.2.3.4", i),
            store_host=v6 if i % 4 == 0 else HostAddress("10.0.0.1", 10911),
            topic=long_topic if i % 5 == 0 else None,
        )
        for i in range(50)
    )
    assert read_all(writer, 0) == reference_rows(records)


def test_topic_filter_skips_other_topics(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    records = writer.extend(make_record(i) for i in range(30))
    data = writer.segment_path(0).read_bytes()
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    for settings_, wanted in (
        (DecodeSettings(topics=("TopicB",)), {"TopicB"}),
        (DecodeSettings(topic_pattern="Topic[AB]"), {"TopicA", "TopicB"}),
        (DecodeSettings(topic_pattern="Topic"), set()),
    ):
        got = rows_of(list(read_slice(data, len(data), piece, settings_)))
        assert got == reference_rows(r for r in records if r.topic in wanted)


def test_include_body_false_gives_null_bodies(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    records = writer.extend(make_record(i) for i in range(10))
    data = writer.segment_path(0).read_bytes()
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    got = rows_of(list(read_slice(data, len(data), piece, DecodeSettings(include_body=False))))
    assert got == reference_rows(records, include_body=False)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            topics(max_size=150), bodies(max_size=300), properties_strings(), host_addresses()
        ),
        min_size=1,
        max_size=12,
    )
)
def test_decode_matches_codec_for_arbitrary_records(tmp_path_factory, items):
    writer = LogWriter(tmp_path_factory.mktemp("log"), segment_size_bytes=1 << 20)
    records = writer.extend(
        make_record(i, topic=t, body=b, properties=p, born_host=h, store_host=h)
        for i, (t, b, p, h) in enumerate(items)
    )
    assert read_all(writer, 0) == reference_rows(records)


def test_any_byte_cut_reads_each_record_exactly_once(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(25))
    data = writer.segment_path(0).read_bytes()
    end = writer.end_offset
    expected = reference_rows(records)
    for cut in range(0, end + 1, 7):
        head = SegmentSlice(0, 0, cut, end, end_exact=cut in (0, end))
        tail = SegmentSlice(0, cut, end, end, start_exact=cut in (0, end))
        got = rows_of(list(read_slice(data, len(data), head, DecodeSettings())))
        got += rows_of(list(read_slice(data, len(data), tail, DecodeSettings())))
        assert got == expected, cut


def test_sync_forward_finds_the_next_record_start(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(10))
    data = writer.segment_path(0).read_bytes()
    starts = [r.physical_offset for r in records]
    for position in range(0, writer.end_offset + 1):
        expected = next((s for s in starts if s >= position), writer.end_offset)
        assert sync_forward(data, 0, position, writer.end_offset) == expected
    assert all(is_record_start(data, 0, s, writer.end_offset) for s in starts)
    assert not is_record_start(data, 4096, starts[1], writer.end_offset)  # wrong base


def test_hop_stops_at_limit_and_stop(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(10))
    data = writer.segment_path(0).read_bytes()
    starts, after = hop(data, 0, records[5].physical_offset, writer.end_offset)
    assert list(starts) == [r.physical_offset for r in records[:5]]
    assert after == records[5].physical_offset
    starts, after = hop(data, 0, writer.end_offset, records[5].physical_offset + 10)
    assert after == records[5].physical_offset


def test_body_crc_mismatch_names_segment_and_position(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(10))
    data = bytearray(writer.segment_path(0).read_bytes())
    victim = records[6]
    data[victim.physical_offset + 90] ^= 0xFF  # inside the body
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    with pytest.raises(CorruptRecordError) as info:
        list(read_slice(bytes(data), len(data), piece, DecodeSettings(path="seg0", context="p1")))
    assert info.value.position == victim.physical_offset
    assert info.value.path == "seg0"
    assert "BODYCRC" in str(info.value) and "p1" in str(info.value)
    # Without the CRC check the flipped body is returned as stored.
    rows = rows_of(list(read_slice(bytes(data), len(data), piece, DecodeSettings(check_crc=False))))
    assert len(rows) == 10


@pytest.mark.parametrize(
    ("field_position", "reason"),
    [(4, "magic"), (28, "PHYSICALOFFSET"), (2, "TOTALSIZE"), (84, "BODYLENGTH")],
)
def test_corrupt_header_fields_fail_with_reason(tmp_path, field_position, reason):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(10))
    data = bytearray(writer.segment_path(0).read_bytes())
    victim = records[4]
    data[victim.physical_offset + field_position] ^= 0x40
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    with pytest.raises(CorruptRecordError) as info:
        list(read_slice(bytes(data), len(data), piece, DecodeSettings()))
    assert info.value.position >= victim.physical_offset
    assert info.value.position <= records[5].physical_offset


def test_zeros_inside_the_readable_range_are_corruption(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    writer.extend(make_record(i) for i in range(3))
    data = writer.segment_path(0).read_bytes()
    limit = writer.end_offset + 200
    piece = SegmentSlice(0, 0, limit, limit)
    with pytest.raises(CorruptRecordError, match="unwritten"):
        list(read_slice(data, len(data), piece, DecodeSettings()))


def test_record_crossing_the_readable_end_is_corruption(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(3))
    data = writer.segment_path(0).read_bytes()
    limit = records[2].physical_offset + 20
    piece = SegmentSlice(0, 0, limit, limit)
    with pytest.raises(CorruptRecordError, match="readable end"):
        list(read_slice(data, len(data), piece, DecodeSettings()))


def test_embedded_record_in_a_body_cannot_cause_a_duplicate(tmp_path):
    # A body that is a byte copy of the record the writer will place right after it: its
    # PHYSICALOFFSET field matches where the copy sits only if crafted. Build one that does.
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    first = writer.append(make_record(0))
    probe = make_record(1, body=bytes(400))
    body_at = first.physical_offset + len(encode_record(first)) + 88
    fake = encode_record(make_record(9, physical_offset=body_at + 10))
    crafted = bytes(10) + fake + bytes(400 - 10 - len(fake))
    writer.append(make_record(1, body=crafted))
    writer.extend(make_record(i) for i in range(2, 6))
    data = writer.segment_path(0).read_bytes()
    end = writer.end_offset
    cut = body_at + 5  # the next partition would sync to the fake record
    head = SegmentSlice(0, 0, cut, end, end_exact=False)
    with pytest.raises(CorruptRecordError, match="ambiguous"):
        list(read_slice(data, len(data), head, DecodeSettings()))
    assert probe.topic  # the probe only documents the body size used


_PROPERTY_TEXT = st.lists(
    st.sampled_from(["a", "b", "é", "\x01", "\x02", "KEYS", "TAGS", " "]), max_size=30
).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPERTY_TEXT, max_size=20))
def test_properties_column_parses_like_the_per_record_parser(texts):
    from store_helpers import keys_of, tags_of

    from rmq_spark.spark.columnar_properties import parse_properties_column
    from rmq_spark.store.properties import parse_properties

    array = pa.array(texts, pa.string())
    _, offsets, data = array.buffers()
    columns = parse_properties_column(
        np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8),
        np.frombuffer(offsets, np.int32)[: len(texts) + 1].astype(np.int64),
    )
    expected = [parse_properties(t) for t in texts]
    assert [dict(m) for m in columns["properties"].to_pylist()] == expected
    assert columns["keys"].to_pylist() == [keys_of(p) for p in expected]
    assert columns["tags"].to_pylist() == [tags_of(p) for p in expected]


def test_projection_builds_only_the_requested_columns(tmp_path):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 16)
    records = writer.extend(make_record(i) for i in range(20))
    data = writer.segment_path(0).read_bytes()
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    schema = pa.schema([ARROW_SCHEMA.field("tags"), ARROW_SCHEMA.field("physical_offset")])
    got = pa.Table.from_batches(
        list(read_slice(data, len(data), piece, DecodeSettings(schema=schema)))
    )
    expected = reference_rows(records)
    assert got.to_pylist() == [
        {"tags": r["tags"], "physical_offset": r["physical_offset"]} for r in expected
    ]


@pytest.mark.parametrize("count", [64, 65, 200])
@pytest.mark.parametrize("where", ["body", "stored_crc", "stored_crc_sign"])
def test_crc_check_of_many_equal_bodies_finds_the_corrupt_one(tmp_path, count, where):
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    records = writer.extend(make_record(i, body=bytes([i % 251]) * 100) for i in range(count))
    data = bytearray(writer.segment_path(0).read_bytes())
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    clean = rows_of(list(read_slice(bytes(data), len(data), piece, DecodeSettings())))
    assert len(clean) == count
    victim = records[count // 2]
    offset = {"body": 88 + 37, "stored_crc": 11, "stored_crc_sign": 8}[where]
    data[victim.physical_offset + offset] ^= 0x80 if where == "stored_crc_sign" else 0x04
    with pytest.raises(CorruptRecordError, match="BODYCRC") as info:
        list(read_slice(bytes(data), len(data), piece, DecodeSettings()))
    assert info.value.position == victim.physical_offset


def test_identical_damage_to_two_equal_bodies_is_still_detected(tmp_path):
    # Damage that cancels in an XOR fold of equal-length bodies: the same bit flipped at the
    # same offset of two bodies. Each body must be checked on its own.
    writer = LogWriter(tmp_path, segment_size_bytes=1 << 20)
    records = writer.extend(make_record(i, body=bytes([7]) * 100) for i in range(128))
    data = bytearray(writer.segment_path(0).read_bytes())
    piece = SegmentSlice(0, 0, writer.end_offset, writer.end_offset)
    for victim in (records[10], records[90]):
        data[victim.physical_offset + 88 + 50] ^= 0x01
    with pytest.raises(CorruptRecordError, match="BODYCRC") as info:
        list(read_slice(bytes(data), len(data), piece, DecodeSettings()))
    assert info.value.position == records[10].physical_offset
