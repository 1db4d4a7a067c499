"""Where the redelivery job finds schedule entries: the consume_queue table, or the log.

Owns two ``EntrySource`` implementations that answer the same two questions: "the next units
of every delay level from these queue offsets" and "the timer units due by now":

- ``TableEntrySource`` reads the Delta table ``consume_queue`` the reput job writes (one
  small Spark query per question). tagsCode there is the delivery time fixed when the reput
  job saw the message, so a later change of the delay levels affects only new messages.
  Tables built from several stores (a ``store`` column) are read for this job's store only.
- ``LogEntrySource`` reads ``SCHEDULE_TOPIC_XXXX`` and ``rmq_sys_wheel_timer`` records
  straight from the CommitLog (no Spark): the fallback when the table is not there, and what
  the chaos test's plain-Python job uses. It computes delivery times itself from the
  *current* delay levels. It keeps the entries it has seen in memory and scans only new
  bytes on later calls; a restart scans from ``Journal.log_scan_from``.

Does not own deciding what is due (``schedule.py``) or reading message bodies
(``log_reader.py``).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rmq_spark.broker.schedule_records import property_value, timer_due_ms
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.schedule import TIMER_QUEUE_ID, DueEntry, QueueProgress
from rmq_spark.errors import EntrySourceError
from rmq_spark.store.delay_levels import delivery_time_ms
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.properties import DELAY, delay_level_of, parse_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "Candidates",
    "EntrySource",
    "LogEntrySource",
    "TableEntrySource",
    "consume_queue_table_exists",
]

log = logging.getLogger("rmq_spark.delay")


@dataclass(slots=True)
class Candidates:
    """What a source found for one planning step.

    ``levels``: units of every schedule queue (``queue_id`` = level - 1) from its low water
    mark, ascending, at least ``limit`` not-done ones when that many exist. ``timer``: timer
    units due by now and not done, earliest first, at most ``limit``. ``timer_next_due_ms``:
    the earliest timer due time after now when known (``None``: none soon).
    """

    levels: dict[int, list[DueEntry]] = field(default_factory=dict)
    timer: list[DueEntry] = field(default_factory=list)
    timer_next_due_ms: int | None = None

    def holds_due(
        self, levels: Mapping[int, QueueProgress], timer: QueueProgress | None, now_ms: int
    ) -> bool:
        """Whether an entry due by ``now_ms`` is not delivered yet by the progress of
        ``levels`` (keyed by queue id) and ``timer``. Level rows are in queue-offset order, so
        their due times only grow; timer rows are in due-time order."""
        for queue_id, rows in self.levels.items():
            queue = levels.get(queue_id)
            for entry in rows:
                if entry.due_ms > now_ms:
                    break
                if queue is None or not queue.is_done(entry.queue_offset):
                    return True
        for entry in self.timer:
            if entry.due_ms > now_ms:
                break
            if timer is None or not timer.is_done(entry.queue_offset):
                return True
        return False


class EntrySource(Protocol):
    """What the redelivery pass asks for entries."""

    name: str

    def candidates(
        self,
        levels: Mapping[int, QueueProgress],
        timer: QueueProgress | None,
        now_ms: int,
        limit: int,
    ) -> Candidates:
        """Candidates for the next batch; ``levels`` by queue id, ``timer`` None: skip it."""
        ...


def consume_queue_table_exists(tables_dir: str | Path) -> bool:
    """True when ``<tables_dir>/consume_queue`` is a Delta table (has a ``_delta_log``)."""
    return (Path(tables_dir) / "consume_queue" / "_delta_log").is_dir()


class TableEntrySource:
    """Entries from the ``consume_queue`` Delta table (see module docstring).

    Parameters
    ----------
    spark
        The session.
    tables_dir
        The reput job's tables directory.
    lookahead_ms
        Timer units due this far ahead are fetched too, to know the next due time.
    store
        The store redelivered into: in tables of several stores, only its rows (``store``
        column = its absolute path, as the reput job wrote it) are entries.
    """

    name = "consume_queue"

    def __init__(
        self,
        spark: SparkSession,
        tables_dir: str | Path,
        *,
        lookahead_ms: int = 1000,
        store: str | Path | None = None,
    ) -> None:
        self._spark = spark
        self._path = str(Path(tables_dir).absolute() / "consume_queue")
        self.lookahead_ms = lookahead_ms
        self.store = None if store is None else str(Path(store).absolute())

    def candidates(
        self,
        levels: Mapping[int, QueueProgress],
        timer: QueueProgress | None,
        now_ms: int,
        limit: int,
    ) -> Candidates:
        """One Spark query: the level ranges, and the timer units due by now plus those due
        within ``lookahead_ms`` (to know when to wake up).

        Raises
        ------
        EntrySourceError
            Spark could not read the table (Spark's message included).
        """
        try:
            arrow = self._query(levels, timer, now_ms, limit)
        except Exception as err:  # Py4J / Spark / Delta errors, re-raised as ours
            raise EntrySourceError(f"reading {self._path} failed: {err}") from err
        result = Candidates()
        for entry in _entries_from_arrow(arrow):
            if entry.queue_id >= 0:
                result.levels.setdefault(entry.queue_id, []).append(entry)
                continue
            entry = dataclasses.replace(entry, queue_id=TIMER_QUEUE_ID)
            assert timer is not None
            if timer.is_done(entry.queue_offset):
                continue
            if entry.due_ms <= now_ms:
                result.timer.append(entry)
            elif result.timer_next_due_ms is None or entry.due_ms < result.timer_next_due_ms:
                result.timer_next_due_ms = entry.due_ms
        for items in result.levels.values():
            items.sort(key=lambda e: e.queue_offset)
        result.timer.sort(key=lambda e: (e.due_ms, e.queue_offset))
        del result.timer[limit:]
        return result

    def _query(
        self,
        levels: Mapping[int, QueueProgress],
        timer: QueueProgress | None,
        now_ms: int,
        limit: int,
    ) -> Any:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # Epoch milliseconds instead of a timestamp: Arrow conversion of timestamps is slow.
        table = self._spark.read.format("delta").load(self._path)
        if _STORE_COLUMN in table.columns:  # tables of several stores: this store's rows
            if self.store is None:
                raise EntrySourceError(f"{self._path} holds several stores: name the store")
            table = table.where(F.col(_STORE_COLUMN) == F.lit(self.store))
        table = table.withColumn("store_timestamp", F.unix_millis("store_timestamp"))
        low, high = F.lit(0), F.lit(limit)
        for queue_id, queue in sorted(levels.items(), key=lambda item: item[0]):
            extra = limit + queue.done_count_above_low_water
            is_queue = F.col("queue_id") == queue_id
            low = F.when(is_queue, F.lit(queue.low_water)).otherwise(low)
            high = F.when(is_queue, F.lit(queue.low_water + extra)).otherwise(high)
        # Per queue, rows up to and including the first one not due yet: delivery stops
        # there, and a missing offset before it is still seen as a gap.
        first_not_due = F.min(F.when(F.col("tags_code") > now_ms, F.col("queue_offset"))).over(
            Window.partitionBy("queue_id")
        )
        query = (
            table.where(F.col("topic") == RMQ_SYS_SCHEDULE_TOPIC)
            .where((F.col("queue_offset") >= low) & (F.col("queue_offset") < high))
            .select(*_COLUMNS)
            .withColumn("_first_not_due", first_not_due)
            .where(
                F.col("_first_not_due").isNull()
                | (F.col("queue_offset") <= F.col("_first_not_due"))
            )
            .drop("_first_not_due")
        )
        if timer is not None:
            timer_rows = (
                table.where(F.col("topic") == RMQ_SYS_WHEEL_TIMER_TOPIC)
                .where(F.col("queue_id") == TIMER_QUEUE_ID)
                .where(F.col("queue_offset") >= timer.low_water)
                .where(F.col("tags_code") <= now_ms + self.lookahead_ms)
                .orderBy("tags_code", "queue_offset")
                .limit(limit + timer.done_count_above_low_water + 1)
                .select(*_COLUMNS)
                .withColumn("queue_id", F.lit(-1))  # marks timer rows in the union
            )
            query = query.unionByName(timer_rows)
        return query.toArrow()


_STORE_COLUMN = "store"  # tables.STORE_COLUMN (delay imports no reput module here)
_COLUMNS = (
    "queue_id",
    "queue_offset",
    "physical_offset",
    "total_size",
    "tags_code",
    "store_timestamp",
)


def _entries_from_arrow(table: Any) -> list[DueEntry]:
    columns = table.to_pydict()
    stamps = columns["store_timestamp"]
    return [
        DueEntry(
            int(queue_id),
            int(queue_offset),
            int(physical_offset),
            int(total_size),
            int(tags_code),
            _epoch_ms(stamp),
        )
        for queue_id, queue_offset, physical_offset, total_size, tags_code, stamp in zip(
            columns["queue_id"],
            columns["queue_offset"],
            columns["physical_offset"],
            columns["total_size"],
            columns["tags_code"],
            stamps,
            strict=True,
        )
    ]


def _epoch_ms(stamp: Any) -> int:
    if stamp is None:
        return 0
    if hasattr(stamp, "timestamp"):
        return int(round(stamp.timestamp() * 1000))
    return int(stamp)


class LogEntrySource:
    """Entries read from the CommitLog (see module docstring).

    Parameters
    ----------
    reader
        The store's log.
    delay_levels_ms
        The configured levels (``parse_message_delay_level``), for delivery times.
    scan_from
        Physical offset to start the first scan at (``Journal.log_scan_from``).
    timer_enabled
        Also collect ``rmq_sys_wheel_timer`` records.
    """

    name = "commitlog"

    def __init__(
        self,
        reader: LogReader,
        delay_levels_ms: tuple[int, ...],
        scan_from: int = 0,
        *,
        timer_enabled: bool = True,
    ) -> None:
        self._reader = reader
        self._levels = delay_levels_ms
        self._cursor = scan_from
        self._topics = (
            (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC)
            if timer_enabled
            else (RMQ_SYS_SCHEDULE_TOPIC,)
        )
        # Pending units by queue offset, in log order (= queue order within a queue), so that
        # delivered ones are dropped from the front in O(1).
        self._levels_seen: dict[int, OrderedDict[int, DueEntry]] = {}
        self._timer_seen: OrderedDict[int, DueEntry] = OrderedDict()
        self._timer_heap: list[tuple[int, int]] = []  # (due_ms, queue_offset) of pending

    def start_at(self, scan_from: int) -> None:
        """Start the first scan at ``scan_from`` (before the first call only)."""
        assert not self._levels_seen and not self._timer_seen
        self._cursor = scan_from

    @property
    def cursor(self) -> int:
        """Where the next scan starts: every schedule record below it has been seen."""
        return self._cursor

    def _scan(self) -> None:
        start = max(self._cursor, self._reader.min_offset())
        for scanned in self._reader.scan(start, self._topics, with_body=False):
            record = scanned.record
            if record.topic == RMQ_SYS_SCHEDULE_TOPIC:
                delay = property_value(record.properties, DELAY)
                try:
                    level = delay_level_of({DELAY: delay} if delay is not None else {})
                except ValueError:
                    level = 0
                due = delivery_time_ms(record.store_timestamp_ms, level, self._levels)
                target = self._levels_seen.setdefault(record.queue_id, OrderedDict())
            else:
                properties = parse_properties(record.properties)
                due = timer_due_ms(properties, record.store_timestamp_ms)
                target = self._timer_seen
                heapq.heappush(self._timer_heap, (due, record.queue_offset))
            target[record.queue_offset] = DueEntry(
                record.queue_id,
                record.queue_offset,
                scanned.physical_offset,
                scanned.total_size,
                due,
                record.store_timestamp_ms,
            )
        self._cursor = max(self._cursor, self._reader.scan_end)

    def candidates(
        self,
        levels: Mapping[int, QueueProgress],
        timer: QueueProgress | None,
        now_ms: int,
        limit: int,
    ) -> Candidates:
        self._scan()
        result = Candidates()
        for queue_id, seen in self._levels_seen.items():
            queue = levels.get(queue_id, QueueProgress())
            _drop_done_front(seen, queue)
            chosen = result.levels[queue_id] = []
            for offset, entry in seen.items():
                if not queue.is_done(offset):
                    chosen.append(entry)
                    if len(chosen) > limit or entry.due_ms > now_ms:
                        break  # delivery stops at the first unit not due yet
        if timer is not None:
            _drop_done_front(self._timer_seen, timer)
            heap, seen_timer = self._timer_heap, self._timer_seen
            while heap and (heap[0][1] not in seen_timer or timer.is_done(heap[0][1])):
                seen_timer.pop(heapq.heappop(heap)[1], None)
            while heap and heap[0][0] <= now_ms and len(result.timer) < limit:
                _due, offset = heapq.heappop(heap)
                if offset in seen_timer and not timer.is_done(offset):
                    result.timer.append(seen_timer[offset])
            for entry in result.timer:  # still pending until delivered
                heapq.heappush(heap, (entry.due_ms, entry.queue_offset))
            upcoming = [due for due, _ in heapq.nsmallest(1, heap) if due > now_ms]
            result.timer_next_due_ms = upcoming[0] if upcoming else None
        return result

    def pending(self, levels: Mapping[int, QueueProgress], timer: QueueProgress | None) -> int:
        """Entries scanned so far and not delivered (``levels`` by queue id; ``timer`` None:
        timer entries left out). A queue's offsets are contiguous in the log, so each queue
        counts its offsets from the first one seen (or the delivered low water mark) to the
        last one seen, minus the runs delivered in between: no walk over the entries."""
        queues = [(seen, levels.get(q, QueueProgress())) for q, seen in self._levels_seen.items()]
        if timer is not None:
            queues.append((self._timer_seen, timer))
        total = 0
        for seen, progress in queues:
            if not seen:
                continue
            start, end = max(progress.low_water, next(iter(seen))), next(reversed(seen)) + 1
            done = sum(max(0, min(b, end) - max(a, start)) for a, b in progress.done_ranges)
            total += max(0, end - start - done)
        return total

    def restart_offset(self, levels: Mapping[int, QueueProgress], timer: QueueProgress) -> int:
        """A scan start that finds every entry still pending (for ``Journal.log_scan_from``)."""
        firsts = [self._cursor]
        for queue_id, seen in self._levels_seen.items():
            _drop_done_front(seen, levels.get(queue_id, QueueProgress()))
            firsts.extend(entry.physical_offset for entry in itertools.islice(seen.values(), 1))
        _drop_done_front(self._timer_seen, timer)
        firsts.extend(e.physical_offset for e in itertools.islice(self._timer_seen.values(), 1))
        return min(firsts)


def _drop_done_front(seen: OrderedDict[int, DueEntry], progress: QueueProgress) -> None:
    """Forget delivered units at the front (later ones go when the low water mark passes)."""
    while seen:
        offset = next(iter(seen))
        if not progress.is_done(offset):
            return
        seen.popitem(last=False)
