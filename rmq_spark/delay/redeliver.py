"""One redelivery pass: find due entries, restore their messages, put them, record progress.

Owns the exactly-once protocol (docs/DELAY.md, "Exactly once"):

1. plan a batch of due entries (``schedule.plan_level`` / ``plan_timer``);
2. write the batch down as the journal's *intent*, with a CommitLog offset at or below where
   its puts can land, *before* putting anything;
3. put the restored records;
4. mark the entries done and clear the intent in one journal write.

A crash anywhere leaves either no intent (nothing was put, or everything is recorded) or an
intent. An intent is settled before anything else (``settle``): the records stored since its
offset in the batch's real topics are matched against the batch by ``schedule.fingerprint``
(a multiset match), the missing ones are put again, then the intent is committed. Puts whose
outcome is unknown leave the intent for the next pass; refused puts are retried after
``blocked_retry_interval_ms`` while later entries go on.

Does not own where entries come from (``entries.py``), the files (``progress.py``), the put
transport (``sink.py``) or the loop and its timing (``job.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.clock import Clock
from rmq_spark.delay.config import DelayConfig
from rmq_spark.delay.entries import Candidates, EntrySource, LogEntrySource
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.offsets import Intent, IntentEntry, Journal
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.delay.schedule import (
    DELETE_MARKER_PREFIX,
    TIMER_QUEUE_ID,
    Discard,
    QueueProgress,
    StopReason,
    fingerprint,
    percentile,
    plan_level,
    plan_timer,
    property_value,
    restore_delayed,
    restore_timer,
    target_delete_key,
    timer_due_ms,
)
from rmq_spark.delay.sink import PutOutcome, Sink, fallback_message_id
from rmq_spark.errors import StoreError
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import UNIQ_KEY, parse_properties

__all__ = ["EntryMismatchError", "PassReport", "Redeliverer"]

log = logging.getLogger("rmq_spark.delay")

LEVEL, TIMER = "level", "timer"


class EntryMismatchError(StoreError):
    """A schedule entry points at a record that is not the one it describes (the
    consume_queue table belongs to another store, or the log was replaced)."""


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


@dataclass
class _Item:
    """One intent entry, read and restored."""

    intent: IntentEntry
    restored: MessageRecord | Discard
    due_ms: int
    message_id: str


class Redeliverer:
    """Runs redelivery passes over one store; ``open()`` first, ``close()`` at the end.

    Parameters
    ----------
    files
        The store's progress files.
    source
        Where entries come from.
    reader
        The store's CommitLog (messages, and the records stored since an intent).
    sink
        Where restored messages go.
    clock
        The time (``ManualClock`` in tests).
    config
        The ``[delay]`` section.
    """

    def __init__(
        self,
        files: ProgressFiles,
        source: EntrySource,
        reader: LogReader,
        sink: Sink,
        clock: Clock,
        config: DelayConfig,
    ) -> None:
        self.files, self.source, self.reader, self.sink = files, source, reader, sink
        self.clock, self.config = clock, config
        self.journal = Journal()
        self.lateness_window: collections.deque[int] = collections.deque(
            maxlen=config.lateness_window_messages
        )
        self._blocked: dict[tuple[str, int, int], int] = {}
        self._mirror_written_ms: int | None = None
        self._mirror_dirty = False

    # --- lifecycle ------------------------------------------------------------------------

    def open(self) -> None:
        """Take the lock and load the journal (an intent is settled by the first pass)."""
        self.files.lock()
        self.journal = self.files.load()

    def close(self) -> None:
        """Write delayOffset.json one last time and release the lock."""
        try:
            if self._mirror_dirty or self._mirror_written_ms is None:
                self._write_mirror(self.clock.now_ms())
        finally:
            self.files.unlock()

    # --- one pass -------------------------------------------------------------------------

    def run_pass(self) -> PassReport:
        """Settle a pending intent, then redeliver what is due, batch by batch.

        Returns the report; ``report.error`` is set when a put's outcome is unknown (the
        broker is down, a timeout): nothing of that batch is marked done and the next pass
        settles it.
        """
        report = PassReport(now_ms=self.clock.now_ms(), source=self.source.name)
        if self.journal.intent is not None and not self._settle(report):
            return report
        remaining = self.config.pass_messages_max
        while remaining > 0:
            now_ms = self.clock.now_ms()
            fetch = remaining  # one source query per pass, unless it came back full
            found = self._fetch(now_ms, fetch)
            full = len(found.timer) >= fetch or any(
                len(rows) >= fetch for rows in found.levels.values()
            )
            progressed = replan = False
            while remaining > 0:
                limit = min(self.config.batch_messages_max, remaining)
                batch = self._plan(found, now_ms, limit, report)
                if batch is None:  # a gap was stepped over: fetch again
                    replan = True
                    break
                if not batch:
                    break
                progressed = True
                remaining -= len(batch)
                if not self._deliver(batch, now_ms, report):
                    return report
            if replan:
                continue
            if not (full and progressed):
                # Every queue stopped for a reason other than the fetch size: nothing else
                # was due at ``now_ms``.
                report.exhausted = True
                break
        now_ms = self.clock.now_ms()
        if self._mirror_dirty and (
            self._mirror_written_ms is None
            or now_ms - self._mirror_written_ms >= self.config.delay_offset_flush_interval_ms
        ):
            self._write_mirror(now_ms)
        return report

    def _fetch(self, now_ms: int, fetch: int) -> Candidates:
        """Ask the source once for up to ``fetch`` candidates per queue (one Spark query for
        the table); the pass plans all its batches from them."""
        by_queue = levels_by_queue(dict(self.journal.levels))
        timer = self.journal.timer if self.config.timer_enabled else None
        return self.source.candidates(by_queue, timer, now_ms, fetch)

    def _plan(
        self, found: Candidates, now_ms: int, limit: int, report: PassReport
    ) -> list[IntentEntry] | None:
        """The next batch from ``found`` given the progress so far (``None``: a gap was
        stepped over; fetch again)."""
        by_queue = levels_by_queue(dict(self.journal.levels))
        chosen: list[IntentEntry] = []
        for queue_id in sorted(found.levels):
            plan = plan_level(
                found.levels[queue_id],
                by_queue.get(queue_id, QueueProgress()),
                now_ms,
                limit,
                self._skip(LEVEL, queue_id),
            )
            if plan.stop == StopReason.GAP and plan.gap is not None:
                self._step_over_gap(queue_id + 1, plan.gap, report)
                return None
            chosen.extend(IntentEntry(LEVEL, e) for e in plan.entries)
            _earliest(report, plan.next_due_ms)
        if self.config.timer_enabled:
            skip = self._skip(TIMER, TIMER_QUEUE_ID)
            # found.timer is in (due, offset) order and batches take it from the front: drop
            # the delivered head, then look only at as many rows as a batch can need.
            rows, progress = found.timer, self.journal.timer
            head = 0
            while head < len(rows) and progress.is_done(rows[head].queue_offset):
                head += 1
            del rows[:head]
            window = rows[: limit + len(skip)]
            picked = plan_timer(window, progress, now_ms, limit, skip)
            chosen.extend(IntentEntry(TIMER, e) for e in picked)
            _earliest(report, found.timer_next_due_ms)
        chosen.sort(key=lambda item: item.entry.due_ms)
        return chosen[:limit]

    def _skip(self, kind: str, queue_id: int) -> set[int]:
        now_ms = self.clock.now_ms()
        return {
            offset
            for (k, q, offset), retry_ms in self._blocked.items()
            if k == kind and q == queue_id and retry_ms > now_ms
        }

    def _step_over_gap(self, level: int, gap: tuple[int, int], report: PassReport) -> None:
        start, end = gap
        log.warning(
            "%s queue %d: offsets [%d, %d) are missing (deleted before delivery?); "
            "stepping over them",
            RMQ_SYS_SCHEDULE_TOPIC,
            level - 1,
            start,
            end,
        )
        report.skipped_missing += end - start
        levels = dict(self.journal.levels)
        levels[level] = levels.get(level, QueueProgress()).mark(range(start, end))
        self._save(dataclasses.replace(self.journal, levels=levels))

    # --- delivering a batch ---------------------------------------------------------------

    def _deliver(self, batch: list[IntentEntry], now_ms: int, report: PassReport) -> bool:
        items = self._prepare(batch, now_ms)
        due = []
        for item in items:
            if item.due_ms <= now_ms:
                due.append(item)
            else:  # a timer message whose TIMER_DELIVER_MS is after its TIMER_OUT_MS slot
                entry = item.intent.entry
                self._blocked[(item.intent.kind, entry.queue_id, entry.queue_offset)] = item.due_ms
        if not due:
            return True
        _apply_cancellations(due)
        intent = Intent(self.sink.log_end_offset(), now_ms, tuple(item.intent for item in due))
        self._save(dataclasses.replace(self.journal, intent=intent))
        report.batches += 1
        return self._put_and_commit(due, due, report, settling=False)

    def _settle(self, report: PassReport) -> bool:
        """Finish the batch of a pending intent exactly once (see module docstring)."""
        intent = self.journal.intent
        assert intent is not None
        items = self._prepare(list(intent.entries), intent.dequeue_ms)
        _apply_cancellations(items)
        restored = [i for i in items if isinstance(i.restored, MessageRecord)]
        topics = {i.restored.topic for i in restored if isinstance(i.restored, MessageRecord)}
        counts: collections.Counter[tuple[object, ...]] = collections.Counter()
        if topics:
            for scanned in self.reader.scan(intent.log_offset_before, topics, with_body=False):
                counts[fingerprint(scanned.record, exact=self.sink.exact)] += 1
        missing = []
        for item in restored:
            assert isinstance(item.restored, MessageRecord)
            key = fingerprint(item.restored, exact=self.sink.exact, message_id=item.message_id)
            if counts[key] > 0:
                counts[key] -= 1
                report.settled_found += 1
            else:
                missing.append(item)
        log.info(
            "settling an interrupted batch of %d: %d already stored, %d to put again",
            len(items),
            len(restored) - len(missing),
            len(missing),
        )
        return self._put_and_commit(items, missing, report, settling=True)

    def _put_and_commit(
        self, items: list[_Item], to_put: list[_Item], report: PassReport, *, settling: bool
    ) -> bool:
        """Put ``to_put`` (a subset of ``items``), then mark ``items`` done (except refused
        ones) and clear the intent; leave everything as is when an outcome is unknown."""
        puts = [i for i in to_put if isinstance(i.restored, MessageRecord)]
        records = [i.restored for i in puts if isinstance(i.restored, MessageRecord)]
        results = self.sink.put(records, [i.message_id for i in puts]) if puts else []
        now_ms = self.clock.now_ms()
        refused: list[_Item] = []
        for item, result in zip(puts, results, strict=False):
            if result.outcome is PutOutcome.OK:
                stored_ms = result.store_timestamp_ms or now_ms
                if stored_ms < item.due_ms:
                    report.early += 1
                report.lateness_ms.append(stored_ms - item.due_ms)
                self.lateness_window.append(stored_ms - item.due_ms)
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
                    self.config.blocked_retry_interval_ms,
                )
        unknown = len(results) < len(puts) or any(r.outcome is PutOutcome.UNKNOWN for r in results)
        if unknown:
            reasons = [r.reason for r in results if r.outcome is PutOutcome.UNKNOWN]
            report.error = (
                f"put outcome unknown ({reasons[0] if reasons else 'no answer'}); "
                "the batch stays pending and is settled by the next pass"
            )
            log.error("%s", report.error)
            return False
        refused_keys = {id(i) for i in refused}
        done = [i for i in items if id(i) not in refused_keys]
        report.refused += len(refused)
        report.discarded += sum(isinstance(i.restored, Discard) for i in items)
        for item in refused:
            key = (item.intent.kind, item.intent.entry.queue_id, item.intent.entry.queue_offset)
            self._blocked[key] = now_ms + self.config.blocked_retry_interval_ms
        self._commit(done)
        return True

    def _commit(self, done: list[_Item]) -> None:
        levels = dict(self.journal.levels)
        by_level: dict[int, list[int]] = collections.defaultdict(list)
        timer_offsets: list[int] = []
        for item in done:
            entry = item.intent.entry
            self._blocked.pop((item.intent.kind, entry.queue_id, entry.queue_offset), None)
            if item.intent.kind == LEVEL:
                by_level[entry.queue_id + 1].append(entry.queue_offset)
            else:
                timer_offsets.append(entry.queue_offset)
        timer = self.journal.timer.mark(timer_offsets)
        for level, offsets in by_level.items():
            levels[level] = levels.get(level, QueueProgress()).mark(offsets)
        scan_from = self.journal.log_scan_from
        if isinstance(self.source, LogEntrySource):
            scan_from = self.source.restart_offset(levels_by_queue(levels), timer)
        self._save(
            Journal(levels, timer, None, scan_from, self.journal.passes + 1),
        )
        self._mirror_dirty = True

    def _prepare(self, batch: list[IntentEntry], dequeue_ms: int) -> list[_Item]:
        """Read each entry's message and restore it (``Discard`` when it is gone)."""
        records = self.reader.read_many(
            [(item.entry.physical_offset, item.entry.total_size) for item in batch]
        )
        pairs = zip(batch, records, strict=True)
        return [self._restore(item, record, dequeue_ms) for item, record in pairs]

    def _restore(
        self, intent: IntentEntry, record: MessageRecord | Exception, dequeue_ms: int
    ) -> _Item:
        entry = intent.entry
        if isinstance(record, Exception):
            gone = Discard("message no longer in the CommitLog (deleted by retention)")
            return _Item(intent, gone, entry.due_ms, "")
        topic = RMQ_SYS_SCHEDULE_TOPIC if intent.kind == LEVEL else RMQ_SYS_WHEEL_TIMER_TOPIC
        if (record.topic, record.queue_id, record.queue_offset) != (
            topic,
            entry.queue_id,
            entry.queue_offset,
        ):
            raise EntryMismatchError(
                f"entry {topic}/{entry.queue_id}@{entry.queue_offset} points at physical "
                f"offset {entry.physical_offset}, which holds "
                f"{record.topic}/{record.queue_id}@{record.queue_offset}"
            )
        if intent.kind == LEVEL:
            uniq = property_value(record.properties, UNIQ_KEY)
            message_id = uniq or fallback_message_id(entry.physical_offset)
            return _Item(intent, restore_delayed(record), entry.due_ms, message_id)
        properties = parse_properties(record.properties)
        message_id = properties.get(UNIQ_KEY) or fallback_message_id(entry.physical_offset)
        due_ms = max(entry.due_ms, timer_due_ms(properties, record.store_timestamp_ms))
        restored = restore_timer(
            record,
            enqueue_ms=record.store_timestamp_ms,
            dequeue_ms=dequeue_ms,
            properties=properties,
        )
        return _Item(intent, restored, due_ms, message_id)

    def _save(self, journal: Journal) -> None:
        self.files.save(journal)
        self.journal = journal

    def _write_mirror(self, now_ms: int) -> None:
        offsets = {level: p.low_water for level, p in self.journal.levels.items()}
        self.files.save_delay_offsets(offsets, now_ms)
        self._mirror_written_ms = now_ms
        self._mirror_dirty = False


def levels_by_queue(levels: dict[int, QueueProgress]) -> dict[int, QueueProgress]:
    """Level progress keyed by schedule queue id (level - 1)."""
    return {level - 1: progress for level, progress in levels.items()}


def _earliest(report: PassReport, due_ms: int | None) -> None:
    if due_ms is not None and (report.next_due_ms is None or due_ms < report.next_due_ms):
        report.next_due_ms = due_ms


def _apply_cancellations(items: list[_Item]) -> None:
    """Timer messages whose delete marker is in the same batch are not delivered."""
    markers = {
        item.restored.reason.removeprefix(DELETE_MARKER_PREFIX)
        for item in items
        if isinstance(item.restored, Discard)
        and item.restored.reason.startswith(DELETE_MARKER_PREFIX)
    }
    if not markers:
        return
    for item in items:
        if isinstance(item.restored, MessageRecord) and item.intent.kind == TIMER:
            key = target_delete_key(item.restored)
            if key in markers:
                item.restored = Discard(f"cancelled by a timer delete marker ({key})")
