"""ConsumeQueue recovery at open: make every queue agree with the recovered CommitLog
(RocketMQ ``ConsumeQueue.recover``, ``truncateDirtyLogicFiles`` and the reput after
recovery; the rules are in docs/FORMAT.md 6.2).

Owns the order of the steps and what each one may change:

1. Each queue's valid prefix was found when its files were loaded (``CqQueueFiles.load``).
2. Every record from ``S`` to the end is dispatched again, where ``S`` is the flushed record
   (``config/consume_queue.json``: units of records below it were fsynced) or, without one
   or without ``consumequeue/``, the CommitLog's first offset (a full rebuild). A unit
   already at its queue offset must name the same record (kept); one naming another record,
   or a hole before a queue's first re-dispatched unit, is ``ConsumeQueueCorruptError``
   (file and position). A rebuild from the first offset fills holes with pre-blank units
   instead (a queue whose first records retention deleted).
3. A queue whose valid units still end before the CommitLog's next queue offset for it lost
   flushed units (a damaged unit inside a file ends the valid prefix early): corruption.
   Checks 2 and 3 run before anything is cut, so a refused open leaves the files as found.
4. Units pointing at or past the CommitLog's recovered end are cut (the records they named
   are gone), with the non-zero bytes after the prefix (a torn or lost tail); units past a
   queue's next queue offset name no record: cut when above ``S``, corruption below it.
5. ``min_offset`` moves to the first unit at or above the CommitLog's first offset; every
   file is fsynced and the flushed record says the end.

Does not read records itself (``cq_dispatch.collect_units``) nor own the files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rmq_spark.errors import ConsumeQueueCorruptError, StoreMetadataError
from rmq_spark.store.consume_queues import ConsumeQueues, QueueKey, correct_min_offset
from rmq_spark.store.cq_dispatch import Batch, collect_units
from rmq_spark.store.cq_files import CqQueueFiles, read_flushed_record
from rmq_spark.store.scan import SegmentSource

__all__ = ["CqRecovery", "recover_consume_queues"]

_BACKWARD_STEP_UNITS = 1024
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CqRecovery:
    """What ConsumeQueue recovery did: re-dispatched ``[start_offset, end_offset)``
    (``rebuilt``: from the CommitLog's first offset, no usable flushed record), cut
    ``truncated_units`` units in total."""

    start_offset: int
    end_offset: int
    rebuilt: bool
    truncated_units: int


def recover_consume_queues(
    queues: ConsumeQueues,
    segments: Sequence[SegmentSource],
    *,
    min_offset: int,
    end_offset: int,
    next_queue_offsets: Mapping[QueueKey, int],
    delay_levels_ms: tuple[int, ...],
) -> CqRecovery:
    """Reconcile ``queues`` with the recovered CommitLog ``[min_offset, end_offset)``.

    Raises
    ------
    ConsumeQueueCorruptError
        A unit below the flushed record contradicts the CommitLog, or units are missing.
    CorruptRecordError
        The CommitLog cannot be read up to ``end_offset`` (recovery said it could).
    OSError
        A write, fsync or unlink failed.
    """
    flushed = _flushed_record(queues)
    rebuilt = flushed is None or flushed <= min_offset
    start = min_offset if flushed is None else max(min_offset, min(flushed, end_offset))
    # Nothing is cut before every check has passed: a failed check leaves the files as found.
    if rebuilt and end_offset > start:
        _log.info(
            "ConsumeQueue rebuild: dispatching CommitLog [%d, %d) (%d bytes) into every queue",
            start, end_offset, end_offset - start,
        )  # fmt: skip

    def place(batch: Batch) -> None:
        queues.place(batch, fill_gaps=rebuilt)

    collected = collect_units(segments, start, end_offset, delay_levels_ms, sink=place)
    if collected.problem is not None:
        raise collected.problem
    place(collected.batch)
    if not rebuilt:
        for key, queue in queues.items():
            _check_complete(key, queue, next_queue_offsets.get(key, 0), start)
    truncated = 0
    for key, queue in queues.items():
        truncated += _cut_past(queues, key, queue, end_offset)
        truncated += _cut_unnamed(queues, key, queue, next_queue_offsets.get(key, 0), start)
        correct_min_offset(queue, min_offset)
    queues.set_dispatched(end_offset, set())
    queues.flushed_offset = 0
    queues.flush()
    report = CqRecovery(start, end_offset, rebuilt, truncated)
    if truncated or rebuilt or start < end_offset:
        _log.info("ConsumeQueue recovery: %s", report)
    return report


def _check_complete(key: QueueKey, queue: CqQueueFiles, next_offset: int, flushed: int) -> None:
    """Raise if the queue lacks units of records below the flushed offset (its valid units
    end before the CommitLog's next queue offset, and re-dispatch did not fill them)."""
    if queue.max_offset < next_offset:
        path, position = queue.where(queue.max_offset)
        raise ConsumeQueueCorruptError(
            path, position,
            f"{key[0]}/{key[1]}: units {queue.max_offset}..{next_offset - 1} are missing or "
            f"damaged below the flushed offset {flushed} (delete consumequeue/ to rebuild it)",
        )  # fmt: skip


def _flushed_record(queues: ConsumeQueues) -> int | None:
    if not queues.directory.is_dir():
        return None  # deleted to be rebuilt, or never written
    try:
        return read_flushed_record(queues.root_dir)
    except StoreMetadataError as err:
        _log.warning("%s: rebuilding every ConsumeQueue from the CommitLog", err)
        return None


def _cut_past(queues: ConsumeQueues, key: QueueKey, queue: CqQueueFiles, end: int) -> int:
    """Cut the units naming records at or past ``end``, and any tail bytes; returns how
    many units were cut."""
    cut = queue.max_offset
    last = queue.units(cut - 1, 1) if cut > queue.min_offset else []
    if last and last[0].physical_offset >= end:
        while cut > queue.min_offset:
            low = max(queue.min_offset, cut - _BACKWARD_STEP_UNITS)
            units = queue.units(low, cut - low)
            kept = [u for u in units if u.physical_offset < end]
            if len(kept) < len(units):
                cut = low + len(kept)  # physical offsets ascend: the cut ones are a suffix
            if kept:
                break
            cut = low
    count = queue.max_offset - cut
    if count or queue.tail_units:
        _log.warning(
            "ConsumeQueue %s/%d: cutting %d unit(s) past the CommitLog end %d and %d tail "
            "unit(s) after its last valid unit %d",
            key[0], key[1], count, end, queue.tail_units, cut,
        )  # fmt: skip
        queues.truncate(key, cut)
    return count


def _cut_unnamed(
    queues: ConsumeQueues, key: QueueKey, queue: CqQueueFiles, next_offset: int, flushed: int
) -> int:
    """Cut units at or past the queue's next queue offset (no record has those offsets)."""
    count = queue.max_offset - next_offset
    if count <= 0:
        return 0
    first = queue.units(next_offset, 1)
    physical_offset = first[0].physical_offset if first else -1
    if physical_offset < flushed:
        path, position = queue.where(next_offset)
        raise ConsumeQueueCorruptError(
            path, position,
            f"unit {next_offset} points at physical offset {physical_offset}, below the "
            f"flushed offset {flushed}, but the CommitLog has no record with that queue offset",
        )  # fmt: skip
    _log.warning(
        "ConsumeQueue %s/%d: cutting %d unit(s) from %d that name no record",
        key[0], key[1], count, next_offset,
    )  # fmt: skip
    queues.truncate(key, next_offset)
    return count
