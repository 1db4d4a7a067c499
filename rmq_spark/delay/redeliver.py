"""One redelivery pass: find due entries, restore their messages, put them, record progress.

Owns the exactly-once protocol (docs/DELAY.md, "Exactly once"):

1. plan a batch of due entries (``schedule.plan_level`` / ``plan_timer``);
2. write the batch down as the journal's *intent*, with a CommitLog offset at or below where
   its puts can land, *before* putting anything;
3. put the restored records;
4. mark the entries done and clear the intent in one journal write (the next batch's intent
   write when one follows in the pass, else the pass's end).

A crash anywhere leaves either no intent (nothing was put, or everything is recorded) or an
intent. An intent is settled before anything else (``settle``): the records stored since its
offset in the batch's real topics are matched against the batch by ``schedule.fingerprint``
(a multiset match), the missing ones are put again, then the intent is committed. Puts whose
outcome is unknown leave the intent for the next pass; refused puts are retried after
``blocked_retry_interval_ms`` while later entries go on.

Also owns the look-ahead: messages of entries due within ``lookahead_ms`` are read and
restored (``items.load_entry``) before they fall due, so that a batch's work at due time is
the intent, the put and the commit (docs/DELAY.md, "Look-ahead").

Does not own where entries come from (``entries.py``), the files (``progress.py``), the
put transport (``sink.py``), restoring one entry (``items.py``) or the loop (``job.py``).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import logging

from rmq_spark.broker.redelivery import redelivery_put_request
from rmq_spark.broker.schedule_records import Discard
from rmq_spark.clock import Clock
from rmq_spark.delay.config import DelayConfig
from rmq_spark.delay.entries import Candidates, EntrySource, LogEntrySource
from rmq_spark.delay.items import (
    LEVEL,
    TIMER,
    Item,
    Loaded,
    apply_cancellations,
    entry_key,
    finish,
    load_entry,
    reference,
)
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.offsets import Intent, IntentEntry, Journal
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.delay.report import PassReport, earliest, tally_puts
from rmq_spark.delay.schedule import (
    TIMER_QUEUE_ID,
    QueueProgress,
    StopReason,
    fingerprint,
    levels_by_queue,
    plan_level,
    plan_timer,
)
from rmq_spark.delay.sink import PutOutcome, Sink
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC
from rmq_spark.store.message import MessageRecord

__all__ = ["PassReport", "Redeliverer"]  # PassReport: report.py

log = logging.getLogger("rmq_spark.delay")


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
        self._journal_unsaved = False  # ``journal`` holds a commit not written yet
        # Look-ahead (docs/DELAY.md, "Lateness"): messages falling due within
        # ``lookahead_ms`` are read and restored before they are due, so that the work at
        # due time is the put. ``run_once`` turns it off (nothing is waited for).
        self.lookahead_enabled = True
        self._ready: dict[tuple[str, int, int], Loaded] = {}
        self._ready_next_ms: int | None = None
        self._found: Candidates | None = None  # reused while ``now < _found_until_ms``
        self.last_found = Candidates()  # the source's last answer (what metrics count)
        self._found_until_ms = 0
        self._found_horizon_ms = 0  # the last answer covers entries due up to this time

    # --- lifecycle ------------------------------------------------------------------------

    def open(self) -> None:
        """Take the lock and load the journal (an intent is settled by the first pass)."""
        self.files.lock()
        self.journal = self.files.load()

    def close(self) -> None:
        """Write delayOffset.json one last time and release the lock."""
        try:
            self._flush_journal()
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
        try:
            report = self._run_pass()
        except Exception:
            self._flush_journal()
            raise
        self._flush_journal()
        return report

    def _run_pass(self) -> PassReport:
        report = PassReport(now_ms=self.clock.now_ms(), source=self.source.name)
        if self.journal.intent is not None and not self._settle(report):
            return report
        remaining = self.config.pass_messages_max
        found = Candidates()
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
            if replan or (full and progressed):
                self._found = None  # stale: fetch again
            if replan:
                continue
            if not (full and progressed):
                # Every queue stopped for a reason other than the fetch size: nothing else
                # was due at ``now_ms``.
                report.exhausted = True
                break
        now_ms = self.clock.now_ms()
        self._flush_journal()  # before delayOffset.json, which must not run ahead of it
        if report.exhausted and self._lookahead_ms() > 0:
            self._prepare_ahead(found, now_ms, report)
        if self._mirror_dirty and (
            self._mirror_written_ms is None
            or now_ms - self._mirror_written_ms >= self.config.delay_offset_flush_interval_ms
        ):
            self._write_mirror(now_ms)
        return report

    def _timer_progress(self) -> QueueProgress | None:
        return self.journal.timer if self.config.timer_enabled else None

    def _lookahead_ms(self) -> int:
        if not self.lookahead_enabled or self.config.lookahead_ms == 0:
            return 0
        return max(self.config.lookahead_ms, self.config.trigger_interval_ms)

    def _fetch(self, now_ms: int, fetch: int) -> Candidates:
        """Ask the source once for up to ``fetch`` candidates per queue (one Spark query for
        the table); the pass plans all its batches from them.

        With look-ahead the source is asked for what falls due up to ``now + lookahead``, and
        the answer is reused by the passes of the next half trigger interval (the table
        costs a Spark query, the CommitLog lists every pending entry), and beyond that while
        it still holds entries due now and not delivered, up to its horizon: entries read
        ahead are put the moment they fall due, not after another query. An entry indexed
        or stored meanwhile and due sooner waits at most for those puts, never lost; an
        answer cut by ``fetch`` or a gap is not reused.
        """
        lookahead_ms = self._lookahead_ms()
        if self._found is not None and (
            now_ms < self._found_until_ms
            or (
                now_ms < self._found_horizon_ms
                and self._found.holds_due(
                    levels_by_queue(dict(self.journal.levels)), self._timer_progress(), now_ms
                )
            )
        ):
            return self._found
        by_queue = levels_by_queue(dict(self.journal.levels))
        timer = self.journal.timer if self.config.timer_enabled else None
        found = self.source.candidates(by_queue, timer, now_ms + lookahead_ms, fetch)
        if lookahead_ms:
            reuse_ms = min(lookahead_ms, self.config.trigger_interval_ms // 2)
            self._found, self._found_until_ms = found, now_ms + reuse_ms
        self._found_horizon_ms, self.last_found = now_ms + lookahead_ms, found
        return found

    def _prepare_ahead(self, found: Candidates, now_ms: int, report: PassReport) -> None:
        """Read and restore the messages of entries due within the look-ahead (at most
        ``pass_messages_max`` held), soonest first, a batch at a time; stop as soon as
        something known falls due (the next pass puts it). After a complete round the next
        one waits until the horizon moved by a tenth of the look-ahead."""
        lookahead_ms = self._lookahead_ms()
        horizon_ms = min(now_ms + lookahead_ms, self._found_horizon_ms)  # what ``found`` covers
        if self._ready_next_ms is not None and horizon_ms < self._ready_next_ms:
            return
        by_queue = levels_by_queue(dict(self.journal.levels))
        budget = self.config.pass_messages_max - len(self._ready)
        if budget <= 0:  # forget prepared entries done meanwhile (another pass, a settle)
            for key in [k for k in self._ready if self._is_done(k, by_queue)]:
                del self._ready[key]
            budget = self.config.pass_messages_max - len(self._ready)
            if budget <= 0:
                return
        upcoming: list[IntentEntry] = []
        for queue_id, rows in found.levels.items():
            skip = self._skip(LEVEL, queue_id)
            progress = by_queue.get(queue_id, QueueProgress())
            plan = plan_level(rows, progress, horizon_ms, budget, skip)
            upcoming.extend(IntentEntry(LEVEL, e) for e in plan.entries)
        if self.config.timer_enabled:
            skip = self._skip(TIMER, TIMER_QUEUE_ID)
            picked = plan_timer(found.timer, self.journal.timer, horizon_ms, budget, skip)
            upcoming.extend(IntentEntry(TIMER, e) for e in picked)
        ready = self._ready
        upcoming = [i for i in upcoming if i.entry.due_ms > now_ms and entry_key(i) not in ready]
        upcoming.sort(key=lambda item: item.entry.due_ms)
        del upcoming[budget:]
        if upcoming:
            earliest(report, upcoming[0].entry.due_ms)
        step = self.config.batch_messages_max
        for start in range(0, len(upcoming), step):
            if report.next_due_ms is not None and self.clock.now_ms() >= report.next_due_ms:
                return  # something is due: put it first, continue next pass
            chunk = upcoming[start : start + step]
            records = self.reader.read_many(
                [(item.entry.physical_offset, item.entry.total_size) for item in chunk]
            )
            for item, record in zip(chunk, records, strict=True):
                ready[entry_key(item)] = load_entry(item, record)
        self._ready_next_ms = horizon_ms + max(1, lookahead_ms // 10)

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
            earliest(report, plan.next_due_ms)
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
            # Rows are in due order; with look-ahead some fall due after now_ms.
            later = bisect.bisect_right(rows, now_ms, key=lambda row: row.due_ms)
            earliest(report, rows[later].due_ms if later < len(rows) else None)
            earliest(report, found.timer_next_due_ms)
        chosen.sort(key=lambda item: item.entry.due_ms)
        return chosen[:limit]

    def _is_done(self, key: tuple[str, int, int], by_queue: dict[int, QueueProgress]) -> bool:
        kind, queue_id, queue_offset = key
        progress = by_queue.get(queue_id, QueueProgress()) if kind == LEVEL else self.journal.timer
        return progress.is_done(queue_offset)

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
        apply_cancellations(due)
        intent = Intent(self.sink.log_end_offset(), now_ms, tuple(item.intent for item in due))
        self._save(dataclasses.replace(self.journal, intent=intent))
        report.batches += 1
        return self._put_and_commit(due, due, report, settling=False)

    def _settle(self, report: PassReport) -> bool:
        """Finish the batch of a pending intent exactly once (see module docstring)."""
        intent = self.journal.intent
        assert intent is not None
        items = self._prepare(list(intent.entries), intent.dequeue_ms)
        apply_cancellations(items)
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
        self, items: list[Item], to_put: list[Item], report: PassReport, *, settling: bool
    ) -> bool:
        """Put ``to_put`` (a subset of ``items``), then mark ``items`` done (except refused
        ones) and clear the intent; leave everything as is when an outcome is unknown."""
        puts = [i for i in to_put if isinstance(i.restored, MessageRecord)]
        records = [i.restored for i in puts if isinstance(i.restored, MessageRecord)]
        ids = [i.message_id for i in puts]
        if not puts:
            results = []
        elif self.sink.by_reference:
            results = self.sink.put(records, ids, [reference(i) for i in puts])
        else:
            requests = [
                i.request or redelivery_put_request(r) for i, r in zip(puts, records, strict=True)
            ]
            results = self.sink.put(records, ids, requests=requests)
        now_ms = self.clock.now_ms()
        refused = tally_puts(
            report, puts, results, now_ms, settling, self.lateness_window,
            self.config.blocked_retry_interval_ms,
        )  # fmt: skip
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

    def _commit(self, done: list[Item]) -> None:
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
        # Written with the next batch's intent (one journal write for both) or at the end of
        # the pass: until then a crash leaves this batch's intent, which settling finds done.
        self.journal = Journal(levels, timer, None, scan_from, self.journal.passes + 1)
        self._journal_unsaved = True
        self._mirror_dirty = True

    def _prepare(self, batch: list[IntentEntry], dequeue_ms: int) -> list[Item]:
        """Read each entry's message and restore it (``Discard`` when it is gone); entries
        prepared ahead (``_prepare_ahead``) are taken from memory."""
        loaded: list[Loaded | None] = [self._ready.pop(entry_key(item), None) for item in batch]
        missing = [
            index
            for index, (item, found) in enumerate(zip(batch, loaded, strict=True))
            if found is None or found.physical_offset != item.entry.physical_offset
        ]
        if missing:
            records = self.reader.read_many(
                [(batch[i].entry.physical_offset, batch[i].entry.total_size) for i in missing]
            )
            for index, record in zip(missing, records, strict=True):
                loaded[index] = load_entry(batch[index], record)
        ready = [found for found in loaded if found is not None]
        assert len(ready) == len(batch)
        return [finish(item, found, dequeue_ms) for item, found in zip(batch, ready, strict=True)]

    def _save(self, journal: Journal) -> None:
        self.files.save(journal)
        self.journal = journal
        self._journal_unsaved = False

    def _flush_journal(self) -> None:
        """Write a commit not written yet (``_commit``)."""
        if self._journal_unsaved:
            self._save(self.journal)

    def _write_mirror(self, now_ms: int) -> None:
        offsets = {level: p.low_water for level, p in self.journal.levels.items()}
        self.files.save_delay_offsets(offsets, now_ms)
        if self.config.timer_enabled:
            self.files.save_timer_checkpoint(self.journal.timer.low_water, now_ms)
        self._mirror_written_ms = now_ms
        self._mirror_dirty = False
