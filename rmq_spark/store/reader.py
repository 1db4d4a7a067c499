"""Read-only access to a store's CommitLog, also while another process has it open.

Owns ``SegmentCursor`` (decoding the records of one segment through a read-ahead buffer),
``iter_records`` (every record from a physical offset, in log order), ``verify_log``
(check every record: magic, lengths, CRC, position) and ``read_record_at``/``record_at_bytes``,
the one way to read one record by its physical offset (the store, ``query``, the delay
job, the dashboard and ``rmq-spark groups`` all read a single record through it). Used by
recovery, ``rmq-spark dump`` and ``rmq-spark verify``. Takes no lock and never writes: a
reader opens the segments with ``pread`` (a shared mapping of a file another process may
truncate could fault).

A reader of a *running* store should stop at the checkpoint's ``confirmPhyOffset``
(``checkpoint.read_checkpoint``): past it, a record may be half written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError
from rmq_spark.store.codec import DecodedRecord, NeedMoreData, decode_record, peek_header
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import IoMode
from rmq_spark.store.fileio import OsOpener
from rmq_spark.store.layout import COMMITLOG_DIR, MESSAGE_MAGIC_CODES
from rmq_spark.store.readable import (
    check_checkpoint,
    missing_prefix,
    open_segments,
    prefix_error,
    readable_end,
)
from rmq_spark.store.scan import LogScan, SegmentCursor, SegmentSource, StopKind, judge_end
from rmq_spark.store.view import StoreView

__all__ = [
    "RecordFile",
    "SegmentCursor",
    "VerifyResult",
    "iter_records",
    "open_read_only",
    "read_record",
    "read_record_at",
    "read_store",
    "record_at_bytes",
    "verify_log",
    "verify_segments",
    "verify_store",
]

_SIZE = struct.Struct(">i")


def open_read_only(root_dir: Path, segment_size_bytes: int | None = None) -> CommitLog:
    """The CommitLog of the store at ``root_dir`` for reading, without a lock.

    ``segment_size_bytes`` defaults to the size of the first segment file found.
    """
    directory = root_dir / COMMITLOG_DIR
    if segment_size_bytes is None:
        names = (
            sorted(p for p in directory.glob("[0-9]" * 20) if p.is_file())
            if directory.exists()
            else []
        )
        sizes = [p.stat().st_size for p in names if p.stat().st_size]
        segment_size_bytes = sizes[0] if sizes else 1 << 30
    return CommitLog.load(directory, segment_size_bytes, OsOpener(IoMode.PWRITE), read_only=True)


def iter_records(
    commitlog: CommitLog,
    from_offset: int | None = None,
    end_offset: int | None = None,
    *,
    check_crc: bool = True,
) -> Iterator[DecodedRecord]:
    """Every record from ``from_offset`` (default: the oldest) until ``end_offset`` or the
    end of the log (``scan.judge_end``); ``DecodedRecord.position`` is the *physical* offset.

    Raises
    ------
    CorruptRecordError
        A bad record before the end of the log (including a record that does not name its
        own physical offset, as when ``from_offset`` is not a record boundary).
    """
    scan = LogScan(commitlog.segments, from_offset, end_offset, check_crc=check_crc)
    yield from scan
    if scan.stop.kind is StopKind.BAD and "PHYSICALOFFSET" in scan.stop.reason:
        raise CorruptRecordError(
            str(scan.stop.path), scan.stop.position, f"{scan.stop.reason} (not a record boundary?)"
        )
    judge_end(
        commitlog.segments,
        scan.stop,
        durable_offset=0,
        min_store_timestamp_ms=scan.last_store_timestamp_ms,
        segment_size=commitlog.segment_size_bytes,
    )


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of a verification: ``error`` is the first problem (``None`` if all good).

    ``end_offset`` is where the records end (or the physical offset of the problem);
    ``torn_bytes`` non-zero bytes after it are one torn write, which recovery will cut.
    """

    record_count: int
    checked_bytes: int
    segment_count: int
    end_offset: int
    error: CorruptRecordError | None = None
    torn_bytes: int = 0


def verify_segments(
    segments: Sequence[SegmentSource],
    *,
    durable_offset: int = 0,
    end_offset: int | None = None,
    live: bool = False,
    segment_size: int = 0,
) -> VerifyResult:
    """Check every record (magic, TOTALSIZE vs lengths, CRC, position, every full segment
    ending in a BLANK record) and judge the end of the log (``scan.judge_end``)."""
    first = segments[0].base_offset if segments else 0
    scan = LogScan(segments, first, end_offset, with_body=False, durable_offset=durable_offset)
    checked = 0
    for decoded in scan:
        checked += decoded.total_size
    stop = scan.stop
    try:
        verdict = judge_end(
            segments,
            stop,
            durable_offset=durable_offset,
            min_store_timestamp_ms=scan.last_store_timestamp_ms,
            live=live,
            segment_size=segment_size,
        )
    except CorruptRecordError as err:
        return VerifyResult(scan.count, checked, len(segments), stop.offset, err)
    return VerifyResult(
        scan.count, checked, len(segments), verdict.offset, None, verdict.torn_bytes
    )


def verify_log(commitlog: CommitLog, end_offset: int | None = None) -> VerifyResult:
    """``verify_segments`` of a loaded CommitLog (no checkpoint: nothing is known durable)."""
    return verify_segments(
        commitlog.segments, end_offset=end_offset, segment_size=commitlog.segment_size_bytes
    )


