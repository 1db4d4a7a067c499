"""The one segment scan and the one end-of-log judge.

Every reader of the CommitLog (recovery, ``dump``/``verify``, the msg-id query, the delay
job's log reader, the Spark planner's tail check, the reput progress) walks records with
``LogScan`` and asks ``judge_end`` where the log ends; ``readable.readable_end`` puts both
together for a store directory seen through a ``StoreView``.

The rule for where the readable log ends:

* A store one of *our* brokers has open (its lock is held, its queue-offset snapshot file
  exists): the checkpoint's ``confirmPhyOffset``, which that broker publishes only at the end
  of whole records.
* A store another writer has open whose checkpoint is not ours (Apache RocketMQ leaves
  ``confirmPhyOffset`` and ``masterFlushedOffset`` at 0 or stale): scan to the last
  complete, valid record; what follows may be a write in progress, so it is not judged.
* A store no process has open (clean close, kill -9, power loss, a copy): scan to the real
  end X of the valid records, whatever the checkpoint says, and judge X:

  - X below ``masterFlushedOffset`` (what the checkpoint says is durable): acknowledged data
    is damaged (``CorruptRecordError``) or missing (``DataMissingError``, a truncated or
    deleted segment file), naming the file and position;
  - a valid, newer record within one maximal record after X, or in a later segment: a hole
    (``CorruptRecordError``);
  - non-zero bytes after X that one unsynced write cannot have left: more than one maximal
    record of them, non-zero bytes further on in the segment (read when bytes follow X), a
    later segment that is not all zeros (``CorruptRecordError``);
  - otherwise X is the end; the non-zero bytes just after it are one torn write
    (``LogEnd.torn_bytes``: recovery cuts them, readers ignore them), and later all-zero
    segments are preallocated files (RocketMQ leaves one; ``LogEnd.empty_segments``).

Where a scan stops inside a segment: zero bytes where a header would start, a bad record
(bad magic, impossible size, lengths disagreeing with TOTALSIZE, CRC mismatch,
PHYSICALOFFSET not naming its own position, a record running past the end of the file),
or, above the durable offset, a last record (followed by zero bytes) whose final byte is
zero: BODYCRC covers only the body, so a write torn in the topic or properties decodes, but
a whole record never ends in a zero byte.
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rmq_spark.errors import CorruptRecordError, DataMissingError
from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    DecodeOutcome,
    NeedMoreData,
    SkippedRecord,
    Unwritten,
    decode_record,
)
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    segment_name,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "LogEnd",
    "LogScan",
    "ScanStop",
    "SegmentCursor",
    "SegmentSource",
    "StopKind",
    "first_non_zero",
    "judge_end",
]

_CHUNK_BYTES = 8 << 20
_ZEROS = bytes(1 << 20)
_MAGICS = (MESSAGE_MAGIC_CODE_V1.to_bytes(4, "big"), MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big"))
DEFAULT_MAX_RECORD_BYTES = (
    4 * 1024 * 1024 + 64 * 1024 + MAX_PROPERTIES_SIZE_BYTES + 4 * MAX_TOPIC_LENGTH_V1
)
"""The largest record of a store with the default (RocketMQ's) 4 MiB message size limit:
how far past the end of the data one torn write can reach, for readers without a config."""

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


def first_non_zero(segment: SegmentSource, start: int, end: int | None = None) -> int | None:
    """Position of the first non-zero byte in ``[start, end)`` (default: to the file end).

    Reads only the file's data regions (``SEEK_DATA``): holes and unwritten preallocated
    extents read as zeros without being read.
    """
    stop = segment.size_bytes if end is None else min(end, segment.size_bytes)
    for begin, finish in _data_regions(segment.path, start, stop):
        position = begin
        while position < finish:
            chunk = segment.read(position, min(len(_ZEROS), finish - position))
            if not chunk:
                return None
            if chunk != _ZEROS[: len(chunk)]:
                return position + len(chunk) - len(chunk.lstrip(b"\0"))
            position += len(chunk)
    return None


def _data_regions(path: Path, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """``[begin, end)`` ranges of ``path`` within ``[start, stop)`` that may hold data."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield start, stop
        return
    try:
        position = start
        while position < stop:
            try:
                begin = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as err:
                if err.errno != errno.ENXIO:  # no SEEK_DATA here: read it all
                    yield position, stop
                return  # ENXIO: only a hole from here to the end of the file
            if begin >= stop:
                return
            finish = min(stop, os.lseek(fd, begin, os.SEEK_HOLE))
            yield begin, finish
            position = finish
    finally:
        os.close(fd)


def _last_non_zero_end(segment: SegmentSource, start: int, end: int) -> int:
    """End of the last non-zero byte in ``[start, end)`` (``start`` if all zero)."""
    data = segment.read(start, end - start)
    return start + len(data.rstrip(b"\0"))


def _valid_record_at(segment: SegmentSource, position: int, min_store_ts: int) -> bool:
    """A valid record that names its own position and is not older than the last good one
    (older ones are stale bytes RocketMQ leaves past its own truncation)."""
    try:
        outcome = SegmentCursor(segment, 1 << 16).decode(position, with_body=False)
    except CorruptRecordError:
        return False
    return (
        isinstance(outcome, DecodedRecord)
        and outcome.record.physical_offset == segment.base_offset + position
        and outcome.record.store_timestamp_ms >= min_store_ts
    )


def _valid_record_after(
    segment: SegmentSource, position: int, limit: int, min_store_ts: int
) -> int | None:
    region = segment.read(position, limit - position)
    candidates = []
    for magic in _MAGICS:
        at = region.find(magic, 5)
        while at >= 0:
            candidates.append(at - 4)
            at = region.find(magic, at + 1)
    for found in sorted(candidates):
        if _valid_record_at(segment, position + found, min_store_ts):
            return position + found
    return None


@dataclass(frozen=True, slots=True)
class LogEnd:
    """The judged end of the log.

    ``offset`` is the end of the readable records. ``torn_bytes`` non-zero bytes after it
    are one torn write (recovery cuts them). ``empty_segments`` are later all-zero
    (preallocated) segment files. ``stop`` is where the scan stopped.
    """

    offset: int
    stop: ScanStop
    torn_bytes: int = 0
    empty_segments: tuple[str, ...] = ()


def _where(stop: ScanStop, segment_size: int) -> tuple[str, int]:
    if stop.path is not None and stop.kind is not StopKind.GAP and stop.kind is not StopKind.BLANK:
        return str(stop.path), stop.position
    base = stop.offset - stop.offset % segment_size if segment_size else stop.offset
    path = stop.path.parent / segment_name(base) if stop.path else Path(segment_name(base))
    return str(path), stop.offset - base


def judge_end(
    segments: Sequence[SegmentSource],
    stop: ScanStop,
    *,
    durable_offset: int,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    min_store_timestamp_ms: int = 0,
    live: bool = False,
    segment_size: int = 0,
) -> LogEnd:
    """Decide what the place a scan stopped at means (the rule in the module docstring).

    ``live``: another process is writing the store (bytes past the end may be a write in
    progress; only the durable offset is checked).

    Raises
    ------
    DataMissingError
        The data ends below ``durable_offset`` because a file is short or missing.
    CorruptRecordError
        Damage: a bad record below ``durable_offset``, a hole, or more non-zero bytes after
        the end than one torn write leaves.
    """
    end = stop.offset
    if stop.kind is StopKind.LIMIT:
        return LogEnd(end, stop)
    size = segment_size or max((s.size_bytes for s in segments), default=0)
    path, position = _where(stop, size)
    if end < durable_offset:
        if stop.kind is StopKind.BAD:
            raise CorruptRecordError(
                path,
                position,
                f"{stop.reason} below the durable offset {durable_offset} "
                "(acknowledged data is damaged)",
            )
        why = "segment file is missing" if stop.kind is StopKind.GAP else "data ends"
        raise DataMissingError(
            path,
            position,
            f"the {why} at physical offset {end}, below the durable offset {durable_offset} "
            f"the checkpoint records: {durable_offset - end} bytes of acknowledged data are "
            "missing (a truncated or deleted segment file)",
        )
    if stop.kind is StopKind.GAP:
        raise DataMissingError(path, position, f"{stop.reason}: a hole in the middle of the log")
    if live or stop.index < 0:
        return LogEnd(end, stop)
    torn = 0
    what = stop.reason or "zero bytes where a record or BLANK must be"
    if stop.kind is not StopKind.BLANK:
        torn = _judge_tail(
            segments[stop.index], stop, what, max_record_bytes, min_store_timestamp_ms
        )
    empty: list[str] = []
    for later in segments[stop.index + 1 :]:
        if _valid_record_at(later, 0, min_store_timestamp_ms):
            raise CorruptRecordError(
                path, position, f"{what}, followed by valid data in segment {later.path.name}"
            )
        at = first_non_zero(later, 0)
        if at is not None:
            raise CorruptRecordError(
                path,
                position,
                f"{what}, followed by non-zero bytes in segment {later.path.name} at position "
                f"{at} (not one torn write)",
            )
        empty.append(later.path.name)
    return LogEnd(end, stop, torn, tuple(empty))


def _judge_tail(
    segment: SegmentSource,
    stop: ScanStop,
    what: str,
    max_record: int,
    min_store_ts: int,
) -> int:
    """The torn bytes after the end inside its segment, or raise if they are not one write."""
    position, size, path = stop.position, segment.size_bytes, str(segment.path)
    window_end = min(size, position + max_record)
    found = _valid_record_after(segment, position, window_end, min_store_ts)
    if found is not None:
        raise CorruptRecordError(
            path, position, f"{what}, followed by a valid record at position {found}"
        )
    torn_end = _last_non_zero_end(segment, position, window_end)
    if torn_end == position:
        return 0  # zeros after the end: nothing more to read (a 1 GiB segment costs 0.2 s)
    # Bytes follow the end: they must be one write, so nothing is further on.
    beyond = first_non_zero(segment, window_end)
    if beyond is not None:
        raise CorruptRecordError(
            path,
            position,
            f"{what}, and non-zero bytes at position {beyond}, more than one record "
            f"({max_record} bytes) after it: not one torn write",
        )
    if torn_end > size - 8 and torn_end > position + 8:
        raise CorruptRecordError(
            path,
            position,
            f"{what}, and non-zero bytes up to the end of the file: not one torn write",
        )
    return torn_end - position
