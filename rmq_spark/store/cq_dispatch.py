"""Dispatch: CommitLog records -> ConsumeQueue units (RocketMQ ``ReputMessageService`` with
``CommitLogDispatcherBuildConsumeQueue``, docs/FORMAT.md 6, 6.1).

Owns the dispatch thread and the recovery scan. The thread writes the units of the records
the put path handed over as facts (``cq_facts.py``), never reading a record back; the scan
(``collect_units``, for recovery at open) reads records with the store's one scan
(``scan.LogScan``, no CRC, no body, as RocketMQ's reput reads them). Both take which records
get a unit and their tagsCode from ``cq_rule.py``. Does not own the files
(``consume_queues.py``).

Dispatch runs behind the store's acknowledged end (``MessageStore.confirmed_offset``):
consumers never see a unit of a record that a crash could still take back. The thread sleeps
until the put path says that end moved (``wake``: it only sets an event). A put thread that
has just written a large batch under ASYNC runs the round itself instead (``after_write``): its
facts are still in its CPU's cache and no thread has to be woken and handed the GIL, which
cost the put path as much again as building the units did. One round at a time (a lock): a
put thread that finds a round under way waits for it to end and then runs its own, so a large
batch's units are written when its put returns, whatever the thread was doing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queues import ConsumeQueues, QueueKey, UnitEntry
from rmq_spark.store.cq_facts import FactUnits, PendingUnits
from rmq_spark.store.cq_rule import dispatches, tags_of, unit_tags_code
from rmq_spark.store.index_dispatch import IndexDispatch
from rmq_spark.store.scan import LogScan, SegmentSource, StopKind

__all__ = ["Batch", "Collected", "CqDispatcher", "collect_units", "tags_of"]

_MIN_CHUNK_BYTES = 64 << 10
_MAX_CHUNK_BYTES = 8 << 20
_SINK_RECORDS = 200_000  # a rebuild hands its units on in pieces: memory stays bounded
_PROGRESS_S = 5.0
_BUSY_PAUSE_S = 0.001
_INLINE_RECORDS = 128
"""A batch this large is dispatched by its writer (``after_write``). A round in the writer
costs ~30 us of CPU whatever its size (a ``pwrite`` per queue, mostly) and saves the thread's
wake-up and GIL hand-over: a win from 128 records on (``bench/bench_cq_cpu.py``, 4 queues:
0.25 us/msg in the writer vs 0.37 in the thread), a loss at 64 (0.50 vs 0.39)."""
_IDLE_WAIT_S = 1.0  # a safety net only: every acknowledged put wakes the thread
_log = logging.getLogger(__name__)

Batch = dict[QueueKey, list[UnitEntry]]


@dataclass(slots=True)
class Collected:
    """The units of a range of records, grouped by queue in log order (those not handed to
    a ``sink`` yet); ``end_offset``: where the records ended; ``problem``: why the scan
    stopped short of the range's end."""

    batch: Batch
    end_offset: int
    problem: CorruptRecordError | None = None


def collect_units(
    segments: Sequence[SegmentSource],
    start: int,
    end: int,
    delay_levels_ms: tuple[int, ...],
    sink: Callable[[Batch], None] | None = None,
) -> Collected:
    """The units of the records in ``[start, end)`` (``start`` a record boundary, ``end`` an
    acknowledged end, hence a boundary too). Bytes below ``end`` that are not a record end
    the range early, with the ``problem`` naming their file and position. With ``sink``,
    the units are handed to it every so many records (in log order; the rest are in the
    result) and progress is logged at INFO every few seconds."""
    chunk = min(_MAX_CHUNK_BYTES, max(_MIN_CHUNK_BYTES, end - start))
    scan = LogScan(
        segments, start, end, check_crc=False, with_body=False, durable_offset=None,
        chunk_bytes=chunk,
    )  # fmt: skip
    batch: Batch = {}
    pending = 0
    logged = time.monotonic()
    for decoded in scan:
        record = decoded.record
        if not dispatches(record.sys_flag):
            continue
        key = (record.topic, record.queue_id)
        entry = (
            record.queue_offset,
            decoded.position,
            decoded.total_size,
            unit_tags_code(
                record.topic, record.properties, None, record.store_timestamp_ms,
                delay_levels_ms,
            ),
        )  # fmt: skip
        entries = batch.get(key)
        if entries is None:
            batch[key] = [entry]
        else:
            entries.append(entry)
        if sink is not None:
            pending += 1
            if pending >= _SINK_RECORDS:
                sink(batch)
                batch, pending = {}, 0
                if time.monotonic() - logged >= _PROGRESS_S:
                    logged = time.monotonic()
                    _log.info(
                        "ConsumeQueue rebuild: %d of %d CommitLog bytes dispatched",
                        decoded.position - start, end - start,
                    )  # fmt: skip
    stop = scan.stop
    if stop.kind is StopKind.LIMIT or stop.offset >= end:
        return Collected(batch, max(stop.offset, start))
    problem = CorruptRecordError(
        str(stop.path), stop.position,
        f"dispatch stopped below the acknowledged end {end} ({stop.kind.value}"
        f"{': ' + stop.reason if stop.reason else ''})",
    )  # fmt: skip
    return Collected(batch, max(stop.offset, start), problem)


