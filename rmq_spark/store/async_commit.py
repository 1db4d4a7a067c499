"""SYNC group commit for asyncio producers: the waves ``put_async`` and ``put_batch_async`` await.

Owns how a put made on an event loop waits for durability without blocking the loop or a
thread per put (``durability.Durability.wait_async`` uses it). The record is appended in the
calling (loop) thread, under the put lock, by the same code as ``put`` (``appender.py``); then:

* The put joins the loop's open *wave* and awaits the wave's one future. A wave closes
  (goes to the flush thread) as soon as ``WAVE_SIZE`` puts joined it, or at the end of the
  loop pass in which it opened (its first put schedules the closing with ``call_soon``, which
  runs after the puts already made ready).
* The *flush thread* (one per store, started on the first use) waits until an fsync covers
  the highest end offset of every wave it took (it joins ``GroupCommit``: it leads an fsync
  or shares one with thread producers; one fsync in flight, the next covers everything
  written while it ran), then resolves every wave that fsync covered, one
  ``loop.call_soon_threadsafe`` per loop: one wake-up of the loop per group of puts.
* Closing a wave mid-pass lets its fsync overlap with the appends of the rest of the pass:
  a crowd of producers woken together splits into two groups, one appending while the
  other's fsync runs, instead of one group that appends, then idles through the fsync.
  Because the flush thread needs the GIL to start the fsync and the loop holds it until the
  pass ends, the loop waits (at most ``_HANDSHAKE_S``, typically tens of microseconds) for
  the flush thread to start when the thread was idle; when an fsync is already running, the
  wave just queues for the next one.
* A wave that no fsync covered after ``sync_flush_timeout_ms`` resolves its puts with
  ``FlushWait.TIMEOUT`` (a timer on the loop); a failed fsync resolves them with ``FAILED``
  (the store fails closed). Cancelling a waiting put takes effect when its wave resolves
  (cancelling the shared future would cancel every put of the wave); the record stays
  stored, unacknowledged.

Where the kernel offers io_uring (``store.io_uring``, default on), the loop does the fsyncs of
its waves itself instead (``ring_commit.py``): it submits them, notices their end between two
puts and resolves the waves without a thread; the flush thread then serves other loops only.

Acknowledgement is the same as ``put``'s: ``PUT_OK`` only after an fsync covered the record.
ASYNC stores need none of this: ``put_async`` is ``put`` (the put never blocks on I/O).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from rmq_spark.store.flush import FlushWait, GroupCommit
from rmq_spark.store.ring_commit import RingCommit

__all__ = ["AsyncGroupCommit", "WAVE_SIZE", "resolve_waves"]

_log = logging.getLogger(__name__)
_DURABLE = FlushWait.DURABLE
_running_loop = asyncio.get_running_loop
WAVE_SIZE = 32
"""Puts per wave: a wave goes to the flush thread as soon as this many puts joined it
(chosen with ``bench/bench_put.py``: 16-48 perform alike with 64 producers; fewer producers
than this keep one wave per loop pass)."""
_HANDSHAKE_S = 0.002  # the longest the loop waits for an idle flush thread to take a wave


class _WaveFuture(asyncio.Future):  # type: ignore[type-arg]
    """The one future every put of a wave awaits. Cancelling a waiting put must not cancel
    the others: ``cancel`` refuses, so the task is cancelled when the wave resolves."""

    def cancel(self, msg: object = None) -> bool:
        return False


class _Wave:
    """Puts of one loop awaiting the same fsync: the future they await, the highest end
    offset, how many joined, whether it went to the flush thread."""

    __slots__ = ("loop", "future", "end", "timer", "count", "closed")

    def __init__(self, loop: asyncio.AbstractEventLoop, end: int) -> None:
        self.loop = loop
        self.future = _WaveFuture(loop=loop)
        self.end = end
        self.timer: asyncio.TimerHandle | None = None
        self.count = 0
        self.closed = False


class AsyncGroupCommit:
    """Waves of asyncio puts made durable by one flush thread (see the module docstring).

    Parameters
    ----------
    group
        The store's ``GroupCommit`` (the flush thread waits on it like a thread producer).
    timeout_ms
        How long a put waits for its fsync before ``FlushWait.TIMEOUT``.
    wave_size
        Puts after which a wave goes to the flush thread without waiting for the pass end.
    ring
        Makes a ``RingCommit`` for a loop (the loop fsyncs its own waves through io_uring),
        or ``None`` (no io_uring: every wave goes to the flush thread).
    """

    def __init__(
        self,
        group: GroupCommit,
        timeout_ms: int,
        wave_size: int = WAVE_SIZE,
        ring: Callable[[asyncio.AbstractEventLoop], RingCommit | None] | None = None,
    ) -> None:
        if wave_size < 1:
            raise ValueError(f"wave_size: must be >= 1, got {wave_size}")
        self._ring_factory = ring
        self._ring: RingCommit | None = None  # the io_uring path of one loop
        self._group = group
        self._wave_size = wave_size
        self._timeout_s = timeout_ms / 1000
        self._open: dict[asyncio.AbstractEventLoop, _Wave] = {}
        self._closed_waves: deque[_Wave] = deque()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards starting and stopping the flush thread
        self._stopped = False
        self._idle = False  # the flush thread waits for a wave
        self._started: threading.Lock | None = None  # released when the next fsync starts
        self.groups = 0
        """How many groups were resolved (one ``call_soon_threadsafe`` each)."""

    def wait(self, end_offset: int) -> asyncio.Future[FlushWait]:
        """A future of the running loop, resolved once an fsync covers ``end_offset`` (shared
        by the wave: await it, do not cancel it)."""
        loop = _running_loop()
        ring = self._ring
        if ring is not None and ring.loop is loop:
            if ring.in_flight and ring.ready():
                ring.pump()  # an fsync in flight ended: resolve its waves now, mid-pass
        elif self._ring_factory is not None:
            self._ring_for(loop)
        wave = self._open.get(loop)
        if wave is None:
            wave = self._open[loop] = _Wave(loop, end_offset)
            loop.call_soon(self._close_wave, wave)
            wave.timer = loop.call_later(self._timeout_s, _expire, wave)
        elif end_offset > wave.end:
            wave.end = end_offset
        wave.count += 1
        if wave.count >= self._wave_size:
            self._close_wave(wave, True)  # fsynced while the loop appends the next puts
        return wave.future

    def _close_wave(self, wave: _Wave, early: bool = False) -> None:
        """On the loop: no more puts join ``wave``; hand it to the flush thread. ``early``
        (mid-pass): if the flush thread is idle, wait until it has started the fsync."""
        if wave.closed:
            return
        wave.closed = True
        if self._open.get(wave.loop) is wave:
            del self._open[wave.loop]
        if self._group.flushed_offset >= wave.end:  # a running fsync covered it meanwhile
            resolve_waves([wave], _DURABLE)
            return
        ring = self._ring
        if ring is not None and ring.loop is wave.loop and not self._stopped:
            ring.add(wave)
            return
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._closed_waves.append(wave)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="rmq-store-async-flush", daemon=True
                    )
                    self._thread.start()
        if stopped:  # the store is closed: what it flushed on close is all there is
            durable = self._group.flushed_offset >= wave.end
            resolve_waves([wave], _DURABLE if durable else FlushWait.FAILED)
            return
        if early and self._idle:
            started = threading.Lock()
            started.acquire()
            self._started = started
            self._wakeup.set()
            started.acquire(timeout=_HANDSHAKE_S)
        else:
            self._wakeup.set()

    def _ring_for(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give ``loop`` the io_uring path if no other live loop has it."""
        current = self._ring
        if current is not None:
            if not current.loop.is_closed():
                return  # another loop has it: this one uses the flush thread
            self._ring = None
            current.stop()
        factory = self._ring_factory
        if factory is None or self._stopped:
            return
        ring = factory(loop)
        if ring is None:
            self._ring_factory = None  # not available here: never ask again
        self._ring = ring

    def _run(self) -> None:
        waves = self._closed_waves
        while True:
            self._idle = True
            self._wakeup.wait()
            self._idle = False
            self._wakeup.clear()
            stopped = self._stopped  # read first: every wave queued before the stop is seen
            while waves:
                taken: list[_Wave] = []
                while waves:
                    taken.append(waves.popleft())
                target = max(wave.end for wave in taken)
                started = self._started
                if started is not None:  # the loop waits for this fsync to start
                    self._started = None
                    started.release()
                try:
                    outcome = self._group.wait_durable(target, None)
                except Exception:  # never leave a put waiting for ever
                    _log.exception("async flush of the store failed")
                    outcome = FlushWait.FAILED
                if outcome is _DURABLE:  # waves queued during the fsync that it covered
                    flushed = self._group.flushed_offset
                    while waves and waves[0].end <= flushed:
                        taken.append(waves.popleft())
                self._hand_back(taken, outcome)
            if stopped:
                return

    def _hand_back(self, waves: list[_Wave], outcome: FlushWait) -> None:
        """Resolve ``waves`` on their loops: one ``call_soon_threadsafe`` per loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Wave]] = {}
        for wave in waves:
            by_loop.setdefault(wave.loop, []).append(wave)
        for loop, group in by_loop.items():
            self.groups += 1  # before: the loop may resolve them before the next line runs
            try:
                loop.call_soon_threadsafe(resolve_waves, group, outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                self.groups -= 1

    def stop(self) -> None:
        """Resolve what is queued and end the flush thread (the store is closing; it has
        flushed, or failed). Waves closed later resolve at once from the flushed offset."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        ring, self._ring = self._ring, None
        if ring is not None:
            ring.stop()
        self._wakeup.set()
        if thread is not None:
            thread.join()


def resolve_waves(waves: list[_Wave], outcome: FlushWait) -> None:
    """On the loop: give every put of ``waves`` its outcome (unless it timed out)."""
    for wave in waves:
        if wave.timer is not None:
            wave.timer.cancel()
        if not wave.future.done():
            wave.future.set_result(outcome)


def _expire(wave: _Wave) -> None:
    """On the loop: the wave's puts waited ``sync_flush_timeout_ms`` in vain."""
    wave.timer = None
    if not wave.future.done():
        wave.future.set_result(FlushWait.TIMEOUT)
