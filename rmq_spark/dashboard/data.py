"""What the dashboard shows, gathered read-only from a store directory: topics and queues,
consumer groups and their lag, the reput and delay jobs' progress.

Owns turning the store's files into plain rows (frozen dataclasses) for the pages; knows
nothing of HTTP (``app.py``) nor of message lookups and traffic (``lookup.py``). Never takes
the store's lock nor opens a file for writing: every read here is one a running broker
allows (ConsumeQueue files through ``QueueFiles``, the CommitLog through ``StoreView``, the
JSON progress files as the broker last saved them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmq_spark.cli.groups_command import GroupQueueRow, QueueFiles, group_rows
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.errors import RmqError
from rmq_spark.store.codec import DecodedRecord, decode_record
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.reader_progress import read_reader_progress
from rmq_spark.store.view import StoreView

__all__ = [
    "DelayRow",
    "GroupQueueRow",
    "QueueRow",
    "ReaderRow",
    "StoreSummary",
    "TopicRow",
    "all_queues",
    "decoded_at",
    "delay_rows",
    "group_rows",
    "is_system_topic",
    "newest_store_time_ms",
    "reader_rows",
    "store_end",
    "store_summary",
    "store_time_of_unit",
    "topic_queues",
    "topic_rows",
]

_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])  # FORMAT.md 6
_SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", RMQ_SYS_SCHEDULE_TOPIC)


def is_system_topic(topic: str) -> bool:
    """Retry, dead-letter, schedule and timer topics: the broker's, not an application's."""
    return topic.startswith(_SYSTEM_PREFIXES)


@dataclass(frozen=True, slots=True)
class QueueRow:
    topic: str
    queue_id: int
    min_offset: int  # the oldest queue offset still in the ConsumeQueue
    max_offset: int  # one past the newest
    size_bytes: int  # the CommitLog bytes of the messages in [min_offset, max_offset)

    @property
    def message_count(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class TopicRow:
    topic: str
    queue_count: int
    min_offset: int  # smallest min_offset of its queues
    max_offset: int  # largest max_offset of its queues
    message_count: int
    size_bytes: int
    system: bool


def _queue_size_bytes(queue: QueueFiles) -> int:
    """The sizes of the units in ``[min_offset, max_offset)`` added up, file by file with
    numpy (a Python loop over a million units would cost a page load half a second)."""
    total = 0
    for path in sorted(_numbered(queue.directory), key=_by_number):
        base = int(path.name) // _UNIT.itemsize
        start, end = max(queue.min_offset, base) - base, queue.max_offset - base
        if end <= 0:
            continue
        with path.open("rb") as handle:
            handle.seek(start * _UNIT.itemsize)
            data = handle.read((end - start) * _UNIT.itemsize)
        units = np.frombuffer(data, dtype=_UNIT, count=len(data) // _UNIT.itemsize)
        total += int(units["size"][units["size"] > 0].sum(dtype=np.int64))
    return total


def topic_queues(root: Path, topic: str) -> list[QueueRow]:
    """Every queue of ``topic`` in the ConsumeQueue, by queue id (``[]``: no such topic)."""
    rows = []
    for queue in all_queues(root, topic):
        size = _queue_size_bytes(queue)
        queue_id = int(queue.directory.name)
        rows.append(QueueRow(topic, queue_id, queue.min_offset, queue.max_offset, size))
    return rows


def _numbered(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.isdigit()]


def _by_number(path: Path) -> int:
    return int(path.name)


def topic_rows(root: Path) -> list[TopicRow]:
    """Every topic with a ConsumeQueue, application topics first, then by name."""
    directory = root / CONSUME_QUEUE_DIR
    if not directory.is_dir():
        return []
    rows = []
    for path in sorted(p for p in directory.iterdir() if p.is_dir()):
        queues = topic_queues(root, path.name)
        rows.append(
            TopicRow(
                topic=path.name,
                queue_count=len(queues),
                min_offset=min((q.min_offset for q in queues), default=0),
                max_offset=max((q.max_offset for q in queues), default=0),
                message_count=sum(q.message_count for q in queues),
                size_bytes=sum(q.size_bytes for q in queues),
                system=is_system_topic(path.name),
            )
        )
    return sorted(rows, key=lambda row: (row.system, row.topic))


@dataclass(frozen=True, slots=True)
class StoreSummary:
    store_dir: Path
    segment_count: int
    min_offset: int  # the oldest byte still in the CommitLog
    end_offset: int  # where readers may read up to
    disk_bytes: int  # the segment files' sizes added up (preallocated ones count whole)
    broker_open: bool  # a process holds the store's lock (a running broker)


def store_end(view: StoreView) -> int:
    """Where readers may read up to: the broker's published end while one runs, else the
    end-of-log rule every reader uses (``planner.readable_end``)."""
    if view.broker_open and view.publishes_end:
        return view.confirm_offset
    from rmq_spark.spark.planner import readable_end

    return readable_end(view)


def store_summary(root: Path) -> StoreSummary:
    view = StoreView.open(root)
    return StoreSummary(
        store_dir=root,
        segment_count=len(view.spans),
        min_offset=view.min_offset,
        end_offset=store_end(view),
        disk_bytes=sum(span.size_bytes for span in view.spans),
        broker_open=view.broker_open,
    )


@dataclass(frozen=True, slots=True)
class ReaderRow:
    """A registered reader (the reput job: ``reput:<tables dir>``) and how far behind it is."""

    name: str
    physical_offset: int  # every record below it is processed
    updated_at_ms: int
    lag_bytes: int  # store end - physical_offset
    lag_seconds: float | None  # newest store time - store time of its next record; None: level


def reader_rows(root: Path) -> list[ReaderRow]:
    """The readers of ``config/readers/`` with their lag against the store's end."""
    readers = read_reader_progress(root)
    if not readers:
        return []
    view = StoreView.open(root)
    end = store_end(view)
    queues = [q for t in topic_rows(root) for q in all_queues(root, t.topic)]
    newest_ms = newest_store_time_ms(view, queues)
    rows = []
    for reader in readers:
        lag_seconds: float | None = None
        if reader.physical_offset < end and newest_ms >= 0:
            next_ms = _store_time_at(root, reader.physical_offset)
            if next_ms is not None:
                lag_seconds = max(0, newest_ms - next_ms) / 1000
        rows.append(
            ReaderRow(
                reader.name,
                reader.physical_offset,
                reader.updated_at_ms,
                max(0, end - reader.physical_offset),
                lag_seconds,
            )
        )
    return rows


