from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.store.codec import BlankPadding, decode_record
from rmq_spark.store.config import IoMode
from rmq_spark.store.fileio import FaultPlan, FaultyOpener, FileKind, OsOpener
from rmq_spark.store.segment import Segment


@pytest.fixture
def segment(tmp_path: Path) -> Segment:
    file = OsOpener().create(tmp_path / "00000000000000004096", 1024, FileKind.SEGMENT)
    segment = Segment(4096, file)
    yield segment
    segment.close()


def test_append_returns_the_position_and_advances(segment: Segment) -> None:
    assert segment.append(b"a" * 100) == 0
    assert segment.append(b"b" * 50) == 100
    assert segment.write_position == 150
    assert segment.write_offset == 4096 + 150
    assert segment.read(100, 50) == b"b" * 50


def test_fits_keeps_room_for_the_blank_record(segment: Segment) -> None:
    segment.append(b"x" * 1000)
    assert segment.fits(16)
    assert not segment.fits(17)  # 1000 + 17 + 8 > 1024


def test_blank_record_covers_the_rest_of_the_file_and_marks_it_full(segment: Segment) -> None:
    segment.append(b"x" * 1000)
    segment.append_blank()
    assert segment.is_full
    outcome = decode_record(segment.read(1000, 24), 0)
    assert outcome == BlankPadding(0, 24)


def test_flush_reports_the_position_it_covered(segment: Segment) -> None:
    segment.append(b"x" * 10)
    assert segment.flush() == 10
    assert segment.flushed_position == 10


def test_truncate_to_zeroes_after_the_position(segment: Segment) -> None:
    segment.append(b"x" * 300)
    segment.truncate_to(120)
    assert segment.write_position == 120
    assert segment.read(0, 300) == b"x" * 120 + bytes(180)


def test_a_mapped_segment_exposes_its_mapping_until_closed(tmp_path: Path) -> None:
    file = OsOpener(IoMode.MMAP).create(tmp_path / "00000000000000000000", 1024, FileKind.SEGMENT)
    segment = Segment(0, file)
    assert segment.mapping is not None
    segment.close()
    assert segment.mapping is None


def test_segments_of_unmapped_or_faulty_files_have_no_mapping(tmp_path: Path) -> None:
    pwrite = OsOpener(IoMode.PWRITE).create(tmp_path / "a", 1024, FileKind.SEGMENT)
    faulty = FaultyOpener(FaultPlan("fsync")).create(tmp_path / "b", 1024, FileKind.SEGMENT)
    for file in (pwrite, faulty):
        segment = Segment(0, file)
        assert segment.mapping is None  # puts go through ``append`` (and its failpoints)
        segment.close()
