"""Read-only access to a store's CommitLog for the redelivery job, without any lock.

Owns two reads the job needs whether or not a broker has the store open: one record by its
physical offset (``read``), and a forward scan of records of some topics from a physical
offset (``scan``), used to find schedule records when no consume_queue table is there (the
fallback) and to recognise records already redelivered after a crash. Files are read with
``os.pread`` (never mapped), so a segment deleted or truncated under us raises an error
instead of SIGBUS. Does not own decoding (``store/codec.py``) or writing.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError, StoreIOError
from rmq_spark.store.codec import (
    BlankPadding,
    DecodedRecord,
    NeedMoreData,
    SkippedRecord,
    Unwritten,
    decode_record,
)
from rmq_spark.store.layout import COMMITLOG_DIR, is_segment_name, parse_segment_name
from rmq_spark.store.message import MessageRecord

__all__ = ["LogReader", "ScannedRecord"]

_SCAN_CHUNK_BYTES = 4 * 1024 * 1024
_HEADER_BYTES = 8


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A record met by ``scan``: where it is, how long, and the record."""

    physical_offset: int
    total_size: int
    record: MessageRecord


class LogReader:
    """Reads ``<store_dir>/commitlog`` segments; call ``close()`` (or use ``with``) when done.

    The segment listing is cached and refreshed when an offset falls outside it; file
    descriptors are cached per segment (a segment deleted by retention stays readable
    through an open descriptor, which is harmless here).

    Parameters
    ----------
    store_dir
        The store root.
    """

    def __init__(self, store_dir: str | Path) -> None:
        self.commitlog_dir = Path(store_dir) / COMMITLOG_DIR
        self._listing: list[tuple[int, int]] = []
        self._fds: dict[int, int] = {}
        self.scan_end = 0  # where the last ``scan`` stopped: the end of what was readable

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _segments(self, refresh: bool = True) -> list[tuple[int, int]]:
        """``(base_offset, size_bytes)`` of every segment, oldest first."""
        if not refresh and self._listing:
            return self._listing
        found: list[tuple[int, int]] = []
        try:
            entries = list(os.scandir(self.commitlog_dir))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            if not is_segment_name(entry.name):
                continue
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue
            if size > 0:
                found.append((parse_segment_name(entry.name), size))
        found.sort()
        self._listing = found
        live = {base for base, _ in found}
        for base in [b for b in self._fds if b not in live]:
            os.close(self._fds.pop(base))
        return found

    def min_offset(self) -> int:
        """Base offset of the oldest segment (0 when there is none)."""
        segments = self._segments()
        return segments[0][0] if segments else 0

    def _locate(self, physical_offset: int) -> tuple[int, int] | None:
        for refresh in (False, True):
            segments = self._segments(refresh)
            index = bisect.bisect_right([base for base, _ in segments], physical_offset) - 1
            if index >= 0 and physical_offset < segments[index][0] + segments[index][1]:
                return segments[index]
        return None

    def read(self, physical_offset: int, size_hint: int = 0) -> MessageRecord:
        """The message record at ``physical_offset``.

        Raises
        ------
        OffsetOutOfRangeError
            No segment holds that offset (deleted by retention, or never written).
        CorruptRecordError
            The bytes there are not a whole valid record.
        """
        found = self._locate(physical_offset)
        if found is None:
            segments = self._listing
            low = segments[0][0] if segments else 0
            high = segments[-1][0] + segments[-1][1] if segments else 0
            raise OffsetOutOfRangeError(physical_offset, low, high)
        base, _size = found
        position = physical_offset - base
        data = self._pread(base, max(size_hint, _HEADER_BYTES), position)
        if len(data) >= 4:
            total = int.from_bytes(data[:4], "big", signed=True)
            if total > len(data):
                data = self._pread(base, total, position)
        path = str(self.commitlog_dir / f"{base:020d}")
        outcome = decode_record(memoryview(data), 0, path=path, check_crc=True)
        if not isinstance(outcome, DecodedRecord):
            raise CorruptRecordError(
                path, position, f"no whole message record here ({type(outcome).__name__})"
            )
        return outcome.record

    def scan(
        self,
        from_offset: int,
        topics: Collection[str] | None = None,
        *,
        with_body: bool = True,
    ) -> Iterator[ScannedRecord]:
        """Records (of ``topics``, if given) from ``from_offset`` to the end of what is written.

        ``from_offset`` must be a record boundary (or below the oldest segment: the scan
        starts there). The scan ends at unwritten bytes, at a record that is not whole yet,
        or at bytes that do not decode in the newest segment (a write in progress, a torn
        tail); bad bytes in an older segment raise ``CorruptRecordError``.
        """
        segments = self._segments()
        self.scan_end = max(from_offset, segments[0][0]) if segments else from_offset
        for number, (base, size) in enumerate(segments):
            if base + size <= from_offset:
                continue
            is_last = number == len(segments) - 1
            position = max(from_offset - base, 0)
            finished = yield from self._scan_segment(
                base, size, position, topics, with_body, is_last
            )
            if not finished:
                return

    def _scan_segment(
        self,
        base: int,
        size: int,
        position: int,
        topics: Collection[str] | None,
        with_body: bool,
        is_last: bool,
    ) -> Iterator[ScannedRecord]:
        """Yield the segment's records; return True at its BLANK end, False where data ends."""
        path = str(self.commitlog_dir / f"{base:020d}")
        chunk_start, chunk = position, b""
        while position < size:
            at = position - chunk_start
            if len(chunk) - at < _HEADER_BYTES:
                chunk_start, at = position, 0
                chunk = self._pread(base, min(_SCAN_CHUNK_BYTES, size - position), position)
                if len(chunk) < _HEADER_BYTES:
                    return False
            try:
                outcome = decode_record(
                    memoryview(chunk), at, path=path, check_crc=False, with_body=with_body,
                    topics=topics,
                )  # fmt: skip
            except CorruptRecordError:
                if is_last:
                    return False  # a record being written right now, or a torn tail
                raise
            if isinstance(outcome, NeedMoreData):
                if chunk_start + len(chunk) >= size:
                    return False
                chunk_start = position
                chunk = self._pread(base, max(outcome.need, _SCAN_CHUNK_BYTES), position)
                if len(chunk) < outcome.need:
                    return False
                continue
            if isinstance(outcome, Unwritten):
                return False
            if isinstance(outcome, BlankPadding):
                self.scan_end = base + size
                return True
            if isinstance(outcome, SkippedRecord):
                position += outcome.total_size
                self.scan_end = base + position
                continue
            assert isinstance(outcome, DecodedRecord)
            yield ScannedRecord(base + position, outcome.total_size, outcome.record)
            position += outcome.total_size
            self.scan_end = base + position
        self.scan_end = base + size
        return True

    def end_offset(self, from_offset: int) -> int:
        """The end of the readable records, scanning headers from ``from_offset`` (a record
        boundary at or below the end)."""
        for _ in self.scan(from_offset, topics=(), with_body=False):
            pass
        return self.scan_end

    def _pread(self, base: int, length: int, position: int) -> bytes:
        path = self.commitlog_dir / f"{base:020d}"
        fd = self._fds.get(base)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError as err:
                raise OffsetOutOfRangeError(base + position, 0, 0) from err
            self._fds[base] = fd
        try:
            return os.pread(fd, length, position)
        except OSError as err:
            raise StoreIOError(f"{path}: cannot read at position {position}: {err}") from err
