"""A store written with one segment size and opened with another is refused, unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import open_store, put_many

from rmq_spark.errors import SegmentSizeMismatchError, StoreError
from rmq_spark.store.layout import COMMITLOG_DIR
from rmq_spark.store.reader import iter_records, open_read_only


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the lock file's content is not data)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _written_store(root: Path, *, close: bool = True) -> dict[int, bytes]:
    """60 messages in 4 KiB segments: {physical offset: body}."""
    store = open_store(root)
    results = put_many(store, 60)
    bodies = {result.physical_offset: store.read(result.physical_offset).body for result in results}
    if close:
        store.close()
    else:
        store.abandon()
    return bodies


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "after-crash"])
def test_opening_with_another_segment_size_is_refused_and_changes_nothing(
    tmp_path: Path, clean: bool
) -> None:
    offsets = _written_store(tmp_path, close=clean)
    (tmp_path / COMMITLOG_DIR / "00000000000001048576").touch()  # an empty trailing file
    before = _tree(tmp_path)
    with pytest.raises(SegmentSizeMismatchError) as info:
        open_store(tmp_path, segment_size_bytes=8192)
    error = info.value
    assert isinstance(error, StoreError)
    assert error.path == tmp_path / COMMITLOG_DIR / "00000000000000000000"
    assert (error.size, error.configured, error.store_size) == (4096, 8192, 4096)
    message = str(error)
    assert str(error.path) in message and "length 4096" in message and "8192" in message
    assert "--set store.segment_size_bytes=4096" in message
    assert _tree(tmp_path) == before  # nothing written, truncated or deleted
    store = open_store(tmp_path)  # the right size opens it, with every message
    assert {offset: store.read(offset).body for offset in offsets} == offsets
    assert store.queue_offset("TopicTest", 0) == len(offsets)
    store.close()


def test_a_lone_segment_of_another_size_is_named_as_damaged(tmp_path: Path) -> None:
    _written_store(tmp_path)
    segments = sorted((tmp_path / COMMITLOG_DIR).iterdir())
    assert len(segments) >= 3
    with open(segments[1], "r+b") as file:
        file.truncate(4000)
    with pytest.raises(SegmentSizeMismatchError) as info:
        open_store(tmp_path)
    assert info.value.path == segments[1] and info.value.store_size is None
    assert "length 4000" in str(info.value) and "damaged" in str(info.value)


def test_readers_take_the_size_of_the_files_and_skip_an_empty_trailing_one(
    tmp_path: Path,
) -> None:
    offsets = _written_store(tmp_path)
    (tmp_path / COMMITLOG_DIR / "00000000000001048576").touch()
    commitlog = open_read_only(tmp_path)
    assert commitlog.segment_size_bytes == 4096
    assert [record.position for record in iter_records(commitlog)] == sorted(offsets)
    commitlog.close()
    assert (tmp_path / COMMITLOG_DIR / "00000000000001048576").exists()


def _rmq_spark(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from rmq_spark.cli.main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_cli_send_to_a_store_of_another_segment_size_exits_with_a_clear_error(
    tmp_path: Path,
) -> None:
    _written_store(tmp_path)
    before = _tree(tmp_path)
    done = _rmq_spark("send", "--store", str(tmp_path), "--topic", "T", "--body", "x")
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "rmq-spark send: error:" in done.stderr
    assert "00000000000000000000" in done.stderr and "length 4096" in done.stderr
    assert str(1 << 30) in done.stderr
    assert "--set store.segment_size_bytes=4096" in done.stderr
    assert _tree(tmp_path) == before
    fixed = _rmq_spark(
        "send", "--store", str(tmp_path), "--set", "store.segment_size_bytes=4096",
        "--topic", "T", "--body", "x",
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    assert '"status": "PUT_OK"' in fixed.stdout
