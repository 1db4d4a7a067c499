"""A read-only view of a store directory, for readers that never write: the Spark source.

Owns listing ``commitlog/`` segments, reading ``confirmPhyOffset`` from ``checkpoint`` and
deciding whether a broker has the store open, all without taking any lock and without
opening the ``lock`` file. (The store's lock is a POSIX ``fcntl`` lock, which the kernel
drops when *any* descriptor of the file in the owning process is closed; a reader in the
broker's own process that opened and closed ``lock`` would silently release it.) Also maps
segment files for reading. Does not decode records (``columnar.py``) or plan (``planner.py``).

"Broker has it open" means: some process holds a lock on ``<store>/lock``, found in
``/proc/locks`` by the file's device and inode (Linux). Where ``/proc/locks`` is missing the
``abort`` file decides (it exists while a broker runs, and after a crash).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.spark.offsets import SegmentSpan
from rmq_spark.store.layout import (
    CONFIRM_PHY_OFFSET_POSITION,
    is_segment_name,
    parse_segment_name,
    segment_name,
)

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "LOCK_FILE",
    "MappedSegment",
    "StoreView",
    "broker_has_store_open",
    "read_confirm_offset",
]

CHECKPOINT_FILE = "checkpoint"
LOCK_FILE = "lock"
ABORT_FILE = "abort"
_I64 = struct.Struct(">q")
_PROC_LOCKS = Path("/proc/locks")
_STABLE_READ_ATTEMPTS = 100


def read_confirm_offset(store_dir: Path) -> int:
    """``confirmPhyOffset`` (byte 32 of ``checkpoint``, big-endian int64); 0 if absent.

    Reads until two reads agree, so a concurrent 8-byte write is never seen torn.
    """
    try:
        fd = os.open(store_dir / CHECKPOINT_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        previous = os.pread(fd, 8, CONFIRM_PHY_OFFSET_POSITION)
        for _ in range(_STABLE_READ_ATTEMPTS):
            current = os.pread(fd, 8, CONFIRM_PHY_OFFSET_POSITION)
            if current == previous:
                break
            previous = current
    finally:
        os.close(fd)
    if len(previous) < 8:
        return 0
    return max(0, _I64.unpack(previous)[0])


def broker_has_store_open(store_dir: Path, proc_locks: Path = _PROC_LOCKS) -> bool:
    """Whether a process (this one included) holds a lock on ``<store_dir>/lock``.

    Never opens the lock file (see the module docstring). Falls back to "the ``abort`` file
    exists" where ``/proc/locks`` cannot be read.
    """
    try:
        stat = os.stat(store_dir / LOCK_FILE)
    except FileNotFoundError:
        return False
    try:
        table = proc_locks.read_text()
    except OSError:
        return (store_dir / ABORT_FILE).exists()
    # Lines look like "1: POSIX  ADVISORY  WRITE 4242 fd:00:1234567 0 0"; the device is
    # printed as hex major:minor.
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        for item in fields[4:7]:
            if item == wanted:
                return True
    return False


@dataclass(frozen=True, slots=True)
class StoreView:
    """A snapshot of a store directory: its segments, confirm offset and broker state."""

    store_dir: Path
    spans: tuple[SegmentSpan, ...]
    confirm_offset: int
    broker_open: bool

    @classmethod
    def open(cls, store_dir: str | Path) -> StoreView:
        """List the segments of the store at ``store_dir`` (a directory with ``commitlog/``).

        Raises
        ------
        FileNotFoundError
            ``store_dir`` does not exist.
        """
        root = Path(store_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"store directory {root} does not exist")
        # Read the broker state and the confirm offset *before* listing, so that every byte
        # below the confirm offset was written before the listing saw its segment.
        broker_open = broker_has_store_open(root)
        confirm = read_confirm_offset(root)
        spans: list[SegmentSpan] = []
        commitlog = root / "commitlog"
        if commitlog.is_dir():
            with os.scandir(commitlog) as entries:
                for entry in entries:
                    if not is_segment_name(entry.name) or not entry.is_file():
                        continue
                    try:
                        size = entry.stat().st_size
                    except FileNotFoundError:  # deleted by retention while listing
                        continue
                    if size > 0:
                        spans.append(SegmentSpan(parse_segment_name(entry.name), size))
        spans.sort(key=lambda s: s.base_offset)
        return cls(root, tuple(spans), confirm, broker_open)

    @property
    def min_offset(self) -> int:
        """Base offset of the oldest segment (0 for an empty store)."""
        return self.spans[0].base_offset if self.spans else 0

    @property
    def max_extent(self) -> int:
        """End of the newest segment file (0 for an empty store)."""
        return self.spans[-1].end_offset if self.spans else 0

    def span_at(self, physical_offset: int) -> SegmentSpan | None:
        """The segment whose bytes include ``physical_offset``, if listed."""
        lo, hi = 0, len(self.spans)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.spans[mid].end_offset <= physical_offset:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self.spans) and self.spans[lo].base_offset <= physical_offset:
            return self.spans[lo]
        return None

    def segment_path(self, base_offset: int) -> Path:
        return segment_path(self.store_dir, base_offset)


def segment_path(store_dir: Path, base_offset: int) -> Path:
    """``<store_dir>/commitlog/<20-digit base offset>``."""
    return store_dir / "commitlog" / segment_name(base_offset)


class MappedSegment:
    """A read-only memory map of one segment file; use as a context manager.

    ``buffer`` is the map itself (supports the buffer protocol, ``find`` and slicing).
    Raises ``FileNotFoundError`` if the file is gone (deleted by retention).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            self.size_bytes = os.fstat(fd).st_size
            self.buffer = (
                mmap.mmap(fd, self.size_bytes, access=mmap.ACCESS_READ) if self.size_bytes else b""
            )
        finally:
            os.close(fd)

    def close(self) -> None:
        if isinstance(self.buffer, mmap.mmap):
            try:
                self.buffer.close()
            except BufferError:
                # Arrow or numpy still holds a view; the map goes when the last view does.
                pass

    def __enter__(self) -> MappedSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
