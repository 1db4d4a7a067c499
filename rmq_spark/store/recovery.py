"""Recovery on open: scan the tail of the log, tell a torn tail from corruption, truncate.

Differences from RocketMQ (FORMAT.md 10): normal and abnormal recovery run the same scan, from
the queue-offset snapshot instead of "the third-last file" (normal) or "the newest file older
than the checkpoint timestamps" (abnormal); there is no ConsumeQueue to dispatch to (the Spark
jobs build those tables from the log); and the tail of the last segment is zeroed on
truncation, while RocketMQ leaves stale bytes.

Owns the scan that finds the end of the log, the rebuild of the queue-offset table and of
the idempotency window, and the only truncation of the CommitLog (FORMAT.md 10, with CRC
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

Where the log ends is decided by the one segment scan and end-of-log judge of ``scan.py``
(the rule is in its docstring), with the checkpoint's ``masterFlushedOffset`` as the durable
offset. A torn tail (at most one unsynced write, at the end of the last segment that holds
data) is copied to ``<store>/quarantine/`` and zeroed, and later all-zero segments are
deleted. Anything else raises ``RecoveryRefusedError`` naming file, position and cause, and
changes nothing: an operator decides with ``rmq-spark recover --truncate-at``
(``quarantine.truncate_store``), which moves whatever it cuts aside, never deletes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rmq_spark.errors import (
    CheckpointDamagedError,
    CorruptRecordError,
    DataMissingError,
    RecoveryRefusedError,
)
from rmq_spark.store.checkpoint import QueueOffsetSnapshot
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.put_state import IdempotencyWindow, QueueOffsetTable
from rmq_spark.store.quarantine import QUARANTINE_DIR, quarantine_bytes, quarantine_root
from rmq_spark.store.readable import check_checkpoint, missing_prefix, prefix_error
from rmq_spark.store.scan import LogEnd, LogScan, SegmentCursor, StopKind, judge_end
from rmq_spark.store.view import StoreView

__all__ = ["RecoveredState", "RecoveryReport", "recover"]

_log = logging.getLogger(__name__)
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
    RecoveryRefusedError
        The end of the data is not one torn write (see ``scan.judge_end``); nothing changed.
    CheckpointDamagedError
        A checkpoint offset lies beyond the segment files by more than one segment.
    DataMissingError
        The oldest segments are gone and retention did not record deleting them.
    """
    _judge_store(commitlog)
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
    if not segments and durable_offset <= 0:
        state.report = RecoveryReport(clean_shutdown, used_snapshot, 0, 0, 0, 0)
        return state

    scan = LogScan(
        segments, start, check_crc=check_crc, with_body=False, durable_offset=durable_offset
    )
    observe = queue_offsets.observe
    for decoded in scan:
        record = decoded.record
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
                        decoded.position,
                        decoded.total_size,
                        record.queue_offset,
                        record.queue_id,
                        record.store_timestamp_ms,
                    ),
                )
    if scan.count:
        state.last_record_offset = scan.last_record_offset
        state.last_store_timestamp_ms = scan.last_store_timestamp_ms
    stop = scan.stop
    try:
        verdict = judge_end(
            segments,
            stop,
            durable_offset=durable_offset,
            max_record_bytes=max_record_bytes,
            min_store_timestamp_ms=state.last_store_timestamp_ms,
            segment_size=commitlog.segment_size_bytes,
        )
    except CorruptRecordError as err:
        raise RecoveryRefusedError(
            err.path,
            err.position,
            f"{err.reason}; the store does not open. To cut the log there, run `rmq-spark "
            f"recover --store {commitlog.directory.parent} --truncate-at {stop.offset}` (what "
            f"is cut is kept in {QUARANTINE_DIR}/)",
        ) from err
    end = verdict.offset
    reason = stop.reason if stop.kind is not StopKind.ZEROS else ""
    deleted = verdict.empty_segments
    if verdict.torn_bytes:
        quarantine_bytes(commitlog, end, verdict.torn_bytes, reason or "torn write")
    _cut(commitlog, end, verdict)
    if verdict.torn_bytes:
        _log.warning(
            "recovery: truncated a torn tail of %d bytes at physical offset %d (%s); a copy "
            "is in %s",
            verdict.torn_bytes,
            end,
            reason or "partial record",
            quarantine_root(commitlog),
        )
    state.report = RecoveryReport(
        clean_shutdown=clean_shutdown,
        used_snapshot=used_snapshot,
        start_offset=start,
        end_offset=end,
        scanned_bytes=end - start,
        record_count=scan.count,
        truncated_bytes=verdict.torn_bytes,
        truncated_at=end if verdict.torn_bytes else None,
        reason=reason or ("partial record" if verdict.torn_bytes else ""),
        deleted_segments=deleted,
        snapshot_offset=snapshot.physical_offset if used_snapshot and snapshot else None,
    )
    return state


def _judge_store(commitlog: CommitLog) -> None:
    """The checks ``verify`` and ``dump`` make before reading (``readable.py``): a damaged
    checkpoint, a lost oldest segment. Each refuses the open, naming the file and the
    ``rmq-spark recover`` command that accepts the state (nothing is changed here)."""
    root = commitlog.directory.parent
    view = StoreView.open(root)
    try:
        check_checkpoint(view)
    except CheckpointDamagedError as err:
        raise CheckpointDamagedError(
            err.path,
            f"{err.reason}; the store does not open. After looking (`rmq-spark verify "
            f"--store {root}`), run `rmq-spark recover --store {root} --reset-checkpoint` "
            f"(the old checkpoint is kept in {QUARANTINE_DIR}/)",
        ) from None
    missing = missing_prefix(view)
    if missing is not None:
        lost = prefix_error(view, missing)
        raise DataMissingError(
            lost.path,
            lost.position,
            f"{lost.reason}; the store does not open. To accept the loss, run "
            f"`rmq-spark recover --store {root} --accept-missing` (records it in "
            "config/retention.json)",
        )


def _cut(commitlog: CommitLog, end: int, verdict: LogEnd) -> None:
    """Make ``end`` the end of the log: zero the torn bytes, drop later all-zero segments."""
    if verdict.torn_bytes or verdict.empty_segments:
        commitlog.truncate_to(end)
        return
    segment = commitlog.segment_for(end)
    if segment is not None:
        position = end - segment.base_offset
        segment.write_position = position
        segment.flushed_position = position
