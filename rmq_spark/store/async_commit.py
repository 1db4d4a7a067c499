"""SYNC group commit for asyncio producers: ``put_async`` and ``put_batch_async``.

Owns how a put made on an event loop waits for durability without blocking the loop or a
thread per put. The record is appended in the calling (loop) thread, under the put lock, by the
same code as ``put`` (``store_put.py``); then:

* The put joins the loop's open *wave* (every put made on that loop during one pass of its
  ready callbacks) and awaits the wave's one future. The first put of a wave schedules
  (``call_soon``) the wave's closing, which runs after the puts already made ready, so a
  crowd of producers woken together (the previous wave) writes its next records into one
  wave.
* A closed wave goes to the *flush thread* (one per store, started on the first use), which
  waits until an fsync covers the highest end offset of every wave it took (it joins
  ``GroupCommit``: it leads an fsync or shares one with thread producers), then resolves
  every wave of one loop with ONE ``loop.call_soon_threadsafe``: one wake-up of the loop per
  group of puts, not one thread hand-off per put.
* A wave that no fsync covered after ``sync_flush_timeout_ms`` resolves its puts with
  ``FlushWait.TIMEOUT`` (a timer on the loop); a failed fsync resolves them with ``FAILED``
  (the store fails closed). Cancelling a waiting put takes effect when its wave resolves
  (cancelling the shared future would cancel every put of the wave); the record stays
  stored, unacknowledged.

Acknowledgement is the same as ``put``'s: ``PUT_OK`` only after an fsync covered the record.
ASYNC stores need none of this: ``put_async`` is ``put`` (the put never blocks on I/O).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Sequence

from rmq_spark.store.flush import FlushWait, GroupCommit
from rmq_spark.store.put import PutRequest, PutResult, PutStatus
from rmq_spark.store.store_put import PutPaths

__all__ = ["AsyncGroupCommit", "AsyncPutPaths"]

_log = logging.getLogger(__name__)
_PUT_OK = PutStatus.PUT_OK
_DURABLE = FlushWait.DURABLE
_running_loop = asyncio.get_running_loop


class _WaveFuture(asyncio.Future):  # type: ignore[type-arg]
    """The one future every put of a wave awaits. Cancelling a waiting put must not cancel
    the others: ``cancel`` refuses, so the task is cancelled when the wave resolves."""

    def cancel(self, msg: object = None) -> bool:
        return False


class _Wave:
    """The puts one loop made in one pass: the future they await, the highest end offset."""

    __slots__ = ("loop", "future", "end", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, end: int) -> None:
        self.loop = loop
        self.future = _WaveFuture(loop=loop)
        self.end = end
        self.timer: asyncio.TimerHandle | None = None


class AsyncGroupCommit:
    """Waves of asyncio puts made durable by one flush thread (see the module docstring).

    Parameters
    ----------
    group
        The store's ``GroupCommit`` (the flush thread waits on it like a thread producer).
    timeout_ms
        How long a put waits for its fsync before ``FlushWait.TIMEOUT``.
    """

    def __init__(self, group: GroupCommit, timeout_ms: int) -> None:
        self._group = group
        self._timeout_s = timeout_ms / 1000
        self._open: dict[asyncio.AbstractEventLoop, _Wave] = {}
        self._closed_waves: deque[_Wave] = deque()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards starting and stopping the flush thread
        self._stopped = False
        self.groups = 0
        """How many groups were resolved (one ``call_soon_threadsafe`` each)."""

    def wait(self, end_offset: int) -> asyncio.Future[FlushWait]:
        """A future of the running loop, resolved once an fsync covers ``end_offset`` (shared
        by the wave: await it, do not cancel it)."""
        loop = _running_loop()
        wave = self._open.get(loop)
        if wave is None:
            wave = self._open[loop] = _Wave(loop, end_offset)
            loop.call_soon(self._close_wave, wave)
            wave.timer = loop.call_later(self._timeout_s, _expire, wave)
        elif end_offset > wave.end:
            wave.end = end_offset
        return wave.future

    def _close_wave(self, wave: _Wave) -> None:
        """On the loop: no more puts join ``wave``; hand it to the flush thread."""
        if self._open.get(wave.loop) is wave:
            del self._open[wave.loop]
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
            _resolve([wave], _DURABLE if durable else FlushWait.FAILED)
            return
        self._wakeup.set()

    def _run(self) -> None:
        waves = self._closed_waves
        while True:
            self._wakeup.wait()
            self._wakeup.clear()
            stopped = self._stopped  # read first: every wave queued before the stop is seen
            while waves:
                taken: list[_Wave] = []
                while waves:
                    taken.append(waves.popleft())
                target = max(wave.end for wave in taken)
                try:
                    outcome = self._group.wait_durable(target, None)
                except Exception:  # never leave a put waiting for ever
                    _log.exception("async flush of the store failed")
                    outcome = FlushWait.FAILED
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
                loop.call_soon_threadsafe(_resolve, group, outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                self.groups -= 1

    def stop(self) -> None:
        """Resolve what is queued and end the flush thread (the store is closing; it has
        flushed, or failed). Waves closed later resolve at once from the flushed offset."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wakeup.set()
        if thread is not None:
            thread.join()


def _resolve(waves: list[_Wave], outcome: FlushWait) -> None:
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


class AsyncPutPaths(PutPaths):
    """``PutPaths`` plus ``put_async`` and ``put_batch_async``: a base class of
    ``MessageStore``, which sets ``_async_commit`` to ``None`` and stops it on close."""

    _async_commit: AsyncGroupCommit | None

    async def put_async(self, request: PutRequest) -> PutResult:
        """``put`` for a coroutine on an event loop: the record is written in the calling
        thread (the put lock is held for microseconds); under SYNC the coroutine then
        awaits the fsync that covers it, the loop staying free. Same statuses as ``put``."""
        result = self._append(request)
        if self._sync and result.status is _PUT_OK:
            end = result.physical_offset + result.total_size
            if self._group.flushed_offset < end:
                outcome = await (self._async_commit or self._commit()).wait(end)
                if outcome is not _DURABLE:
                    result.status, result.detail = self._flush_status(outcome)  # type: ignore[misc]
        return result

    async def put_batch_async(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """``put_batch`` for a coroutine (see ``put_async``)."""
        results, end = self._append_batch(requests)
        if self._sync and end and self._group.flushed_offset < end:
            status = self._flush_status(await self._commit().wait(end))
            if status is not None:
                for result in results:
                    result.status, result.detail = status
        return results

    def _commit(self) -> AsyncGroupCommit:
        commit = self._async_commit
        if commit is None:
            commit = self._async_commit = AsyncGroupCommit(self._group, self._timeout_ms)
        return commit
