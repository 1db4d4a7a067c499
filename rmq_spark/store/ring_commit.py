"""SYNC group commit driven by the event loop itself, through io_uring (``uring.py``).

Owns the fsyncs of the asyncio puts of one loop when the kernel offers io_uring: which waves
an fsync covers, submitting it, noticing its end, and resolving the waves. ``async_commit.py``
decides when a wave closes and hands it here; without io_uring it uses its flush thread.

* A closed wave joins ``pending``. When fewer than ``max_in_flight`` fsyncs are in flight
  (default 2), the loop commits what the segments staged (``Segment.commit``) and submits
  one fdatasync per segment written since the last fsync; the pending waves ride on it.
  With two in flight, a wave that fills while the previous one is being fsynced does not
  wait for that fsync to end before its own starts (the loop would idle meanwhile). Fsyncs
  are finished in the order they were submitted.
* The loop notices the end of the fsync between two puts (``poll``: two memory reads of the
  completion ring), or, when it has nothing else to do, from the eventfd the kernel signals
  (a reader callback). It then publishes the flushed offset (checkpoint, ``GroupCommit``),
  resolves the covered waves and submits the next fsync, all without leaving the loop: no
  thread, no GIL hand-off, no ``call_soon_threadsafe``.
* A timer checks the ring every 2 ms while fsyncs are in flight, in case the eventfd's
  wake-up is not delivered: without it the waves would wait for their timeout. Each time it
  is the timer that finds an fsync ended, ``rescues`` counts it (logged the first time). The
  broker's load test stalled in about 4 of 16 runs on uvloop before this timer existed and
  in none of 14 since, with no rescue logged: see ``eventloop.py``.
* A completion that has not come 1 s after its fdatasync was submitted is taken as lost:
  the timer then fdatasyncs those descriptors in the loop's thread, finishes the fsyncs, and
  the loop fsyncs that way from then on (``without_ring``), instead of waiting forever.
* A failed fsync (or commit) fails the store closed and resolves every wave ``FAILED``.

Not thread-safe: everything runs on the loop's thread, except ``stop`` once the loop no
longer runs puts (the store is closing), which waits for the fsync in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from rmq_spark.store.flush import FlushWait
from rmq_spark.store.uring import FsyncRing

if TYPE_CHECKING:
    from rmq_spark.store.async_commit import _Wave

__all__ = ["RingCommit"]

_log = logging.getLogger(__name__)
_TICK_S = 0.002  # how often the safety-net timer looks at the ring while fsyncs are in flight
# An fdatasync's completion that has not come after this long is taken as lost (seen once in
# CI: two submitted, none completed, the loop idle); the timer then fsyncs in the loop's thread.
_LOST_AFTER_S = 1.0

Start = Callable[[], "tuple[list[int], int, object]"]
"""Commit what is staged; returns (descriptors to fdatasync, the offset they make durable,
what ``finish`` needs). No descriptors: another flush fsynced everything below that offset
(``finish`` still publishes it). Raises ``OSError``."""
Finish = Callable[[object, int], None]
"""After the fdatasyncs: record and publish the durable offset. Raises ``OSError``."""


class RingCommit:
    """The io_uring fsyncs of one loop's waves (see the module docstring).

    Parameters
    ----------
    ring
        The ring (this object closes it in ``stop``).
    loop
        The loop whose waves it takes; its thread is the only one that calls it.
    start, finish
        The store's side of an fsync (see ``Start`` and ``Finish``).
    fail
        Called with the error when an fsync failed (the store fails closed).
    resolve
        Gives the waves their outcome (``async_commit._resolve``).
    flushed
        The store's flushed offset now.
    max_in_flight
        How many fsyncs may be in flight at once.
    """

    def __init__(
        self,
        ring: FsyncRing,
        loop: asyncio.AbstractEventLoop,
        start: Start,
        finish: Finish,
        fail: Callable[[OSError], None],
        resolve: Callable[[list[_Wave], FlushWait], None],
        flushed: Callable[[], int],
        max_in_flight: int = 2,
    ) -> None:
        self.ring = ring
        self.loop = loop
        self._start = start
        self._finish = finish
        self._fail = fail
        self._resolve = resolve
        self._flushed = flushed
        self.pending: list[_Wave] = []
        self.in_flight: deque[_Fsync] = deque()
        """Submitted fsyncs, oldest first."""
        self._by_id: dict[int, _Fsync] = {}
        self._max_in_flight = max_in_flight
        self._error: OSError | None = None
        self._sequence = 0
        self._stopped = False
        self._tick_handle: asyncio.TimerHandle | None = None
        self.rescues = 0
        """How many times the safety-net timer, not the eventfd or a put, found an ended fsync."""
        self.without_ring = False
        """True once a completion never came: fsyncs are then plain fdatasyncs on the loop."""
        self.ready = ring.ready
        loop.add_reader(ring.eventfd, self._on_eventfd)

    def add(self, wave: _Wave) -> None:
        """A closed wave: fsync it (now, or with the next fsync)."""
        self.pending.append(wave)
        self.pump()

    def poll(self) -> None:
        """Between two puts: take the end of the fsyncs in flight, if it came."""
        if self.in_flight and self.ready():
            self.pump()

    def _on_eventfd(self) -> None:
        self.ring.drain_eventfd()
        self.pump()

    def pump(self) -> None:
        """Finish the fsyncs in flight that ended; start the next if waves wait for one."""
        in_flight = self.in_flight
        if in_flight and self.ready():
            for user_data, result in self.ring.reap():
                fsync = self._by_id.get(user_data)
                if fsync is None:
                    continue  # finished already (``_rescue``), or unknown
                fsync.remaining -= 1
                if result < 0 and fsync.error is None:
                    fsync.error = OSError(-result, f"fdatasync (io_uring): {os.strerror(-result)}")
            if not self._finish_ended():
                return
        if self.pending and len(in_flight) < self._max_in_flight and not self._stopped:
            self._submit()

    def _finish_ended(self) -> bool:
        """Publish and resolve the fsyncs that ended, oldest first; False: the store failed."""
        in_flight = self.in_flight
        while in_flight and in_flight[0].remaining == 0:
            fsync = in_flight.popleft()
            del self._by_id[fsync.id]
            error = fsync.error or self._error
            if error is None:
                try:
                    self._finish(fsync.token, fsync.covering)
                except OSError as err:
                    error = err
            if error is not None:
                self._failed(error, fsync.waves)
                return False
            self._resolve(fsync.waves, FlushWait.DURABLE)
        if self.pending:
            flushed = self._flushed()
            covered = [wave for wave in self.pending if wave.end <= flushed]
            if covered:
                self.pending = [wave for wave in self.pending if wave.end > flushed]
                self._resolve(covered, FlushWait.DURABLE)
        return True

    def _submit(self) -> None:
        waves = self.pending
        self.pending = []
        flushed = self._flushed()
        if all(wave.end <= flushed for wave in waves):  # another fsync covered them already
            self._resolve(waves, FlushWait.DURABLE)
            return
        try:
            fds, covering, token = self._start()
            if not fds:
                # Every byte below ``covering`` was fsynced already, by a flush that may not
                # have published it yet (a thread's group commit): publish it before the
                # waves are acknowledged.
                self._finish(token, covering)
                self._resolve(waves, FlushWait.DURABLE)
                return
            if self.without_ring:
                for fd in fds:
                    os.fdatasync(fd)
                self._finish(token, covering)
                self._resolve(waves, FlushWait.DURABLE)
                return
            self._sequence += 1
            self.ring.submit_fdatasync(fds, self._sequence)
        except OSError as err:
            self._failed(err, waves)
            return
        fsync = _Fsync(self._sequence, fds, covering, waves, token)
        self.in_flight.append(fsync)
        self._by_id[fsync.id] = fsync
        if self._tick_handle is None:
            self._tick_handle = self.loop.call_later(_TICK_S, self._tick)

    def _tick(self) -> None:
        """The safety net: finish what ended if nothing else noticed; again while needed."""
        self._tick_handle = None
        if not self.in_flight or self._stopped:
            return
        if self.ready():
            self.rescues += 1
            if self.rescues == 1:
                _log.debug("io_uring: an fsync's end was found by the timer, not the eventfd")
            self.pump()
        elif time.monotonic() - self.in_flight[0].submitted_s > _LOST_AFTER_S:
            self._rescue()
        if self.in_flight and self._tick_handle is None and not self._stopped:
            self._tick_handle = self.loop.call_later(_TICK_S, self._tick)

    def _rescue(self) -> None:
        """Completions that never came: fdatasync the fsyncs in flight in this thread, and
        from now on fsync without the ring (its own count keeps the lost entries)."""
        _log.warning(
            "io_uring: an fdatasync submitted %.1f s ago never completed; fsyncs of this loop "
            "are done by fdatasync in its thread from now on",
            time.monotonic() - self.in_flight[0].submitted_s,
        )
        self.without_ring = True
        for fsync in self.in_flight:
            for fd in fsync.fds:
                try:
                    os.fdatasync(fd)
                except OSError as err:
                    fsync.error = fsync.error or err
            fsync.remaining = 0
        if self._finish_ended() and self.pending and not self._stopped:
            self._submit()

    def _failed(self, error: OSError, waves: list[_Wave]) -> None:
        """The store fails closed: every wave waiting here gets ``FAILED`` now (the
        completions of the fsyncs still in flight are ignored when they come)."""
        _log.error("SYNC fsync through io_uring failed: %s", error)
        self._error = error
        self._stopped = True
        self._fail(error)
        for fsync in self.in_flight:
            waves = waves + fsync.waves
        self.in_flight.clear()
        self._by_id.clear()
        pending, self.pending = self.pending, []
        self._resolve(waves + pending, FlushWait.FAILED)

    def stop(self) -> None:
        """Wait for the fsync in flight, resolve what waits (on the loop if it still runs)
        and release the ring. The store flushed everything before (or failed)."""
        self._stopped = True
        ring = self.ring
        try:
            # Without the ring, what it still counts in flight are the lost completions.
            results = [] if self.without_ring else ring.wait_all()
        except OSError as err:  # cannot wait: nothing more is known about that fsync
            _log.error("waiting for the io_uring fsync failed: %s", err)
            results = [(0, -(err.errno or 5))]
        waves: list[_Wave] = list(self.pending)
        self.pending = []
        for fsync in self.in_flight:
            waves.extend(fsync.waves)
        self.in_flight.clear()
        self._by_id.clear()
        failed = any(result < 0 for _, result in results) or self._error is not None
        flushed = self._flushed()
        durable = [wave for wave in waves if not failed and wave.end <= flushed]
        lost = [wave for wave in waves if failed or wave.end > flushed]
        loop = self.loop
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(_finish_on_loop, loop, ring, self._resolve, durable, lost)
                return
            except RuntimeError:  # closed meanwhile
                pass
        ring.close()


class _Fsync:
    """One submitted fsync: its fdatasyncs not completed yet, the offset it makes durable,
    the waves it covers, the store's token for ``finish``, the first error."""

    __slots__ = ("id", "fds", "remaining", "covering", "waves", "token", "error", "submitted_s")

    def __init__(
        self, id_: int, fds: list[int], covering: int, waves: list[_Wave], token: object
    ) -> None:
        self.id = id_
        self.fds = fds
        self.remaining = len(fds)
        self.submitted_s = time.monotonic()
        self.covering = covering
        self.waves = waves
        self.token = token
        self.error: OSError | None = None


def _finish_on_loop(
    loop: asyncio.AbstractEventLoop,
    ring: FsyncRing,
    resolve: Callable[[list[_Wave], FlushWait], None],
    durable: list[_Wave],
    lost: list[_Wave],
) -> None:
    loop.remove_reader(ring.eventfd)
    ring.close()
    resolve(durable, FlushWait.DURABLE)
    resolve(lost, FlushWait.FAILED)
