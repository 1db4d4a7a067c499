"""The files of one ConsumeQueue: ``consumequeue/<topic>/<queueId>/<20-digit byte offset>``.

Owns one queue's fixed-size files of 20-byte units (RocketMQ ``ConsumeQueue`` over its
``MappedFileQueue``, docs/FORMAT.md 6): naming (the file's first unit's *byte* offset in the
queue, 20 digits), creating them at full size (sparse, as RocketMQ's mapped files are, so
that RocketMQ's loader accepts them), writing and reading units by queue offset, truncating,
deleting the oldest file, fsyncing, and the load-time checks (file sizes, gaps, the valid
prefix). Also owns the ``config/consume_queue.json`` record. Does not decide which units to
write (``cq_dispatch.py``) nor how the queue is reconciled with the CommitLog
(``cq_recovery.py``).

Units are written with ``pwrite`` and read with ``pread`` (never a shared mapping: a reader
racing a deletion gets an error, not SIGBUS). A file's unwritten units are zeros, which
RocketMQ's test for a written unit (offset >= 0 and size > 0) rejects.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from rmq_spark.errors import ConsumeQueueCorruptError, StoreMetadataError
from rmq_spark.store.consume_queue import UNIT, CqUnit, units_of, written_count, written_end
from rmq_spark.store.fileio import fsync_dir, make_dirs_durably, write_file_atomically
from rmq_spark.store.layout import CQ_UNIT_SIZE_BYTES, is_segment_name, segment_name

__all__ = [
    "CONSUME_QUEUE_DIR",
    "CQ_FILE_UNITS",
    "CqQueueFiles",
    "FLUSHED_RECORD_FILE",
    "read_flushed_record",
    "write_flushed_record",
]

CONSUME_QUEUE_DIR = "consumequeue"
CQ_FILE_UNITS = 300_000
"""Units per file: RocketMQ's ``mappedFileSizeConsumeQueue`` is 300,000 x 20 = 6,000,000."""
FLUSHED_RECORD_FILE = "config/consume_queue.json"
"""Under the store root: every unit of a record below ``flushed_offset`` is fsynced. Beside
``consumequeue/``, not in it, so that deleting ``consumequeue/`` (to rebuild it) leaves no
record that claims units it no longer has, and tools that size CQ files by the first file
they find there see only CQ files."""

_UNIT = UNIT
_UNIT_BYTES = CQ_UNIT_SIZE_BYTES
_ZERO_CHUNK_BYTES = 1 << 20
_READ_BLOCK_UNITS = 4096
_RECORD_VERSION = 1
_log = logging.getLogger(__name__)


def read_flushed_record(root_dir: Path) -> int | None:
    """``flushed_offset`` of ``config/consume_queue.json``; ``None`` when there is none.

    Raises
    ------
    StoreMetadataError
        The file exists but is not a version 1 record.
    """
    path = root_dir / FLUSHED_RECORD_FILE
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as err:
        raise StoreMetadataError(str(path), f"not JSON ({err})") from None
    value = body.get("flushed_offset") if isinstance(body, dict) else None
    if body.get("version") != _RECORD_VERSION or type(value) is not int or value < 0:
        raise StoreMetadataError(str(path), f"not a version {_RECORD_VERSION} flushed record")
    return value


def write_flushed_record(root_dir: Path, flushed_offset: int) -> None:
    """Durably replace ``config/consume_queue.json`` (raises ``OSError``)."""
    path = root_dir / FLUSHED_RECORD_FILE
    make_dirs_durably(path.parent)
    body = {"version": _RECORD_VERSION, "flushed_offset": flushed_offset}
    write_file_atomically(path, (json.dumps(body) + "\n").encode())


