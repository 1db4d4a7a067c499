"""The one end-of-log judge: what the place a ``LogScan`` stopped at means.

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

Owns ``judge_end``, ``LogEnd`` and the zero-byte probes it uses (``first_non_zero``). Does
not own walking the records (``segment_scan.py``) or cutting a torn tail (``recovery.py``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import CorruptRecordError, DataMissingError
from rmq_spark.store.layout import (
    MAX_PROPERTIES_SIZE_BYTES,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    segment_name,
)
from rmq_spark.store.record_decode import DecodedRecord
from rmq_spark.store.segment_scan import ScanStop, SegmentCursor, SegmentSource, StopKind

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "LogEnd", "first_non_zero", "judge_end"]

_ZEROS = bytes(1 << 20)
_MAGICS = (MESSAGE_MAGIC_CODE_V1.to_bytes(4, "big"), MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big"))
DEFAULT_MAX_RECORD_BYTES = (
    4 * 1024 * 1024 + 64 * 1024 + MAX_PROPERTIES_SIZE_BYTES + 4 * MAX_TOPIC_LENGTH_V1
)
"""The largest record of a store with the default (RocketMQ's) 4 MiB message size limit:
how far past the end of the data one torn write can reach, for readers without a config."""


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
