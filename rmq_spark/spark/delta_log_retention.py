"""A Delta table's expired log entries, removed after the reput's checkpoints.

Delta updates a snapshot by listing ``_delta_log``, and on a local (or HDFS) file system its
log store lists the whole directory and then filters: every commit pays for every file ever
written there, 10-11 us each (``bench/bench_delta_log.py``: 28,807 files added 305 ms to a
commit, 115,207 added 1.25 s). A reput table gains four a version (the commit, Delta's
checksum, and the hidden Hadoop checksum of each) at up to two versions a second. Delta
removes expired entries only after a checkpoint of its own, which the reput's tables never
take (``tables.checkpoint_tables`` writes theirs with delta-rs), and neither Delta's cleanup
nor delta-rs's removes the checksums.

The rule is Delta's (``MetadataCleanup``): the newest checkpoint whose commit is older than
the retention stays, with every version after it; the files of every earlier version go. So
each version that stays can still be read (time travel), and no version younger than the
retention goes. Files this module does not recognise stay.

Does not own when it runs (``reput_maintenance.py``) nor writing checkpoints (``tables.py``).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

__all__ = ["expired_log_files", "remove_expired_log_files"]

log = logging.getLogger("rmq_spark.reput")

# A version's files: its commit, Delta's checksum, a checkpoint (one file, a part of several,
# or a V2 checkpoint named by a UUID), each maybe with Hadoop's hidden checksum beside it.
_VERSION_FILE = re.compile(
    r"\.?(?P<version>\d{20})\."
    r"(?P<kind>json|crc|checkpoint\.parquet|checkpoint\.(?P<part>\d{10})\.(?P<parts>\d{10})\.parquet"
    r"|checkpoint\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.(?:json|parquet))"
    r"(?P<sidecar>\.crc)?"
)


def expired_log_files(log_dir: Path, retention_s: float, now_s: float) -> list[Path]:
    """The files of ``log_dir`` (a ``_delta_log``) that the retention lets go: every file of a
    version below the newest complete checkpoint whose commit was written ``retention_s`` or
    more before ``now_s``."""
    by_version: dict[int, list[str]] = {}
    checkpoint_parts: dict[int, set[tuple[int, int]]] = {}
    with os.scandir(log_dir) as entries:
        for entry in entries:
            found = _VERSION_FILE.fullmatch(entry.name)
            if found is None or not entry.is_file(follow_symlinks=False):
                continue
            version = int(found["version"])
            by_version.setdefault(version, []).append(entry.name)
            if found["sidecar"] is None and found["kind"].startswith("checkpoint"):
                part = (int(found["part"] or 1), int(found["parts"] or 1))
                checkpoint_parts.setdefault(version, set()).add(part)
    keep_from = _kept_checkpoint(log_dir, checkpoint_parts, now_s - retention_s)
    if keep_from is None:
        return []
    return [
        log_dir / name
        for version in by_version
        if version < keep_from
        for name in by_version[version]
    ]


def _kept_checkpoint(
    log_dir: Path, checkpoint_parts: dict[int, set[tuple[int, int]]], cutoff_s: float
) -> int | None:
    """The newest complete checkpoint's version whose commit is older than ``cutoff_s``."""
    for version in sorted(checkpoint_parts, reverse=True):
        parts = checkpoint_parts[version]
        if not any(len(parts) == count for _, count in parts):
            continue  # a multi-part checkpoint with parts missing: not one to read from
        try:
            written_s = (log_dir / f"{version:020d}.json").stat().st_mtime
        except FileNotFoundError:
            continue  # its commit is gone already: an older cleanup's kept checkpoint
        if written_s <= cutoff_s:
            return version
    return None


def remove_expired_log_files(log_dir: Path, retention_s: float, now_s: float) -> int:
    """Remove ``expired_log_files``; returns how many went. A file removed meanwhile by
    someone else (Delta's own cleanup) is no error."""
    removed = 0
    for path in expired_log_files(log_dir, retention_s, now_s):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
    if removed:
        log.debug("reput: removed %d expired log files of %s", removed, log_dir)
    return removed
