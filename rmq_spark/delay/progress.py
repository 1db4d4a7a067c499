"""The redelivery job's files under ``<store>/config/``: journal, delayOffset.json, lock.

Owns reading and writing them durably:

- ``scheduleJournal.json`` (ours, authoritative): level offsets, timer progress and the
  intent of the batch in flight. Written atomically (temp file, fsync, rename, fsync of the
  directory), so after a crash it is either the old or the new content.
- ``delayOffset.json`` (+ ``.bak``) and ``timercheck``: RocketMQ's files, mirrors of the level
  offsets and of the timer queue's low-water mark (``rocketmq_timercheck``) written after the
  journal, through ``rmq_spark.broker.config_files.rocketmq_config_files`` (the owner of every
  RocketMQ config file: format, ``.bak``, atomic replace, ``dataVersion``). A mirror that
  cannot be read at all is ignored with a warning: the journal is authoritative.
- ``schedule.lock``: an ``flock`` held while a job runs, so that two jobs never redeliver from
  the same store at once.

On load the level offsets are the journal's, raised to delayOffset.json's where that file is
ahead (a RocketMQ broker or an operator moved it). Does not own the file formats
(``offsets.py``, ``rocketmq_config.py``) or what is due (``schedule.py``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config_files import (
    DELAY_OFFSET_FILE,
    read_delay_offsets,
    write_delay_offsets,
)
from rmq_spark.broker.config_files.rocketmq_timercheck import write_timer_checkpoint
from rmq_spark.clock import ManualClock
from rmq_spark.delay.offsets import Journal, format_journal, parse_journal
from rmq_spark.delay.schedule import QueueProgress
from rmq_spark.errors import (
    ProgressFormatError,
    ScheduleLockedError,
    StoreIOError,
    StoreLockedError,
    StoreMetadataError,
)
from rmq_spark.store.fileio import write_file_atomically

__all__ = [
    "DELAY_OFFSET_FILE",
    "JOURNAL_FILE",
    "LOCK_FILE",
    "ProgressFiles",
]

log = logging.getLogger("rmq_spark.delay")

CONFIG_DIR = "config"
JOURNAL_FILE = "scheduleJournal.json"
LOCK_FILE = "schedule.lock"


class ProgressFiles:
    """The progress files of one store; ``lock()`` before writing anything.

    Parameters
    ----------
    store_dir
        The store root (``config/`` is created in it when missing).
    """

    def __init__(self, store_dir: str | Path) -> None:
        self.store_dir = Path(store_dir)
        self.config_dir = self.store_dir / CONFIG_DIR
        self.journal_path = self.config_dir / JOURNAL_FILE
        self.delay_offset_path = self.config_dir / DELAY_OFFSET_FILE
        self._lock_fd: int | None = None

    # --- lock -------------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the job lock.

        Raises
        ------
        ScheduleLockedError
            Another process (a second redelivery job) holds it.
        """
        if self._lock_fd is not None:
            return
        self._ensure_dir()
        fd = os.open(self.config_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ScheduleLockedError(
                f"{self.config_dir / LOCK_FILE}: another redelivery job is running on this store"
            ) from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    # --- load -------------------------------------------------------------------------------

    def load(self) -> Journal:
        """The journal, with level offsets raised to delayOffset.json's where it is ahead.

        Raises
        ------
        ProgressFormatError
            The journal exists but cannot be read: we stop rather than guess (guessing low
            would redeliver, guessing high would lose messages). The message says which file.
        """
        journal = Journal()
        if self.journal_path.exists():
            text = self.journal_path.read_text(encoding="utf-8")
            try:
                journal = parse_journal(text)
            except ProgressFormatError as err:
                raise ProgressFormatError(f"{self.journal_path}: {err}") from err
        mirror = self.load_delay_offsets()
        if mirror is not None:
            merged = dict(journal.levels)
            for level, offset in mirror.items():
                current = merged.get(level, QueueProgress())
                if offset > current.low_water:
                    if self.journal_path.exists():
                        log.warning(
                            "%s: level %d is at offset %d, ahead of the journal's %d; using it",
                            self.delay_offset_path,
                            level,
                            offset,
                            current.low_water,
                        )
                    merged[level] = current.raise_low_water(offset)
            journal = dataclasses.replace(journal, levels=merged)
        return journal

    def load_delay_offsets(self) -> dict[int, int] | None:
        """delayOffset.json's level -> offset, else its ``.bak``'s; ``None`` when neither is
        readable."""
        try:
            return read_delay_offsets(self.store_dir)
        except StoreMetadataError as err:
            log.warning("%s; ignoring it (the journal is authoritative)", err)
            return None

    # --- save -------------------------------------------------------------------------------

    def save(self, journal: Journal) -> None:
        """Write the journal durably (atomic replace)."""
        self._require_lock()
        _atomic_write(self.journal_path, format_journal(journal))

    def save_delay_offsets(self, level_offsets: dict[int, int], now_ms: int) -> None:
        """Write delayOffset.json as a 5.x broker does (old content to ``.bak`` first)."""
        self._require_lock()
        write_delay_offsets(self.store_dir, level_offsets, clock=ManualClock(now_ms))

    def save_timer_checkpoint(self, timer_low_water: int, now_ms: int) -> None:
        """Write RocketMQ's ``timercheck``: its timer resumes at ``timer_low_water``."""
        self._require_lock()
        write_timer_checkpoint(self.store_dir, timer_low_water, now_ms, now_ms)

    def _require_lock(self) -> None:
        if self._lock_fd is None:
            raise StoreLockedError(f"{self.config_dir}: write without holding {LOCK_FILE}")

    def _ensure_dir(self) -> None:
        try:
            self.config_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreIOError(f"{self.config_dir}: cannot create: {err}") from err


def _atomic_write(path: Path, text: str) -> None:
    try:
        write_file_atomically(path, text.encode("utf-8"))
    except OSError as err:
        raise StoreIOError(f"{path}: cannot write: {err}") from err
