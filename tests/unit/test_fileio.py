from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rmq_spark.store.config import IoMode
from rmq_spark.store.fileio import (
    FaultPlan,
    FaultyFile,
    FaultyOpener,
    FileKind,
    MmapFile,
    OsFile,
    OsOpener,
    make_dirs_durably,
    write_file_atomically,
)


@pytest.fixture(params=[IoMode.MMAP, IoMode.PWRITE], ids=["mmap", "pwrite"])
def opener(request: pytest.FixtureRequest) -> OsOpener:
    return OsOpener(request.param)


def test_create_preallocates_a_zero_filled_file_of_full_size(
    tmp_path: Path, opener: OsOpener
) -> None:
    file = opener.create(tmp_path / "00000000000000000000", 8192, FileKind.SEGMENT)
    try:
        assert file.size() == 8192
        assert file.read(0, 8192) == bytes(8192)
        assert (tmp_path / "00000000000000000000").stat().st_size == 8192
        # Allocated, not sparse: writes cannot hit ENOSPC later.
        assert (tmp_path / "00000000000000000000").stat().st_blocks * 512 >= 8192
    finally:
        file.close()
    assert not list(tmp_path.glob("*.tmp"))


def test_write_then_read_returns_the_bytes_at_their_position(
    tmp_path: Path, opener: OsOpener
) -> None:
    file = opener.create(tmp_path / "f", 4096, FileKind.SEGMENT)
    file.write(100, b"hello")
    file.write(4091, b"world")
    assert file.read(100, 5) == b"hello"
    assert file.read(4091, 100) == b"world"  # short only at the end of the file
    file.close()
    reopened = opener.open(tmp_path / "f", FileKind.SEGMENT)
    assert reopened.read(100, 5) == b"hello"
    reopened.close()


def test_truncate_zeroes_the_tail_and_keeps_the_length(tmp_path: Path, opener: OsOpener) -> None:
    file = opener.create(tmp_path / "f", 3 * 4096, FileKind.SEGMENT)
    file.write(0, b"\xff" * (3 * 4096))
    file.truncate(1000)
    assert file.size() == 3 * 4096
    assert file.read(0, 1000) == b"\xff" * 1000
    assert file.read(1000, 3 * 4096) == bytes(3 * 4096 - 1000)
    file.fsync()
    file.close()
    assert (tmp_path / "f").read_bytes()[1000:] == bytes(3 * 4096 - 1000)


def test_mmap_file_refuses_a_write_past_its_end(tmp_path: Path) -> None:
    OsOpener().create(tmp_path / "f", 4096, FileKind.SEGMENT).close()
    file = MmapFile(tmp_path / "f")
    with pytest.raises(OSError):
        file.write(4090, b"0123456789")
    file.close()


def test_read_only_file_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(bytes(4096))
    file = OsFile(tmp_path / "f", read_only=True)
    with pytest.raises(OSError):
        file.write(0, b"x")
    file.close()


def test_close_is_idempotent(tmp_path: Path, opener: OsOpener) -> None:
    file = opener.create(tmp_path / "f", 4096, FileKind.SEGMENT)
    file.close()
    file.close()


@pytest.mark.parametrize(
    ("fail_at", "operation"),
    [
        ("append", lambda f: f.write(0, b"abc")),
        ("fsync", lambda f: f.fsync()),
        ("truncate", lambda f: f.truncate(0)),
    ],
)
def test_faulty_file_fails_at_its_failpoint_with_the_errno(
    tmp_path: Path, fail_at: str, operation: object
) -> None:
    inner = OsOpener().create(tmp_path / "f", 4096, FileKind.SEGMENT)
    file = FaultyFile(inner, fail_at=fail_at, error=errno.EIO)
    with pytest.raises(OSError) as info:
        operation(file)  # type: ignore[operator]
    assert info.value.errno == errno.EIO
    assert fail_at in str(info.value)
    file.close()


