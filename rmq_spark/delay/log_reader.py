"""Read-only access to a store's CommitLog for the redelivery job, without any lock.

Owns two reads the job needs whether or not a broker has the store open: one record by its
physical offset (``read``, ``read_many``: ``store.reader.record_at_bytes`` over one
``pread`` per neighbourhood), and a forward scan of records of some topics from a physical
offset (``scan``, through ``store/scan.py``'s segment scan and end-of-log judge), used to
find schedule records when no consume_queue table is there (the fallback) and to recognise
records already redelivered after a crash. Files are read with ``os.pread`` (never mapped),
so a segment deleted or truncated under us raises an error instead of SIGBUS. Does not own
decoding (``store/codec.py``) or writing.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError, StoreIOError
from rmq_spark.spark.planner import walk_headers
from rmq_spark.store.layout import COMMITLOG_DIR, is_segment_name, parse_segment_name
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.readable import TailCache, open_segments, readable_end
from rmq_spark.store.reader import record_at_bytes
from rmq_spark.store.scan import LogScan, StopKind
from rmq_spark.store.view import StoreView

__all__ = ["LogReader", "ScannedRecord"]

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
        self._tail = TailCache()
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
            at, source = offset - start, data
            total = int.from_bytes(data[at : at + 4], "big", signed=True)
            if at + total > len(data):  # the size hint was short: read it alone
                at, source = (
                    0,
                    memoryview(self._pread(base, max(total, _HEADER_BYTES), offset - base)),
                )
            found = record_at_bytes(source, at, offset, path=path, check_crc=True)
            if found is None:
                raise CorruptRecordError(path, offset - base, "no whole message record here")
            results[index] = found.record

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
        starts there). The end is ``store.readable.readable_end`` with ``tail=True``: a running
        broker's last complete valid record (its own puts are acknowledged before they are
        published), the judged end of a store no broker has open.

        Raises
        ------
        CorruptRecordError
            Bad bytes below the end, or damage the end-of-log judge found.
        DataMissingError
            Acknowledged data is missing (a truncated or deleted segment file).
        """
        view = StoreView.open(self.commitlog_dir.parent)
        start = max(from_offset, view.min_offset)
        end = self._end(view, start)
        self.scan_end = start
        segments = open_segments(view)
        try:
            scan = LogScan(
                segments, start, end, check_crc=False, with_body=with_body, topics=topics,
                durable_offset=None,
            )  # fmt: skip
            for decoded in scan:
                yield ScannedRecord(decoded.position, decoded.total_size, decoded.record)
                self.scan_end = decoded.position + decoded.total_size
            stop = scan.stop
            if stop.kind is not StopKind.LIMIT and stop.offset < end:
                reason = stop.reason or "zero bytes where a record or BLANK must be"
                raise CorruptRecordError(str(stop.path), stop.position, reason)
            self.scan_end = max(self.scan_end, min(stop.offset, end))
        finally:
            for segment in segments:
                segment.close()

    def _end(self, view: StoreView, start: int) -> int:
        return readable_end(
            view, cache=self._tail, walk=walk_headers, tail=True, from_offset=start
        ).offset

    def end_offset(self, from_offset: int) -> int:
        """The end of the readable records (``scan``'s end), walking record headers from
        ``from_offset`` (a record boundary at or below the end)."""
        view = StoreView.open(self.commitlog_dir.parent)
        self.scan_end = self._end(view, max(from_offset, view.min_offset))
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
