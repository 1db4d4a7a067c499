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
from collections.abc import Collection, Iterator, Sequence
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
_READ_GAP_BYTES = 64 * 1024  # read across a gap this small rather than pread twice
_READ_SPAN_BYTES = 4 * 1024 * 1024  # one read_many pread covers at most this much
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
        self._names: dict[int, str] = {}

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
        result = self.read_many([(physical_offset, size_hint)])[0]
        if isinstance(result, OffsetOutOfRangeError):
            raise result
        return result

    def read_many(
        self, wanted: Sequence[tuple[int, int]]
    ) -> list[MessageRecord | OffsetOutOfRangeError]:
        """The records at ``(physical_offset, size_hint)`` positions, in the order asked.

        Neighbouring records of one segment are read with one ``pread``. A position no
        segment holds gives an ``OffsetOutOfRangeError`` *value* in its place.

        Raises
        ------
        CorruptRecordError
            The bytes at a position are not a whole valid record.
        """
        results: list[MessageRecord | OffsetOutOfRangeError | None] = [None] * len(wanted)
        order = sorted(range(len(wanted)), key=lambda i: wanted[i][0])
        group: list[int] = []
        group_base = group_end = -1
        for index in order:
            offset, size = wanted[index]
            found = self._locate(offset)
            if found is None:
                results[index] = self._out_of_range(offset)
                continue
            base = found[0]
            size = max(size, _HEADER_BYTES)
            if group and (
                base != group_base
                or offset > group_end + _READ_GAP_BYTES
                or offset + size - wanted[group[0]][0] > _READ_SPAN_BYTES
            ):
                self._read_group(group, wanted, group_base, results)
                group = []
            if not group:
                group_base = base
            group.append(index)
            group_end = max(group_end if len(group) > 1 else 0, offset + size)
        if group:
            self._read_group(group, wanted, group_base, results)
        return results  # type: ignore[return-value]

    def _read_group(
        self,
        group: list[int],
        wanted: Sequence[tuple[int, int]],
        base: int,
        results: list[MessageRecord | OffsetOutOfRangeError | None],
    ) -> None:
        start = wanted[group[0]][0]
        end = max(offset + max(size, _HEADER_BYTES) for offset, size in (wanted[i] for i in group))
        data = memoryview(self._pread(base, end - start, start - base))
        path = self._names.get(base) or self._names.setdefault(base, f"{base:020d}")
        for index in group:
            offset = wanted[index][0]
            outcome = decode_record(data, offset - start, path=path, check_crc=True)
            if isinstance(outcome, NeedMoreData):  # the size hint was short: read it alone
                total = int.from_bytes(data[offset - start : offset - start + 4], "big")
                alone = self._pread(base, max(total, _HEADER_BYTES), offset - base)
                outcome = decode_record(memoryview(alone), 0, path=path, check_crc=True)
            if not isinstance(outcome, DecodedRecord):
                raise CorruptRecordError(
                    path,
                    offset - base,
                    f"no whole message record here ({type(outcome).__name__})",
                )
            results[index] = outcome.record

    def _out_of_range(self, physical_offset: int) -> OffsetOutOfRangeError:
        segments = self._listing
        low = segments[0][0] if segments else 0
        high = segments[-1][0] + segments[-1][1] if segments else 0
        return OffsetOutOfRangeError(physical_offset, low, high)

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