def verify_store(root_dir: Path) -> VerifyResult:
    """Verify the store at ``root_dir`` with the rule of ``scan.py``: every record, the
    checkpoint, a missing first segment, and what follows the end of the data.

    Raises
    ------
    CheckpointDamagedError
        The checkpoint holds impossible offsets.
    """
    view = StoreView.open(root_dir)
    check_checkpoint(view)
    missing = missing_prefix(view)
    if missing is not None:
        return VerifyResult(0, 0, len(view.spans), missing[0], prefix_error(view, missing))
    end_offset = view.confirm_offset if view.broker_open and view.publishes_end else None
    segments = open_segments(view)
    try:
        return verify_segments(
            segments,
            durable_offset=0 if view.broker_open else view.flushed_offset,
            end_offset=end_offset,
            live=view.broker_open,
            segment_size=view.segment_size,
        )
    finally:
        for segment in segments:
            segment.close()


def read_store(
    root_dir: Path, from_offset: int | None = None, *, check_crc: bool = True
) -> Iterator[DecodedRecord]:
    """Every record of the store at ``root_dir`` from ``from_offset`` (default: the oldest)
    to the end of its readable log (``readable.readable_end``); ``position`` = physical offset.

    Raises
    ------
    OffsetOutOfRangeError
        ``from_offset`` is below the oldest segment or past the end of the log.
    CorruptRecordError, DataMissingError, CheckpointDamagedError
        Damage or missing acknowledged data (the error names the file and position).
    """
    view = StoreView.open(root_dir)
    # The end is judged with the same CRC check as the read below, so that a bad last record
    # is the torn write verify and recovery call it, not damage found past the judged end.
    end = readable_end(view, check_crc=check_crc).offset
    missing = missing_prefix(view)
    if missing is not None:
        raise prefix_error(view, missing)
    start = view.min_offset if from_offset is None else from_offset
    if not view.min_offset <= start <= end:
        raise OffsetOutOfRangeError(start, view.min_offset, end)
    segments = open_segments(view)
    try:
        scan = LogScan(segments, start, end, check_crc=check_crc, durable_offset=None)
        yield from scan
        stop = scan.stop
        if stop.kind is not StopKind.LIMIT and stop.offset < end:
            reason = stop.reason or "zero bytes where a record or BLANK must be"
            if "PHYSICALOFFSET" in reason and stop.offset == start:
                reason += " (not a record boundary?)"
            raise CorruptRecordError(str(stop.path), stop.position, reason)
    finally:
        for segment in segments:
            segment.close()


class RecordFile(Protocol):
    """A segment read with ``pread``: ``store.segment.Segment``, ``view.FileSegment``."""

    base_offset: int

    @property
    def path(self) -> Path: ...

    def read(self, position: int, size: int) -> bytes: ...


def record_at_bytes(
    data: bytes | memoryview, at: int, physical_offset: int, *, path: str, check_crc: bool = True
) -> DecodedRecord | None:
    """The message record at ``data[at:]``, if one starts there and says it is at
    ``physical_offset`` (``position`` is that offset); ``None`` when none does (a blank,
    another magic, bytes cut short, a record that says it is elsewhere).

    Raises
    ------
    CorruptRecordError
        A message record starts there but its bytes are damaged (CRC, lengths).
    """
    head = peek_header(data, at)
    if isinstance(head, NeedMoreData) or head[1] not in MESSAGE_MAGIC_CODES:
        return None
    outcome = decode_record(data, at, path=path, check_crc=check_crc)
    if not isinstance(outcome, DecodedRecord) or outcome.record.physical_offset != physical_offset:
        return None
    return DecodedRecord(outcome.record, physical_offset, outcome.total_size, outcome.magic_version)


def read_record_at(
    segment: RecordFile, physical_offset: int, *, check_crc: bool = True
) -> DecodedRecord | None:
    """``record_at_bytes`` of the record at ``physical_offset`` of ``segment``: two reads
    (its size, then the record). Raises ``CorruptRecordError`` (with the segment's path and
    position) and ``OSError`` (a read failed)."""
    position = physical_offset - segment.base_offset
    head = segment.read(position, 8)
    size = _SIZE.unpack_from(head)[0] if len(head) == 8 else 0
    data = segment.read(position, size) if size > 8 else head
    path = str(segment.path)
    try:
        return record_at_bytes(data, 0, physical_offset, path=path, check_crc=check_crc)
    except CorruptRecordError as err:
        raise CorruptRecordError(
            path, position, err.reason, stored_crc=err.stored_crc, computed_crc=err.computed_crc
        ) from None


def read_record(commitlog: CommitLog, physical_offset: int) -> DecodedRecord:
    """The record at ``physical_offset`` (BODYCRC checked); ``position`` is the physical offset.

    Raises
    ------
    OffsetOutOfRangeError
        ``physical_offset`` is outside ``[min_offset, max_offset)`` (or its segment was just
        deleted by retention).
    CorruptRecordError
        The bytes there are not a valid record that starts at ``physical_offset``.
    """
    segment = commitlog.segment_for(physical_offset)
    if segment is None or not physical_offset < commitlog.max_offset:
        raise OffsetOutOfRangeError(physical_offset, commitlog.min_offset, commitlog.max_offset)
    try:
        found = read_record_at(segment, physical_offset)
    except (OSError, ValueError) as err:  # closed by retention meanwhile
        raise OffsetOutOfRangeError(
            physical_offset, commitlog.min_offset, commitlog.max_offset
        ) from err
    if found is None:
        raise CorruptRecordError(
            str(segment.path),
            physical_offset - segment.base_offset,
            "no message record starts here (a blank, or not a record boundary)",
        )
    return found
