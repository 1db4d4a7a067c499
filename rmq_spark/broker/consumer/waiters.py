"""Long polling: the one loop of a receive that waits for its topic to grow, and its wake-ups.

``long_poll`` is the one loop of both fronts (``ConsumeService.receive`` on the event loop,
``receive_blocking`` in the embedded consumer's thread), which do its I/O: pop; when nothing
came, wait for a wake-up (at most until the earliest invisible message comes back), then pop
again, until something came, the time is up or the broker stops. A receive registers before
it looks (so a message stored between its look and its wait still wakes it), then waits on
an ``asyncio.Event`` (woken through ``loop.call_soon_threadsafe``) or a ``threading.Event``.
``wake`` is the queue source's listener: it runs on the source's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["Waiters", "long_poll"]

T = TypeVar("T")
PopResult = tuple[list[T], bool]  # a pop's result, and whether the broker is stopping


def long_poll(wait_s: float, now_s: Callable[[], float]) -> Generator[float, PopResult[T], list[T]]:
    """The one long-poll loop, without its I/O. Prime it with ``next``, then send in each
    pop's result and whether the broker is stopping; it answers the seconds left to wait for
    a wake-up before the next pop, or returns the receive's answer (something came, the time
    is up, or the broker is stopping)."""
    end = now_s() + wait_s
    found, stopping = yield 0.0
    while True:
        remaining_s = end - now_s()
        if found or remaining_s <= 0 or stopping:
            return found
        found, stopping = yield remaining_s


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
