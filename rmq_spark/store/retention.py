"""Retention: which of the oldest segments may be deleted, and deleting them on the record
(RocketMQ's ``CleanCommitLogService``, docs/FORMAT.md).

A segment is *expired* when ``file_reserved_time_hours`` have passed since it stopped being
written. RocketMQ reads the file's mtime; this store uses the STORETIMESTAMP of the first
record of the *next* segment (written right after this one filled up), so that the decision
follows the store's ``Clock`` and a test with a ``ManualClock`` controls it.

A segment is *processed* when it lies wholly below the slowest registered reader's progress
(``reader_progress.py``: the reput job, later consumer groups); with no reader registered every
segment counts as processed. Oldest first, at most ``delete_file_batch_max`` per round,
stopping at the first segment that may not go, never the last segment (the one written):

- processed and expired: deleted (``expired``, INFO);
- processed, disk above ``disk_max_used_space_ratio``: deleted (``disk_full``, WARNING);
- not processed: kept, unless the disk is above ``disk_emergency_used_space_ratio``: then
  force-deleted (``emergency``), logged at ERROR with what each reader lost.

Every deletion is first recorded in ``<store>/config/retention.json`` (written atomically and
fsynced before the segment is unlinked), so that a reader can tell a prefix retention removed
on purpose (below ``deleted_below``) from a lost file::

    {"version": 1, "deleted_below": 2097152,
     "deletions": [{"segment": "00000000000001048576", "base_offset": 1048576,
                    "end_offset": 2097152, "deleted_at_ms": 1700000000000,
                    "reason": "expired", "unprocessed_bytes": 0}]}

The list keeps the last ``RECORD_MAX_DELETIONS`` entries. Differences from RocketMQ: no
``deleteWhen`` hour (expired segments go at the next round); two ratios (clean / emergency)
instead of three (clean / forced clean / refuse writes), and readers hold segments back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock
from rmq_spark.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreIOError,
    StoreMetadataError,
)
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically
from rmq_spark.store.layout import segment_name
from rmq_spark.store.reader import read_record
from rmq_spark.store.reader_progress import ReaderProgress, read_reader_progress

if TYPE_CHECKING:
    from rmq_spark.store.commitlog import CommitLog
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.put_lock import PutLock

__all__ = [
    "Deletion",
    "RECORD_MAX_DELETIONS",
    "RETENTION_FILE",
    "Retention",
    "SegmentAge",
    "disk_used_ratio",
    "plan_deletions",
    "record_deletions",
]

RETENTION_FILE = "config/retention.json"  # under the store root
RECORD_MAX_DELETIONS = 1000
_VERSION = 1
_MS_PER_HOUR = 3_600_000
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SegmentAge:
    """A closed segment as retention sees it: ``[base_offset, end_offset)`` and when it
    stopped being written (``None``: unknown, never expired)."""

    base_offset: int
    end_offset: int
    closed_at_ms: int | None


@dataclass(frozen=True, slots=True)
class Deletion:
    """One segment retention deletes, as recorded in ``retention.json``.

    ``unprocessed_bytes``: bytes of the segment the slowest reader had not processed (only an
    ``emergency`` deletion has any); ``lost_by`` names each such reader and its bytes (logged,
    not recorded).
    """

    segment: str
    base_offset: int
    end_offset: int
    deleted_at_ms: int
    reason: str  # "expired" | "disk_full" | "emergency" | "lost" (recorded by recover)
    unprocessed_bytes: int
    lost_by: tuple[tuple[str, int], ...] = ()


def plan_deletions(
    segments: Sequence[SegmentAge],
    readers: Sequence[ReaderProgress],
    now_ms: int,
    *,
    file_reserved_time_hours: int,
    disk_ratio: float,
    disk_max_used_space_ratio: float,
    disk_emergency_used_space_ratio: float,
    delete_file_batch_max: int,
) -> list[Deletion]:
    """Which of the oldest closed segments to delete now, oldest first (PURE).

    ``segments``: every segment but the last, oldest first. ``disk_ratio``: the used fraction
    of the disk holding the store now.

    Examples
    --------
    >>> ages = [SegmentAge(0, 100, 0), SegmentAge(100, 200, 0)]
    >>> [d.segment[-3:] for d in plan_deletions(
    ...     ages, [ReaderProgress("reput:t", 150, 0)], 3_600_000, file_reserved_time_hours=1,
    ...     disk_ratio=0.5, disk_max_used_space_ratio=0.75,
    ...     disk_emergency_used_space_ratio=0.95, delete_file_batch_max=10)]
    ['000']
    """
    reserved_ms = file_reserved_time_hours * _MS_PER_HOUR
    disk_full = disk_ratio > disk_max_used_space_ratio
    emergency = disk_ratio > disk_emergency_used_space_ratio
    floor = min((reader.physical_offset for reader in readers), default=None)
    plan: list[Deletion] = []
    for age in segments[:delete_file_batch_max]:
        processed = floor is None or age.end_offset <= floor
        expired = age.closed_at_ms is not None and age.closed_at_ms + reserved_ms <= now_ms
        if processed and expired:
            reason = "expired"
        elif processed and disk_full:
            reason = "disk_full"
        elif not processed and emergency:
            reason = "emergency"
        else:
            break
        lost_by = tuple(
            (reader.name, age.end_offset - max(age.base_offset, reader.physical_offset))
            for reader in readers
            if reader.physical_offset < age.end_offset
        )
        plan.append(
            Deletion(
                segment=segment_name(age.base_offset),
                base_offset=age.base_offset,
                end_offset=age.end_offset,
                deleted_at_ms=now_ms,
                reason=reason,
                unprocessed_bytes=max((lost for _, lost in lost_by), default=0),
                lost_by=lost_by,
            )
        )
    return plan


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the file system holding ``path`` (0.0 .. 1.0)."""
    stat = os.statvfs(path)
    if stat.f_blocks == 0:
        return 0.0
    return (stat.f_blocks - stat.f_bfree) / stat.f_blocks


