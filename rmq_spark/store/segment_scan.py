"""The one segment scan: every record of the CommitLog from an offset, in log order.

Owns ``LogScan`` (walks the segments, stops at the first place that is not a valid record of
this log and says why in a ``ScanStop``), ``SegmentCursor`` (decodes one segment through a
read-ahead buffer) and ``SegmentSource`` (what they read). What the stop means is
``log_end.judge_end``'s question, not the scan's.

Where a scan stops inside a segment: zero bytes where a header would start, a bad record
(bad magic, impossible size, lengths disagreeing with TOTALSIZE, CRC mismatch,
PHYSICALOFFSET not naming its own position, a record running past the end of the file),
or, above the durable offset, a last record (followed by zero bytes) whose final byte is
zero: BODYCRC covers only the body, so a write torn in the topic or properties decodes, but
a whole record never ends in a zero byte.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.layout import PHYSICAL_OFFSET_POSITION, segment_name
from rmq_spark.store.record_decode import (
    BlankPadding,
    DecodedRecord,
    DecodeOutcome,
    NeedMoreData,
    SkippedRecord,
    Unwritten,
    decode_record,
)

__all__ = [
    "LogScan",
    "ScanStop",
    "SegmentCursor",
    "SegmentSource",
    "StopKind",
    "Walk",
]

_CHUNK_BYTES = 8 << 20

Walk = Callable[[Path, int, int], int]
"""A fast path: ``walk(path, base_offset, position)`` returns how far the records from
``position`` are structurally valid (magic, sizes, PHYSICALOFFSET); the scan resumes there."""


class SegmentSource(Protocol):
    """What the scan reads: a store ``Segment`` or a ``view.FileSegment``."""

    base_offset: int
    size_bytes: int

    @property
    def path(self) -> Path: ...

    def read(self, position: int, size: int) -> bytes: ...


_HEADER_BYTES = 88  # an IPv4 record header: the least decode_record reads in one go


class SegmentCursor:
    """Decodes records of one segment through a read-ahead buffer."""

    def __init__(self, segment: SegmentSource, chunk_bytes: int = _CHUNK_BYTES) -> None:
        self.segment = segment
        self._chunk_bytes = chunk_bytes
        self._buf = b""
        self.view = memoryview(self._buf)  # decoding from a view: CRC without copying bodies
        self.buf_start = 0  # the segment position of view[0]
        self._name = segment.path.name

    def _fill(self, position: int, need: int) -> None:
        self._buf = self.segment.read(position, max(self._chunk_bytes, need))
        self.view = memoryview(self._buf)
        self.buf_start = position

    def window(self, position: int, size: int) -> bytes:
        """Bytes ``[position, position + size)`` (fewer at the end of the file)."""
        start = position - self.buf_start
        if start < 0 or start + size > len(self._buf):
            return self.segment.read(position, size)
        return self._buf[start : start + size]

    def decode(
        self,
        position: int,
        *,
        check_crc: bool = True,
        with_body: bool = True,
        topics: Collection[str] | None = None,
        reported_position: int | None = None,
    ) -> DecodeOutcome:
        """Like ``codec.decode_record`` at segment ``position``. Errors carry the file path
        and the position inside the file; an outcome's own ``position`` is relative to the
        read-ahead buffer unless ``reported_position`` says what a ``DecodedRecord`` is to
        carry. ``NeedMoreData`` only when the record runs past the file's end."""
        segment = self.segment
        while True:
            start = position - self.buf_start
            if start < 0 or start + 8 > len(self._buf):
                self._fill(position, 8)
                start = 0
            try:
                outcome = decode_record(
                    self.view, start, path=self._name, check_crc=check_crc,
                    with_body=with_body, topics=topics, reported_position=reported_position,
                )  # fmt: skip
            except CorruptRecordError as err:
                raise CorruptRecordError(
                    str(segment.path),
                    position,
                    err.reason,
                    stored_crc=err.stored_crc,
                    computed_crc=err.computed_crc,
                ) from None
            if isinstance(outcome, NeedMoreData):
                if self.buf_start + len(self._buf) >= segment.size_bytes:
                    return outcome  # the record would run past the end of the file
                self._fill(position, outcome.need)
                continue
            return outcome


