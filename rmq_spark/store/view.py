"""A read-only view of a store directory, for readers that never write (Spark, delay, CLI).

Owns the store's file names, listing ``commitlog/`` segments, reading the checkpoint,
reading what retention recorded it deleted (``config/retention.json``), and deciding whether
a process (a broker: ours or Apache RocketMQ's) has the store open, all without taking any
lock and without opening the ``lock`` file. (The store's lock is a POSIX ``fcntl`` lock,
which the kernel drops when *any* descriptor of the file in the owning process is closed; a
reader in the broker's own process that opened and closed ``lock`` would silently release
it.) Also maps segment files for reading and reads them with ``pread``. Does not decode
records (``codec.py``) nor decide where the log ends (``scan.py``).

"Has it open" means: some process holds a lock on ``<store>/lock``, found in ``/proc/locks``
by the file's device and inode (Linux). Where ``/proc/locks`` is missing the ``abort`` file
decides (it exists while a broker runs, and after a crash).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import StoreError
from rmq_spark.store.checkpoint import (
    CHECKPOINT_FILE,
    SNAPSHOT_FILE,
    CheckpointValues,
    read_checkpoint,
)
from rmq_spark.store.layout import (
    COMMITLOG_DIR,
    CONFIRM_PHY_OFFSET_POSITION,
    QUARANTINE_DIR,
    is_segment_name,
    parse_segment_name,
    segment_name,
)
from rmq_spark.store.lockfile import ABORT_FILE, LOCK_FILE

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "COMMITLOG_DIR",
    "FileSegment",
    "LOCK_FILE",
    "MappedSegment",
    "QUARANTINE_DIR",
    "RETENTION_FILE",
    "SNAPSHOT_FILE",
    "SegmentSpan",
    "StoreView",
    "broker_has_store_open",
    "read_confirm_offset",
    "retention_floor",
    "segment_path",
]

RETENTION_FILE = "config/retention.json"
_I64 = struct.Struct(">q")
_PROC_LOCKS = Path("/proc/locks")
_STABLE_READ_ATTEMPTS = 100


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """One segment file as listed: base offset (its name) and file size."""

    base_offset: int
    size_bytes: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size_bytes


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
    return max(0, int(_I64.unpack(previous)[0]))


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


def retention_floor(root_dir: Path) -> int:
    """The physical offset below which retention deleted every byte on purpose (0 if none).

    Reads ``<root>/config/retention.json`` (``{"version": 1, "deleted_below": N, ...}``,
    written by retention). A missing prefix of the log below it is retention; above it, in
    a store we wrote, it is loss.

    Raises
    ------
    StoreError
        The file exists but is not valid JSON of that shape.
    """
    path = root_dir / RETENTION_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0
    try:
        value = json.loads(text)["deleted_below"]
    except (ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: unreadable retention record ({err})") from err
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StoreError(f"{path}: deleted_below must be an integer >= 0, got {value!r}")
    return value


def segment_path(store_dir: Path, base_offset: int) -> Path:
    """``<store_dir>/commitlog/<20-digit base offset>``."""
    return store_dir / COMMITLOG_DIR / segment_name(base_offset)


def _list_spans(root: Path) -> tuple[tuple[SegmentSpan, ...], tuple[str, ...]]:
    """Non-empty segment files (sorted) and the names of empty ones."""
    spans: list[SegmentSpan] = []
    empty: list[str] = []
    commitlog = root / COMMITLOG_DIR
    if not commitlog.is_dir():
        return (), ()
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
            else:
                empty.append(entry.name)
    spans.sort(key=lambda s: s.base_offset)
    return tuple(spans), tuple(sorted(empty))


@dataclass(frozen=True, slots=True)
class StoreView:
    """A snapshot of a store directory: its segments, checkpoint and who has it open.

    Attributes
    ----------
    spans
        Non-empty segment files, oldest first.
    empty_segments
        Names of 0-byte segment files (a file being created, or one truncated to nothing).
    checkpoint
        The checkpoint's fields (``None``: no checkpoint file).
    broker_open
        A process holds the store's lock (a running broker, ours or RocketMQ's).
    ours
        The store was written by this package (its queue-offset snapshot file exists):
        its checkpoint offsets are kept up to date, unlike Apache RocketMQ's.
    deleted_below
        ``retention_floor``: everything below it was deleted by retention on purpose.
    """

    store_dir: Path
    spans: tuple[SegmentSpan, ...]
    checkpoint: CheckpointValues | None
    broker_open: bool
    ours: bool = False
    deleted_below: int = 0
    empty_segments: tuple[str, ...] = ()

    @classmethod
    def open(cls, store_dir: str | Path) -> StoreView:
        """Look at the store at ``store_dir`` (a directory with ``commitlog/``).

        Raises
        ------
        FileNotFoundError
            ``store_dir`` does not exist.
        """
        root = Path(store_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"store directory {root} does not exist")
        # Read the broker state and the checkpoint *before* listing, so that every byte
        # below the confirm offset was written before the listing saw its segment.
        broker_open = broker_has_store_open(root)
        checkpoint = read_checkpoint(root)
        ours = (root / SNAPSHOT_FILE).exists()
        floor = retention_floor(root)
        spans, empty = _list_spans(root)
        return cls(root, spans, checkpoint, broker_open, ours, floor, empty)

    @property
    def confirm_offset(self) -> int:
        """``confirmPhyOffset`` (0 without a checkpoint)."""
        return max(0, self.checkpoint.confirm_phy_offset) if self.checkpoint else 0

    @property
    def publishes_end(self) -> bool:
        """Whether a running writer publishes its readable end in ``confirmPhyOffset``: ours
        does (with ``masterFlushedOffset``). Apache RocketMQ 5.3 leaves it at 0, and after a
        restart writes its recovered end there once and never moves it, with
        ``masterFlushedOffset`` left at 0: a confirm offset without a flushed one is stale."""
        return self.ours or (self.confirm_offset > 0 and self.flushed_offset > 0)

    @property
    def flushed_offset(self) -> int:
        """``masterFlushedOffset``: what the checkpoint says is durable (0 without one)."""
        return self.checkpoint.master_flushed_offset if self.checkpoint else 0

    @property
    def min_offset(self) -> int:
        """Base offset of the oldest segment (0 for an empty store)."""
        return self.spans[0].base_offset if self.spans else 0

    @property
    def max_extent(self) -> int:
        """End of the newest segment file (0 for an empty store)."""
        return self.spans[-1].end_offset if self.spans else 0

    @property
    def segment_size(self) -> int:
        """The segment size the files show (the largest file; 1 GiB for an empty store)."""
        return max((s.size_bytes for s in self.spans), default=1 << 30)

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

    def segment(self, span: SegmentSpan) -> FileSegment:
        """A ``pread`` reader of ``span`` (close it, or use ``with``)."""
        return FileSegment(self.segment_path(span.base_offset), span.base_offset)


class FileSegment:
    """A segment file read with ``pread`` (a file truncated under us gives short reads, never
    SIGBUS). ``size_bytes`` is the file's size when opened. Use as a context manager."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = os.open(path, os.O_RDONLY)
        self.size_bytes = os.fstat(self._fd).st_size

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size_bytes

    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self.size_bytes - position))
        return os.pread(self._fd, size, position) if size else b""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
            self.buffer: mmap.mmap | bytes = (
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
