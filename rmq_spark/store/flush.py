"""Flushing: SYNC group commit and the background housekeeping thread (ASYNC flushes).

Owns *when* data is fsynced and published, not *how* (the store passes a ``flush`` callable
that fsyncs the CommitLog and publishes the checkpoint):

* ``GroupCommit`` (SYNC): a put waits until an fsync covers its end offset. The first waiter
  that finds no fsync running becomes the leader and runs one; every put that arrived while
  the previous fsync ran is covered by the next one, so N concurrent producers share fsyncs.
  A waiter gives up after ``timeout_ms`` (``FlushWait.TIMEOUT``; the record stays stored).
  A failed fsync is sticky: the data it covered may be lost (Linux may drop dirty pages after
  a failed writeback), so every later wait fails too and the store fails closed.
* ``Housekeeper``: one daemon thread running periodic tasks (ASYNC flush every
  ``flush_interval_ms``, confirm-offset publication, queue-offset snapshots, retention).

Timeouts and intervals are real elapsed time (``threading`` waits), not the store's
``Clock``: the Clock stamps messages; these bound how long a thread blocks.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FlushWait", "GroupCommit", "Housekeeper", "PeriodicTask"]

_log = logging.getLogger(__name__)


class FlushWait(enum.Enum):
    """How waiting for durability ended."""

    DURABLE = "DURABLE"
    TIMEOUT = "TIMEOUT"
    FAILED = "FAILED"


class GroupCommit:
    """Leader/follower group commit over ``flush() -> flushed_offset``.

    Parameters
    ----------
    flush
        fsyncs everything written so far and returns the offset it covered; raises
        ``OSError`` on failure.
    flushed_offset
        Offset already durable (after recovery).
    """

    def __init__(self, flush: Callable[[], int], flushed_offset: int = 0) -> None:
        self._flush = flush
        self._cond = threading.Condition(threading.Lock())
        self._flushed_offset = flushed_offset
        self._flushing = False
        self.error: OSError | None = None
        self.fsync_count = 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def wait_durable(self, end_offset: int, timeout_ms: int) -> FlushWait:
        """Block until an fsync covers ``end_offset``, leading one if none is running."""
        deadline = time.monotonic() + timeout_ms / 1000
        cond = self._cond
        with cond:
            while True:
                if self._flushed_offset >= end_offset:
                    return FlushWait.DURABLE
                if self.error is not None:
                    return FlushWait.FAILED
                if not self._flushing:
                    self._lead()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return FlushWait.TIMEOUT
                cond.wait(remaining)

    def _lead(self) -> None:
        """Run one fsync with the condition released (caller holds it)."""
        self._flushing = True
        self._cond.release()
        error: OSError | None = None
        flushed = 0
        try:
            flushed = self._flush()
        except OSError as err:
            error = err
        finally:
            self._cond.acquire()
            self._flushing = False
        self.fsync_count += 1
        if error is not None:
            self.error = error
        elif flushed > self._flushed_offset:
            self._flushed_offset = flushed
        self._cond.notify_all()

    def flush_now(self) -> int:
        """One fsync outside any put (close, snapshots); returns the flushed offset."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            if self.error is not None:
                raise self.error
            self._lead()
            if self.error is not None:
                raise self.error
            return self._flushed_offset

    def fail(self, error: OSError) -> None:
        """Make every current and future wait fail (the store failed closed)."""
        with self._cond:
            if self.error is None:
                self.error = error
            self._cond.notify_all()


@dataclass
class PeriodicTask:
    """``run()`` every ``interval_ms``; an exception is logged and the task keeps running."""

    name: str
    interval_ms: int
    run: Callable[[], None]
    next_due_s: float = 0.0


class Housekeeper:
    """A daemon thread that runs ``PeriodicTask``s until ``stop()``."""

    def __init__(self, tasks: list[PeriodicTask], name: str = "rmq-store-housekeeper") -> None:
        self._tasks = [task for task in tasks if task.interval_ms > 0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        now = time.monotonic()
        for task in self._tasks:
            task.next_due_s = now + task.interval_ms / 1000
        if self._tasks:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for task in self._tasks:
                if now >= task.next_due_s:
                    try:
                        task.run()
                    except Exception:  # noqa: BLE001 - a periodic task must not kill the thread
                        _log.exception("store task %s failed", task.name)
                    task.next_due_s = max(task.next_due_s + task.interval_ms / 1000, now)
            next_due = min(task.next_due_s for task in self._tasks)
            self._stop.wait(max(0.0, next_due - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
