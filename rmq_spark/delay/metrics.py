"""Prometheus metrics of the schedule job (``delay.metrics_listen`` / ``metrics_push_url``).

``ScheduleMetrics.after_pass`` is the job's per-pass callback (``run_schedule(on_pass=...)``):
it counts what the pass did (``PassReport``) and sets what is still waiting, from the pass's
own view: the entries the source last answered with (``Redeliverer.last_found``) against the
journal's delivered progress. ``late`` messages are due and not delivered yet (a lower
bound when the source's answer was cut at ``pass_messages_max`` per queue); ``pending`` are
scheduled and not delivered, due or not, known exactly when entries come from the CommitLog
(``LogEntrySource.pending``; absent with the consume_queue table, which is only asked for
what is due). The registry, server and pushes are ``spark/job_metrics.JobMetrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram

from rmq_spark.delay.entries import Candidates, LogEntrySource
from rmq_spark.delay.offsets import Journal
from rmq_spark.delay.redeliver import PassReport, Redeliverer
from rmq_spark.delay.schedule import levels_by_queue
from rmq_spark.spark.job_metrics import JobMetrics

__all__ = ["LATENESS_BUCKETS", "ScheduleMetrics", "late_entries"]

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


def late_entries(found: Candidates, journal: Journal, now_ms: int) -> tuple[int, int | None]:
    """(entries of ``found`` due by ``now_ms`` and not delivered per ``journal``, the due time
    of the oldest of them). Level rows are in queue order (due times grow), timer rows in due
    order, so each list is read up to its first entry not due (PURE)."""
    by_queue = levels_by_queue(dict(journal.levels))
    count, oldest = 0, None
    rows = [(entries, by_queue.get(queue_id)) for queue_id, entries in found.levels.items()]
    rows.append((found.timer, journal.timer))
    for entries, progress in rows:
        for entry in entries:
            if entry.due_ms > now_ms:
                break
            if progress is None or not progress.is_done(entry.queue_offset):
                count += 1
                oldest = entry.due_ms if oldest is None else min(oldest, entry.due_ms)
    return count, oldest


class ScheduleMetrics:
    """The schedule job's metrics in ``metrics.registry``, labelled by ``store`` (absolute
    path; a job over several stores reports each)."""

    def __init__(self, metrics: JobMetrics, stores: Sequence[str | Path]) -> None:
        self._metrics = metrics
        registry = metrics.registry
        store = ["store"]
        self.passes = Counter("rmq_schedule_passes", "Redelivery passes", store, registry=registry)
        self.delivered = Counter(
            "rmq_schedule_delivered_messages",
            "Delayed and timer messages put into their real topics",
            store,
            registry=registry,
        )
        self.refused = Counter(
            "rmq_schedule_refused_messages",
            "Puts the broker refused (retried later)",
            store,
            registry=registry,
        )
        self.errors = Counter(
            "rmq_schedule_pass_errors", "Passes that failed (retried)", store, registry=registry
        )
        self.lateness = Histogram(
            "rmq_schedule_lateness_seconds",
            "Delivery time minus due time of each redelivered message",
            store,
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.late = Gauge(
            "rmq_schedule_late_messages", "Due and not delivered yet", store, registry=registry
        )
        self.late_seconds = Gauge(
            "rmq_schedule_late_seconds",
            "How long the oldest due, undelivered message has been due (0: none)",
            store,
            registry=registry,
        )
        self.pending = Gauge(
            "rmq_schedule_pending_messages",
            "Scheduled and not delivered yet, due or not (CommitLog entry source only)",
            store,
            registry=registry,
        )
        for path in stores:
            label = str(Path(path).absolute())
            for family in (self.passes, self.delivered, self.refused, self.errors):
                family.labels(label)
            for family in (self.lateness, self.late, self.late_seconds):
                family.labels(label)

    def after_pass(self, redeliverer: Redeliverer, report: PassReport) -> None:
        store = str(Path(redeliverer.files.store_dir).absolute())
        self.passes.labels(store).inc()
        self.delivered.labels(store).inc(report.delivered + report.settled_put)
        self.refused.labels(store).inc(report.refused)
        if report.error is not None:
            self.errors.labels(store).inc()
        for lateness_ms in report.lateness_ms:
            self.lateness.labels(store).observe(max(0, lateness_ms) / 1000)
        now_ms = redeliverer.clock.now_ms()
        journal = redeliverer.journal
        count, oldest = late_entries(redeliverer.last_found, journal, now_ms)
        self.late.labels(store).set(count)
        self.late_seconds.labels(store).set(0 if oldest is None else (now_ms - oldest) / 1000)
        source = redeliverer.source
        if isinstance(source, LogEntrySource):
            timer = journal.timer if redeliverer.config.timer_enabled else None
            levels = levels_by_queue(dict(journal.levels))
            self.pending.labels(store).set(source.pending(levels, timer))
        self._metrics.push_soon()

    def stop(self) -> None:
        self._metrics.stop()
