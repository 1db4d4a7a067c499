"""Segment warming: zero-fill (write and fsync) the active segment ahead of the write position.

Owns the warming thread and the *writable limit* of the active segment. Does not own where
records go (``commitlog.py``) nor when puts are fsynced (``flush.py``).

Why: segments are preallocated with ``fallocate``, which on ext4 and XFS leaves *unwritten*
extents. The first write-back of a block in such an extent converts it, a metadata change,
so every SYNC group-commit ``fdatasync`` also commits the file system journal. On this
project's machine (ext4) that made the fdatasync of a few KB appended to a 1 GiB segment cost
260-300 us, against 130-150 us once the blocks had been written with zeros beforehand
(``bench/bench_put.py`` measures SYNC puts both ways). RocketMQ has the same remedy,
``warmMapedFileEnable``, which zero-fills a whole new file; here the zeros are written a
window ahead of the writer instead, so a fresh store does not wait for a 1 GiB zero-fill.

The zeros are written with ``pwrite`` in 64 KiB pieces: written in one big piece, the kernel
(6.x) caches the file in large folios, and the page-cache writes that follow cost 10x more,
and a memory-mapped write then dirties a whole large folio at a time.

Safety rule (the writer and the warmer never write the same bytes): the writer writes only
below ``Segment.limit``; the warmer writes zeros only at or above it, and raises it after
writing. Both change ``limit`` under ``lock``. When the writer needs more than the warmer has
done, it raises the limit itself (``CommitLog.segment_for_append``), and the bytes it took
are simply not warmed. Warming is an optimisation: a failure is logged and warming stops.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq_spark.store.commitlog import CommitLog

__all__ = ["SegmentWarmer", "WARM_PIECE_BYTES"]

_log = logging.getLogger(__name__)

WARM_PIECE_BYTES = 64 * 1024
"""Bytes per zero ``pwrite`` (see the module docstring: larger pieces make later writes slow)."""
_STEP_BYTES = 1 << 20  # zeros written (and fsynced) per step, the lock held while writing
_POLL_S = 0.005  # how often the thread looks at the write position


class SegmentWarmer:
    """Keeps the active segment of ``commitlog`` zero-filled ``ahead_bytes`` past its write
    position, from a daemon thread.

    Parameters
    ----------
    commitlog
        The store's ``CommitLog``; ``start`` attaches the warmer to it (``warm_lock``).
    ahead_bytes
        How far ahead of the write position to keep warm (> 0).
    """

    def __init__(self, commitlog: CommitLog, ahead_bytes: int) -> None:
        if ahead_bytes <= 0:
            raise ValueError(f"ahead_bytes: must be > 0, got {ahead_bytes}")
        self._commitlog = commitlog
        self._ahead = ahead_bytes
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.warmed_bytes = 0
        """Zero bytes written so far (for tests and benchmarks)."""

    def attach(self) -> None:
        """Take over the commit log's writable limit: the active segment's starts at its write
        position (the writer raises it until warming catches up). Puts must not run yet."""
        commitlog = self._commitlog
        with self.lock:
            active = commitlog.active
            if active is not None:
                active.limit = active.write_position
            commitlog.warm_lock = self.lock

    def start(self) -> None:
        """``attach``, then warm from a daemon thread until ``stop``."""
        self.attach()
        self._thread = threading.Thread(target=self._run, name="rmq-store-warmer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (before the segments are closed); idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None

    def _run(self) -> None:
        stop = self._stop
        while not stop.is_set():
            try:
                busy = self.warm_once()
            except Exception as err:  # an optimisation: never let it take the store down
                _log.warning("warming segments stopped: %s", err)
                self._give_up()
                return
            if not busy:
                stop.wait(_POLL_S)

    def warm_once(self) -> bool:
        """Warm one step of the active segment if it is behind its target; returns whether
        anything was written. Raises ``OSError`` when writing or syncing the zeros failed."""
        segment = self._commitlog.active
        if segment is None:
            return False
        with self.lock:
            if self._stop.is_set() or segment is not self._commitlog.active:
                return False
            start = segment.limit
            # Below half the window ahead, warm a whole step: few, large fsyncs.
            if start >= segment.size_bytes or start - segment.write_position >= self._ahead // 2:
                return False
            step = max(WARM_PIECE_BYTES, min(_STEP_BYTES, self._ahead // 2))
            end = min(segment.size_bytes, _align_up(start + 1, WARM_PIECE_BYTES) + step)
            segment.file.write_zeros(start, end - start, WARM_PIECE_BYTES)
            segment.limit = end
            self.warmed_bytes += end - start
        # Outside the lock: a writer that caught up need not wait for the disk. The fsync
        # makes the blocks written (extents converted) before records land in them.
        segment.file.sync_data()
        return True

    def _give_up(self) -> None:
        """Warming failed: let the writer use whole segments again."""
        with self.lock:
            self._commitlog.warm_lock = None
            active = self._commitlog.active
            if active is not None:
                active.limit = active.size_bytes


def _align_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit
