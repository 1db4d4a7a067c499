"""The store's running markers: the ``lock`` file and the ``abort`` file (FORMAT.md 1).

Owns the exclusive lock that keeps a second writer (another ``MessageStore`` or broker, in
this process or another) off a store, and the ``abort`` marker whose presence at open means
the last run did not shut down cleanly. Does not own recovery (``recovery.py``).

``lock`` holds the ASCII text ``lock`` and an exclusive POSIX ``fcntl`` lock on byte range
[0, 1), as RocketMQ's ``FileChannel.tryLock(0, 1, false)``, so a Java broker and this store
exclude each other. POSIX locks belong to a *process*, so a second open in the same process
would succeed silently; a process-wide registry of locked files (by device and inode) closes
that gap.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

from rmq_spark.errors import StoreLockedError
from rmq_spark.store.fileio import fsync_dir

__all__ = ["ABORT_FILE", "LOCK_FILE", "StoreLock", "abort_exists", "create_abort", "remove_abort"]

LOCK_FILE = "lock"
ABORT_FILE = "abort"

_held: set[tuple[int, int]] = set()
_held_guard = threading.Lock()


class StoreLock:
    """An acquired store lock; ``release()`` (or ``close()``) gives it up."""

    def __init__(self, path: Path, fd: int, key: tuple[int, int]) -> None:
        self.path = path
        self._fd = fd
        self._key = key

    @classmethod
    def acquire(cls, root_dir: Path) -> StoreLock:
        """Take the exclusive lock of the store at ``root_dir``.

        Raises
        ------
        StoreLockedError
            Another ``MessageStore`` (in this or another process) or a broker has the store.
        """
        path = root_dir / LOCK_FILE
        with _held_guard:
            # Check the registry *before* opening: closing any descriptor of the file would
            # drop the POSIX lock this process already holds on it.
            try:
                existing = os.stat(path)
            except FileNotFoundError:
                existing = None
            if existing is not None and (existing.st_dev, existing.st_ino) in _held:
                raise StoreLockedError(_locked_message(root_dir, "this process"))
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                stat = os.fstat(fd)
                key = (stat.st_dev, stat.st_ino)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                except OSError as err:
                    raise StoreLockedError(_locked_message(root_dir, "another process")) from err
                _held.add(key)
            except BaseException:
                os.close(fd)
                raise
        if stat.st_size != 4:
            os.pwrite(fd, b"lock", 0)
            os.ftruncate(fd, 4)
        return cls(path, fd, key)

    def release(self) -> None:
        if self._fd < 0:
            return
        with _held_guard:
            with contextlib.suppress(OSError):
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            os.close(self._fd)
            self._fd = -1
            _held.discard(self._key)

    close = release


def _locked_message(root_dir: Path, who: str) -> str:
    return (
        f"store {root_dir} is already open by {who} (a MessageStore or broker holds "
        f"{root_dir / LOCK_FILE}); stop it first, or open the store read-only "
        "(e.g. `rmq-spark dump`)"
    )


def abort_exists(root_dir: Path) -> bool:
    """Whether ``abort`` is present: the last run did not shut down cleanly."""
    return (root_dir / ABORT_FILE).exists()


def create_abort(root_dir: Path) -> None:
    """Create the (empty) ``abort`` marker durably: it says "running" until removed."""
    path = root_dir / ABORT_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    fsync_dir(root_dir)


def remove_abort(root_dir: Path) -> None:
    """Remove ``abort`` durably after a clean shutdown."""
    with contextlib.suppress(FileNotFoundError):
        (root_dir / ABORT_FILE).unlink()
    fsync_dir(root_dir)
