"""The ``os`` calls under the store's files that are not one segment's reads and writes.

Owns durable creation and replacement (``fsync_dir``, ``write_file_atomically``,
``make_dirs_durably``), allocation and zeroing (``preallocate``, ``zero_range``,
``write_zeros``: ``fallocate`` where the file system has it, written zeros where not) and
whole positional writes (``pwrite_all``). Does not own file names or any policy about when to
flush; the ``SegmentFile`` implementations that use these live in ``segment_files.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

__all__ = [
    "fsync_dir",
    "make_dirs_durably",
    "preallocate",
    "pwrite_all",
    "write_file_atomically",
    "write_zeros",
    "zero_range",
]

_ZERO_CHUNK_BYTES = 1 << 20
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that a create, rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that after a crash it holds the old or the new bytes,
    never a mix: a temp file beside it (``mode`` from its creation on), fsync, rename, fsync of
    the directory (raises ``OSError``). The store's small JSON files (snapshot, retention
    record, reader progress, the redelivery journal) and the TLS pair are written this way."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # a temp file a crash left keeps its old mode otherwise
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


def preallocate(fd: int, offset: int, length: int) -> None:
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
        write_zeros(fd, offset, length)


def write_zeros(fd: int, offset: int, length: int, piece: int = _ZERO_CHUNK_BYTES) -> None:
    zeros = bytes(min(length, piece))
    end = offset + length
    while offset < end:
        n = os.pwrite(fd, memoryview(zeros)[: min(len(zeros), end - offset)], offset)
        offset += n


def zero_range(fd: int, offset: int, length: int) -> None:
    """Make ``[offset, offset+length)`` read as zeros, keeping size and allocation."""
    if length <= 0:
        return
    if _FALLOCATE is not None:
        flags = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        if _FALLOCATE(fd, flags, offset, length) == 0:
            preallocate(fd, offset, length)
            return
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
    write_zeros(fd, offset, length)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        if n <= 0:  # pragma: no cover - the kernel reports errors as OSError
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view = view[n:]
        position += n
