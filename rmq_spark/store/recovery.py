"""Recovery on open: scan the tail of the log, tell a torn tail from corruption, truncate.

Differences from RocketMQ (spec 8.4/8.5): normal and abnormal recovery run the same scan, from
the queue-offset snapshot instead of "the third-last file" (normal) or "the newest file older
than the checkpoint timestamps" (abnormal); there is no ConsumeQueue to dispatch to (the Spark
jobs build those tables from the log); and the tail of the last segment is zeroed on
truncation, while RocketMQ leaves stale bytes.

Owns the scan that finds the end of the log, the rebuild of the queue-offset table and of
the idempotency window, and the only truncation of the CommitLog (spec 8.4/8.5, with CRC
checks; RocketMQ's ``recoverNormally``/``recoverAbnormally``). Does not own the file layout
(``commitlog.py``) nor the record format (``codec.py``).

Where the scan starts. The queue-offset snapshot (``checkpoint.py``) holds the table valid at
a physical offset S that was fsynced when it was written (at every clean shutdown and every
``snapshot_interval_ms``). Recovery checks that the snapshot's last record really ends at S,
then scans from the oldest record of the idempotency window W <= S (or S when the window is
off) to the end. So restart time grows with the data written since the last snapshot (plus
the window), never with the whole log. Without a usable snapshot it scans from the oldest
segment. A clean shutdown (no ``abort`` file) leaves S at the end of the log; after a crash S
is at most ``snapshot_interval_ms`` old.

What ends the scan, at physical offset X (position P in segment F):

* zero bytes where a header would start (``Unwritten``): the end of the data;
* a bad record (bad magic, impossible size, TOTALSIZE disagreeing with the lengths, BODYCRC
  mismatch, PHYSICALOFFSET not equal to X, a record running past the end of F);
* above the durable offset, a last record (followed by ``Unwritten``) whose final byte is
  zero: BODYCRC covers only the body, so a write torn in the topic or properties decodes,
  but a whole record never ends in a zero byte (see ``_torn_last_record``).

Either way, X is then judged:

* X below the durable offset (the checkpoint's ``masterFlushedOffset``): ``CorruptRecordError``
  — acknowledged, fsynced data is damaged or missing;
* a valid record somewhere after X (a record whose magic, lengths, CRC check, whose
  PHYSICALOFFSET names its own position and whose STORETIMESTAMP is not older than the last
  good record's, within one maximal record size after X in F, or at the start of a later
  segment): ``CorruptRecordError`` — a hole in the middle. Older valid records are stale
  bytes left past an earlier truncation (RocketMQ does not zero them) and do not count;
* otherwise a torn tail: the end of the log is X; the bytes found after X (up to the last
  non-zero byte within one maximal record size) are reported as ``truncated_bytes`` and
  zeroed, and later (empty) segments are deleted.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.checkpoint import QueueOffsetSnapshot
from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    Unwritten,
)
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.layout import (
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.put import IdempotencyWindow, QueueOffsetTable
from rmq_spark.store.reader import SegmentCursor

__all__ = ["RecoveredState", "RecoveryReport", "recover"]

_log = logging.getLogger(__name__)
_MAGICS = (
    struct.pack(">I", MESSAGE_MAGIC_CODE_V1),
    struct.pack(">I", MESSAGE_MAGIC_CODE_V2),
)
_UNIQ_MARKER = "UNIQ_KEY\x01"


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found and did.

    Attributes
    ----------
    clean_shutdown
        No ``abort`` file: the last run closed the store.
    used_snapshot
        The scan started from the queue-offset snapshot, not the oldest segment.
    start_offset, end_offset
        Where the scan started, and the end of the log it recovered (``max_offset``).
    scanned_bytes, record_count
        How much was scanned.
    truncated_bytes
        Bytes of a torn tail that were discarded (0 if the log ended cleanly).
    truncated_at
        Physical offset where the torn tail started (``None`` if there was none).
    reason
        Why the scan stopped at ``end_offset`` (e.g. ``"BODYCRC mismatch"``).
    deleted_segments
        Names of segments past the end that were deleted.
    snapshot_offset
        Physical offset of the queue-offset snapshot used (``None`` if none).
    """

    clean_shutdown: bool
    used_snapshot: bool
    start_offset: int
    end_offset: int
    scanned_bytes: int
    record_count: int
    truncated_bytes: int = 0
    truncated_at: int | None = None
    reason: str = ""
    deleted_segments: tuple[str, ...] = ()
    snapshot_offset: int | None = None


