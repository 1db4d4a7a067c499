"""The Spark source's batch decoder checks the record CRC property (docs/FORMAT.md 2.3) of
every record it reads when ``check_crc`` is on, and never shows it as a message property."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.columnar import DecodeSettings, read_slice
from rmq_spark.spark.offsets import SegmentSlice
from rmq_spark.store.codec import DecodedRecord, decode_record
from rmq_spark.store.put import PutRequest


def _segment(tmp_path: Path) -> tuple[bytes, list[tuple[int, int]], int]:
    """A segment written by the store: its bytes, (offset, size) of each record, the end."""
    store = open_store(tmp_path / "store")
    placed = []
    for index in range(20):
        request = PutRequest(
            "TopicA" if index % 2 else "TopicB",
            b"body %d" % index,
            index % 3,
            properties={"user": str(index)},
            tags="TagA",
        )
        result = store.put(request)
        placed.append((result.physical_offset, result.total_size))
    end = store.max_offset
    path = store.commitlog.segments[0].path
    store.close()
    return path.read_bytes(), placed, end


def _read(data: bytes, end: int, **settings: object) -> list[dict[str, object]]:
    piece = SegmentSlice(0, 0, end, end)
    batches = read_slice(data, len(data), piece, DecodeSettings(path="seg", **settings))  # type: ignore[arg-type]
    return [row for batch in batches for row in batch.to_pylist()]


def test_rows_leave_the_property_out_like_the_codec(tmp_path: Path) -> None:
    data, placed, end = _segment(tmp_path)
    rows = _read(data, end)
    assert len(rows) == 20
    for row, (offset, _) in zip(rows, placed, strict=True):
        outcome = decode_record(data, offset, check_crc=True)
        assert isinstance(outcome, DecodedRecord)
        assert b"__CRC32#" in data[offset : offset + outcome.total_size]
        assert "__CRC32#" not in dict(row["properties"])  # type: ignore[arg-type]
        assert dict(row["properties"])["user"] == str(placed.index((offset, _)))  # type: ignore[arg-type]


# Header fields BODYCRC and the length checks do not cover: queue id, flag, queue offset,
# sysflag (a transaction bit), born timestamp, born host, store timestamp, store host,
# reconsume times, prepared offset (low bytes: a timestamp must stay a date for the read
# without the check); then a topic byte (record 7: 6-byte body) and a properties byte.
_FLIPS = [12, 16, 20, 38, 47, 48, 63, 64, 72, 76, 88 + 6 + 3, -25]


@pytest.mark.parametrize("where", _FLIPS)
def test_a_flipped_bit_the_body_crc_misses_fails_the_read(tmp_path: Path, where: int) -> None:
    data, placed, end = _segment(tmp_path)
    offset, size = placed[7]
    damaged = bytearray(data)
    damaged[offset + where if where >= 0 else offset + size + where - 20] ^= 0x04
    with pytest.raises(CorruptRecordError) as info:
        _read(bytes(damaged), end)
    assert info.value.position == offset and "record CRC" in info.value.reason
    # A damaged topic cannot make a record vanish behind a topic filter either.
    with pytest.raises(CorruptRecordError):
        _read(bytes(damaged), end, topics=("TopicA",))
    assert len(_read(bytes(damaged), end, check_crc=False)) == 20


def test_without_the_property_the_records_read_as_before(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store", append_record_crc=False)
    for index in range(5):
        assert store.put(PutRequest("TopicA", b"x", 0, tags=f"T{index}")).ok
    end = store.max_offset
    data = store.commitlog.segments[0].path.read_bytes()
    store.close()
    assert b"__CRC32#" not in data[:end]
    assert [row["tags"] for row in _read(data, end)] == ["T0", "T1", "T2", "T3", "T4"]


def test_a_damaged_body_is_named_a_body_crc_mismatch(tmp_path: Path) -> None:
    data, placed, end = _segment(tmp_path)
    offset, _ = placed[3]
    damaged = bytearray(data)
    damaged[offset + 90] ^= 0x10  # inside the body
    with pytest.raises(CorruptRecordError) as info:
        _read(bytes(damaged), end)
    assert info.value.position == offset and info.value.reason == "BODYCRC mismatch"
