"""Which files of a ``_delta_log`` the reput's log retention removes (Delta's rule: the newest
checkpoint older than the retention stays with everything after it)."""

from __future__ import annotations

import os
from pathlib import Path

from rmq_spark.spark.delta_log_retention import expired_log_files, remove_expired_log_files

NOW_S = 1_000_000.0
RETENTION_S = 600.0


def _version(log_dir: Path, version: int, age_s: float, *, checkpoint: str | None = None) -> None:
    """Version ``version``'s files as Spark on a local file system writes them, ``age_s`` old;
    ``checkpoint``: also a checkpoint file of that name's tail."""
    name = f"{version:020d}"
    files = [f"{name}.json", f"{name}.crc", f".{name}.json.crc", f".{name}.crc.crc"]
    if checkpoint is not None:
        files += [f"{name}.{checkpoint}", f".{name}.{checkpoint}.crc"]
    for file_name in files:
        path = log_dir / file_name
        path.write_text("{}")
        os.utime(path, (NOW_S - age_s, NOW_S - age_s))


def _names(paths: list[Path]) -> set[str]:
    return {path.name for path in paths}


def test_every_file_below_the_newest_expired_checkpoint_goes_and_nothing_after(
    tmp_path: Path,
) -> None:
    for version in range(10):
        checkpoint = "checkpoint.parquet" if version in (3, 6, 9) else None
        age_s = 1000 - version * 100  # versions 0-4 older than the retention, 5-9 younger
        _version(tmp_path, version, age_s, checkpoint=checkpoint)
    (tmp_path / "_last_checkpoint").write_text("{}")
    (tmp_path / "00000000000000000001.json.3f2a.tmp").write_text("")  # not ours to judge
    expired = expired_log_files(tmp_path, RETENTION_S, NOW_S)
    # checkpoint 3 is the newest whose commit is older than the retention: 0-2 go, 3 stays
    assert {int(name.lstrip(".")[:20]) for name in _names(expired)} == {0, 1, 2}
    assert len(expired) == 3 * 4
    assert remove_expired_log_files(tmp_path, RETENTION_S, NOW_S) == 12
    left = set(os.listdir(tmp_path))
    assert "00000000000000000003.checkpoint.parquet" in left and "_last_checkpoint" in left
    assert "00000000000000000001.json.3f2a.tmp" in left
    assert not any(name.lstrip(".").startswith(f"{2:020d}") for name in left)
    assert expired_log_files(tmp_path, RETENTION_S, NOW_S) == []  # the next run: nothing new


def test_nothing_goes_without_a_checkpoint_older_than_the_retention(tmp_path: Path) -> None:
    for version in range(5):
        _version(tmp_path, version, 5000, checkpoint=None)
    _version(tmp_path, 5, 10, checkpoint="checkpoint.parquet")  # young: every older version stays
    assert expired_log_files(tmp_path, RETENTION_S, NOW_S) == []


def test_a_multi_part_checkpoint_counts_only_when_every_part_is_there(tmp_path: Path) -> None:
    for version in range(3):
        _version(tmp_path, version, 5000)
    _version(tmp_path, 3, 4000, checkpoint="checkpoint.0000000001.0000000002.parquet")
    _version(tmp_path, 4, 3000, checkpoint="checkpoint.0000000001.0000000002.parquet")
    part = tmp_path / "00000000000000000004.checkpoint.0000000002.0000000002.parquet"
    part.write_text("{}")
    os.utime(part, (NOW_S - 3000, NOW_S - 3000))
    # 4 is complete (both parts), 3 is not: 0-3 go
    expired = {
        int(name.lstrip(".")[:20])
        for name in _names(expired_log_files(tmp_path, RETENTION_S, NOW_S))
    }
    assert expired == {0, 1, 2, 3}
    part.unlink()  # now neither is complete: nothing goes
    assert expired_log_files(tmp_path, RETENTION_S, NOW_S) == []