@dataclass
class RecoveredState:
    """Everything the store needs after recovery."""

    report: RecoveryReport
    queue_offsets: QueueOffsetTable
    window: IdempotencyWindow
    last_record_offset: int = -1
    last_store_timestamp_ms: int = 0
    snapshot_queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


def _uniq_key(props: str) -> str | None:
    at = props.find(_UNIQ_MARKER)
    while at > 0 and props[at - 1] != "\x02":
        at = props.find(_UNIQ_MARKER, at + 1)
    if at < 0:
        return None
    start = at + len(_UNIQ_MARKER)
    end = props.find("\x02", start)
    return props[start : end if end >= 0 else len(props)] or None


def _torn_last_record(cursor: SegmentCursor, position: int, outcome: DecodedRecord) -> bool:
    """A record that ends in a zero byte and is the last one before unwritten space.

    BODYCRC covers only the body, so a write torn inside the topic or the properties can
    still decode. A record written whole never ends in a zero byte (properties end with
    ``\x02`` or a value character, topics have no NUL), while a torn one ends in the zeros
    of the unwritten space: for the *last* record above the durable offset that means torn.
    """
    end = position + outcome.total_size
    if cursor.window(end - 1, 1) != b"\0":
        return False
    try:
        return isinstance(cursor.decode(end, check_crc=False), Unwritten)
    except CorruptRecordError:
        return False


def _valid_at(cursor: SegmentCursor, position: int, min_store_timestamp_ms: int) -> bool:
    """Whether a valid record that names its own position starts here and is not older than
    the last good record (older ones are stale bytes past an earlier truncation: RocketMQ
    does not zero them, spec 5.4 and 14.5)."""
    segment = cursor.segment
    try:
        outcome = cursor.decode(position, with_body=False)
    except CorruptRecordError:
        return False
    return (
        isinstance(outcome, DecodedRecord)
        and outcome.record.physical_offset == segment.base_offset + position
        and outcome.record.store_timestamp_ms >= min_store_timestamp_ms
    )


def _valid_record_after(
    cursor: SegmentCursor, position: int, limit_bytes: int, min_store_timestamp_ms: int
) -> int | None:
    """Position of a valid record within ``limit_bytes`` after ``position``, else ``None``."""
    segment = cursor.segment
    end = min(segment.size_bytes, position + limit_bytes)
    region = cursor.window(position, end - position)
    candidates = []
    for magic in _MAGICS:
        at = region.find(magic, 5)
        while at >= 0:
            candidates.append(at - 4)
            at = region.find(magic, at + 1)
    for offset in sorted(candidates):
        if _valid_at(cursor, position + offset, min_store_timestamp_ms):
            return position + offset
    return None


