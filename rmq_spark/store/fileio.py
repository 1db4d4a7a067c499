"""File access for the store: the ``SegmentFile`` protocol, its two real implementations and a
fault-injecting wrapper for tests.

Owns every ``os`` call on segment and checkpoint files: open, preallocate (zero-filled, full
size, created under a temporary name and renamed so that a crash never leaves a half-created
segment), positional write/read, fsync, logical truncation, size. Does not own file names,
record contents or any policy about when to flush.

Two implementations of ``SegmentFile``:

* ``OsFile``: ``os.pwrite`` / ``os.pread`` on a file descriptor.
* ``MmapFile``: a shared ``mmap`` of the whole preallocated file (RocketMQ's ``MappedFile``);
  a write is a ``memcpy`` into the page cache, no system call. Data written either way is in
  the page cache, so it survives a crash of the *process*; only ``fsync`` makes it survive a
  crash of the *machine*. Linux writes back pages dirtied through a shared mapping on
  ``fdatasync`` of the file, so both implementations flush the same way.

``truncate(position)`` is a *logical* truncation: afterwards every byte from ``position`` to
the end reads as zero, while the file keeps its length and its disk allocation (segments are
fixed-size; a size-mismatched segment fails the load). It punches a hole and re-allocates it
(``fallocate``), falling back to writing zeros where the file system cannot punch holes.

Failpoints (``FaultyFile``, ``FaultyOpener``): ``append`` (a segment write), ``fsync``,
``roll`` (creating a segment), ``truncate``, ``checkpoint`` (a checkpoint-file write). Each
raises ``OSError(errno)`` (ENOSPC by default, or EIO) after ``after`` successful hits.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import enum
import errno
import mmap
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rmq_spark.store.config import IoMode

__all__ = [
    "FAILPOINTS",
    "FaultPlan",
    "FaultyFile",
    "FaultyOpener",
    "FileKind",
    "FileOpener",
    "MmapFile",
    "OsFile",
    "OsOpener",
    "SegmentFile",
    "fsync_dir",
    "make_dirs_durably",
    "write_file_atomically",
]

FAILPOINTS = ("append", "fsync", "roll", "truncate", "checkpoint")
_ZERO_CHUNK_BYTES = 1 << 20
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


class FileKind(enum.Enum):
    """What a file is for; the failpoints depend on it."""

    SEGMENT = "segment"
    CHECKPOINT = "checkpoint"


class SegmentFile(Protocol):
    """A fixed-size file accessed by position. All methods raise ``OSError`` on failure."""

    path: Path

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data`` at ``position`` (no short writes)."""
        ...

    def write_through(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """``write``, but through the file descriptor even when the file is memory-mapped
        (a staged segment's commit: the writer's mapping is never dirtied, see segment.py)."""
        ...

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer only at the end of the file)."""
        ...

    def fsync(self) -> None:
        """Make everything written so far durable."""
        ...

    def truncate(self, position: int) -> None:
        """Zero ``[position, size())`` keeping the length and the allocation."""
        ...

    def write_zeros(self, position: int, length: int, piece: int) -> None:
        """Write zeros over ``[position, position+length)`` in ``piece``-byte writes
        (segment warming, ``warm.py``)."""
        ...

    def sync_data(self) -> None:
        """fdatasync, outside the put path's accounting (segment warming)."""
        ...

    def size(self) -> int:
        """The file length in bytes."""
        ...

    def close(self) -> None:
        """Release the descriptor (and the mapping). Idempotent."""
        ...


class FileOpener(Protocol):
    """Opens and creates store files; tests swap in ``FaultyOpener``."""

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        """Open an existing file."""
        ...

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        """Create ``path`` zero-filled and fully allocated, atomically (temp name + rename)."""
        ...


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that a create, rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that after a crash it holds the old or the new bytes,
    never a mix: a temp file beside it, fsync, rename, fsync of the directory (raises
    ``OSError``). The store's small JSON files (snapshot, retention record, reader progress,
    the redelivery journal) are written this way."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def make_dirs_durably(directory: Path) -> None:
    """``mkdir -p`` whose new entries survive a power loss (each new directory's parent is
    fsynced); nothing is done for a directory that exists (raises ``OSError``)."""
    missing: list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        fsync_dir(path.parent)


