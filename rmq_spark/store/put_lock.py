"""``PutLock``: the store's put lock, a mutex whose contended waiters park instead of queueing.

Owns only mutual exclusion. Why not a plain ``threading.Lock``: a thread blocked on a CPython
lock is *handed* the lock when it is released and then waits for the GIL while holding it.
The releasing thread, which has the GIL, blocks on its very next put, hands the GIL over, and
from then on every put costs two context switches: a lock convoy. With two ASYNC producer
threads a put cost about twice the CPU of a put from one thread (bench_put.py).

Here a contended thread parks on a token of its own and is *woken*, not handed the lock: it
retries when it gets the GIL, while the thread that released the lock keeps running. At most
one parked thread is being woken at a time, so a crowd of producers does not stampede for
the GIL on every release.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["PutLock"]


class PutLock:
    """A mutex for short critical sections under the GIL (see the module docstring).

    Fast path, inlined by the put path::

        if not lock.mutex.acquire(False):
            lock.acquire_contended()
        try:
            ...
        finally:
            lock.mutex.release()
            if lock.parked:
                lock.wake_one()

    ``with lock:`` does the same. Every user must release through ``release`` (or the
    inlined form above), never ``mutex.release()`` alone, or a parked thread may sleep on.
    """

    __slots__ = ("mutex", "parked", "_waking", "_local")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.parked: deque[threading.Lock] = deque()  # tokens of parked threads, oldest first
        self._waking = False  # a parked thread was woken and has not retried yet
        self._local = threading.local()

    def acquire(self) -> None:
        if not self.mutex.acquire(False):
            self.acquire_contended()

    def release(self) -> None:
        self.mutex.release()
        if self.parked:
            self.wake_one()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def locked(self) -> bool:
        return self.mutex.locked()

    def acquire_contended(self) -> None:
        """Park until a release wakes us, retry; repeat until the mutex is ours."""
        mutex = self.mutex
        token = self._local.__dict__.get("token")
        if token is None:
            token = self._local.token = threading.Lock()
            token.acquire()  # a token is held while nobody waits on it
        while True:
            self.parked.append(token)
            if mutex.acquire(False):  # released between our first try and parking
                try:
                    self.parked.remove(token)
                except ValueError:  # a release already took our token: take its wake-up
                    token.acquire()
                    self._waking = False
                return
            token.acquire()  # parked
            self._waking = False
            if mutex.acquire(False):
                return

    def wake_one(self) -> None:
        """Wake the oldest parked thread, unless one woken earlier has not retried yet."""
        if self._waking:
            return
        try:
            token = self.parked.popleft()
        except IndexError:
            return
        self._waking = True
        token.release()