class StopKind(enum.Enum):
    """Why a ``LogScan`` stopped."""

    LIMIT = "limit"  # the caller's end offset
    ZEROS = "zeros"  # zero bytes where a header would start
    BAD = "bad"  # bytes that are not a valid record
    SHORT = "short"  # the file ends inside a record, or before a header (truncated file)
    BLANK = "blank"  # a BLANK ended the last listed segment: the log ends at its end
    GAP = "gap"  # a BLANK, and the next segment file is not there (a hole between files)


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Where and why a scan stopped: physical ``offset``, ``index`` of the segment in the
    scanned sequence (-1: no segment), ``path``/``position`` in it, and the ``reason``."""

    offset: int
    kind: StopKind
    index: int
    path: Path | None
    position: int
    reason: str = ""


class LogScan:
    """Every record from ``from_offset`` (a record boundary) in log order: iterate it for
    ``DecodedRecord`` (``position`` = physical offset; records of other ``topics`` are
    skipped), then read ``stop``. Never raises for bad bytes: they end the scan, and
    ``judge_end`` decides what the end means.

    ``durable_offset``: above it, a last record that ends in a zero byte is a torn write
    (see the module docstring); ``None`` turns that check off.
    """

    def __init__(
        self,
        segments: Sequence[SegmentSource],
        from_offset: int | None = None,
        end_offset: int | None = None,
        *,
        check_crc: bool = True,
        with_body: bool = True,
        topics: Collection[str] | None = None,
        durable_offset: int | None = 0,
        walk: Walk | None = None,
        chunk_bytes: int = _CHUNK_BYTES,
    ) -> None:
        self.segments = segments
        self.chunk_bytes = chunk_bytes  # read-ahead: small for a reader that follows the tail
        first = segments[0].base_offset if segments else 0
        self.from_offset = first if from_offset is None else max(from_offset, first)
        self.end_offset = end_offset
        self.check_crc = check_crc
        self.with_body = with_body
        self.topics = topics
        self.durable_offset = durable_offset
        self.walk = walk
        self.stop = ScanStop(self.from_offset, StopKind.ZEROS, -1, None, 0)
        self.last_record_offset = -1
        self.last_store_timestamp_ms = 0
        self.count = 0

    def _index_of(self, offset: int) -> int:
        for index, segment in enumerate(self.segments):
            if segment.base_offset <= offset < segment.base_offset + segment.size_bytes:
                return index
        return -1

    def __iter__(self) -> Iterator[DecodedRecord]:
        segments = self.segments
        offset = self.from_offset
        index = self._index_of(offset)
        if index < 0:
            kind = StopKind.LIMIT if self._at_limit(offset) else StopKind.SHORT
            self.stop = ScanStop(offset, kind, len(segments) - 1, None, 0, "no segment holds it")
            return
        while True:
            segment = segments[index]
            stop = yield from self._segment(index, offset - segment.base_offset)
            if stop is not None:
                self.stop = stop
                return
            end = segment.base_offset + segment.size_bytes
            if index + 1 >= len(segments):
                self.stop = ScanStop(end, StopKind.BLANK, index, segment.path, segment.size_bytes)
                return
            if segments[index + 1].base_offset != end:
                self.stop = ScanStop(
                    end, StopKind.GAP, index, segment.path, segment.size_bytes,
                    f"segment {segment_name(end)} is missing",
                )  # fmt: skip
                return
            index += 1
            offset = end

    def _at_limit(self, offset: int) -> bool:
        return self.end_offset is not None and offset >= self.end_offset

    def _segment(
        self, index: int, position: int
    ) -> Generator[DecodedRecord, None, ScanStop | None]:
        """Yield one segment's records; return ``None`` at its BLANK, else the stop."""
        segment = self.segments[index]
        base, size, path = segment.base_offset, segment.size_bytes, segment.path
        if self.walk is not None and position < size:
            position = max(position, self.walk(path, base, position))
            if self.end_offset is not None:
                position = min(position, max(0, self.end_offset - base))
        cursor = SegmentCursor(segment, self.chunk_bytes)
        decode = cursor.decode
        name = path.name
        check_crc, with_body, topics = self.check_crc, self.with_body, self.topics
        durable = self.durable_offset
        # Past this position the caller's end offset is reached (a plain int compare per
        # record: this loop is every reader's hot path).
        limit = size + 1 if self.end_offset is None else self.end_offset - base
        while True:
            offset = base + position
            if position >= limit:
                return ScanStop(offset, StopKind.LIMIT, index, path, position)
            if size - position < 8:
                return ScanStop(offset, StopKind.SHORT, index, path, position, "the file ends here")
            try:
                # The record inside the read-ahead buffer: decode it in place (the cursor's
                # own decode, which refills the buffer and names the file, costs a call more).
                start = position - cursor.buf_start
                outcome = (
                    decode_record(
                        cursor.view, start, path=name, check_crc=check_crc, with_body=with_body,
                        topics=topics, reported_position=offset,
                    )
                    if 0 <= start and start + _HEADER_BYTES <= len(cursor.view)
                    else None
                )  # fmt: skip
                if outcome is None or type(outcome) is NeedMoreData:
                    outcome = decode(
                        position, check_crc=check_crc, with_body=with_body, topics=topics,
                        reported_position=offset,
                    )  # fmt: skip
            except CorruptRecordError as err:
                return ScanStop(offset, StopKind.BAD, index, path, position, err.reason)
            if type(outcome) is DecodedRecord:
                record = outcome.record
                if record.physical_offset != offset or (durable is not None and offset >= durable):
                    reason = self._check(cursor, position, outcome)
                    if reason:
                        return ScanStop(offset, StopKind.BAD, index, path, position, reason)
                self.last_record_offset = offset
                self.count += 1
                position += outcome.total_size
                self.last_store_timestamp_ms = record.store_timestamp_ms
                yield outcome
                continue
            if isinstance(outcome, BlankPadding):
                return None
            if isinstance(outcome, Unwritten):
                return ScanStop(offset, StopKind.ZEROS, index, path, position)
            if isinstance(outcome, NeedMoreData):
                reason = f"record of {outcome.need} bytes runs past the end of the file"
                return ScanStop(offset, StopKind.SHORT, index, path, position, reason)
            assert isinstance(outcome, SkippedRecord), outcome
            reason = self._check(cursor, position, outcome)
            if reason:
                return ScanStop(offset, StopKind.BAD, index, path, position, reason)
            self.last_record_offset = offset
            self.count += 1
            position += outcome.total_size

    def _check(
        self, cursor: SegmentCursor, position: int, outcome: DecodedRecord | SkippedRecord
    ) -> str:
        """Why a decoded record is not a record of this log here ("" if it is)."""
        offset = cursor.segment.base_offset + position
        if isinstance(outcome, DecodedRecord):
            physical_offset = outcome.record.physical_offset
        else:  # SkippedRecord: validated by the codec, its topic is not wanted
            field = cursor.window(position + PHYSICAL_OFFSET_POSITION, 8)
            physical_offset = int.from_bytes(field, "big", signed=True)
        if physical_offset != offset:
            return f"PHYSICALOFFSET field says {physical_offset}"
        durable = self.durable_offset
        if durable is not None and offset >= durable:
            end = position + outcome.total_size
            if cursor.window(end - 1, 1) == b"\0" and _zeros_at(cursor, end):
                return "last record ends in zero bytes (torn write)"
        return ""


def _zeros_at(cursor: SegmentCursor, position: int) -> bool:
    head = cursor.window(position, 8)
    return len(head) == 8 and head == bytes(8)