class CqQueueFiles:
    """The files of one queue. ``min_offset``/``max_offset`` are queue offsets (unit
    indexes): units ``[min_offset, max_offset)`` are readable; ``max_offset`` is where the
    next unit goes. Not thread-safe: ``ConsumeQueues`` serialises access.
    """

    def __init__(self, directory: Path, file_units: int) -> None:
        self.directory = directory
        self.file_units = file_units
        self.file_bytes = file_units * _UNIT_BYTES
        self._fds: dict[int, int] = {}  # first unit index of a file -> descriptor
        self.bases: list[int] = []  # first unit index of each file, ascending
        self.min_offset = 0
        self.max_offset = 0
        self.tail_units = 0  # units past max_offset that held non-zero bytes at load
        self._dirty: set[int] = set()

    # --- naming ---------------------------------------------------------------------------

    def base_of(self, index: int) -> int:
        return index - index % self.file_units

    def path_of(self, base: int) -> Path:
        return self.directory / segment_name(base * _UNIT_BYTES)

    def where(self, index: int) -> tuple[str, int]:
        """(file path, byte position) of unit ``index`` (for error messages)."""
        base = self.base_of(index)
        return str(self.path_of(base)), (index - base) * _UNIT_BYTES

    # --- loading --------------------------------------------------------------------------

    @classmethod
    def load(cls, directory: Path, file_units: int) -> CqQueueFiles:
        """Open the queue's files and find its valid prefix (RocketMQ ``ConsumeQueue.recover``:
        from the second-last file, units up to the first that is not written).

        Raises
        ------
        ConsumeQueueCorruptError
            A file of the wrong size or name, or a missing file between two others.
        """
        queue = cls(directory, file_units)
        names = sorted(entry.name for entry in os.scandir(directory) if entry.is_file())
        bases: list[int] = []
        for name in names:
            path = directory / name
            if not is_segment_name(name) or int(name) % queue.file_bytes:
                raise ConsumeQueueCorruptError(
                    str(path), 0, f"not a ConsumeQueue file name (multiple of {queue.file_bytes})"
                )
            bases.append(int(name) // _UNIT_BYTES)
        while bases and os.stat(queue.path_of(bases[-1])).st_size == 0:
            path = queue.path_of(bases.pop())
            _log.warning(
                "deleting empty trailing ConsumeQueue file %s (a creation cut short)", path
            )
            path.unlink()
        for previous, base in zip(bases, bases[1:], strict=False):
            if base != previous + file_units:
                raise ConsumeQueueCorruptError(
                    str(queue.path_of(previous + file_units)), 0, "missing between two files"
                )
        try:
            for base in bases:
                path = queue.path_of(base)
                fd = os.open(path, os.O_RDWR)
                queue._fds[base] = fd
                queue.bases.append(base)
                size = os.fstat(fd).st_size
                if size != queue.file_bytes:
                    hint = (
                        f" (written with another file size? open the store with "
                        f"store.consume_queue_file_units = {size // _UNIT_BYTES})"
                        if size and size % _UNIT_BYTES == 0
                        else ""
                    )
                    raise ConsumeQueueCorruptError(
                        str(path), size, f"file is {size} bytes, expected {queue.file_bytes}{hint}"
                    )
            queue._find_end()
        except BaseException:
            queue.close()
            raise
        return queue

    def _find_end(self) -> None:
        """Set ``max_offset`` to the end of the valid prefix of the last files, and
        ``tail_units`` to how many units after it hold non-zero bytes."""
        if not self.bases:
            return
        self.min_offset = self.bases[0]
        used_units: dict[int, int] = {}

        def written(base: int, previous: int) -> tuple[int, int, bool]:
            data = os.pread(self._fds[base], self.file_bytes, 0)
            used = len(data.rstrip(b"\0"))
            used += -used % _UNIT_BYTES
            used_units[base] = used // _UNIT_BYTES
            count, previous = written_count(units_of(data[:used]), previous)
            return count, previous, count == self.file_units

        self.max_offset, stopped = written_end(self.bases, written)
        if stopped is not None:
            self.tail_units = used_units[stopped] - (self.max_offset - stopped)
            for later in self.bases[self.bases.index(stopped) + 1 :]:
                if os.pread(self._fds[later], self.file_bytes, 0).strip(b"\0"):
                    self.tail_units += self.file_units  # truncate_to deletes the file

    # --- reading and writing ----------------------------------------------------------------

    def read(self, start: int, count: int) -> bytes:
        """The raw bytes of units ``[start, start + count)`` that exist in files (raises
        ``OSError``)."""
        parts: list[bytes] = []
        index, end = start, start + count
        while index < end:
            base = self.base_of(index)
            fd = self._fds.get(base)
            if fd is None:
                break
            take = min(end, base + self.file_units) - index
            parts.append(os.pread(fd, take * _UNIT_BYTES, (index - base) * _UNIT_BYTES))
            index += take
        return b"".join(parts)

    def units(self, start: int, count: int) -> list[CqUnit]:
        """Decoded units ``[start, start + count)`` (as far as files go)."""
        return [CqUnit(*fields) for fields in _UNIT.iter_unpack(self.read(start, count))]

    def iter_units(self, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """``(physical_offset, size, tags_code)`` of units ``[start, end)``, read in blocks."""
        index = start
        while index < end:
            take = (
                min(end, self.base_of(index) + self.file_units, index + _READ_BLOCK_UNITS) - index
            )
            yield from _UNIT.iter_unpack(self.read(index, take))
            index += take

    def write(self, start: int, data: bytes) -> None:
        """Write whole units at queue offset ``start``, creating files as needed (raises
        ``OSError``). Does not move ``max_offset``."""
        assert len(data) % _UNIT_BYTES == 0
        base = start - start % self.file_units
        fd = self._fds.get(base)
        position = (start - base) * _UNIT_BYTES
        size = len(data)
        if fd is not None and position + size <= self.file_bytes:  # the usual case: one call
            written = os.pwrite(fd, data, position)
            while written < size:  # a short write
                written += os.pwrite(fd, memoryview(data)[written:], position + written)
            self._dirty.add(base)
            return
        view = memoryview(data)
        index = start
        while view:
            base = self.base_of(index)
            fd = self._fds.get(base)
            if fd is None:
                fd = self._create(base)
            take = min(len(view), (base + self.file_units - index) * _UNIT_BYTES)
            position = (index - base) * _UNIT_BYTES
            chunk = view[:take]
            while chunk:
                written = os.pwrite(fd, chunk, position)
                chunk, position = chunk[written:], position + written
            self._dirty.add(base)
            view = view[take:]
            index += take // _UNIT_BYTES

    def _create(self, base: int) -> int:
        """Create the file starting at unit ``base`` at full size, durably named."""
        make_dirs_durably(self.directory)
        path = self.path_of(base)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, self.file_bytes)
            os.fsync(fd)
            fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            raise
        self._fds[base] = fd
        self.bases.append(base)
        self.bases.sort()
        if len(self.bases) == 1:
            self.min_offset = max(self.min_offset, base)
        return fd

    def take_dirty(self) -> list[tuple[int, int]]:
        """``(first unit, duplicated descriptor)`` of every file written since the last
        call, to fsync without holding the caller's lock (close the descriptors; raises
        ``OSError``). ``mark_dirty`` puts them back after a failed fsync."""
        taken = [(base, os.dup(self._fds[base])) for base in sorted(self._dirty)]
        self._dirty.clear()
        return taken

    def mark_dirty(self, bases: list[int]) -> None:
        self._dirty.update(base for base in bases if base in self._fds)

    # --- truncating and deleting ------------------------------------------------------------

    def truncate_to(self, index: int) -> None:
        """Make ``index`` the end: zero the units after it that were ever written in its
        file (``tail_units``) and delete every later file (raises ``OSError``)."""
        base = self.base_of(index)
        end = max(self.max_offset, index) + self.tail_units
        for doomed in [b for b in self.bases if b > base]:
            _log.warning("deleting ConsumeQueue file %s past the end", self.path_of(doomed))
            os.close(self._fds.pop(doomed))
            self.bases.remove(doomed)
            self._dirty.discard(doomed)
            self.path_of(doomed).unlink()
            fsync_dir(self.directory)
        fd = self._fds.get(base)
        if fd is not None:
            position = (index - base) * _UNIT_BYTES
            stop = min(end - base, self.file_units) * _UNIT_BYTES
            while position < stop:
                size = min(_ZERO_CHUNK_BYTES, stop - position)
                os.pwrite(fd, bytes(size), position)
                position += size
            self._dirty.add(base)
        self.max_offset = min(self.max_offset, index)
        self.min_offset = min(self.min_offset, self.max_offset)
        self.tail_units = 0

    def delete_oldest_file(self) -> Path:
        """Delete the first file (never the only one); returns its path (raises ``OSError``)."""
        assert len(self.bases) > 1
        base = self.bases.pop(0)
        os.close(self._fds.pop(base))
        self._dirty.discard(base)
        path = self.path_of(base)
        path.unlink()
        fsync_dir(self.directory)
        self.min_offset = max(self.min_offset, self.bases[0])
        return path

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
