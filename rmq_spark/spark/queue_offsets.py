"""Per-queue starting and ending positions of the ``rocketmq`` source (Kafka's per-partition
``startingOffsets`` / ``endingOffsets`` / ``startingOffsetsByTimestamp`` JSON).

The source's offsets stay physical (one ``{"physical_offset": N}`` for the whole log); a
queue offset is translated through the store's ConsumeQueue, read with ``store.cq_view.CqView``
(``pread`` only: a broker may own the files), from the first unit whose record is still in
the log. A query then reads the physical range that covers every queue's position and
drops, in ``read``, the rows of a queue outside ``[its start, its end)`` by ``queue_offset``
(``QueueFilter``). Only the partitions below ``QueueFilter.below`` need that filter.

Does not own option syntax (``options.py``) nor partitioning and reading (``partitions.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rmq_spark.errors import DataLossError, SourceError
from rmq_spark.spark import planner
from rmq_spark.spark.options import (
    EARLIEST_QUEUE_OFFSET,
    LATEST_QUEUE_OFFSET,
    EndingMode,
    SourceOptions,
    StartingMode,
)
from rmq_spark.store.cq_view import CqView, queue_dirs, queue_topics
from rmq_spark.store.view import StoreView

__all__ = ["QueueFilter", "apply_filter", "queue_end", "queue_filter", "queue_start"]

_NO_LIMIT = 1 << 62


def _lower_bound(queue: CqView, queue_offset: int, view: StoreView) -> int:
    """A physical offset at or before the record ``queue_offset`` of this queue, past every
    record of the queue before it (so a read from there, filtered by queue offset, sees all
    of the queue from ``queue_offset``)."""
    found = queue.unit(queue_offset)
    if found is not None:
        return found[0]
    before = queue.unit(queue_offset - 1)
    if before is not None:
        return before[0] + before[1]  # the next record of the queue is further on
    return view.min_offset


def _first_stored_at(queue: CqView, view: StoreView, timestamp_ms: int) -> int | None:
    """The first queue offset stored at or after ``timestamp_ms``; ``None`` if none."""
    found = queue.offset_for_time(timestamp_ms, lambda at: planner.store_time_at(view, at))
    return found if found < queue.max_offset else None


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Rows of a named queue outside ``[low, high)`` (queue offsets; high -1: no end) are
    dropped in ``read``; partitions starting at or past ``below`` (physical) need no filter
    for starts (ending filters set ``below`` past any offset)."""

    entries: tuple[tuple[str, int, int, int], ...]  # (topic, queue id, low, high)
    below: int


def _queues(view: StoreView, options: SourceOptions) -> dict[tuple[str, int], CqView]:
    topics = queue_topics(view.store_dir)
    if options.topics:
        topics = [t for t in topics if t in options.topics]
    elif options.topic_pattern:
        topics = [t for t in topics if re.fullmatch(options.topic_pattern, t)]
    return {
        (topic, queue_id): CqView.open(directory, view.min_offset)
        for topic in topics
        for queue_id, directory in queue_dirs(view.store_dir, topic).items()
    }


def _check_named(
    queues: dict[tuple[str, int], CqView], named: set[tuple[str, int]], option: str
) -> None:
    missing = sorted(set(queues) - named)
    if missing:
        listed = ", ".join(f"{t}/{q}" for t, q in missing[:10])
        raise SourceError(
            f"option {option} gives no position for queue(s) {listed} of its topics; as in "
            "Kafka's per-partition JSON, name every queue (-2 earliest, -1 latest)"
        )


def _start_offsets(
    view: StoreView, options: SourceOptions, queues: dict[tuple[str, int], CqView], strict: bool
) -> dict[tuple[str, int], int]:
    """Queue offset where each named queue starts (-2 stands for the queue's start)."""
    starts: dict[tuple[str, int], int] = {}
    for topic, queue_id, value in options.starting_queues:
        starts[(topic, queue_id)] = value
    for topic, queue_id, stamp in options.starting_queue_times:
        index = queues.get((topic, queue_id))
        found = _first_stored_at(index, view, stamp) if index is not None else None
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
    view: StoreView, options: SourceOptions, queues: dict[tuple[str, int], CqView]
) -> dict[tuple[str, int], int]:
    """Queue offset (exclusive) where each named queue ends; -1: the latest. By timestamp:
    the first message stored at or after it, or the latest if there is none (Kafka's rule)."""
    ends = {(topic, queue_id): value for topic, queue_id, value in options.ending_queues}
    for topic, queue_id, stamp in options.ending_queue_times:
        index = queues.get((topic, queue_id))
        found = _first_stored_at(index, view, stamp) if index is not None else None
        ends[(topic, queue_id)] = LATEST_QUEUE_OFFSET if found is None else found
    return ends


def _checked_start(
    key: tuple[str, int], value: int, index: CqView | None, strict: bool, fail: bool
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
                below = max(below, _lower_bound(index, low, view))
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
            bounds.append(_lower_bound(index, max(low, index.min_offset), view))
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
    import pyarrow.compute as pc  # here, not at the top: an executor's work, not planning's

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
