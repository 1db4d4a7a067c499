"""Time, injected: ``Clock`` protocol, ``SystemClock`` and ``ManualClock`` for tests.

Nothing below ``jobs/`` and ``broker/server.py`` reads the wall clock directly; it takes a
``Clock`` so that delay and redelivery tests can move time by hand.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def monotonic_ms(self) -> float:
        """A monotonic millisecond counter for measuring intervals."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic_ns() / 1_000_000


class ManualClock:
    """A clock that moves only when told to (``advance``/``set``)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def monotonic_ms(self) -> float:
        return float(self.now_ms())

    def advance(self, delta_ms: int) -> None:
        if delta_ms < 0:
            raise ValueError(f"a clock cannot go back: advance({delta_ms})")
        with self._lock:
            self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now_ms = now_ms
