"""Read-only access to a store's CommitLog, also while another process has it open.

Owns ``SegmentCursor`` (decoding the records of one segment through a read-ahead buffer),
``iter_records`` (every record from a physical offset, in log order) and ``verify_log``
(check every record: magic, lengths, CRC, position). Used by recovery, ``rmq-spark dump`` and
``rmq-spark verify``. Takes no lock and never writes: a reader opens the segments with
``pread`` (a shared mapping of a file another process may truncate could fault).

A reader of a *running* store should stop at the checkpoint's ``confirmPhyOffset``
(``checkpoint.read_checkpoint``): past it, a record may be half written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError
from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    Unwritten,
    decode_record,
)
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import IoMode
from rmq_spark.store.fileio import OsOpener
from rmq_spark.store.layout import COMMITLOG_DIR
from rmq_spark.store.segment import Segment

__all__ = [
    "SegmentCursor",
    "VerifyResult",
    "iter_records",
    "open_read_only",
    "read_record",
    "verify_log",
]

_CHUNK_BYTES = 8 << 20
_SIZE = struct.Struct(">i")


class SegmentCursor:
    """Decodes records of one segment through a read-ahead buffer (``SegmentFile.read``)."""

    def __init__(self, segment: Segment, chunk_bytes: int = _CHUNK_BYTES) -> None:
        self.segment = segment
        self._chunk_bytes = chunk_bytes
        self._buf = b""
        self._view = memoryview(self._buf)  # decoding from a view: CRC without copying bodies
        self._buf_start = 0
        self._name = segment.path.name

    def _fill(self, position: int, need: int) -> None:
        size = max(self._chunk_bytes, need)
        self._buf = self.segment.read(position, size)
        self._view = memoryview(self._buf)
        self._buf_start = position

    def window(self, position: int, size: int) -> bytes:
        """Bytes ``[position, position + size)`` (fewer at the end of the file)."""
        start = position - self._buf_start
        if start < 0 or start + size > len(self._buf):
            return self.segment.read(position, size)
        return self._buf[start : start + size]

    def decode(self, position: int, *, check_crc: bool = True, with_body: bool = True) -> object:
        """Like ``codec.decode_record`` at segment ``position``. Errors carry the file path
        and the position inside the file; an outcome's own ``position`` is relative to the
        read-ahead buffer (use ``decode_at`` for segment positions)."""
        segment = self.segment
        while True:
            start = position - self._buf_start
            if start < 0 or start + 8 > len(self._buf):
                self._fill(position, 8)
                start = 0
            try:
                outcome = decode_record(
                    self._view, start, path=self._name, check_crc=check_crc, with_body=with_body
                )
            except CorruptRecordError as err:
                raise CorruptRecordError(
                    str(segment.path),
                    position,
                    err.reason,
                    stored_crc=err.stored_crc,
                    computed_crc=err.computed_crc,
                ) from None
            if isinstance(outcome, NeedMoreData):
                if self._buf_start + len(self._buf) >= segment.size_bytes:
                    return outcome  # the record would run past the end of the file
                self._fill(position, outcome.need)
                continue
            return outcome

    def decode_at(self, position: int, *, check_crc: bool = True) -> object:
        """``decode`` with outcomes whose ``position`` is the segment position."""
        outcome = self.decode(position, check_crc=check_crc)
        if isinstance(outcome, DecodedRecord):
            return DecodedRecord(
                outcome.record, position, outcome.total_size, outcome.magic_version
            )
        if isinstance(outcome, BlankPadding):
            return BlankPadding(position, outcome.remaining_bytes)
        if isinstance(outcome, Unwritten):
            return Unwritten(position)
        return outcome


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
    """Every record from ``from_offset`` (default: the oldest) until the data ends or
    ``end_offset``; ``DecodedRecord.position`` is the *physical* offset.

    Raises
    ------
    CorruptRecordError
        A bad record before the data ends (including a record that does not name its own
        physical offset, as when ``from_offset`` is not a record boundary).
    """
    segments = commitlog.segments
    if not segments:
        return
    offset = commitlog.min_offset if from_offset is None else max(from_offset, commitlog.min_offset)
    index = (offset - segments[0].base_offset) // commitlog.segment_size_bytes
    while index < len(segments):
        segment = segments[index]
        cursor = SegmentCursor(segment)
        position = offset - segment.base_offset
        while position < segment.size_bytes:
            if end_offset is not None and segment.base_offset + position >= end_offset:
                return
            outcome = cursor.decode(position, check_crc=check_crc)
            if isinstance(outcome, DecodedRecord):
                physical_offset = segment.base_offset + position
                if outcome.record.physical_offset != physical_offset:
                    raise CorruptRecordError(
                        str(segment.path),
                        position,
                        f"PHYSICALOFFSET field says {outcome.record.physical_offset} "
                        "(not a record boundary?)",
                    )
                yield DecodedRecord(
                    outcome.record, physical_offset, outcome.total_size, outcome.magic_version
                )
                position += outcome.total_size
                continue
            if isinstance(outcome, BlankPadding):
                break
            return  # Unwritten or NeedMoreData: the data ends here
        index += 1
        offset = segment.end_offset


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of ``verify_log``: ``error`` is the first problem (``None`` if all good)."""

    record_count: int
    checked_bytes: int
    segment_count: int
    end_offset: int
    error: CorruptRecordError | None = None


