"""Flushing: SYNC group commit and the background housekeeping thread (ASYNC flushes).

Owns *when* data is fsynced and published, not *how* (the store passes a ``flush`` callable
that fsyncs the CommitLog and publishes the checkpoint):

* ``GroupCommit`` (SYNC): a put waits until an fsync covers its end offset. A put that no
  started fsync covers leads one itself; puts arriving meanwhile share the next one, so N
  concurrent producers share fsyncs (rules in the class docstring). A waiter gives up after
  ``timeout_ms`` (``FlushWait.TIMEOUT``; the record stays stored).
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
from collections import deque
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
    """A put waiting for durability, blocked on a lock of its own until it is released.

    One per thread, reused: its lock is held whenever nobody waits on it.
    """

    __slots__ = ("end_offset", "lock", "lead")

    def __init__(self) -> None:
        self.end_offset = 0
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False  # set before release: "you are the next leader"


class GroupCommit:
    """Leader/follower group commit over ``flush() -> flushed_offset``, with up to
    ``max_in_flight`` fsyncs running at once.

    Rules (all decisions under one lock; see also ``tests/unit/test_flush.py``):

    * A put whose record is already durable returns at once.
    * A put that no started fsync covers starts one itself (it becomes a *leader*) when fewer
      than ``max_in_flight`` run and no wake-up chain is running; otherwise it waits on a lock
      of its own. A leader reads ``written()`` first: its fsync covers at least that much.
    * When an fsync returns, every waiter it made durable is queued for waking, and the
      queue is woken as a *chain*: the leader wakes the first; each woken put wakes the next
      before it returns. Waking them all at once would make them all fight for the GIL at
      the same moment (each would sleep twice: on its lock, then on the GIL).
    * The next fsync starts when the chain has ended: the put that finds the queue empty
      hands leadership to the oldest waiter no started fsync covers. By then the woken puts
      have written their next records, so one fsync covers them all: fewer fsyncs per put.
      (With no chain to wait for, the returning leader hands over at once.)
    * With ``max_in_flight`` = 1 (the default) all producers form one group: fsync, wake
      the group, fsync again (about 62 of 64 producers per fsync in bench_put.py). With 2, a
      second group is fsynced while the first is woken and writes, and the kernel (jbd2)
      overlaps the fsyncs: on a CPU-saturated machine that gave up to 1.5x the wall-clock
      throughput at the same CPU per put, but on a quiet one 20 % less throughput and 50 %
      more CPU per put (twice the fsyncs and hand-overs, each waking an idle core).
    * A failed fsync is sticky: every waiter, now and later, gets ``FAILED``.

    Parameters
    ----------
    flush
        fsyncs everything written so far and returns the offset it covered; raises
        ``OSError`` on failure. Called from several threads at once when
        ``max_in_flight > 1``.
    written
        The offset written so far (what ``flush_now`` must cover).
    flushed_offset
        Offset already durable (after recovery).
    max_in_flight
        How many fsyncs may run at once (>= 1).
    """

    def __init__(
        self,
        flush: Callable[[], int],
        written: Callable[[], int],
        flushed_offset: int = 0,
        max_in_flight: int = 1,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight: must be >= 1, got {max_in_flight}")
        self._flush = flush
        self._written = written
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []  # not durable yet, oldest first
        self._ready: deque[_Waiter] = deque()  # durable (or failed), to be woken in a chain
        self._local = threading.local()
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._covering = 0  # the most any started fsync covers
        self._flushed_offset = flushed_offset
        self.error: OSError | None = None
        self.fsync_count = 0
        self.on_advance: Callable[[], None] | None = None
        """Called (outside the lock) after ``flushed_offset`` moved: the ConsumeQueue
        dispatcher's wake-up. Must be quick and must not raise."""

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def wait_durable(self, end_offset: int, timeout_ms: int | None) -> FlushWait:
        """Block until an fsync covers ``end_offset``, leading one if none will."""
        if self._flushed_offset >= end_offset:
            return FlushWait.DURABLE
        with self._lock:
            if self._flushed_offset >= end_offset:
                return FlushWait.DURABLE
            if self.error is not None:
                return FlushWait.FAILED
            if (
                self._covering < end_offset
                and self._in_flight < self._max_in_flight
                and not self._ready
            ):
                self._start_fsync()
                waiter = None
            else:
                waiter = self._local.__dict__.get("waiter")
                if waiter is None:
                    waiter = self._local.waiter = _Waiter()
                waiter.end_offset = end_offset
                waiter.lead = False
                self._waiters.append(waiter)
        if waiter is None:
            return self._lead(end_offset)
        if not waiter.lock.acquire(timeout=-1 if timeout_ms is None else timeout_ms / 1000):
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    return FlushWait.TIMEOUT
            waiter.lock.acquire()  # released just now, or queued to be: take its outcome
        if waiter.lead:
            return self._lead(end_offset)
        self._wake_next()
        if self._flushed_offset >= end_offset:
            return FlushWait.DURABLE
        return FlushWait.FAILED

    def _wake_next(self) -> None:
        """Wake the next queued waiter; at the end of the chain, start the next fsync."""
        try:
            waiter = self._ready.popleft()
        except IndexError:
            self._hand_over()
            return
        waiter.lock.release()

    def _hand_over(self) -> None:
        """Make the oldest waiter no started fsync covers a leader, if one may start."""
        with self._lock:
            if (
                not self._waiters
                or self._ready
                or self._in_flight >= self._max_in_flight
                or self.error is not None
            ):
                return
            leader = self._take_uncovered()
            if leader is None:
                return
            leader.lead = True
            self._start_fsync()
        leader.lock.release()

    def _start_fsync(self) -> None:
        """Count one more fsync about to start (lock held). It will cover at least what is
        written now, so no later decision starts another one for the same records."""
        self._in_flight += 1
        written = self._written()
        if written > self._covering:
            self._covering = written

    def _take_uncovered(self) -> _Waiter | None:
        """Remove and return the oldest waiter that no started fsync covers (lock held)."""
        covering = self._covering
        for index, waiter in enumerate(self._waiters):
            if waiter.end_offset > covering:
                return self._waiters.pop(index)
        return None

    def _lead(self, end_offset: int) -> FlushWait:
        """Run fsyncs until ``end_offset`` is covered (or one fails), then queue the durable
        waiters and start their wake-up chain. The caller counted itself in ``_in_flight``."""
        while True:
            covering = self._written()  # this fsync covers at least what is written now
            with self._lock:
                if covering > self._covering:
                    self._covering = covering
            error: OSError | None = None
            flushed = 0
            try:
                flushed = self._flush()
            except OSError as err:
                error = err
            advanced = False
            with self._lock:
                self.fsync_count += 1
                if error is not None and self.error is None:
                    self.error = error
                if flushed > self._flushed_offset:
                    self._flushed_offset = flushed
                    advanced = True
                durable = self._flushed_offset
                failed = self.error is not None
                if not failed and durable < end_offset:
                    continue  # cannot happen with an honest flush(); fsync again
                self._in_flight -= 1
                if failed:
                    self._ready.extend(self._waiters)
                    self._waiters = []
                else:
                    pending: list[_Waiter] = []
                    for waiter in self._waiters:
                        (self._ready if waiter.end_offset <= durable else pending).append(waiter)
                    self._waiters = pending
            self._wake_next()  # the first of the chain, or (no chain) the next leader
            if advanced and self.on_advance is not None:
                self.on_advance()  # after the puts' wake-up: they need not wait for it
            return FlushWait.FAILED if failed else FlushWait.DURABLE

    def flush_now(self) -> int:
        """fsync everything written so far (close, snapshots, ASYNC flushes); returns the
        flushed offset. Raises the ``OSError`` of a failed fsync."""
        if self.wait_durable(self._written(), None) is FlushWait.FAILED:
            assert self.error is not None
            raise self.error
        return self._flushed_offset

    def advance(self, flushed_offset: int, fsynced: bool = True) -> None:
        """Everything below ``flushed_offset`` is durable and published, made so outside this
        object (``ring_commit.py``): by an fsync of its own (``fsynced``, counted) or found
        fsynced by another flush."""
        with self._lock:
            self.fsync_count += fsynced
            advanced = flushed_offset > self._flushed_offset
            if advanced:
                self._flushed_offset = flushed_offset
        if advanced and self.on_advance is not None:
            self.on_advance()

    def fail(self, error: OSError) -> None:
        """Make every current and future wait fail (the store failed closed)."""
        with self._lock:
            if self.error is None:
                self.error = error
            self._ready.extend(self._waiters)
            self._waiters = []
        while self._ready:
            try:
                waiter = self._ready.popleft()
            except IndexError:
                break
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