def _check_snapshot(commitlog: CommitLog, snapshot: QueueOffsetSnapshot | None) -> int | None:
    """Store timestamp of the snapshot's last record (0 if none) if it matches the log."""
    if snapshot is None:
        return None
    end = commitlog.segments[-1].end_offset if commitlog.segments else 0
    if not commitlog.min_offset <= snapshot.physical_offset <= end:
        _log.warning(
            "ignoring queue-offset snapshot at %d: outside the log", snapshot.physical_offset
        )
        return None
    if snapshot.last_record_offset < 0:
        return 0 if snapshot.physical_offset == commitlog.min_offset else None
    segment = commitlog.segment_for(snapshot.last_record_offset)
    if segment is None:
        return None
    try:
        outcome = SegmentCursor(segment, 1 << 16).decode(
            snapshot.last_record_offset - segment.base_offset
        )
    except CorruptRecordError:
        outcome = None
    if (
        isinstance(outcome, DecodedRecord)
        and snapshot.last_record_offset + outcome.total_size == snapshot.physical_offset
    ):
        return outcome.record.store_timestamp_ms
    _log.warning(
        "ignoring queue-offset snapshot at %d: does not match the log", snapshot.physical_offset
    )
    return None


def recover(
    commitlog: CommitLog,
    *,
    durable_offset: int,
    snapshot: QueueOffsetSnapshot | None,
    clean_shutdown: bool,
    check_crc: bool,
    window_capacity: int,
    max_record_bytes: int,
) -> RecoveredState:
    """Find the end of the log, truncate a torn tail, rebuild queue offsets and the window.

    Parameters
    ----------
    commitlog
        The loaded log (every segment's write position is still its full size).
    durable_offset
        The checkpoint's fsynced offset: a bad record below it is corruption.
    snapshot
        The last queue-offset snapshot, if any (checked against the log before use).
    clean_shutdown
        Whether the ``abort`` file was absent (reported; both cases scan the same way).
    check_crc
        Verify BODYCRC of every scanned record.
    window_capacity
        Size of the idempotency window to rebuild (0: none).
    max_record_bytes
        The largest possible record: how far past a bad record to look for valid data.

    Raises
    ------
    CorruptRecordError
        A bad record (or the end of the data) below ``durable_offset``, or followed by a
        valid record.
    """
    snapshot_ts = _check_snapshot(commitlog, snapshot)
    queue_offsets = QueueOffsetTable()
    window = IdempotencyWindow(window_capacity)
    state = RecoveredState(
        report=RecoveryReport(clean_shutdown, False, 0, 0, 0, 0),
        queue_offsets=queue_offsets,
        window=window,
    )
    if snapshot is not None and snapshot_ts is not None:
        queue_offsets.offsets.update(snapshot.queue_offsets)
        start = snapshot.physical_offset
        if window_capacity > 0:
            start = max(commitlog.min_offset, min(start, snapshot.window_start_offset))
        state.last_record_offset = snapshot.last_record_offset
        state.last_store_timestamp_ms = snapshot_ts
        used_snapshot = True
    else:
        start = commitlog.min_offset
        used_snapshot = False
    segments = commitlog.segments
    if not segments:
        state.report = RecoveryReport(clean_shutdown, used_snapshot, 0, 0, 0, 0)
        return state

    offset = start
    segment = commitlog.segment_for(offset)
    assert segment is not None
    index = segments.index(segment)
    cursor = SegmentCursor(segment)
    record_count = 0
    reason = ""
    end: int | None = None
    observe = queue_offsets.observe
    while end is None:
        position = offset - segment.base_offset
        try:
            outcome = cursor.decode(position, check_crc=check_crc, with_body=False)
        except CorruptRecordError as err:
            outcome = err
        if isinstance(outcome, DecodedRecord):
            record = outcome.record
            if record.physical_offset != offset:
                outcome = CorruptRecordError(
                    str(segment.path),
                    position,
                    f"PHYSICALOFFSET field says {record.physical_offset}",
                )
            elif offset >= durable_offset and _torn_last_record(cursor, position, outcome):
                outcome = CorruptRecordError(
                    str(segment.path), position, "last record ends in zero bytes (torn write)"
                )
            else:
                tx_type = record.sys_flag & TRANSACTION_MASK
                if tx_type == TRANSACTION_NOT_TYPE or tx_type == TRANSACTION_COMMIT_TYPE:
                    observe(record.topic, record.queue_id, record.queue_offset)
                if window_capacity > 0:
                    uniq = _uniq_key(record.properties)
                    if uniq is not None:
                        window.add(
                            record.topic,
                            uniq,
                            (
                                offset,
                                outcome.total_size,
                                record.queue_offset,
                                record.queue_id,
                                record.store_timestamp_ms,
                            ),
                        )
                state.last_record_offset = offset
                state.last_store_timestamp_ms = record.store_timestamp_ms
                record_count += 1
                offset += outcome.total_size
                continue
        if isinstance(outcome, BlankPadding):
            if index + 1 < len(segments):
                index += 1
                segment = segments[index]
                cursor = SegmentCursor(segment)
                offset = segment.base_offset
                continue
            end = segment.end_offset
            break
        # The data ends here: Unwritten, NeedMoreData or a bad record.
        if isinstance(outcome, Unwritten):
            reason = ""
        elif isinstance(outcome, NeedMoreData):
            reason = f"record of {outcome.need} bytes runs past the end of the segment"
        else:
            assert isinstance(outcome, CorruptRecordError)
            reason = outcome.reason
        end = offset
    truncated_bytes, deleted = _judge_end(
        commitlog,
        cursor,
        index,
        end,
        reason,
        durable_offset=durable_offset,
        max_record_bytes=max_record_bytes,
        last_store_timestamp_ms=state.last_store_timestamp_ms,
    )
    if truncated_bytes:
        _log.warning(
            "recovery: truncated a torn tail of %d bytes at physical offset %d (%s)",
            truncated_bytes,
            end,
            reason or "partial record",
        )
    state.report = RecoveryReport(
        clean_shutdown=clean_shutdown,
        used_snapshot=used_snapshot,
        start_offset=start,
        end_offset=end,
        scanned_bytes=end - start,
        record_count=record_count,
        truncated_bytes=truncated_bytes,
        truncated_at=end if truncated_bytes else None,
        reason=reason or ("partial record" if truncated_bytes else ""),
        deleted_segments=deleted,
        snapshot_offset=snapshot.physical_offset if used_snapshot and snapshot else None,
    )
    return state