class Retention:
    """Runs retention rounds over a store's CommitLog (``MessageStore`` delegates to it).

    Parameters
    ----------
    config
        The store's config: root, reserved time, ratios, batch size.
    clock
        Now, for expiry and the record's ``deleted_at_ms``.
    commitlog
        Returns the store's ``CommitLog`` (loaded after this object is made).
    put_lock
        Held while segments are unlinked, so that no put rolls a segment meanwhile.
    disk_ratio
        Used fraction of the disk holding a path (tests pass their own).
    """

    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        commitlog: Callable[[], CommitLog],
        put_lock: PutLock,
        *,
        disk_ratio: Callable[[Path], float] = disk_used_ratio,
    ) -> None:
        self._config = config
        self._clock = clock
        self._commitlog = commitlog
        self._put_lock = put_lock
        self._disk_ratio = disk_ratio
        self._root = config.root_dir
        self._closed_at_cache: dict[int, int] = {}
        self._round_lock = threading.Lock()  # the housekeeper and a caller may both run one
        self._pinned_warned: tuple[int, str] | None = None

    @property
    def record_path(self) -> Path:
        """``<root>/config/retention.json``."""
        return self._root / RETENTION_FILE

    def delete_expired(self) -> list[Path]:
        """One round: plan, record in ``retention.json``, then delete; returns the deleted
        segment paths.

        Raises
        ------
        StoreMetadataError
            A reader progress file or ``retention.json`` is damaged (nothing is deleted).
        StoreIOError
            A reader progress file cannot be read, or ``retention.json`` cannot be written
            (nothing is deleted).
        OSError
            A segment cannot be unlinked.
        """
        with self._round_lock:
            commitlog = self._commitlog()
            config = self._config
            ages = []
            for segment in commitlog.segments[:-1]:
                end = segment.base_offset + segment.size_bytes
                ages.append(SegmentAge(segment.base_offset, end, self.closed_at(end)))
            readers = read_reader_progress(self._root)
            ratio = self._disk_ratio(self._root)
            plan = plan_deletions(
                ages,
                readers,
                self._clock.now_ms(),
                file_reserved_time_hours=config.file_reserved_time_hours,
                disk_ratio=ratio,
                disk_max_used_space_ratio=config.disk_max_used_space_ratio,
                disk_emergency_used_space_ratio=config.disk_emergency_used_space_ratio,
                delete_file_batch_max=config.delete_file_batch_max,
            )
            if len(plan) < config.delete_file_batch_max:
                self._warn_if_pinned(ages[len(plan) :], readers, ratio)
            if not plan:
                return []
            self._record(plan)
            with self._put_lock:
                # Only a round removes segments, and rounds run one at a time.
                assert commitlog.min_offset == plan[0].base_offset
                deleted = commitlog.delete_oldest(len(plan))
            for deletion, path in zip(plan, deleted, strict=False):
                _log_deletion(deletion, path, ratio, config)
            return deleted

    def closed_at(self, next_base: int) -> int | None:
        """Store timestamp of the first record of the segment at ``next_base`` (cached);
        ``None`` when there is no readable record there."""
        cached = self._closed_at_cache.get(next_base)
        if cached is not None:
            return cached
        try:
            record = read_record(self._commitlog(), next_base).record
        except (OffsetOutOfRangeError, CorruptRecordError):
            return None
        self._closed_at_cache[next_base] = record.store_timestamp_ms
        return record.store_timestamp_ms

    def _record(self, plan: Sequence[Deletion]) -> None:
        """Append ``plan`` to ``retention.json``, durably, before any file goes."""
        record_deletions(self.record_path, plan)

    def _warn_if_pinned(
        self, kept: Sequence[SegmentAge], readers: Sequence[ReaderProgress], ratio: float
    ) -> None:
        """Say once per (segment, reader) when a full disk waits for a reader."""
        if not kept or not readers or ratio <= self._config.disk_max_used_space_ratio:
            return
        if ratio > self._config.disk_emergency_used_space_ratio:
            return  # above the emergency ratio nothing waits for a reader
        slowest = min(readers, key=lambda reader: reader.physical_offset)
        if kept[0].end_offset <= slowest.physical_offset:
            return
        key = (kept[0].base_offset, slowest.name)
        if key != self._pinned_warned:
            self._pinned_warned = key
            _log.warning(
                "retention: disk %.1f%% full (disk_max_used_space_ratio %s) but segment %s is "
                "kept: reader %r has processed only up to %d (published %.0f s ago); it goes "
                "when the reader moves on, when the disk passes "
                "disk_emergency_used_space_ratio %s, or when the reader is removed "
                "(rmq-spark reput --unregister)",
                ratio * 100,
                self._config.disk_max_used_space_ratio,
                segment_name(kept[0].base_offset),
                slowest.name,
                slowest.physical_offset,
                max(0, self._clock.now_ms() - slowest.updated_at_ms) / 1000,
                self._config.disk_emergency_used_space_ratio,
            )


