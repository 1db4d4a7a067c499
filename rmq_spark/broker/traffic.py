"""``TrafficStats``: what the broker put and delivered, counted cheaply on the hot paths.

``BrokerService`` counts stored messages and bytes per topic and times its store puts;
``ConsumeService`` counts deliveries and acknowledgements per consumer group. Nothing here
exports anything: ``metrics.py`` reads ``snapshot()`` when Prometheus scrapes, so a broker
without metrics pays a lock, a dict update and a bisect per put.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from rmq_spark.store.latency import LatencySnapshot, LatencyStats
from rmq_spark.store.put import PutResult, PutStatus

__all__ = ["RpcKey", "TrafficSnapshot", "TrafficStats"]

RpcKey = tuple[str, str, str, str]
"""``(protocol, method, response code, result)`` of timed requests (``rpc_done``)."""


@dataclass(frozen=True, slots=True)
class TrafficSnapshot:
    """Totals since the broker started: ``puts`` topic -> (messages, bytes) stored (the
    stored topic: a delayed message counts under its schedule topic; bytes are whole records
    as written to the CommitLog), ``received``/``acked`` group -> messages, ``put_latency``."""

    puts: dict[str, tuple[int, int]]
    received: dict[str, int]
    acked: dict[str, int]
    put_latency: LatencySnapshot
    rpc: dict[RpcKey, LatencySnapshot] = field(default_factory=dict)


class TrafficStats:
    """Counters shared by the send and consume paths; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._puts: dict[str, list[int]] = {}
        self._received: dict[str, int] = {}
        self._acked: dict[str, int] = {}
        self.put_latency = LatencyStats()
        self._rpc: dict[RpcKey, LatencyStats] = {}

    def put_done(self, results: Iterable[PutResult], seconds: float | None) -> None:
        """Count the stored records among ``results`` (retried duplicates store nothing);
        ``seconds``: how long the store put took, recorded once per result."""
        count = 0
        with self._lock:
            for result in results:
                count += 1
                if result.status is PutStatus.PUT_OK and not result.duplicate:
                    totals = self._puts.get(result.topic)
                    if totals is None:
                        totals = self._puts[result.topic] = [0, 0]
                    totals[0] += 1
                    totals[1] += result.total_size
        if seconds is not None and count:
            self.put_latency.record(seconds, count)

    def received(self, group: str, count: int) -> None:
        with self._lock:
            self._received[group] = self._received.get(group, 0) + count

    def acked(self, group: str) -> None:
        with self._lock:
            self._acked[group] = self._acked.get(group, 0) + 1

    def rpc_done(
        self, protocol: str, method: str, code: str, result: str, seconds: float, times: int = 1
    ) -> None:
        """``times`` requests answered alike: their ``method``, the answers' status ``code``,
        ``result`` (``success``, or how they failed) and how long each took."""
        key = (protocol, method, code, result)
        stats = self._rpc.get(key)
        if stats is None:
            with self._lock:
                stats = self._rpc.setdefault(key, LatencyStats())
        stats.record(seconds, times)

    def snapshot(self) -> TrafficSnapshot:
        with self._lock:
            puts = {topic: (n, size) for topic, (n, size) in self._puts.items()}
            received, acked = dict(self._received), dict(self._acked)
            rpc = list(self._rpc.items())
        return TrafficSnapshot(
            puts,
            received,
            acked,
            self.put_latency.snapshot(),
            {key: stats.snapshot() for key, stats in rpc},
        )
