"""A read-only view of one ConsumeQueue, beside ``StoreView``: what every reader of a queue
reads it through, the broker's consumers as Spark, the CLI and the dashboard.

Owns reading a queue's units (``units``: numpy, ``entries``/``cq_units``: the written units
from an offset, as the consume path takes them) and the searches over them (a unit by queue
offset, the first unit of a record at or after a CommitLog offset or a store time, the first
live unit after retention), over one of two sources of files:

* ``CqView.open(directory)``: the files by path (``consumequeue/<topic>/<queueId>/<20-digit
  byte offset>``), read with ``pread`` only (never a mapping, a lock or a write: a file
  retention deletes under us reads as no units, never SIGBUS), safe while a broker writes
  them; the end is found once, at ``open`` (``consume_queue.written_count`` over the last two
  files, as the broker's own load finds it): units written after ``open`` are not seen.
* ``ConsumeQueues.view(topic, queue_id)``: the broker's own queue (``cq_files.CqQueueFiles``)
  under the table's lock; its end is the writer's, so it moves as units are dispatched.

Also lists a store's ConsumeQueue topics and queues. The unit layout and its rules are
``consume_queue.py``'s; the broker's writer is ``cq_files.py``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import numpy as np

from rmq_spark.store.consume_queue import (
    PRE_BLANK_SIZE,
    UNIT,
    CqUnit,
    first_at_or_after,
    first_live,
    units_of,
    written_count,
    written_end,
)
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.layout import CQ_UNIT_SIZE_BYTES

__all__ = ["CqView", "QueueFiles", "queue_dirs", "queue_topics"]

_BLOCK_UNITS = 1 << 16
_FIRST_BLOCK_UNITS = 512
_PREFIXES: dict[tuple[str, int], tuple[int, int, int, bytes]] = {}
"""``(directory, file base) -> (previous offset given, units checked, last offset named,
the last checked unit's bytes)``: what earlier views of this process found written."""
_PREFIXES_MAX = 4096
_NO_LOCK = contextlib.nullcontext()


class QueueFiles(Protocol):
    """What a view reads: one queue's files, ``bases`` their first units (ascending), units
    ``[min_offset, max_offset)`` written. ``read`` gives the raw bytes of units ``[start,
    start + count)`` as far as files go (raises ``OSError``)."""

    directory: Path
    bases: list[int]
    min_offset: int
    max_offset: int

    def read(self, start: int, count: int) -> bytes: ...


def queue_topics(root: Path) -> list[str]:
    """Every topic with a ConsumeQueue directory in the store at ``root``, sorted."""
    directory = Path(root) / CONSUME_QUEUE_DIR
    try:
        return sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    except FileNotFoundError:
        return []


def queue_dirs(root: Path, topic: str) -> dict[int, Path]:
    """``queue id -> directory`` of ``topic``'s ConsumeQueues (``{}``: no such topic)."""
    directory = Path(root) / CONSUME_QUEUE_DIR / topic
    try:
        names = [entry.name for entry in os.scandir(directory) if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {int(name): directory / name for name in sorted(names, key=int) if name.isdigit()}


class CqView:
    """One ConsumeQueue, read-only: units ``[min_offset, max_offset)`` are written.

    ``min_offset`` is the first file's first unit (as the broker loads it; ``live_min``
    skips what retention deleted from the CommitLog). A view by path holds descriptors: use
    it as a context manager, or ``close``. ``lock`` guards ``files`` while a writer changes
    them (the broker's table's lock); a view by path needs none.
    """

    def __init__(
        self, files: QueueFiles, lock: AbstractContextManager[object] | None = None
    ) -> None:
        self.files = files
        self.directory = Path(files.directory)
        self.queue_id = int(self.directory.name) if self.directory.name.isdigit() else -1
        self._lock = lock if lock is not None else _NO_LOCK
        self._loaded: np.ndarray | None = None

    @classmethod
    def open(cls, directory: str | Path, log_min_offset: int | None = None) -> CqView:
        """The queue whose files are in ``directory`` (none: an empty queue). With
        ``log_min_offset`` (the CommitLog's oldest byte), ``min_offset`` is ``live_min`` of
        it: the units of records retention deleted are left out."""
        path = Path(directory)
        try:
            names = [entry.name for entry in os.scandir(path) if entry.is_file()]
        except (FileNotFoundError, NotADirectoryError):
            names = []
        bases = sorted(int(n) // CQ_UNIT_SIZE_BYTES for n in names if n.isdigit())
        view = cls(_FilesAt(path, bases))
        if log_min_offset is not None:
            view.files.min_offset = view.live_min(log_min_offset)
        return view

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    @property
    def bases(self) -> list[int]:
        return self.files.bases

    # --- units ------------------------------------------------------------------------------

    def _read(self, start: int, count: int) -> tuple[int, bytes]:
        """The first written queue offset at or after ``start`` and the bytes of up to
        ``count`` written units from ``start``."""
        with self._lock:
            files = self.files
            index, end = max(start, files.min_offset), min(start + count, files.max_offset)
            return index, files.read(index, end - index) if index < end else b""

    def load(self) -> CqView:
        """Read every written unit now and serve later reads from memory (a caller making
        thousands of probes, as the dashboard's traffic chart does). Returns ``self``."""
        self._loaded = None
        self._loaded = self.all_units()
        return self

    def units(self, start: int, count: int) -> np.ndarray:
        """``UNIT_DTYPE`` units of queue offsets ``[start, start + count)`` within the
        written ones (item ``i`` is ``max(start, min_offset) + i``; shorter where a file
        is gone)."""
        if self._loaded is not None:
            index, end = max(start, self.min_offset), min(start + count, self.max_offset)
            return self._loaded[index - self.min_offset : max(index, end) - self.min_offset]
        return units_of(self._read(start, count)[1])

    def entries(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """``(CommitLog offset, size, tagsCode)`` of up to ``count`` units from queue offset
        ``start`` (item ``i`` is ``start + i``): empty when ``start`` is not a written unit;
        the list ends before a unit that is not valid (``CqUnit.is_valid``). A pre-blank
        filler (``PRE_BLANK_SIZE``) names no record: skip it."""
        if start < self.min_offset:
            return []
        rows = list(UNIT.iter_unpack(self._read(start, count)[1]))
        for i, (physical, size, _tags) in enumerate(rows):
            if physical < 0 or size <= 0:
                return rows[:i]
        return rows

    def cq_units(self, start: int, count: int) -> list[CqUnit]:
        """``entries`` as ``CqUnit`` values."""
        return [CqUnit(*row) for row in self.entries(start, count)]

    def all_units(self) -> np.ndarray:
        """Every written unit, ``[min_offset, max_offset)``."""
        return self.units(self.min_offset, self.max_offset - self.min_offset)

    def unit(self, queue_offset: int) -> tuple[int, int] | None:
        """(CommitLog offset, size) of a written unit; ``None`` outside them (or gone)."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        loaded = self._loaded
        if loaded is not None and queue_offset - self.min_offset < len(loaded):
            item = loaded[queue_offset - self.min_offset]
            return int(item["phys"]), int(item["size"])
        found = self.units(queue_offset, 1)
        return (int(found["phys"][0]), int(found["size"][0])) if len(found) else None

    def physical_at(self, queue_offset: int) -> int | None:
        """The CommitLog offset of a unit naming a record; ``None`` for the pre-blank filler
        or outside the written units."""
        found = self.unit(queue_offset)
        return None if found is None or found[1] == PRE_BLANK_SIZE else found[0]

    def live_min(self, log_min_offset: int) -> int:
        """The first queue offset whose record is at or above ``log_min_offset`` (RocketMQ
        ``minLogicOffset``); ``max_offset`` if none."""
        for base in list(self.bases):
            low = max(base, self.min_offset)
            units = self.units(low, self._file_end(base) - low)
            found = first_live(units, log_min_offset)
            if found < len(units):
                return low + found
        return self.max_offset

    def _file_end(self, base: int) -> int:
        later = [b for b in self.bases if b > base]
        return min(later[0], self.max_offset) if later else self.max_offset

    def first_at_or_after(self, physical_offset: int, low: int | None = None) -> int:
        """The first queue offset whose record starts at or after ``physical_offset``
        (``max_offset`` when none does)."""
        start = self.min_offset if low is None else max(low, self.min_offset)
        return first_at_or_after(start, self.max_offset, physical_offset, self.physical_at)

    def offset_for_time(
        self, timestamp_ms: int, store_time_of: Callable[[int], int | None], low: int | None = None
    ) -> int:
        """The first queue offset (from ``low``) stored at or after ``timestamp_ms``;
        ``max_offset`` if none (RocketMQ ``getOffsetInQueueByTime``).
        ``store_time_of(physical_offset)``: the record's store time; ``None`` or -1 when it
        is gone (older than anything still there)."""

        def stamp(queue_offset: int) -> int | None:
            physical = self.physical_at(queue_offset)
            return None if physical is None else store_time_of(physical)

        start = self.min_offset if low is None else max(low, self.min_offset)
        return first_at_or_after(start, self.max_offset, timestamp_ms, stamp)

    def size_bytes(self) -> int:
        """The CommitLog bytes of the records the written units name."""
        sizes = self.all_units()["size"]
        return int(sizes[sizes != PRE_BLANK_SIZE].astype(np.int64).sum())

    def close(self) -> None:
        """Close the files of a view by path (the broker's own stay the broker's)."""
        files = getattr(self, "files", None)
        if isinstance(files, _FilesAt):
            files.close()

    def __del__(self) -> None:  # a view dropped unclosed (a caller's table of them)
        self.close()

    def __enter__(self) -> CqView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _FilesAt:
    """A queue's files by path, opened as needed, read with ``pread``; the end found once."""

    def __init__(self, directory: Path, bases: list[int]) -> None:
        self.directory = directory
        self.bases = bases
        self._fds: dict[int, int] = {}
        self.min_offset = bases[0] if bases else 0
        self.max_offset = written_end(bases, self._written)[0]

    def _written(self, base: int, previous: int) -> tuple[int, int, bool]:
        """``written_count`` of the file at ``base`` (and whether every unit of it is), read
        in blocks from where an earlier view of this process left it: the broker writes a
        unit once, so only units written since are checked again (a recovery that cut the
        file is seen at the boundary unit, which then reads differently)."""
        key = (str(self.directory), base)
        count, known = 0, _PREFIXES.get(key)
        if known is not None and known[0] == previous and known[1] > 0:
            boundary = self._pread(base, (known[1] - 1) * CQ_UNIT_SIZE_BYTES, CQ_UNIT_SIZE_BYTES)
            if boundary == known[3]:
                count, previous = known[1], known[2]
        previous_in, size = known[0] if count else previous, self._file_size(base)
        block_units = _FIRST_BLOCK_UNITS  # growing: a live queue's new units are few
        while count * CQ_UNIT_SIZE_BYTES < size:
            want = min(block_units * CQ_UNIT_SIZE_BYTES, size - count * CQ_UNIT_SIZE_BYTES)
            block_units = min(block_units * 4, _BLOCK_UNITS)
            block = units_of(self._pread(base, count * CQ_UNIT_SIZE_BYTES, want))
            found, previous = written_count(block, previous)
            count += found
            if found < len(block) or not len(block):
                break
        whole = count * CQ_UNIT_SIZE_BYTES >= size
        if count:
            last = self._pread(base, (count - 1) * CQ_UNIT_SIZE_BYTES, CQ_UNIT_SIZE_BYTES)
            if len(_PREFIXES) >= _PREFIXES_MAX:
                _PREFIXES.clear()
            _PREFIXES[key] = (previous_in, count, previous, last)
        return count, previous, whole

    def _fd(self, base: int) -> int | None:
        fd = self._fds.get(base)
        if fd is None:
            name = f"{base * CQ_UNIT_SIZE_BYTES:020d}"
            try:
                fd = self._fds[base] = os.open(self.directory / name, os.O_RDONLY)
            except FileNotFoundError:  # deleted by retention since listed: no unit left
                return None
        return fd

    def _file_size(self, base: int) -> int:
        fd = self._fd(base)
        return os.fstat(fd).st_size if fd is not None else 0

    def _pread(self, base: int, position: int, size: int) -> bytes:
        fd = self._fd(base)
        return os.pread(fd, size, position) if fd is not None and size > 0 else b""

    def read(self, start: int, count: int) -> bytes:
        """Units ``[start, start + count)`` up to the first file gone (or short)."""
        parts: list[bytes] = []
        index, end = start, start + count
        while index < end:
            at = int(np.searchsorted(self.bases, index, side="right")) - 1
            if at < 0:
                break
            base = self.bases[at]
            stop = min(end, self.bases[at + 1]) if at + 1 < len(self.bases) else end
            want = (stop - index) * CQ_UNIT_SIZE_BYTES
            got = self._pread(base, (index - base) * CQ_UNIT_SIZE_BYTES, want)
            parts.append(got[: len(got) - len(got) % CQ_UNIT_SIZE_BYTES])
            if len(got) < want:
                break
            index = stop
        return b"".join(parts)

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)