def _judge_end(
    commitlog: CommitLog,
    cursor: SegmentCursor,
    index: int,
    end: int,
    reason: str,
    *,
    durable_offset: int,
    max_record_bytes: int,
    last_store_timestamp_ms: int,
) -> tuple[int, tuple[str, ...]]:
    """Raise if the end at ``end`` is corruption; else truncate there. Returns
    ``(truncated_bytes, deleted segment names)``."""
    segments = commitlog.segments
    segment = segments[index]
    position = end - segment.base_offset
    path = str(segment.path)
    if end < durable_offset:
        what = reason or "the data ends"
        raise CorruptRecordError(
            path,
            position,
            f"{what} below the durable offset {durable_offset} (acknowledged data is damaged)",
        )
    truncated_bytes = 0
    if position < segment.size_bytes:
        found = _valid_record_after(cursor, position, max_record_bytes, last_store_timestamp_ms)
        if found is not None:
            raise CorruptRecordError(
                path,
                position,
                f"{reason or 'zero bytes'}, followed by a valid record at position {found}",
            )
        limit = min(segment.size_bytes - position, max_record_bytes)
        truncated_bytes = len(cursor.window(position, limit).rstrip(b"\0"))
    for later in segments[index + 1 :]:
        if _valid_at(SegmentCursor(later, 1 << 16), 0, last_store_timestamp_ms):
            raise CorruptRecordError(
                path,
                position,
                f"{reason or 'zero bytes'}, followed by valid data in segment {later.path.name}",
            )
    deleted = tuple(later.path.name for later in segments[index + 1 :])
    if truncated_bytes or deleted or position < segment.size_bytes:
        if truncated_bytes or deleted:
            commitlog.truncate_to(end)
        else:
            segment.write_position = position
            segment.flushed_position = position
    return truncated_bytes, deleted
