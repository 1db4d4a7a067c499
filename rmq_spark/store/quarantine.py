"""What is cut from the log is moved aside, never deleted: ``<store>/quarantine/``.

Owns the quarantine directory (a copy of the bytes a truncation zeroes, the later segment
files it removes, and one small JSON manifest per cut) and ``truncate_store``, the
operator's decision behind ``rmq-spark recover --truncate-at``. It lives beside
``commitlog/``, not in it, so that neither our loader nor RocketMQ's sees it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from rmq_spark.errors import StoreError
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.fileio import fsync_dir, write_file_atomically
from rmq_spark.store.layout import segment_name
from rmq_spark.store.view import QUARANTINE_DIR

__all__ = [
    "QUARANTINE_DIR",
    "TruncateResult",
    "quarantine_bytes",
    "quarantine_file",
    "quarantine_root",
    "truncate_store",
]

_log = logging.getLogger(__name__)
_COPY_CHUNK = 8 << 20


def quarantine_root(commitlog: CommitLog) -> Path:
    """``<store>/quarantine/``: beside ``commitlog/``, never inside it (RocketMQ 4.x refuses
    to load a ``commitlog/`` holding anything but segment files)."""
    return commitlog.directory.parent / QUARANTINE_DIR


def _cut_dir(commitlog: CommitLog, offset: int) -> Path:
    return _new_dir(quarantine_root(commitlog), f"cut-{{stamp}}-at-{segment_name(offset)}")


def _new_dir(parent: Path, pattern: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    directory = parent / pattern.format(stamp=stamp)
    suffix = 0
    candidate = directory
    while candidate.exists():
        suffix += 1
        candidate = directory.with_name(f"{directory.name}.{suffix}")
    candidate.mkdir(parents=True)
    return candidate


def _manifest(directory: Path, body: dict[str, object]) -> None:
    write_file_atomically(directory / "manifest.json", json.dumps(body, indent=2).encode())
    fsync_dir(directory.parent)  # the new cut directory's own entry


def quarantine_bytes(commitlog: CommitLog, offset: int, length: int, reason: str) -> Path:
    """Copy ``[offset, offset + length)`` (inside one segment) aside before it is zeroed."""
    segment = commitlog.segment_for(offset)
    assert segment is not None, offset
    position = offset - segment.base_offset
    data = segment.read(position, length)
    directory = _cut_dir(commitlog, offset)
    write_file_atomically(directory / f"{segment.path.name}@{position}.bin", data)
    _manifest(
        directory,
        {
            "cut_at": offset,
            "reason": reason,
            "bytes": [{"segment": segment.path.name, "position": position, "length": len(data)}],
            "segments": [],
        },
    )
    return directory


def quarantine_file(root_dir: Path, path: Path, reason: str) -> Path:
    """Move ``path`` (a file or directory of the store that cannot stay, such as a damaged
    checkpoint) to ``<root>/quarantine/<name>-<time>/`` with a manifest; the new directory."""
    directory = _new_dir(root_dir / QUARANTINE_DIR, f"{path.name}-{{stamp}}")
    os.replace(path, directory / path.name)
    fsync_dir(path.parent)
    _manifest(directory, {"moved": path.name, "reason": reason})
    return directory


class TruncateResult:
    """What ``truncate_store`` moved aside: bytes copied, segments moved, the directory."""

    def __init__(self, directory: Path, copied_bytes: int, moved_segments: list[str]) -> None:
        self.directory = directory
        self.copied_bytes = copied_bytes
        self.moved_segments = moved_segments


def truncate_store(commitlog: CommitLog, offset: int, reason: str) -> TruncateResult:
    """Make ``offset`` the end of the log: copy the rest of its segment aside (then zero it)
    and move every later segment file into the quarantine. The caller holds the store lock
    and closes ``commitlog`` afterwards (its segment list is stale).

    Raises
    ------
    StoreError
        ``offset`` is outside the segment files.
    """
    segments = commitlog.segments
    if not segments or not segments[0].base_offset <= offset <= segments[-1].end_offset:
        low = segments[0].base_offset if segments else 0
        high = segments[-1].end_offset if segments else 0
        raise StoreError(f"--truncate-at {offset} is outside the segment files [{low}, {high}]")
    directory = _cut_dir(commitlog, offset)
    pieces: list[dict[str, object]] = []
    copied = 0
    segment = commitlog.segment_for(offset)
    if segment is not None and offset > segment.base_offset:
        position = offset - segment.base_offset
        target = directory / f"{segment.path.name}@{position}.bin"
        with target.open("wb") as out:
            at = position
            while at < segment.size_bytes:
                chunk = segment.read(at, min(_COPY_CHUNK, segment.size_bytes - at))
                if not chunk:
                    break
                out.write(chunk)
                at += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        copied = at - position
        pieces.append({"segment": segment.path.name, "position": position, "length": copied})
    if segment is not None and offset > segment.base_offset:
        segment.truncate_to(offset - segment.base_offset)
        segment.file.fsync()
    names = []
    for later in [s for s in segments if s.base_offset >= offset]:
        later.close()
        os.replace(later.path, directory / later.path.name)
        names.append(later.path.name)
    fsync_dir(commitlog.directory)
    _manifest(
        directory,
        {"cut_at": offset, "reason": reason, "bytes": pieces, "segments": names},
    )
    _log.warning(
        "cut the log at physical offset %d: %d bytes copied and %d segments moved to %s",
        offset,
        copied,
        len(names),
        directory,
    )
    return TruncateResult(directory, copied, names)
