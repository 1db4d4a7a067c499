"""``LatencyStats``: a cheap, lock-guarded histogram of durations (no metrics library).

The store times its fsyncs with one (``Durability.fsync_stats``) and the broker its puts; the
broker's metrics module (``rmq_spark/broker/metrics.py``) reads ``snapshot()`` at scrape
time and exports Prometheus histograms. The store itself depends on no metrics library:
recording is a bisect and two additions under an uncontended lock.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_BOUNDS_S", "LatencySnapshot", "LatencyStats"]

# Upper bounds in seconds: 50 us (a page-cache put) to 10 s (a stalled disk).
DEFAULT_BOUNDS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LatencySnapshot:
    """Counts per bucket (``counts[i]``: durations <= ``bounds[i]``, not cumulative; the last
    count is above every bound), their sum in seconds and how many there were."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum_s: float
    count: int


class LatencyStats:
    """Durations recorded from any thread; ``snapshot()`` reads them consistently."""

    __slots__ = ("_bounds", "_counts", "_sum_s", "_lock")

    def __init__(self, bounds: Sequence[float] = DEFAULT_BOUNDS_S) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bounds must be increasing and non-empty, got {list(bounds)}")
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum_s = 0.0
        self._lock = threading.Lock()

    def record(self, seconds: float, times: int = 1) -> None:
        """Record ``seconds`` ``times`` times (a batch: each of its messages waited that long)."""
        index = bisect.bisect_left(self._bounds, seconds)
        with self._lock:
            self._counts[index] += times
            self._sum_s += seconds * times

    def snapshot(self) -> LatencySnapshot:
        with self._lock:
            counts = tuple(self._counts)
            sum_s = self._sum_s
        return LatencySnapshot(self._bounds, counts, sum_s, sum(counts))
