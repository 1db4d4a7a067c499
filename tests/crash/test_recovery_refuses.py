"""Recovery never destroys more than one torn write; `rmq-spark recover` cuts, never deletes."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.cli.store_commands import main
from rmq_spark.errors import CorruptRecordError, RecoveryRefusedError

MIB = 1 << 20


def _open(root: Path):  # type: ignore[no-untyped-def]
    # 1 MiB segments and 1 KiB messages: one torn write is at most ~98 KiB.
    return open_store(root, segment_size_bytes=MIB)


def _crashed(root: Path, count: int = 20) -> list:
    store = _open(root)
    results = put_many(store, count, body_size=300)
    store.abandon()
    return results


def _digests(root: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (root / "commitlog").iterdir()
        if p.is_file()
    }


def _write(path: Path, position: int, data: bytes) -> None:
    with path.open("r+b") as handle:
        handle.seek(position)
        handle.write(data)


def test_segments_of_random_bytes_are_refused_and_left_as_they_are(tmp_path: Path) -> None:
    rng = random.Random(14)
    commitlog = tmp_path / "commitlog"
    commitlog.mkdir()
    for index in range(3):
        (commitlog / f"{index * MIB:020d}").write_bytes(rng.randbytes(MIB))
    before = _digests(tmp_path)
    with pytest.raises(RecoveryRefusedError) as info:
        _open(tmp_path)
    assert info.value.path == str(commitlog / f"{0:020d}") and info.value.position == 0
    assert "not one torn write" in str(info.value) and "rmq-spark recover" in str(info.value)
    assert _digests(tmp_path) == before


def test_non_zero_bytes_beyond_one_record_after_a_bad_record_are_refused(tmp_path: Path) -> None:
    results = _crashed(tmp_path)
    segment = segment_paths(tmp_path)[0]
    end = results[-1].physical_offset + results[-1].total_size
    _write(segment, end, b"\x00\x00\x01\x00\x01\x02\x03\x04")  # a bad record header
    _write(segment, end + 200_000, b"\x01" * 16)  # far past what one write can reach
    before = _digests(tmp_path)
    with pytest.raises(RecoveryRefusedError, match="more than one record"):
        _open(tmp_path)
    assert _digests(tmp_path) == before


def test_a_later_non_empty_segment_is_refused(tmp_path: Path) -> None:
    _crashed(tmp_path)
    later = tmp_path / "commitlog" / f"{MIB:020d}"
    later.write_bytes(b"\x07" * 64 + bytes(MIB - 64))
    with pytest.raises(RecoveryRefusedError, match=f"non-zero bytes in segment {later.name}"):
        _open(tmp_path)
    assert later.exists()


def test_damage_below_the_durable_offset_is_refused(tmp_path: Path) -> None:
    store = _open(tmp_path)
    results = put_many(store, 10, body_size=300)
    store.close()
    _write(segment_paths(tmp_path)[0], results[4].physical_offset + 150, b"\xff\xfe")
    with pytest.raises(RecoveryRefusedError, match="below the durable offset") as info:
        _open(tmp_path)
    assert isinstance(info.value, CorruptRecordError)
    assert info.value.position == results[4].physical_offset


def test_one_torn_write_is_cut_and_kept_in_the_quarantine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    results = _crashed(tmp_path)
    end = results[-1].physical_offset + results[-1].total_size
    torn = b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"half a record" * 5
    _write(segment_paths(tmp_path)[0], end, torn)
    with caplog.at_level(logging.WARNING):
        store = _open(tmp_path)
    try:
        report = store.recovery_report
        assert (report.end_offset, report.truncated_bytes) == (end, len(torn))
    finally:
        store.close()
    quarantine = tmp_path / "quarantine"
    (cut,) = quarantine.iterdir()
    manifest = json.loads((cut / "manifest.json").read_text())
    assert manifest["cut_at"] == end and manifest["bytes"][0]["length"] == len(torn)
    (copy,) = cut.glob("*.bin")
    assert copy.read_bytes() == torn
    assert not [r for r in caplog.records if "ignoring directory" in r.getMessage()]


def test_recover_command_cuts_the_log_and_moves_everything_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _crashed(tmp_path)
    segment = segment_paths(tmp_path)[0]
    _write(segment, results[15].physical_offset + 120, b"\xff")  # damage mid-log
    later = tmp_path / "commitlog" / f"{MIB:020d}"
    later.write_bytes(b"\x07" * 64 + bytes(MIB - 64))
    with pytest.raises(RecoveryRefusedError):
        _open(tmp_path)
    original = segment.read_bytes()
    cut_at = results[15].physical_offset
    code = main(
        ["recover", "--store", str(tmp_path), "--truncate-at", str(cut_at),
         "--set", f"store.segment_size_bytes={MIB}"]
    )  # fmt: skip
    assert code == 0
    assert "moved to" in capsys.readouterr().out
    (cut,) = (tmp_path / "quarantine").iterdir()
    manifest = json.loads((cut / "manifest.json").read_text())
    assert manifest["segments"] == [later.name] and (cut / later.name).exists()
    (copy,) = cut.glob("*.bin")
    assert copy.read_bytes() == original[cut_at:]
    assert not later.exists()
    store = _open(tmp_path)
    try:
        assert store.max_offset == cut_at and store.queue_offset("TopicTest", 0) == 15
    finally:
        store.close()


def test_recover_help_explains_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["recover", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--truncate-at OFFSET" in text and "quarantine/" in text and "lost" in text
