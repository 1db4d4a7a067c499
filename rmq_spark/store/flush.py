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


class _Waiter:
    """One put waiting for durability: blocked on its own lock until a leader releases it."""

    __slots__ = ("end_offset", "lock", "lead")

    def __init__(self, end_offset: int) -> None:
        self.end_offset = end_offset
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False  # set before release: "you are the next leader"


class GroupCommit:
    """Leader/follower group commit over ``flush() -> flushed_offset``.

    A waiter blocks on a lock of its own that the leader releases directly, so waking N
    producers costs N lock releases, not a convoy on one shared condition lock. When the
    leader's own record is durable it hands leadership to the oldest waiter still not
    covered (which runs the next fsync for everything written meanwhile) and returns.

    Parameters
    ----------
    flush
        fsyncs everything written so far and returns the offset it covered; raises
        ``OSError`` on failure.
    written
        The offset written so far (what ``flush_now`` must cover).
    flushed_offset
        Offset already durable (after recovery).
    """

    def __init__(
        self, flush: Callable[[], int], written: Callable[[], int], flushed_offset: int = 0
    ) -> None:
        self._flush = flush
        self._written = written
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []
        self._flushing = False
        self._flushed_offset = flushed_offset
        self.error: OSError | None = None
        self.fsync_count = 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def wait_durable(self, end_offset: int, timeout_ms: int | None) -> FlushWait:
        """Block until an fsync covers ``end_offset``, leading one if none is running."""
        if self._flushed_offset >= end_offset:
            return FlushWait.DURABLE
        with self._lock:
            if self._flushed_offset >= end_offset:
                return FlushWait.DURABLE
            if self.error is not None:
                return FlushWait.FAILED
            if not self._flushing:
                self._flushing = True
                waiter = None
            else:
                waiter = _Waiter(end_offset)
                self._waiters.append(waiter)
        if waiter is None:
            return self._lead(end_offset)
        timeout = -1 if timeout_ms is None else timeout_ms / 1000
        if not waiter.lock.acquire(timeout=timeout):
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    return FlushWait.TIMEOUT
            waiter.lock.acquire()  # released just now: take the outcome it was given
        if waiter.lead:
            return self._lead(end_offset)
        if self._flushed_offset >= end_offset:
            return FlushWait.DURABLE
        return FlushWait.FAILED

    def _lead(self, end_offset: int) -> FlushWait:
        """Run fsyncs until ``end_offset`` is covered (or one fails), then hand over."""
        while True:
            error: OSError | None = None
            flushed = 0
            try:
                flushed = self._flush()
            except OSError as err:
                error = err
            with self._lock:
                self.fsync_count += 1
                if error is not None and self.error is None:
                    self.error = error
                if flushed > self._flushed_offset:
                    self._flushed_offset = flushed
                done = self.error is not None or self._flushed_offset >= end_offset
                if not done:
                    continue  # our own record came after the capture: fsync again
                covered = self._flushed_offset
                ready = [w for w in self._waiters if w.end_offset <= covered or self.error]
                rest = [w for w in self._waiters if w.end_offset > covered and not self.error]
                self._waiters = rest[1:]
                if rest:
                    rest[0].lead = True  # it starts the next fsync as soon as it wakes
                else:
                    self._flushing = False
            for waiter in ready:
                waiter.lock.release()
            if rest:
                rest[0].lock.release()
            return FlushWait.FAILED if self.error is not None else FlushWait.DURABLE

    def flush_now(self) -> int:
        """fsync everything written so far (close, snapshots, ASYNC flushes); returns the
        flushed offset. Raises the ``OSError`` of a failed fsync."""
        if self.wait_durable(self._written(), None) is FlushWait.FAILED:
            assert self.error is not None
            raise self.error
        return self._flushed_offset

    def fail(self, error: OSError) -> None:
        """Make every current and future wait fail (the store failed closed)."""
        with self._lock:
            if self.error is None:
                self.error = error
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.lock.release()


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
