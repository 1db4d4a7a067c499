"""``ConsumeQueues``: every ConsumeQueue of a store, and the live view consumers read each
through (``view``: a ``cq_view.CqView`` over the writer's files, whose end moves as units are
dispatched; the reading and the searches are the view's).

Owns the ``(topic, queue_id) -> CqQueueFiles`` table, the rule for placing units (a unit goes
at its record's QUEUEOFFSET; one already there pointing at the same record is kept; one
pointing elsewhere is corruption), the dispatched offset and who waits for it, flushing
(and the ``config/consume_queue.json`` record), and deleting files retention made useless
(RocketMQ ``CleanConsumeQueueService``). Does not read the CommitLog (``cq_dispatch.py``)
nor reconcile with it at open (``cq_recovery.py``).

Thread model: one lock guards the table and every file; the dispatch thread writes under
it, consumers' threads read under it (a read is one ``pread``); the periodic fsyncs run on
duplicated descriptors outside it, so no reader waits for the disk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from rmq_spark.errors import ConsumeQueueCorruptError
from rmq_spark.store.consume_queue import PRE_BLANK_UNIT, UNIT, CqUnit, first_live, units_of
from rmq_spark.store.cq_files import (
    CONSUME_QUEUE_DIR,
    CqQueueFiles,
    write_flushed_record,
)
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.fileio import make_dirs_durably

__all__ = ["ConsumeQueues", "QueueKey", "UnitEntry"]

QueueKey = tuple[str, int]
UnitEntry = tuple[int, int, int, int]
"""``(queue_offset, physical_offset, size, tags_code)`` of one unit to place."""
Listener = Callable[[set[QueueKey]], None]

_UNIT = UNIT
_READ_BLOCK_UNITS = 4096
_PRE_BLANK = _UNIT.pack(PRE_BLANK_UNIT.physical_offset, PRE_BLANK_UNIT.size, 0)
_log = logging.getLogger(__name__)


class ConsumeQueues:
    """The ConsumeQueues under ``<root>/consumequeue`` (``MessageStore.consume_queues``).

    Queue offsets are unit indexes: unit ``n`` of a queue is the record whose QUEUEOFFSET is
    ``n``. Reads see only units of records the store has acknowledged (the dispatcher runs
    behind ``MessageStore.confirmed_offset``).
    """

    def __init__(self, root_dir: Path, file_units: int) -> None:
        self.root_dir = root_dir
        self.directory = root_dir / CONSUME_QUEUE_DIR
        self.file_units = file_units
        self._queues: dict[QueueKey, CqQueueFiles] = {}
        self._views: dict[QueueKey, CqView] = {}
        self._lock = threading.Lock()
        self._empty = CqView(CqQueueFiles(self.directory / "-" / "-1", file_units))
        self._dispatched_changed = threading.Condition(threading.Lock())
        self._dispatched = 0
        self._listeners: list[Listener] = []
        self.flushed_offset = 0
        """Every unit of a record below this CommitLog offset is fsynced (and recorded)."""
        self.failure: BaseException | None = None
        """Why dispatching stopped, if it did (logged at ERROR)."""

    @classmethod
    def load(cls, root_dir: Path, file_units: int) -> ConsumeQueues:
        """Open every queue under ``<root>/consumequeue`` (RocketMQ's rule: each directory
        is a topic, each directory in it named by an int is a queue; others are skipped).

        Raises
        ------
        ConsumeQueueCorruptError
            A queue's files are misnamed, of the wrong size, or have a gap.
        """
        queues = cls(root_dir, file_units)
        if not queues.directory.is_dir():
            return queues
        try:
            for topic_entry in sorted(os.scandir(queues.directory), key=lambda e: e.name):
                if not topic_entry.is_dir():
                    continue
                for queue_entry in sorted(os.scandir(topic_entry.path), key=lambda e: e.name):
                    if queue_entry.is_dir() and queue_entry.name.isdigit():
                        key = (topic_entry.name, int(queue_entry.name))
                        files = CqQueueFiles.load(Path(queue_entry.path), file_units)
                        queues._add(key, files)
        except BaseException:
            queues.close()
            raise
        return queues

    # --- the read API -------------------------------------------------------------------------

    def view(self, topic: str, queue_id: int) -> CqView:
        """The queue as its readers see it, live: a ``CqView`` over the writer's files, read
        under this table's lock (an empty view for a queue without units; ask again later,
        it is not the queue's once one is created)."""
        return self._views.get((topic, queue_id)) or self._empty

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``view(topic, queue_id).min_offset``: the first queue offset still readable."""
        return self.view(topic, queue_id).min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        """``view(...).max_offset``: the next queue offset to be dispatched."""
        return self.view(topic, queue_id).max_offset

    def units(self, topic: str, queue_id: int, start: int, max_count: int) -> list[CqUnit]:
        """``view(topic, queue_id).cq_units(start, max_count)``."""
        return self.view(topic, queue_id).cq_units(start, max_count)

    def offset_for_time(
        self, topic: str, queue_id: int, timestamp_ms: int, store_timestamp_of: Callable[[int], int]
    ) -> int:
        """``view(topic, queue_id).offset_for_time(timestamp_ms, store_timestamp_of)``."""
        return self.view(topic, queue_id).offset_for_time(timestamp_ms, store_timestamp_of)

    def queues(self) -> dict[str, list[int]]:
        """Every topic with a ConsumeQueue and its queue ids, ascending."""
        result: dict[str, list[int]] = {}
        with self._lock:
            keys = sorted(self._queues)
        for topic, queue_id in keys:
            result.setdefault(topic, []).append(queue_id)
        return result

    @property
    def dispatched_offset(self) -> int:
        """Every record below this CommitLog offset has its unit (if it gets one)."""
        return self._dispatched

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(grown)`` from the dispatch thread after each round that placed units,
        with the ``(topic, queue_id)`` pairs that grew. ``fn`` must be quick; an exception
        it raises is logged."""
        self._listeners.append(fn)

    def wait_dispatched(self, commitlog_offset: int, timeout_s: float) -> bool:
        """Block until ``dispatched_offset >= commitlog_offset``; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._dispatched_changed:
            while self._dispatched < commitlog_offset:
                left = deadline - time.monotonic()
                if left <= 0 or self.failure is not None:
                    return self._dispatched >= commitlog_offset
                self._dispatched_changed.wait(left)
            return True

    # --- placing units (the dispatcher and recovery) -----------------------------------------

    def place(self, batch: Mapping[QueueKey, Sequence[UnitEntry]], *, fill_gaps: bool) -> None:
        """Write each queue's units at their queue offsets, in order.

        A unit below ``max_offset`` must point at the same physical offset as the one there
        (a re-dispatch: kept). A unit past ``max_offset`` leaves a gap: with ``fill_gaps``
        it is filled with pre-blank units (a queue whose earlier records are gone: the
        queue's ``min_offset`` moves past them), otherwise the units are missing although
        they were flushed.

        Raises
        ------
        ConsumeQueueCorruptError
            A unit there points elsewhere; a gap without ``fill_gaps``.
        OSError
            A write failed.
        """
        with self._lock:
            for key, entries in batch.items():
                queue = self._queues.get(key)
                if queue is None:
                    directory = self.directory / key[0] / str(key[1])
                    queue = self._add(key, CqQueueFiles(directory, self.file_units))
                self._place(key, queue, entries, fill_gaps)

    def _place(
        self, key: QueueKey, queue: CqQueueFiles, entries: Sequence[UnitEntry], fill_gaps: bool
    ) -> None:
        end = queue.max_offset
        _check_existing(queue, [entry for entry in entries if entry[0] < end])
        empty = end == 0 and not queue.bases
        if empty and entries and entries[0][0] > 0:
            # A queue that starts past offset 0: its first file is the one holding the first
            # unit, pre-blank up to it (RocketMQ's firstCreateInQueue).
            end = queue.base_of(entries[0][0])
            queue.min_offset = entries[0][0]
        run = bytearray()
        run_start = end
        for index, physical_offset, size, tags_code in entries:
            if index < end:
                continue
            if index > end:
                if not fill_gaps:
                    path, position = queue.where(end)
                    raise ConsumeQueueCorruptError(
                        path, position,
                        f"units {end}..{index - 1} of {key[0]}/{key[1]} are missing below the "
                        "flushed offset (delete consumequeue/ to rebuild it)",
                    )  # fmt: skip
                if not empty:
                    _log.error("ConsumeQueue %s/%d: queue offsets %d..%d never dispatched",
                               key[0], key[1], end, index - 1)  # fmt: skip
                run += _PRE_BLANK * (index - end)
            run += _UNIT.pack(physical_offset, size, tags_code)
            end = index + 1
            empty = False
        if run:
            queue.write(run_start, bytes(run))
            queue.max_offset = end

    def place_runs(self, runs: Mapping[QueueKey, Sequence[tuple[int, int, list[bytes]]]]) -> None:
        """``place`` (with ``fill_gaps``) of units already packed: per queue, runs of
        ``(first queue offset, count, pieces of packed units)``. A run that starts at the
        queue's end is written as it is (the live path); any other goes through ``place``'s
        checks unit by unit. Raises as ``place`` does."""
        with self._lock:
            for key, key_runs in runs.items():
                queue = self._queues.get(key)
                if queue is None:
                    directory = self.directory / key[0] / str(key[1])
                    queue = self._add(key, CqQueueFiles(directory, self.file_units))
                for first, count, pieces in key_runs:
                    data = b"".join(pieces)
                    if first == queue.max_offset and (queue.bases or first == 0):
                        queue.write(first, data)
                        queue.max_offset = first + count
                        continue
                    entries = [
                        (first + i, *_UNIT.unpack_from(data, i * _UNIT.size)) for i in range(count)
                    ]
                    self._place(key, queue, cast("list[UnitEntry]", entries), True)

    def set_dispatched(self, offset: int, grown: set[QueueKey]) -> None:
        """Publish a finished round: wake waiters, then tell listeners what grew."""
        with self._dispatched_changed:
            self._dispatched = max(self._dispatched, offset)
            self._dispatched_changed.notify_all()
        if grown:
            for listener in list(self._listeners):
                try:
                    listener(grown)
                except Exception:  # noqa: BLE001 - a consumer's hook must not stop dispatch
                    _log.exception("ConsumeQueue listener %r failed", listener)

    def fail(self, error: BaseException) -> None:
        """Dispatching stopped: record why and wake every waiter."""
        self.failure = error
        with self._dispatched_changed:
            self._dispatched_changed.notify_all()

    def _add(self, key: QueueKey, queue: CqQueueFiles) -> CqQueueFiles:
        self._queues[key] = queue
        self._views[key] = CqView(queue, self._lock)
        return queue

    # --- queue maintenance ------------------------------------------------------------------

    def items(self) -> list[tuple[QueueKey, CqQueueFiles]]:
        with self._lock:
            return list(self._queues.items())

    def truncate(self, key: QueueKey, index: int) -> None:
        """Make ``index`` the end of queue ``key`` (recovery; raises ``OSError``)."""
        with self._lock:
            self._queues[key].truncate_to(index)

    def flush(self) -> None:
        """fsync what was dispatched so far, then record it in ``config/consume_queue.json``
        (raises ``OSError``). The offset is read first: the fsyncs cover its units."""
        dispatched = self._dispatched
        if dispatched <= self.flushed_offset:
            return
        with self._lock:  # fsyncs run outside it: readers and the dispatcher do not wait
            taken = [(queue, queue.take_dirty()) for queue in self._queues.values()]
        try:
            for _queue, files in taken:
                for _base, fd in files:
                    os.fsync(fd)
        except OSError:
            with self._lock:
                for queue, files in taken:
                    queue.mark_dirty([base for base, _fd in files])
            raise
        finally:
            for _queue, files in taken:
                for _base, fd in files:
                    os.close(fd)
        make_dirs_durably(self.directory)  # a record implies the directory (see recovery)
        write_flushed_record(self.root_dir, dispatched)
        self.flushed_offset = dispatched

    def delete_below(self, min_physical_offset: int) -> list[Path]:
        """Delete each queue's oldest files whose last unit points below
        ``min_physical_offset`` (never a queue's last file), then move each ``min_offset``
        to its first unit at or above it. Returns the deleted paths (raises ``OSError``)."""
        deleted: list[Path] = []
        with self._lock:
            for queue in self._queues.values():
                while len(queue.bases) > 1:
                    last = queue.units(queue.bases[1] - 1, 1)
                    if not last or last[0].physical_offset >= min_physical_offset:
                        break
                    deleted.append(queue.delete_oldest_file())
                correct_min_offset(queue, min_physical_offset)
        for path in deleted:
            _log.info("retention deleted ConsumeQueue file %s", path)
        return deleted

    def close(self) -> None:
        with self._lock:
            for queue in self._queues.values():
                queue.close()
            self._queues.clear()
            self._views.clear()


def correct_min_offset(queue: CqQueueFiles, min_physical_offset: int) -> None:
    """``min_offset`` := the first unit pointing at or above ``min_physical_offset``
    (RocketMQ ``correctMinOffset``; pre-blank units never count)."""
    index, end = queue.min_offset, queue.max_offset
    while index < end:
        take = min(end, queue.base_of(index) + queue.file_units, index + _READ_BLOCK_UNITS) - index
        units = units_of(queue.read(index, take))
        found = first_live(units, min_physical_offset)
        if found < len(units) or len(units) < take:
            index += found
            break
        index += take
    queue.min_offset = min(index, end)


def _check_existing(queue: CqQueueFiles, entries: Sequence[UnitEntry]) -> None:
    """Raise unless every unit already at these entries' queue offsets points at the same
    record (one read for the whole range)."""
    if not entries:
        return
    low = entries[0][0]
    data = queue.read(low, entries[-1][0] + 1 - low)
    for index, physical_offset, _size, _tags in entries:
        position = (index - low) * _UNIT.size
        there = _UNIT.unpack_from(data, position)[0] if position < len(data) else None
        if there != physical_offset:
            path, at = queue.where(index)
            raise ConsumeQueueCorruptError(
                path, at,
                f"unit {index} points at physical offset {there}, but the CommitLog record "
                f"with that queue offset is at {physical_offset}",
            )  # fmt: skip