def test_faulty_file_lets_the_first_hits_through_and_stops_after_times(tmp_path: Path) -> None:
    inner = OsOpener().create(tmp_path / "f", 4096, FileKind.SEGMENT)
    plan = FaultPlan("append", after=2, times=1)
    file = FaultyFile(inner, plan)
    file.write(0, b"a")
    file.write(1, b"b")
    with pytest.raises(OSError) as info:
        file.write(2, b"c")
    assert info.value.errno == errno.ENOSPC
    file.write(2, b"c")
    assert file.read(0, 3) == b"abc"
    assert (plan.hits, plan.failures) == (4, 1)
    file.close()


def test_faulty_append_with_partial_bytes_leaves_a_torn_write(tmp_path: Path) -> None:
    inner = OsOpener().create(tmp_path / "f", 4096, FileKind.SEGMENT)
    file = FaultyFile(inner, FaultPlan("append", partial_bytes=3))
    with pytest.raises(OSError):
        file.write(0, b"abcdef")
    assert file.read(0, 6) == b"abc\0\0\0"
    file.close()


def test_faulty_opener_fails_segment_creation_at_roll(tmp_path: Path) -> None:
    opener = FaultyOpener(FaultPlan("roll", after=1))
    opener.create(tmp_path / "a", 4096, FileKind.SEGMENT).close()
    with pytest.raises(OSError):
        opener.create(tmp_path / "b", 4096, FileKind.SEGMENT)
    assert not (tmp_path / "b").exists()
    # Checkpoint files are not segments: "roll" does not apply to them.
    opener.create(tmp_path / "checkpoint", 4096, FileKind.CHECKPOINT).close()


def test_faulty_checkpoint_fails_checkpoint_writes_only(tmp_path: Path) -> None:
    opener = FaultyOpener(FaultPlan("checkpoint"))
    segment = opener.create(tmp_path / "s", 4096, FileKind.SEGMENT)
    segment.write(0, b"fine")
    checkpoint = opener.create(tmp_path / "checkpoint", 4096, FileKind.CHECKPOINT)
    with pytest.raises(OSError):
        checkpoint.write(32, b"\0" * 8)
    segment.close()
    checkpoint.close()


def test_fault_plan_rejects_an_unknown_failpoint() -> None:
    with pytest.raises(ValueError, match="fail_at"):
        FaultPlan("explode")


def test_mmap_file_hands_out_its_mapping_only_while_writable_and_open(tmp_path: Path) -> None:
    OsOpener().create(tmp_path / "f", 4096, FileKind.SEGMENT).close()
    file = MmapFile(tmp_path / "f")
    mapping = file.mapping
    assert mapping is not None and len(mapping) == 4096
    mapping[10:13] = b"abc"  # a write through the mapping is a write of the file
    assert file.read(10, 3) == b"abc"
    file.close()
    assert file.mapping is None
    read_only = MmapFile(tmp_path / "f", read_only=True)
    assert read_only.mapping is None and read_only.read(10, 3) == b"abc"
    read_only.close()
    assert not hasattr(OsFile(tmp_path / "f"), "mapping")


def test_write_file_atomically_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_file_atomically(path, b"old content, longer than the new")
    write_file_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_write_file_atomically_leaves_the_old_file_when_it_fails(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_file_atomically(path, b"old")
    (tmp_path / "state.json.tmp").mkdir()  # the temp file cannot be created
    with pytest.raises(OSError):
        write_file_atomically(path, b"new")
    assert path.read_bytes() == b"old"


def test_make_dirs_durably_creates_every_missing_level(tmp_path: Path) -> None:
    make_dirs_durably(tmp_path / "a" / "b" / "c")
    make_dirs_durably(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()


def test_fsync_and_sync_data_are_one_implementation(tmp_path: Path, opener: OsOpener) -> None:
    segment = opener.create(tmp_path / "seg", 4096, FileKind.SEGMENT)
    segment.write(0, b"x")
    segment.fsync()
    segment.sync_data()
    assert type(segment).sync_data is type(segment).fsync
    segment.close()