def record_deletions(path: Path, plan: Sequence[Deletion]) -> None:
    """Append ``plan`` to the retention record at ``path`` (atomically, durably): also how
    ``rmq-spark recover --accept-missing`` records a lost prefix (reason ``lost``)."""
    deleted_below, deletions = _load_record(path)
    for deletion in plan:
        entry = asdict(deletion)
        del entry["lost_by"]
        deletions.append(entry)
        deleted_below = max(deleted_below, deletion.end_offset)
    body = {
        "version": _VERSION,
        "deleted_below": deleted_below,
        "deletions": deletions[-RECORD_MAX_DELETIONS:],
    }
    try:
        make_dirs_durably(path.parent)
        write_file_atomically(path, (json.dumps(body, indent=1) + "\n").encode("utf-8"))
    except OSError as err:
        raise StoreIOError(f"{path}: cannot record the deletion, none done: {err}") from err


def _load_record(path: Path) -> tuple[int, list[dict[str, object]]]:
    """``(deleted_below, deletions)`` of the record at ``path``; ``(0, [])`` if none yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0, []
    except OSError as err:
        raise StoreIOError(f"{path}: cannot read the retention record: {err}") from err
    try:
        body = json.loads(text)
    except ValueError as err:
        raise StoreMetadataError(str(path), f"not JSON ({err})") from None
    if (
        not isinstance(body, dict)
        or body.get("version") != _VERSION
        or not isinstance(body.get("deleted_below"), int)
        or not isinstance(body.get("deletions"), list)
    ):
        raise StoreMetadataError(str(path), f"not a version {_VERSION} retention record")
    return int(body["deleted_below"]), list(body["deletions"])


def _log_deletion(deletion: Deletion, path: Path, ratio: float, config: StoreConfig) -> None:
    span = f"[{deletion.base_offset}, {deletion.end_offset})"
    if deletion.reason == "expired":
        _log.info("retention deleted %s %s (expired)", path, span)
    elif deletion.reason == "disk_full":
        _log.warning(
            "retention deleted %s %s: disk %.1f%% full, above disk_max_used_space_ratio %s "
            "(every reader had processed it)",
            path,
            span,
            ratio * 100,
            config.disk_max_used_space_ratio,
        )
    else:
        lost = ", ".join(f"{name!r}: {count} bytes" for name, count in deletion.lost_by)
        _log.error(
            "retention FORCE-DELETED %s %s holding data readers had not processed (%s): disk "
            "%.1f%% full, above disk_emergency_used_space_ratio %s; recorded in %s",
            path,
            span,
            lost,
            ratio * 100,
            config.disk_emergency_used_space_ratio,
            RETENTION_FILE,
        )