def _store_time_at(root: Path, physical_offset: int) -> int | None:
    from rmq_spark.spark.query import record_at

    try:
        return record_at(root, physical_offset).record.store_timestamp_ms
    except RmqError:
        return None  # not a record start (a reader parked at a segment's end), or gone


def decoded_at(view: StoreView, physical_offset: int, size: int) -> DecodedRecord | None:
    """The record a ConsumeQueue unit points at; ``None`` when retention deleted it."""
    span = view.span_at(physical_offset)
    if span is None:
        return None
    with view.segment(span) as segment:
        data = segment.read(physical_offset - span.base_offset, size)
        decoded = decode_record(data, 0, path=str(segment.path), check_crc=False)
    if not isinstance(decoded, DecodedRecord):
        return None
    return dataclasses.replace(decoded, position=physical_offset)


def store_time_of_unit(view: StoreView, physical_offset: int, size: int) -> int:
    """The store time of the record a unit points at; -1 when it is gone (older than any)."""
    decoded = decoded_at(view, physical_offset, size)
    return decoded.record.store_timestamp_ms if decoded is not None else -1


def all_queues(root: Path, topic: str) -> list[QueueFiles]:
    """``topic``'s ConsumeQueues by queue id, read-only (``[]``: no such topic)."""
    directory = root / CONSUME_QUEUE_DIR / topic
    if not directory.is_dir():
        return []
    return [QueueFiles(p) for p in sorted(_numbered(directory), key=_by_number)]


def newest_store_time_ms(view: StoreView, queues: list[QueueFiles]) -> int:
    """The newest store time among the queues' last messages; -1 when they hold none."""
    newest = -1
    for queue in queues:
        if queue.max_offset > queue.min_offset:
            [(offset, size)] = queue.units(queue.max_offset - 1, queue.max_offset)
            newest = max(newest, store_time_of_unit(view, offset, size))
    return newest


@dataclass(frozen=True, slots=True)
class DelayRow:
    """One queue the delay job redelivers from: a delay level's or the timer's."""

    name: str  # "level 3" or "timer"
    topic: str
    queue_id: int
    delivered_below: int  # the job's low water: every unit below it is redelivered
    max_offset: int
    pending: int  # units at or above the low water (delivered ones above it not subtracted)


def delay_rows(root: Path) -> tuple[list[DelayRow], int]:
    """The delay job's progress per schedule queue, and its committed passes.

    Raises
    ------
    ProgressFormatError
        The job's journal is unreadable (the error names the file).
    """
    journal = ProgressFiles(root).load()
    rows = []
    for queue in topic_queues(root, RMQ_SYS_SCHEDULE_TOPIC):
        low = journal.levels.get(queue.queue_id + 1)  # queue id = delay level - 1
        below = max(queue.min_offset, low.low_water if low is not None else 0)
        rows.append(
            DelayRow(
                f"level {queue.queue_id + 1}",
                RMQ_SYS_SCHEDULE_TOPIC,
                queue.queue_id,
                below,
                queue.max_offset,
                max(0, queue.max_offset - below),
            )
        )
    for queue in topic_queues(root, RMQ_SYS_WHEEL_TIMER_TOPIC):
        below = max(queue.min_offset, journal.timer.low_water)
        rows.append(
            DelayRow(
                "timer",
                RMQ_SYS_WHEEL_TIMER_TOPIC,
                queue.queue_id,
                below,
                queue.max_offset,
                max(0, queue.max_offset - below),
            )
        )
    return rows, journal.passes