def verify_log(commitlog: CommitLog, end_offset: int | None = None) -> VerifyResult:
    """Check every record of every segment (magic, TOTALSIZE vs lengths, BODYCRC, position,
    every full segment ending in a BLANK record) and report the first problem."""
    segments = commitlog.segments
    count = 0
    checked = 0
    end = commitlog.min_offset
    for index, segment in enumerate(segments):
        cursor = SegmentCursor(segment)
        position = 0
        is_last = index == len(segments) - 1
        while True:
            physical_offset = segment.base_offset + position
            if end_offset is not None and physical_offset >= end_offset:
                return VerifyResult(count, checked, len(segments), physical_offset)
            try:
                outcome = cursor.decode(position)
            except CorruptRecordError as err:
                return VerifyResult(count, checked, len(segments), physical_offset, err)
            if isinstance(outcome, DecodedRecord):
                if outcome.record.physical_offset != physical_offset:
                    error = CorruptRecordError(
                        str(segment.path),
                        position,
                        f"PHYSICALOFFSET field says {outcome.record.physical_offset}",
                    )
                    return VerifyResult(count, checked, len(segments), physical_offset, error)
                count += 1
                checked += outcome.total_size
                position += outcome.total_size
                end = segment.base_offset + position
                continue
            if isinstance(outcome, BlankPadding):
                end = segment.end_offset
                break
            if isinstance(outcome, NeedMoreData):
                error = CorruptRecordError(
                    str(segment.path), position, "record runs past the end of the segment"
                )
                return VerifyResult(count, checked, len(segments), physical_offset, error)
            if not is_last:  # Unwritten before the end of a segment that is not the last
                error = CorruptRecordError(
                    str(segment.path), position, "zero bytes where a record or BLANK must be"
                )
                return VerifyResult(count, checked, len(segments), physical_offset, error)
            garbage = _first_non_zero(segment, position)
            if garbage is not None:
                error = CorruptRecordError(
                    str(segment.path),
                    position,
                    f"non-zero bytes at position {garbage}, after the end of the data",
                )
                return VerifyResult(count, checked, len(segments), physical_offset, error)
            break
    return VerifyResult(count, checked, len(segments), end)


def _first_non_zero(segment: Segment, position: int) -> int | None:
    """Position of the first non-zero byte at or after ``position`` (read in chunks)."""
    while position < segment.size_bytes:
        chunk = segment.read(position, min(_CHUNK_BYTES, segment.size_bytes - position))
        if not chunk:
            return None
        stripped = chunk.lstrip(b"\0")
        if stripped:
            return position + len(chunk) - len(stripped)
        position += len(chunk)
    return None


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
    position = physical_offset - segment.base_offset
    try:
        head = segment.read(position, 8)
        size = _SIZE.unpack_from(head)[0] if len(head) == 8 else 0
        data = segment.read(position, size) if size > 8 else head
    except (OSError, ValueError) as err:  # closed by retention meanwhile
        raise OffsetOutOfRangeError(
            physical_offset, commitlog.min_offset, commitlog.max_offset
        ) from err
    path = str(segment.path)
    try:
        outcome = decode_record(data, 0, path=path, check_crc=True)
    except CorruptRecordError as err:
        raise CorruptRecordError(
            path, position, err.reason, stored_crc=err.stored_crc, computed_crc=err.computed_crc
        ) from None
    if not isinstance(outcome, DecodedRecord):
        raise CorruptRecordError(
            path, position, f"no message record here ({type(outcome).__name__})"
        )
    if outcome.record.physical_offset != physical_offset:
        raise CorruptRecordError(
            path,
            position,
            f"record says it is at {outcome.record.physical_offset}: not a record boundary",
        )
    return DecodedRecord(outcome.record, physical_offset, outcome.total_size, outcome.magic_version)
