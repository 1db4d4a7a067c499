"""``SlaveAcks``: what the slaves have confirmed, and the sends of a SYNC_MASTER waiting for
it (RocketMQ's ``GroupTransferService``).

Owns the acknowledged offset (the highest offset any connected slave reported, RocketMQ's
``push2SlaveMaxOffset``), the live connection count, and the waiters: each send waits for
``acked >= end of its record``; one report releases every waiter it covers (group commit).
Decisions are taken under ``_lock``; futures and events are resolved after it is released.

Statuses (RocketMQ 4.x ``isSlaveOK`` + ``GroupTransferService``): no slave connected, or the
best slave more than ``SLAVE_FALLBEHIND_MAX`` behind -> ``SLAVE_NOT_AVAILABLE`` at once; not
covered within ``timeout_s`` -> ``FLUSH_SLAVE_TIMEOUT``. The message is stored either way.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rmq_spark.broker.replication.wire import SLAVE_FALLBEHIND_MAX
from rmq_spark.broker.send_model import SendCode

__all__ = ["Lag", "SlaveAcks"]

_OK, _TIMEOUT, _NONE = SendCode.OK, SendCode.FLUSH_SLAVE_TIMEOUT, SendCode.SLAVE_NOT_AVAILABLE


@dataclass(slots=True)
class Lag:
    """Replication lag as one side sees it: bytes behind and since when."""

    bytes: int = 0
    seconds: float = 0.0
    connections: int = 0
    acked_offset: int = 0


@dataclass(order=True, slots=True)
class _Waiter:
    end: int
    seq: int
    wake: object = field(compare=False)  # threading.Event or (loop, future)


class SlaveAcks:
    """The master's view of its slaves' reports; thread-safe."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._acked = 0
        self._connections = 0
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._behind_since: float | None = None  # when the slaves last were caught up
        # The transfer loop's wake-up: a new waiter's bytes go out now, not at the next poll.
        self.on_wait: Callable[[], None] | None = None

    @property
    def waiting(self) -> bool:
        """Sends are waiting for a report (the transfer polls faster then)."""
        return bool(self._waiters)

    def connected(self) -> None:
        with self._lock:
            self._connections += 1

    def disconnected(self) -> None:
        with self._lock:
            self._connections -= 1

    def report(self, offset: int) -> None:
        """A slave has everything below ``offset``: release the sends it covers."""
        with self._lock:
            if offset <= self._acked:
                return
            self._acked = offset
            cut = bisect.bisect_right(self._waiters, _Waiter(offset, 1 << 62, None))
            ready, self._waiters = self._waiters[:cut], self._waiters[cut:]
        for waiter in ready:
            _release(waiter)

    def lag(self, end: int) -> Lag:
        """How far the best slave is behind the master's ``end``."""
        now = time.monotonic()
        with self._lock:
            behind = max(0, end - self._acked)
            if behind == 0:
                self._behind_since = None
            elif self._behind_since is None:
                self._behind_since = now
            since = 0.0 if self._behind_since is None else now - self._behind_since
            return Lag(behind, since, self._connections, self._acked)

    def _decide(self, end: int, wake: object) -> SendCode | _Waiter:
        """Lock held by the caller: a status now, or the waiter registered."""
        if self._acked >= end:
            return _OK
        if self._connections <= 0 or end - self._acked > SLAVE_FALLBEHIND_MAX:
            return _NONE
        waiter = _Waiter(end, next(self._seq), wake)
        bisect.insort(self._waiters, waiter)
        return waiter

    def wait(self, end: int) -> SendCode:
        """Block until a slave covers ``end`` (``OK``) or the status saying why not."""
        event = threading.Event()
        with self._lock:
            decided = self._decide(end, event)
        if isinstance(decided, SendCode):
            return decided
        self._notify()
        event.wait(self.timeout_s)
        return self._settle(decided)

    async def wait_async(self, end: int) -> SendCode:
        """``wait`` for a coroutine: the loop stays free."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            decided = self._decide(end, (loop, future))
        if isinstance(decided, SendCode):
            return decided
        self._notify()
        # The report or the timer resolves the one future (no wait_for/shield pair per send).
        timer = loop.call_later(self.timeout_s, _resolve, future)
        try:
            await future
        except asyncio.CancelledError:
            self._settle(decided)  # no longer waited for: out of the list
            raise
        finally:
            timer.cancel()
        return self._settle(decided)

    def _notify(self) -> None:
        hook = self.on_wait
        if hook is not None:
            hook()

    def _settle(self, waiter: _Waiter) -> SendCode:
        with self._lock:
            if self._acked >= waiter.end:
                return _OK
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass
        return _TIMEOUT

    def release_all(self) -> None:
        """Shutting down: every waiter answers now (from what the slaves confirmed)."""
        with self._lock:
            ready, self._waiters = self._waiters, []
        for waiter in ready:
            _release(waiter)


def _release(waiter: _Waiter) -> None:
    wake = waiter.wake
    if isinstance(wake, threading.Event):
        wake.set()
        return
    loop, future = wake  # type: ignore[misc]
    if asyncio._get_running_loop() is loop:  # a report read on the send's own loop
        _resolve(future)
        return
    try:
        loop.call_soon_threadsafe(_resolve, future)
    except RuntimeError:  # its loop is closed: the send that waited ended with it
        pass


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