def _libc_fallocate() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        func = ctypes.CDLL(name, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    func.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    func.restype = ctypes.c_int
    return func


_FALLOCATE = _libc_fallocate()


def _preallocate(fd: int, offset: int, length: int) -> None:
    """Allocate ``[offset, offset+length)`` on disk (reads as zeros) so writes cannot hit ENOSPC."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        # No fallocate on this file system: extend (sparse) and write the zeros ourselves.
        if os.fstat(fd).st_size < offset + length:
            os.ftruncate(fd, offset + length)
        _write_zeros(fd, offset, length)


def _write_zeros(fd: int, offset: int, length: int, piece: int = _ZERO_CHUNK_BYTES) -> None:
    zeros = bytes(min(length, piece))
    end = offset + length
    while offset < end:
        n = os.pwrite(fd, memoryview(zeros)[: min(len(zeros), end - offset)], offset)
        offset += n


def _zero_range(fd: int, offset: int, length: int) -> None:
    """Make ``[offset, offset+length)`` read as zeros, keeping size and allocation."""
    if length <= 0:
        return
    if _FALLOCATE is not None:
        flags = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        if _FALLOCATE(fd, flags, offset, length) == 0:
            _preallocate(fd, offset, length)
            return
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
    _write_zeros(fd, offset, length)


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        if n <= 0:  # pragma: no cover - the kernel reports errors as OSError
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view = view[n:]
        position += n


class _Descriptor:
    """What ``OsFile`` and ``MmapFile`` do alike, through the file descriptor: fsync, zeroing
    writes, ``fileno``. Through the descriptor for a mapped file too: the page cache is the
    one the mapping shares, and Linux writes back pages dirtied through a shared mapping on
    ``fdatasync`` of the file."""

    __slots__ = ()
    _fd: int

    def fileno(self) -> int:
        """The descriptor (for io_uring fsyncs, ``uring.py``); valid until ``close``."""
        return self._fd

    def fsync(self) -> None:
        # Segments never change length after creation, so data-only sync is enough.
        os.fdatasync(self._fd)

    sync_data = fsync  # segment warming's sync: the same call, outside the put accounting

    def write_zeros(self, position: int, length: int, piece: int) -> None:
        _write_zeros(self._fd, position, length, piece)


class OsFile(_Descriptor):
    """``SegmentFile`` over a file descriptor: ``os.pwrite``, ``os.pread``, ``os.fdatasync``."""

    __slots__ = ("path", "_fd", "_read_only")

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._read_only = read_only
        self._fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        _pwrite_all(self._fd, data, position)

    write_through = write

    def read(self, position: int, size: int) -> bytes:
        out = os.pread(self._fd, size, position)
        if len(out) == size or not out:
            return out
        parts = [out]
        got = len(out)
        while got < size:
            more = os.pread(self._fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, position: int) -> None:
        _zero_range(self._fd, position, self.size() - position)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class MmapFile(_Descriptor):
    """``SegmentFile`` over a shared memory map of the whole (preallocated) file."""

    __slots__ = ("path", "_fd", "_map", "_size", "_read_only")

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._read_only = read_only
        self._fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)
        try:
            self._size = os.fstat(self._fd).st_size
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._map = mmap.mmap(self._fd, self._size, access=access) if self._size else None
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def mapping(self) -> mmap.mmap | None:
        """The writable mapping itself (``None`` when read-only, empty or closed), for callers
        that pack records straight into it; such a write is the same as ``write``."""
        return None if self._read_only else self._map

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        end = position + len(data)
        if self._map is None or end > self._size:
            raise OSError(errno.EFBIG, f"write of [{position}, {end}) past {self._size} bytes")
        self._map[position:end] = data

    def write_through(self, position: int, data: bytes | bytearray | memoryview) -> None:
        if position + len(data) > self._size:
            raise OSError(
                errno.EFBIG, f"write of {len(data)} bytes at {position} past {self._size}"
            )
        _pwrite_all(self._fd, data, position)  # the page cache the mapping shares

    def read(self, position: int, size: int) -> bytes:
        if self._map is None:
            return b""
        return self._map[position : position + size]

    def truncate(self, position: int) -> None:
        if self._map is None:
            return
        length = self._size - position
        if length <= 0:
            return
        try:
            _zero_range(self._fd, position, length)
        except OSError:
            # Through the mapping a zeroing write cannot fail: the blocks are allocated.
            self._map[position : self._size] = bytes(length)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsOpener:
    """The real opener: segments as ``MmapFile`` or ``OsFile`` by ``io_mode``; checkpoints
    always as ``OsFile`` (an 8-byte pwrite is how readers see the offset move)."""

    def __init__(self, io_mode: IoMode = IoMode.MMAP) -> None:
        self.io_mode = io_mode

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        if kind is FileKind.SEGMENT and self.io_mode is IoMode.MMAP:
            return MmapFile(path, read_only=read_only)
        return OsFile(path, read_only=read_only)

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        tmp = path.with_name(path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _preallocate(fd, 0, size_bytes)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.close(fd)
        os.rename(tmp, path)
        fsync_dir(path.parent)
        return self.open(path, kind)


@dataclass
class FaultPlan:
    """Where and when ``FaultyFile`` fails. Shared by every file one ``FaultyOpener`` opens.

    Parameters
    ----------
    fail_at
        One of ``FAILPOINTS``.
    after
        Let this many hits of the failpoint succeed before failing.
    times
        Fail this many times, then succeed again; ``None``: fail forever.
    error
        The ``errno`` raised (``errno.ENOSPC``, ``errno.EIO``, ...).
    partial_bytes
        For ``append``: the *first* failing write writes this many bytes of its data before
        failing (a torn write); later failures write nothing.
    """

    fail_at: str
    after: int = 0
    times: int | None = None
    error: int = errno.ENOSPC
    partial_bytes: int = 0
    hits: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.fail_at not in FAILPOINTS:
            raise ValueError(f"fail_at: {self.fail_at!r} is not one of {FAILPOINTS}")

    def should_fail(self, point: str) -> bool:
        """Count a hit of ``point``; True if this hit must fail."""
        if point != self.fail_at:
            return False
        with self._lock:
            self.hits += 1
            if self.hits <= self.after:
                return False
            if self.times is not None and self.failures >= self.times:
                return False
            self.failures += 1
            return True

    def raise_error(self, point: str, path: Path) -> None:
        raise OSError(self.error, f"injected failure at {point}: {os.strerror(self.error)}", path)


class FaultyFile:
    """A ``SegmentFile`` that fails at a named failpoint (``FaultPlan``), else delegates."""

    def __init__(
        self,
        inner: SegmentFile,
        plan: FaultPlan | None = None,
        kind: FileKind = FileKind.SEGMENT,
        **plan_args: object,
    ) -> None:
        self._inner = inner
        self.path = inner.path
        self.plan = plan if plan is not None else FaultPlan(**plan_args)  # type: ignore[arg-type]
        self._kind = kind

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        point = "checkpoint" if self._kind is FileKind.CHECKPOINT else "append"
        if self.plan.should_fail(point):
            partial = min(self.plan.partial_bytes, len(data))
            if partial and self.plan.failures == 1:
                self._inner.write(position, memoryview(data)[:partial])
            self.plan.raise_error(point, self.path)
        self._inner.write(position, data)

    def write_through(self, position: int, data: bytes | bytearray | memoryview) -> None:
        if self.plan.should_fail("append"):  # a staged segment's commit is its append
            self.plan.raise_error("append", self.path)
        self._inner.write_through(position, data)

    def read(self, position: int, size: int) -> bytes:
        return self._inner.read(position, size)

    def fsync(self) -> None:
        point = "checkpoint" if self._kind is FileKind.CHECKPOINT else "fsync"
        if self.plan.should_fail(point):
            self.plan.raise_error(point, self.path)
        self._inner.fsync()

    def truncate(self, position: int) -> None:
        if self.plan.should_fail("truncate"):
            self.plan.raise_error("truncate", self.path)
        self._inner.truncate(position)

    def write_zeros(self, position: int, length: int, piece: int) -> None:
        self._inner.write_zeros(position, length, piece)  # warming: no failpoint of its own

    def sync_data(self) -> None:
        self._inner.sync_data()

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class FaultyOpener:
    """A ``FileOpener`` whose files are ``FaultyFile``s sharing one ``FaultPlan``; ``roll``
    fails segment creation."""

    def __init__(self, plan: FaultPlan, inner: FileOpener | None = None) -> None:
        self.plan = plan
        self._inner = inner if inner is not None else OsOpener()

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        return FaultyFile(self._inner.open(path, kind, read_only=read_only), self.plan, kind)

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        if kind is FileKind.SEGMENT and self.plan.should_fail("roll"):
            self.plan.raise_error("roll", path)
        return FaultyFile(self._inner.create(path, size_bytes, kind), self.plan, kind)
