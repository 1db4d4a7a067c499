"""Per-queue starting and ending positions of the ``rocketmq`` source (Kafka's per-partition
``startingOffsets`` / ``endingOffsets`` / ``startingOffsetsByTimestamp`` JSON).

The source's offsets stay physical (one ``{"physical_offset": N}`` for the whole log); a
queue offset is translated through the store's ConsumeQueue, ``consumequeue/<topic>/<queue>/
<20-digit byte offset>`` files of 20-byte units (CommitLog offset, size, tags code; docs/
FORMAT.md 6), read here with ``pread`` only (never written, locked or deleted: a broker may
own them). A query then reads the physical range that covers every queue's position and
drops, in ``read``, the rows of a queue outside ``[its start, its end)`` by ``queue_offset``
(``QueueFilter``). Only the partitions below ``QueueFilter.below`` need that filter.

Does not own option syntax (``options.py``) nor partitioning and reading (``partitions.py``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import DataLossError, SourceError
from rmq_spark.spark import planner
from rmq_spark.spark.options import (
    EARLIEST_QUEUE_OFFSET,
    LATEST_QUEUE_OFFSET,
    EndingMode,
    SourceOptions,
    StartingMode,
)
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.layout import CQ_UNIT_SIZE_BYTES
from rmq_spark.store.view import StoreView

__all__ = ["QueueFilter", "QueueIndex", "apply_filter", "queue_end", "queue_filter", "queue_start"]

_UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_PRE_BLANK_SIZE = 0x7FFFFFFF  # RocketMQ's filler unit before a queue that starts past 0
_NO_LIMIT = 1 << 62


class QueueIndex:
    """One queue's ConsumeQueue files, read-only: units ``[min_offset, max_offset)``."""

    def __init__(self, directory: Path, log_min_offset: int) -> None:
        self.directory = directory
        names = sorted(n for n in os.listdir(directory) if n.isdigit())
        self._files = [(int(n) // CQ_UNIT_SIZE_BYTES, directory / n) for n in names]
        self.max_offset = self._files[0][0] if self._files else 0
        for base, path in self._files[-2:]:  # RocketMQ's recover: the valid prefix
            units = self._units_of(path)
            bad = np.flatnonzero((units["phys"] < 0) | (units["size"] <= 0))
            count = int(bad[0]) if len(bad) else len(units)
            if count:
                self.max_offset = base + count
        self.min_offset = self.max_offset
        for base, path in self._files:  # RocketMQ's minLogicOffset: first unit still in the log
            units = self._units_of(path)[: max(0, self.max_offset - base)]
            live = (units["phys"] >= log_min_offset) & (units["size"] > 0)
            hits = np.flatnonzero(live & (units["size"] != _PRE_BLANK_SIZE))
            if len(hits):
                self.min_offset = base + int(hits[0])
                break

    @staticmethod
    def _units_of(path: Path) -> np.ndarray:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # deleted by retention since listed: no unit left in it
            data = b""
        return np.frombuffer(data[: len(data) - len(data) % CQ_UNIT_SIZE_BYTES], _UNIT_DTYPE)

    def unit(self, queue_offset: int) -> tuple[int, int] | None:
        """(CommitLog offset, size) of a written unit; ``None`` outside the files."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        for base, path in reversed(self._files):
            if base <= queue_offset:
                try:
                    with path.open("rb") as handle:
                        handle.seek((queue_offset - base) * CQ_UNIT_SIZE_BYTES)
                        raw = handle.read(CQ_UNIT_SIZE_BYTES)
                except FileNotFoundError:
                    return None  # deleted by retention since listed
                if len(raw) < CQ_UNIT_SIZE_BYTES:
                    return None
                unit = np.frombuffer(raw, dtype=_UNIT_DTYPE)[0]
                return int(unit["phys"]), int(unit["size"])
        return None

    def lower_bound(self, queue_offset: int, view: StoreView) -> int:
        """A physical offset at or before the record ``queue_offset`` of this queue, past
        every record of the queue before it (so a read from there, filtered by queue offset,
        sees all of the queue from ``queue_offset``)."""
        found = self.unit(queue_offset)
        if found is not None:
            return found[0]
        before = self.unit(queue_offset - 1)
        if before is not None:
            return before[0] + before[1]  # the next record of the queue is further on
        return view.min_offset

    def first_stored_at(self, view: StoreView, timestamp_ms: int) -> int | None:
        """The first queue offset stored at or after ``timestamp_ms``; ``None`` if none
        (binary search over units: store times grow along the log)."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            unit = self.unit(middle)
            stamp = planner.store_time_at(view, unit[0]) if unit is not None else None
            if stamp is None or stamp < timestamp_ms:
                low = middle + 1
            else:
                high = middle
        return low if low < self.max_offset else None


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Rows of a named queue outside ``[low, high)`` (queue offsets; high -1: no end) are
    dropped in ``read``; partitions starting at or past ``below`` (physical) need no filter
    for starts (ending filters set ``below`` past any offset)."""

    entries: tuple[tuple[str, int, int, int], ...]  # (topic, queue id, low, high)
    below: int


def _queues(view: StoreView, options: SourceOptions) -> dict[tuple[str, int], QueueIndex]:
    root = view.store_dir / CONSUME_QUEUE_DIR
    try:
        topics = sorted(n for n in os.listdir(root) if (root / n).is_dir())
    except FileNotFoundError:
        topics = []
    if options.topics:
        topics = [t for t in topics if t in options.topics]
    elif options.topic_pattern:
        topics = [t for t in topics if re.fullmatch(options.topic_pattern, t)]
    found: dict[tuple[str, int], QueueIndex] = {}
    for topic in topics:
        for name in os.listdir(root / topic):
            if name.isdigit():
                found[(topic, int(name))] = QueueIndex(root / topic / name, view.min_offset)
    return found


def _check_named(
    queues: dict[tuple[str, int], QueueIndex], named: set[tuple[str, int]], option: str
) -> None:
    missing = sorted(set(queues) - named)
    if missing:
        listed = ", ".join(f"{t}/{q}" for t, q in missing[:10])
        raise SourceError(
            f"option {option} gives no position for queue(s) {listed} of its topics; as in "
            "Kafka's per-partition JSON, name every queue (-2 earliest, -1 latest)"
        )


def _start_offsets(
    view: StoreView, options: SourceOptions, queues: dict[tuple[str, int], QueueIndex], strict: bool
) -> dict[tuple[str, int], int]:
    """Queue offset where each named queue starts (-2 stands for the queue's start)."""
    starts: dict[tuple[str, int], int] = {}
    for topic, queue_id, value in options.starting_queues:
        starts[(topic, queue_id)] = value
    for topic, queue_id, stamp in options.starting_queue_times:
        index = queues.get((topic, queue_id))
        found = index.first_stored_at(view, stamp) if index is not None else None
        if found is None and index is not None and options.timestamp_strategy_latest:
            found = index.max_offset
        if found is None:
            if strict:
                raise SourceError(
                    f"startingOffsetsByTimestamp: queue {topic}/{queue_id} has no message "
                    f"stored at or after {stamp} "
                    "(startingOffsetsByTimestampStrategy=latest starts such queues at their end)"
                )
            found = index.max_offset if index is not None else 0
        starts[(topic, queue_id)] = found
    if strict:
        option = "startingOffsetsByTimestamp" if options.starting_queue_times else "startingOffsets"
        _check_named(queues, set(starts), option)
    return starts


def _end_offsets(
    view: StoreView, options: SourceOptions, queues: dict[tuple[str, int], QueueIndex]
) -> dict[tuple[str, int], int]:
    """Queue offset (exclusive) where each named queue ends; -1: the latest. By timestamp:
    the first message stored at or after it, or the latest if there is none (Kafka's rule)."""
    ends = {(topic, queue_id): value for topic, queue_id, value in options.ending_queues}
    for topic, queue_id, stamp in options.ending_queue_times:
        index = queues.get((topic, queue_id))
        found = index.first_stored_at(view, stamp) if index is not None else None
        ends[(topic, queue_id)] = LATEST_QUEUE_OFFSET if found is None else found
    return ends


def _checked_start(
    key: tuple[str, int], value: int, index: QueueIndex | None, strict: bool, fail: bool
) -> int:
    assert value != LATEST_QUEUE_OFFSET, "refused by options.py (not replayable)"
    name = f"{key[0]}/{key[1]}"
    if index is None and strict and value > 0:
        raise SourceError(f"startingOffsets: queue {name} has no ConsumeQueue in the store")
    if index is None or value == EARLIEST_QUEUE_OFFSET:
        return 0 if value == EARLIEST_QUEUE_OFFSET else value
    if strict and value > index.max_offset:
        raise SourceError(
            f"startingOffsets queue {name} offset {value} is past the queue's end "
            f"(it holds [{index.min_offset}, {index.max_offset}))"
        )
    if value < index.min_offset and strict and fail:
        raise DataLossError(
            value, index.min_offset, f"queue offsets of {name} (startingOffsets) were deleted"
        )
    return value


def queue_filter(view: StoreView, options: SourceOptions, *, strict: bool) -> QueueFilter | None:
    """The per-queue filter of ``options`` (``None`` without per-queue positions).

    ``strict`` (a query's first start): unnamed queues, positions past a queue's end, and
    (with ``failOnDataLoss``) deleted positions fail; otherwise (planning a later batch)
    they are clamped, so a restart does not fail on what retention deleted meanwhile.
    """
    starting = options.starting_mode is StartingMode.QUEUES
    ending = options.ending_mode is EndingMode.QUEUES
    if not starting and not ending:
        return None
    queues = _queues(view, options)
    lows: dict[tuple[str, int], int] = {}
    below = view.min_offset
    if starting:
        for key, value in _start_offsets(view, options, queues, strict).items():
            index = queues.get(key)
            low = _checked_start(key, value, index, strict, options.fail_on_data_loss)
            lows[key] = low
            if low > 0 and index is not None:
                below = max(below, index.lower_bound(low, view))
            elif low > 0:
                below = _NO_LIMIT  # a queue with no files yet: filter every partition
    ends = _end_offsets(view, options, queues) if ending else {}
    highs = {key: value for key, value in ends.items() if value != LATEST_QUEUE_OFFSET}
    if ending:
        below = _NO_LIMIT
        if strict:
            _check_named(queues, set(ends), "endingOffsets")
    keys = sorted(k for k in set(lows) | set(highs) if lows.get(k, 0) > 0 or k in highs)
    entries = tuple((t, q, lows.get((t, q), 0), highs.get((t, q), -1)) for t, q in keys)
    return QueueFilter(entries, below)


def queue_start(view: StoreView, options: SourceOptions, end: int) -> int:
    """The physical offset a query with per-queue starts reads from: the lowest position of
    a named queue (a record boundary), within ``[view.min_offset, end]``.

    Raises
    ------
    SourceError
        A queue of the subscribed topics not named, a position past a queue's end, a named
        queue the store does not have, no message at or after a queue's timestamp.
    DataLossError
        A position deleted by retention, with ``failOnDataLoss``.
    """
    queues = _queues(view, options)
    bounds = [end]
    for key, value in _start_offsets(view, options, queues, strict=True).items():
        index = queues.get(key)
        low = _checked_start(key, value, index, True, options.fail_on_data_loss)
        if index is not None:  # (a queue with no files yet has its records further on)
            bounds.append(index.lower_bound(max(low, index.min_offset), view))
    return max(view.min_offset, min(bounds))


def queue_end(view: StoreView, options: SourceOptions, start: int, end: int) -> int:
    """The physical end of a batch with per-queue ``endingOffsets``: past the last record
    every queue reads (``end`` when a queue reads to the latest)."""
    queues = _queues(view, options)
    ends = _end_offsets(view, options, queues)
    _check_named(queues, set(ends), "endingOffsets")
    stop = start
    for (topic, queue_id), value in ends.items():
        index = queues.get((topic, queue_id))
        if value == LATEST_QUEUE_OFFSET:
            stop = max(stop, end)
            continue
        if index is None or value <= index.min_offset:
            continue  # nothing of this queue is read
        if value > index.max_offset:
            raise SourceError(
                f"endingOffsets queue {topic}/{queue_id} offset {value} is past the queue's "
                f"end (it holds [{index.min_offset}, {index.max_offset}))"
            )
        last = index.unit(value - 1)
        if last is None:
            continue
        if last[0] + last[1] > end:
            raise SourceError(
                f"endingOffsets queue {topic}/{queue_id} offset {value} is not readable yet "
                f"(its record ends at {last[0] + last[1]}, the readable end is {end})"
            )
        stop = max(stop, last[0] + last[1])
    return stop


def apply_filter(
    batch: pa.RecordBatch, entries: tuple[tuple[str, int, int, int], ...]
) -> pa.RecordBatch:
    """``batch`` without the rows of a named queue outside its ``[low, high)``."""
    if not entries or batch.num_rows == 0:
        return batch
    topic, queue_id = batch.column("topic"), batch.column("queue_id")
    queue_offset = batch.column("queue_offset")
    drop = pa.array(np.zeros(batch.num_rows, dtype=bool))
    for name, queue, low, high in entries:
        outside = pc.less(queue_offset, low)
        if high >= 0:
            outside = pc.or_(outside, pc.greater_equal(queue_offset, high))
        here = pc.and_(pc.equal(topic, name), pc.equal(queue_id, queue))
        drop = pc.or_(drop, pc.and_(here, outside))
    return batch.filter(pc.invert(drop))
