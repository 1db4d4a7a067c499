"""Retention: which of the oldest segments may be deleted (spec 5.5, ``CleanCommitLogService``).

Owns the decision, not the deletion (``CommitLog.delete_oldest``). A segment is expired when
``file_reserved_time_hours`` have passed since it stopped being written. RocketMQ reads the
file's mtime; this store uses the STORETIMESTAMP of the first record of the *next* segment
(written right after this one filled up), so that the decision follows the store's ``Clock``
and a test with a ``ManualClock`` controls it. When the disk holding the store is fuller than
``disk_max_used_space_ratio``, the oldest segments are deleted whether expired or not. Either
way: oldest first, at most ``delete_file_batch_max`` per round, stopping at the first
segment that may not go, and never the last segment (the one being written).

Differences from RocketMQ: no ``deleteWhen`` hour (expired segments go at the next round),
one disk ratio instead of three (clean / forced clean / refuse writes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["deletable_segment_count", "disk_used_ratio"]

_MS_PER_HOUR = 3_600_000


def deletable_segment_count(
    closed_at_ms: Sequence[int | None],
    now_ms: int,
    *,
    file_reserved_time_hours: int,
    disk_full: bool,
    delete_file_batch_max: int,
) -> int:
    """How many of the oldest segments to delete now.

    Parameters
    ----------
    closed_at_ms
        For every segment but the last, oldest first: when it stopped being written (store
        timestamp of the next segment's first record), or ``None`` if unknown (kept).
    now_ms
        The store clock's now.
    file_reserved_time_hours
        Keep a segment this long after it was closed.
    disk_full
        The disk is above ``disk_max_used_space_ratio``: delete regardless of age.
    delete_file_batch_max
        Upper bound for one round.

    Examples
    --------
    >>> deletable_segment_count([0, 10, 7_200_000], 3_600_000, file_reserved_time_hours=1,
    ...                         disk_full=False, delete_file_batch_max=10)
    2
    """
    reserved_ms = file_reserved_time_hours * _MS_PER_HOUR
    count = 0
    for closed_at in closed_at_ms:
        if count >= delete_file_batch_max:
            break
        expired = closed_at is not None and closed_at + reserved_ms <= now_ms
        if not (expired or disk_full):
            break
        count += 1
    return count


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the file system holding ``path`` (0.0 .. 1.0)."""
    stat = os.statvfs(path)
    if stat.f_blocks == 0:
        return 0.0
    return (stat.f_blocks - stat.f_bfree) / stat.f_blocks
