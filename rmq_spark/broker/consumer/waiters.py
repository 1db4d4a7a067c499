"""Long polling: the one loop of a receive that waits for its topic to grow, and its wake-ups.

``Waiters.poll`` (gRPC handlers, on the event loop) and ``Waiters.poll_blocking`` (the
embedded consumer's thread) drive one loop, ``_long_poll``: pop; when nothing came, wait for a
wake-up at most until the earliest invisible message comes back (``pause_s``), then pop again,
until something came, the time is up or the broker stops. A receive registers before it looks
(so a message stored between its look and its wait still wakes it), then waits on an
``asyncio.Event`` (woken through ``loop.call_soon_threadsafe``) or a ``threading.Event``.
``wake`` is the queue source's listener: it runs on the source's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["Waiters"]

T = TypeVar("T")


def _long_poll(
    wait_s: float,
    now_s: Callable[[], float],
    pause_s: Callable[[float], float],
    stopping: Callable[[], bool],
) -> Generator[float, list[T], list[T]]:
    """The one long-poll loop. Send in each pop's result (the first one primes it); it
    answers how long to wait for a wake-up before the next pop, or returns the answer."""
    end = now_s() + wait_s
    found: list[T] = yield 0.0
    while True:
        remaining = end - now_s()
        if found or remaining <= 0 or stopping():
            return found
        found = yield pause_s(remaining)


class _AsyncWaiter:
    __slots__ = ("event", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            pass  # the loop closed: nobody waits any more


class _ThreadWaiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()

    def wake(self) -> None:
        self.event.set()


class Waiters:
    """Topic -> the receives waiting on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_topic: dict[str, set[_AsyncWaiter | _ThreadWaiter]] = {}

    @contextmanager
    def watch_async(self, *topics: str) -> Iterator[asyncio.Event]:
        waiter = _AsyncWaiter()
        with self._watching(waiter, topics):
            yield waiter.event

    @contextmanager
    def watch_thread(self, *topics: str) -> Iterator[threading.Event]:
        waiter = _ThreadWaiter()
        with self._watching(waiter, topics):
            yield waiter.event

    @contextmanager
    def _watching(
        self, waiter: _AsyncWaiter | _ThreadWaiter, topics: tuple[str, ...]
    ) -> Iterator[None]:
        for topic in topics:
            self._add(topic, waiter)
        try:
            yield
        finally:
            for topic in topics:
                self._remove(topic, waiter)

    async def poll(
        self,
        topics: tuple[str, ...],
        wait_s: float,
        pop: Callable[[], Awaitable[list[T]]],
        pause_s: Callable[[float], float],
        stopping: Callable[[], bool],
    ) -> list[T]:
        """``_long_poll`` on the event loop: ``pop`` until it finds something, at most
        ``wait_s``, waiting for a wake-up of ``topics`` in between."""
        steps: Generator[float, list[T], list[T]] = _long_poll(
            wait_s, asyncio.get_running_loop().time, pause_s, stopping
        )
        next(steps)
        with self.watch_async(*topics) as woken:
            while True:
                woken.clear()
                try:
                    pause = steps.send(await pop())
                except StopIteration as answer:
                    return list(answer.value)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), pause)

    def poll_blocking(
        self,
        topics: tuple[str, ...],
        wait_s: float,
        pop: Callable[[], list[T]],
        pause_s: Callable[[float], float],
        stopping: Callable[[], bool],
    ) -> list[T]:
        """``poll`` for a thread without an event loop."""
        steps: Generator[float, list[T], list[T]] = _long_poll(
            wait_s, time.monotonic, pause_s, stopping
        )
        next(steps)
        with self.watch_thread(*topics) as woken:
            while True:
                woken.clear()
                try:
                    pause = steps.send(pop())
                except StopIteration as answer:
                    return list(answer.value)
                woken.wait(pause)

    def wake(self, grown: set[tuple[str, int]]) -> None:
        """Wake every receive waiting on a topic in ``grown`` ((topic, queue id) pairs)."""
        topics = {topic for topic, _queue in grown}
        with self._lock:
            woken = [w for t in topics for w in self._by_topic.get(t, ())]
        for waiter in woken:
            waiter.wake()

    def wake_all(self) -> None:
        with self._lock:
            woken = [w for waiters in self._by_topic.values() for w in waiters]
        for waiter in woken:
            waiter.wake()

    def _add(self, topic: str, waiter: _AsyncWaiter | _ThreadWaiter) -> None:
        with self._lock:
            self._by_topic.setdefault(topic, set()).add(waiter)

    def _remove(self, topic: str, waiter: _AsyncWaiter | _ThreadWaiter) -> None:
        with self._lock:
            waiters = self._by_topic.get(topic)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._by_topic[topic]
