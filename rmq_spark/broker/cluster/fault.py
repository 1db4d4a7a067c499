"""PURE: choosing a queue for a send, and avoiding brokers that failed or were slow (seed 003).

``QueueChooser`` is RocketMQ's ``MQFaultStrategy.selectOneMessageQueue`` over a route's queues
(every queue of every broker): round-robin from a counter, skipping, on a retry, the broker
whose send just failed. With the latency fault table on (``sendLatencyFaultEnable``),
``LatencyFaultTable`` also skips brokers inside their "not available" window: after each send
the latency maps to a window through ``LATENCY_MAX_MS`` -> ``NOT_AVAILABLE_MS`` (RocketMQ 4.x's
defaults, seed 003's table), and a failure counts as ``ISOLATION_LATENCY_MS`` (a 10-minute
window). When every broker is inside its window the one that recovers first is used (RocketMQ's
``pickOneAtLeast``): a send is never refused for lack of a broker. The clock is injected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "ISOLATION_LATENCY_MS",
    "LATENCY_MAX_MS",
    "LatencyFaultTable",
    "NOT_AVAILABLE_MS",
    "QueueChooser",
    "RoutedQueue",
]

log = logging.getLogger("rmq_spark.broker.cluster")

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
ISOLATION_LATENCY_MS = 30_000  # a failed send counts as this slow


@dataclass(frozen=True, slots=True)
class RoutedQueue:
    """One queue of a route: its broker's name and gRPC ``host:port``, and its id."""

    broker_name: str
    endpoint: str
    queue_id: int


class LatencyFaultTable:
    """Per broker: the last latency and the time (``now_ms``) from which it is available."""

    def __init__(
        self,
        now_ms: Callable[[], float],
        *,
        latency_max_ms: Sequence[int] = LATENCY_MAX_MS,
        not_available_ms: Sequence[int] = NOT_AVAILABLE_MS,
    ) -> None:
        if len(latency_max_ms) != len(not_available_ms) or not latency_max_ms:
            raise ValueError("latency_max_ms and not_available_ms: need the same, non-zero length")
        if list(latency_max_ms) != sorted(latency_max_ms):
            raise ValueError(f"latency_max_ms: must be ascending, got {list(latency_max_ms)}")
        self._now = now_ms
        self._latency_max = tuple(latency_max_ms)
        self._not_available = tuple(not_available_ms)
        self._items: dict[str, tuple[float, float]] = {}  # broker -> (latency, available from)

    def not_available_ms(self, latency_ms: float) -> int:
        """The window a send of ``latency_ms`` earns (``computeNotAvailableDuration``)."""
        pairs = zip(self._latency_max, self._not_available, strict=True)
        for bound, window in reversed(list(pairs)):
            if latency_ms >= bound:
                return window
        return 0

    def update(self, broker: str, latency_ms: float, *, failed: bool) -> None:
        """Record one send to ``broker``: ``failed`` sends count as ``ISOLATION_LATENCY_MS``."""
        window = self.not_available_ms(ISOLATION_LATENCY_MS if failed else latency_ms)
        start = self._now() + window
        self._items[broker] = (latency_ms, start)
        if window:
            log.debug(
                "fault table: broker %s %s after %.0f ms: avoided for %d ms",
                broker, "failed" if failed else "slow", latency_ms, window,
            )  # fmt: skip

    def is_available(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or self._now() >= item[1]

    def recovers_first(self, brokers: Sequence[str]) -> str | None:
        """Of ``brokers``, the one whose window ends first (``None`` for an empty list)."""
        return min(brokers, key=lambda name: self._items.get(name, (0.0, 0.0))[1], default=None)

    def state(self) -> dict[str, tuple[float, float]]:
        """Broker -> (last latency ms, ms until available; 0 when available): for logs."""
        now = self._now()
        return {name: (lat, max(0.0, start - now)) for name, (lat, start) in self._items.items()}


class QueueChooser:
    """Round-robin over a route's queues, with the fault table when ``faults`` is given."""

    def __init__(self, faults: LatencyFaultTable | None = None, start: int = 0) -> None:
        self.faults = faults
        self._index = start

    def choose(self, queues: Sequence[RoutedQueue], last_broker: str | None) -> RoutedQueue:
        """The next queue; ``last_broker``: the broker of a failed attempt (avoided if any
        other broker has a queue)."""
        if not queues:
            raise ValueError("no queues to choose from")
        start, self._index = self._index, self._index + 1
        ordered = [queues[(start + i) % len(queues)] for i in range(len(queues))]
        others = [q for q in ordered if q.broker_name != last_broker] or ordered
        if self.faults is None:
            return others[0]
        faults = self.faults
        for candidates in (others, ordered):
            for queue in candidates:
                if faults.is_available(queue.broker_name):
                    return queue
        least = faults.recovers_first(sorted({q.broker_name for q in others}))
        chosen = next(q for q in others if q.broker_name == least)
        log.debug("fault table: every broker avoided; using %s: %s", least, faults.state())
        return chosen
