"""Dispatch: CommitLog records -> ConsumeQueue units (RocketMQ ``ReputMessageService`` with
``CommitLogDispatcherBuildConsumeQueue``, docs/FORMAT.md 6, 6.1).

Owns which records get a unit (transaction type NOT or COMMIT), what the unit holds (the
record's physical offset, TOTALSIZE and tagsCode: the Java hash of TAGS; the delivery time
for ``SCHEDULE_TOPIC_XXXX`` with a positive DELAY and, as the reput job's ``consume_queue``
table has it, ``TIMER_OUT_MS`` (else ``TIMER_DELIVER_MS``) for ``rmq_sys_wheel_timer``), and
the dispatch thread. Records are read with the store's one scan (``scan.LogScan``, no CRC,
no body, as RocketMQ's reput reads them). Does not own the files (``consume_queues.py``).

The thread runs behind the store's acknowledged end (``MessageStore.confirmed_offset``):
consumers never see a unit of a record that a crash could still take back. It sleeps until
the put path says that end moved (``wake``); the put path only sets an event.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queues import ConsumeQueues, QueueKey, UnitEntry
from rmq_spark.store.delay_levels import schedule_tags_code
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import (
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    delay_level_of,
    parse_properties,
)
from rmq_spark.store.scan import LogScan, SegmentSource, StopKind

__all__ = ["Collected", "CqDispatcher", "collect_units", "tags_of", "unit_tags_code"]

_SPECIAL_TOPICS = frozenset({RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC})
_TAGS_MARK = TAGS + "\x01"
_INTEGRAL = re.compile(r"[\x00-\x20]*([+-]?[0-9]+)[\x00-\x20]*")  # as the reput table reads
_MIN_CHUNK_BYTES = 64 << 10
_MAX_CHUNK_BYTES = 8 << 20
_IDLE_WAIT_S = 1.0  # a safety net only: every acknowledged put wakes the thread
_log = logging.getLogger(__name__)

Batch = dict[QueueKey, list[UnitEntry]]


def unit_tags_code(record: MessageRecord, delay_levels_ms: tuple[int, ...]) -> int:
    """The tagsCode of ``record``'s unit (docs/FORMAT.md 6)."""
    text = record.properties
    topic = record.topic
    if topic not in _SPECIAL_TOPICS:
        return tags_code(tags_of(text))
    properties = parse_properties(text)
    code = tags_code(properties.get(TAGS))
    if topic == RMQ_SYS_SCHEDULE_TOPIC:
        try:
            level = delay_level_of(properties)
        except ValueError:
            return code
        due = schedule_tags_code(record.store_timestamp_ms, level, delay_levels_ms)
        return code if due is None else due
    for key in (TIMER_OUT_MS, TIMER_DELIVER_MS):
        value = _int64(properties.get(key))
        if value is not None:
            return value
    return code


def tags_of(text: str) -> str | None:
    """The TAGS of a stored properties string, as ``parse_properties(text).get("TAGS")``
    reads it (the last non-empty TAGS entry), without splitting the whole string."""
    at = text.rfind(_TAGS_MARK)
    while at >= 0:
        if at == 0 or text[at - 1] == "\x02":
            start = at + len(_TAGS_MARK)
            end = text.find("\x02", start)
            value = text[start:] if end < 0 else text[start:end]
            if value:
                return value
        at = text.rfind(_TAGS_MARK, 0, at)
    return None


def _int64(text: str | None) -> int | None:
    match = _INTEGRAL.fullmatch(text) if text is not None else None
    if match is None:
        return None
    value = int(match.group(1))
    return value if -(1 << 63) <= value < (1 << 63) else None


@dataclass(slots=True)
class Collected:
    """The units of a range of records, grouped by queue in log order; ``end_offset``: where
    the records ended; ``problem``: why the scan stopped short of the range's end."""

    batch: Batch
    end_offset: int
    problem: CorruptRecordError | None = None


def collect_units(
    segments: Sequence[SegmentSource],
    start: int,
    end: int,
    delay_levels_ms: tuple[int, ...],
) -> Collected:
    """The units of the records in ``[start, end)`` (``start`` a record boundary, ``end`` an
    acknowledged end, hence a boundary too). Bytes below ``end`` that are not a record end
    the range early, with the ``problem`` naming their file and position."""
    chunk = min(_MAX_CHUNK_BYTES, max(_MIN_CHUNK_BYTES, end - start))
    scan = LogScan(
        segments, start, end, check_crc=False, with_body=False, durable_offset=None,
        chunk_bytes=chunk,
    )  # fmt: skip
    batch: Batch = {}
    not_type, commit_type = TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE
    for decoded in scan:
        record = decoded.record
        tx_type = record.sys_flag & TRANSACTION_MASK
        if tx_type != not_type and tx_type != commit_type:
            continue
        key = (record.topic, record.queue_id)
        entry = (
            record.queue_offset,
            decoded.position,
            decoded.total_size,
            unit_tags_code(record, delay_levels_ms),
        )
        entries = batch.get(key)
        if entries is None:
            batch[key] = [entry]
        else:
            entries.append(entry)
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
        The store's log.
    acknowledged_end
        The store's acknowledged end (``MessageStore.confirmed_offset``).
    delay_levels_ms
        The store's delay levels (for schedule tagsCodes).
    start_offset
        Where dispatching resumes (recovery dispatched everything below it).
    """

    def __init__(
        self,
        queues: ConsumeQueues,
        commitlog: CommitLog,
        acknowledged_end: Callable[[], int],
        delay_levels_ms: tuple[int, ...],
        start_offset: int,
    ) -> None:
        self._queues = queues
        self._commitlog = commitlog
        self._acknowledged_end = acknowledged_end
        self._levels = delay_levels_ms
        self._offset = start_offset
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="rmq-cq-dispatch", daemon=True)
        queues.set_dispatched(start_offset, set())

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """The acknowledged end moved (called by the put path: one flag test when awake)."""
        if not self._wake.is_set():
            self._wake.set()

    def stop(self) -> None:
        """Dispatch what is acknowledged, then end the thread."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait(_IDLE_WAIT_S)
            self._wake.clear()  # before reading the end: a later put sets it again
            stopping = self._stopping
            try:
                self.dispatch_round()
            except (OSError, ValueError) as err:
                if self._offset < self._commitlog.min_offset:  # read a segment being deleted
                    _log.warning("ConsumeQueue dispatch raced retention (%s); skipping on", err)
                    self._wake.set()
                    continue
                self._fail(err)
                return
            except Exception as err:  # noqa: BLE001 - logged, recorded, readers are woken
                self._fail(err)
                return
            if stopping:
                return

    def _fail(self, error: Exception) -> None:
        _log.error("ConsumeQueue dispatch stopped at %d: %s", self._offset, error, exc_info=error)
        self._queues.fail(error)

    def dispatch_round(self) -> None:
        """Dispatch every acknowledged record not dispatched yet (raises what ``place`` and
        ``collect_units`` raise)."""
        end = self._acknowledged_end()  # before the segment list: the list then holds it
        start = self._offset
        commitlog = self._commitlog
        if start < commitlog.min_offset:
            _log.warning(
                "ConsumeQueue dispatch skips [%d, %d): retention deleted it undispatched",
                start, commitlog.min_offset,
            )  # fmt: skip
            start = commitlog.min_offset
        if start >= end:
            return
        collected = collect_units(commitlog.segments, start, end, self._levels)
        self._queues.place(collected.batch, fill_gaps=True)
        self._offset = collected.end_offset
        self._queues.set_dispatched(collected.end_offset, set(collected.batch))
        if collected.problem is not None:
            raise collected.problem