class CqDispatcher:
    """The dispatch thread of one store.

    Parameters
    ----------
    queues
        Where units go.
    commitlog
        The store's log (its first offset: records retention deleted get no unit).
    acknowledged_end
        The store's acknowledged end (``MessageStore.confirmed_offset``).
    delay_levels_ms
        The store's delay levels (for schedule tagsCodes).
    start_offset
        Where dispatching resumes (recovery dispatched everything below it).
    index
        The IndexFile's dispatch, fed the same facts in the same round (``None``: off).

    ``pending`` is where the put path hands over the facts of each record it writes
    (``cq_facts.PendingUnits``), from ``start_offset`` on.
    """

    def __init__(
        self,
        queues: ConsumeQueues,
        commitlog: CommitLog,
        acknowledged_end: Callable[[], int],
        delay_levels_ms: tuple[int, ...],
        start_offset: int,
        index: IndexDispatch | None = None,
    ) -> None:
        self._queues = queues
        self._index = index
        self._commitlog = commitlog
        self._acknowledged_end = acknowledged_end
        self._units = FactUnits(delay_levels_ms)
        self._offset = start_offset
        self.pending = PendingUnits()
        self._wake = threading.Event()
        self._stopping = False
        self._round = threading.Lock()  # one round at a time: the thread's or a put thread's
        self._done = False  # stopped or failed (set under ``_round``): no more rounds
        self._thread = threading.Thread(target=self._run, name="rmq-cq-dispatch", daemon=True)
        queues.set_dispatched(start_offset, set())

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """The acknowledged end moved (called by the put path: one flag test when awake)."""
        if not self._wake.is_set():
            self._wake.set()

    def after_write(self) -> None:
        """The put path wrote (ASYNC: the acknowledged end moved with it): after a batch of
        ``_INLINE_RECORDS`` or more, a round right here (``dispatch_here``); after anything
        smaller, a wake-up for the thread, which gathers single puts into larger rounds."""
        if self.pending.last_batch_size() >= _INLINE_RECORDS:
            self.dispatch_here()
        elif not self._wake.is_set():
            self._wake.set()

    def dispatch_here(self) -> None:
        """A round in the calling thread (a put thread, after a batch it wrote under ASYNC),
        after the one under way elsewhere, if any, ends: the thread's rounds are short, and
        the batch is then dispatched when its put returns. A failed round stops dispatching
        as it does in the thread, and raises only a ``KeyboardInterrupt``."""
        with self._round:
            if not self._done:
                self._guarded_round()

    def stop(self) -> None:
        """Dispatch what is acknowledged, then end the thread; later ``dispatch_here`` calls
        do nothing."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._round:
            self._done = True
        self.pending.close()

    def _run(self) -> None:
        while True:
            self._wake.wait(_IDLE_WAIT_S)
            self._wake.clear()  # before reading the end: a later put sets it again
            stopping = self._stopping
            with self._round:
                placed = not self._done and self._guarded_round()
                if stopping or self._done:
                    return
            if placed:  # RocketMQ's reput sleeps 1 ms a round: a busy log is dispatched in
                time.sleep(_BUSY_PAUSE_S)  # fewer, larger rounds; an idle one at once

    def _guarded_round(self) -> bool:
        """``dispatch_round`` under ``_round``; a failure is recorded and ends dispatching.

        So does a ``KeyboardInterrupt`` in a put thread's round, which is then re-raised: the
        round may have taken facts it did not place, and a later round would leave a hole
        there (filled with pre-blank units); the next open re-dispatches them instead."""
        try:
            return self.dispatch_round()
        except BaseException as err:  # noqa: BLE001 - logged, recorded, readers are woken
            self._done = True
            self._fail(err)
            self._wake.set()  # the thread sees ``_done`` and ends
            if not isinstance(err, Exception):
                raise
            return False

    def _fail(self, error: BaseException) -> None:
        _log.error("ConsumeQueue dispatch stopped at %d: %s", self._offset, error, exc_info=error)
        self.pending.close()
        self._queues.fail(error)

    def dispatch_round(self) -> bool:
        """Write the units of every acknowledged record not dispatched yet, from the facts
        the put path handed over; whether any unit was written (raises what
        ``ConsumeQueues.place_runs`` raises).

        The end is read before the facts are taken: every record below it was handed over
        before its bytes became readable, so its facts are there."""
        end = self._acknowledged_end()
        if end <= self._offset:
            return False
        facts = self.pending.take(end)
        runs = self._units.runs(facts, self._commitlog.min_offset) if facts else {}
        if runs:
            self._queues.place_runs(runs)
        if facts and self._index is not None:
            self._index.add_facts(facts)
        self._offset = end
        self._queues.set_dispatched(end, set(runs))
        return bool(runs)
