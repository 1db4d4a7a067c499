from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rmq_spark.errors import OffsetOutOfRangeError, SegmentLayoutError
from rmq_spark.store.codec import BlankPadding, decode_record
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.fileio import FaultPlan, FaultyOpener, OsOpener

SIZE = 1024


def _log(directory: Path) -> CommitLog:
    return CommitLog.load(directory, SIZE, OsOpener())


def test_first_append_creates_the_first_segment_named_by_offset_zero(tmp_path: Path) -> None:
    log = _log(tmp_path / "commitlog")
    segment = log.segment_for_append(100)
    segment.append(b"x" * 100)
    assert [p.name for p in (tmp_path / "commitlog").iterdir()] == ["00000000000000000000"]
    assert (log.min_offset, log.max_offset) == (0, 100)
    log.close()


def test_roll_writes_a_blank_and_names_the_next_file_by_its_base_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.segment_for_append(1000).append(b"x" * 1000)
    segment = log.segment_for_append(100)  # 1000 + 100 + 8 > 1024
    assert segment.base_offset == SIZE
    assert segment.path.name == "00000000000000001024"
    assert decode_record(log.segments[0].read(1000, 24), 0) == BlankPadding(0, 24)
    segment.append(b"y" * 100)
    assert log.max_offset == SIZE + 100
    assert log.read(SIZE, 3) == b"yyy"
    log.close()


def test_a_record_that_exactly_leaves_eight_bytes_stays_in_the_segment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    segment = log.segment_for_append(SIZE - 8)
    segment.append(b"x" * (SIZE - 8))
    assert log.segment_for_append(1).base_offset == SIZE
    log.close()


def test_segment_for_finds_the_segment_holding_an_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for _ in range(3):
        log.segment_for_append(1000).append(b"x" * 1000)
    assert [log.segment_for(o).base_offset for o in (0, 1023, 1024, 3000)] == [0, 0, 1024, 2048]
    assert log.segment_for(3 * SIZE) is None
    assert log.next_segment_offset(1500) == 2048
    log.close()


def test_read_outside_the_log_raises_offset_out_of_range(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.segment_for_append(10).append(b"x" * 10)
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 10\)"):
        log.read(10, 1)
    log.close()


def test_load_ignores_files_without_a_twenty_digit_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(tmp_path)
    log.segment_for_append(10).append(b"x" * 10)
    log.close()
    (tmp_path / "notes.txt").write_text("garbage")
    (tmp_path / "123").write_bytes(bytes(SIZE))
    (tmp_path / "subdir").mkdir()
    with caplog.at_level(logging.WARNING):
        log = _log(tmp_path)
    assert [s.path.name for s in log.segments] == ["00000000000000000000"]
    assert "notes.txt" in caplog.text and "123" in caplog.text
    log.close()


def test_load_refuses_a_segment_of_the_wrong_size(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000").write_bytes(bytes(SIZE))
    (tmp_path / "00000000000000001024").write_bytes(bytes(SIZE - 1))
    (tmp_path / "00000000000000002048").write_bytes(bytes(SIZE))
    with pytest.raises(SegmentLayoutError, match="00000000000000001024: length 1023") as info:
        _log(tmp_path)
    assert info.value.path.name == "00000000000000001024"


def test_load_deletes_an_empty_trailing_segment(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000").write_bytes(bytes(SIZE))
    (tmp_path / "00000000000000001024").write_bytes(b"")
    log = _log(tmp_path)
    assert [s.path.name for s in log.segments] == ["00000000000000000000"]
    assert not (tmp_path / "00000000000000001024").exists()
    log.close()


def test_load_refuses_a_gap_between_segments(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000").write_bytes(bytes(SIZE))
    (tmp_path / "00000000000000002048").write_bytes(bytes(SIZE))
    with pytest.raises(SegmentLayoutError, match="not contiguous"):
        _log(tmp_path)


def test_truncate_to_zeroes_the_tail_and_deletes_later_segments(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for _ in range(3):
        log.segment_for_append(1000).append(b"x" * 1000)
    log.truncate_to(500)
    assert [s.base_offset for s in log.segments] == [0]
    assert log.max_offset == 500
    assert log.segments[0].read(0, SIZE) == b"x" * 500 + bytes(SIZE - 500)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000000"]
    log.close()


def test_delete_oldest_never_deletes_the_last_segment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for _ in range(3):
        log.segment_for_append(1000).append(b"x" * 1000)
    deleted = log.delete_oldest(10)
    assert [p.name for p in deleted] == ["00000000000000000000", "00000000000000001024"]
    assert log.min_offset == 2048
    assert log.delete_oldest(1) == []
    log.close()


def test_flush_after_mark_unflushed_fsyncs_every_segment_past_the_offset(tmp_path: Path) -> None:
    plan = FaultPlan("fsync", after=10**9)  # never fails; counts the fsyncs
    log = CommitLog.load(tmp_path, SIZE, FaultyOpener(plan))
    for _ in range(3):
        log.segment_for_append(1000).append(b"x" * 1000)
    assert log.flush(0) == 2048 + 1000
    before = plan.hits
    assert log.flush(0) == 3048 and plan.hits == before  # nothing new to fsync
    log.mark_unflushed(1500)
    assert log.flush(1500) == 3048
    assert plan.hits == before + 2  # the segments at 1024 and 2048
    log.close()


def test_active_is_always_the_last_segment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert log.active is None
    for _ in range(3):
        log.segment_for_append(1000).append(b"x" * 1000)
        assert log.active is log.segments[-1]
    log.delete_oldest(1)
    assert log.active is log.segments[-1] and log.active.base_offset == 2 * SIZE
    log.truncate_to(SIZE + 10)
    assert log.active is log.segments[-1] and log.active.base_offset == SIZE
    log.close()
    reloaded = _log(tmp_path)
    assert reloaded.active is reloaded.segments[-1]
    reloaded.close()
