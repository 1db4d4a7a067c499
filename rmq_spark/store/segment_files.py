"""The ``SegmentFile`` protocol and its two real implementations, and the real opener.

Owns every read and write of one fixed-size store file:

* ``OsFile``: ``os.pwrite`` / ``os.pread`` on a file descriptor.
* ``MmapFile``: a shared ``mmap`` of the whole preallocated file (RocketMQ's ``MappedFile``);
  a write is a ``memcpy`` into the page cache, no system call. Data written either way is in
  the page cache, so it survives a crash of the *process*; only ``fsync`` makes it survive a
  crash of the *machine*. Linux writes back pages dirtied through a shared mapping on
  ``fdatasync`` of the file, so both implementations flush the same way.
* ``OsOpener``: opens them, and creates a segment preallocated (zero-filled, full size) under
  a temporary name and renamed, so that a crash never leaves a half-created segment.

``truncate(position)`` is a *logical* truncation: afterwards every byte from ``position`` to
the end reads as zero, while the file keeps its length and its disk allocation (segments are
fixed-size; a size-mismatched segment fails the load). It punches a hole and re-allocates it
(``fallocate``), falling back to writing zeros where the file system cannot punch holes.

Does not own file names, record contents, when to flush, or fault injection (``file_faults.py``).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import mmap
import os
from pathlib import Path
from typing import Protocol

from rmq_spark.store.config import IoMode
from rmq_spark.store.file_ops import fsync_dir, preallocate, pwrite_all, write_zeros, zero_range

__all__ = ["FileKind", "FileOpener", "MmapFile", "OsFile", "OsOpener", "SegmentFile"]


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
        write_zeros(self._fd, position, length, piece)


class OsFile(_Descriptor):
    """``SegmentFile`` over a file descriptor: ``os.pwrite``, ``os.pread``, ``os.fdatasync``."""

    __slots__ = ("path", "_fd", "_read_only")

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._read_only = read_only
        self._fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        pwrite_all(self._fd, data, position)

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
        zero_range(self._fd, position, self.size() - position)

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
        pwrite_all(self._fd, data, position)  # the page cache the mapping shares

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
            zero_range(self._fd, position, length)
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
            preallocate(fd, 0, size_bytes)
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
