"""What one redelivery pass did (``PassReport``): counts, lateness, the next due time; the job
logs it as one JSON line (``job.py``) and sums the passes of ``run_once``. ``tally_puts``
counts a batch's put results into it."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.delay.items import Item
from rmq_spark.delay.schedule import percentile
from rmq_spark.delay.sink import PutOutcome, SinkResult

__all__ = ["PassReport", "earliest", "tally_puts"]

log = logging.getLogger("rmq_spark.delay")


@dataclass
class PassReport:
    """What one pass did; ``as_dict()`` is what the job logs as one JSON line."""

    now_ms: int = 0
    source: str = ""
    delivered: int = 0
    discarded: int = 0
    settled_found: int = 0  # intent entries found already stored (after a crash)
    settled_put: int = 0  # intent entries put again while settling
    refused: int = 0
    skipped_missing: int = 0  # entries lost before delivery (retention), stepped over
    early: int = 0  # stored before their due time: must stay 0
    batches: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    next_due_ms: int | None = None
    exhausted: bool = False  # the pass saw everything due at its time (not cut by a limit)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self, window: collections.deque[int] | None = None) -> dict[str, Any]:
        doc = {k: v for k, v in dataclasses.asdict(self).items() if k != "lateness_ms"}
        doc["lateness_p50_ms"] = percentile(self.lateness_ms, 0.5)
        doc["lateness_p99_ms"] = percentile(self.lateness_ms, 0.99)
        doc["lateness_max_ms"] = max(self.lateness_ms) if self.lateness_ms else None
        if window is not None:
            doc["window_lateness_p50_ms"] = percentile(window, 0.5)
            doc["window_lateness_p99_ms"] = percentile(window, 0.99)
        return doc


def earliest(report: PassReport, due_ms: int | None) -> None:
    """Lower ``report.next_due_ms`` to ``due_ms`` (``None``: nothing known)."""
    if due_ms is not None and (report.next_due_ms is None or due_ms < report.next_due_ms):
        report.next_due_ms = due_ms


def tally_puts(
    report: PassReport,
    puts: Sequence[Item],
    results: Sequence[SinkResult],
    now_ms: int,
    settling: bool,
    window: collections.deque[int],
    retry_ms: int,
) -> list[Item]:
    """Count the results of ``puts`` into ``report`` (lateness also into ``window``); returns
    the refused items (retried after ``retry_ms``). Unknown outcomes are the caller's."""
    refused: list[Item] = []
    for item, result in zip(puts, results, strict=False):
        if result.outcome is PutOutcome.OK:
            stored_ms = result.store_timestamp_ms or now_ms
            if stored_ms < item.due_ms:
                report.early += 1
            report.lateness_ms.append(stored_ms - item.due_ms)
            window.append(stored_ms - item.due_ms)
            report.settled_put += settling
            report.delivered += not settling
        elif result.outcome is PutOutcome.REFUSED:
            refused.append(item)
            log.error(
                "redelivery of %s offset %d to %s refused: %s; retrying in %d ms",
                item.intent.kind,
                item.intent.entry.queue_offset,
                getattr(item.restored, "topic", "?"),
                result.reason,
                retry_ms,
            )
    return refused
