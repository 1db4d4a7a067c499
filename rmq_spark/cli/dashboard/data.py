"""What the dashboard shows, gathered read-only from a store directory: topics and queues,
consumer groups and their lag, the reput and delay jobs' progress.

Owns turning the store's files into plain rows (frozen dataclasses) for the pages; knows
nothing of HTTP (``app.py``) nor of message lookups and traffic (``lookup.py``). Never takes
the store's lock nor opens a file for writing: every read here is one a running broker
allows (ConsumeQueue and CommitLog files through ``files.py``, the
JSON progress files as the broker last saved them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmq_spark.cli.dashboard.files import LogReader, topic_queue_snapshots
from rmq_spark.cli.groups_command import GroupQueueRow, group_rows
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.cq_view import CqView
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
    "application_queues",
    "delay_rows",
    "group_rows",
    "is_system_topic",
    "newest_store_time_ms",
    "reader_rows",
    "store_end",
    "store_summary",
    "topic_queues",
    "topic_rows",
]

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


def topic_queues(root: Path, topic: str) -> list[QueueRow]:
    """Every queue of ``topic`` in the ConsumeQueue, by queue id (``[]``: no such topic)."""
    return [
        QueueRow(topic, q.queue_id, q.min_offset, q.max_offset, q.size_bytes())
        for q in topic_queue_snapshots(root, topic)
    ]


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
    """Where readers may read up to: the end-of-log rule every reader uses (a running
    broker's published end; a closed store's last valid record)."""
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
    queues = [q for qs in application_queues(root).values() for q in qs]
    with LogReader(view) as log:
        newest_ms = newest_store_time_ms(log, queues)
    rows = []
    for reader in readers:
        lag_seconds: float | None = None
        if reader.physical_offset < end and newest_ms >= 0:
            next_ms = _store_time_at(view, reader.physical_offset)
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


def _store_time_at(view: StoreView, physical_offset: int) -> int | None:
    with LogReader(view) as log:
        found = log.store_time_ms(physical_offset)
    return found if found >= 0 else None  # not a record start (a segment's end), or gone


def newest_store_time_ms(log: LogReader, queues: list[CqView]) -> int:
    """The newest store time among the queues' last messages; -1 when they hold none."""
    newest = -1
    for queue in queues:
        last = queue.physical_at(queue.max_offset - 1)
        if last is not None:
            newest = max(newest, log.store_time_ms(last))
    return newest


def application_queues(root: Path) -> dict[str, list[CqView]]:
    """The ConsumeQueues of every application topic (system topics left out), by topic."""
    directory = root / CONSUME_QUEUE_DIR
    if not directory.is_dir():
        return {}
    topics = sorted(p.name for p in directory.iterdir() if p.is_dir())
    return {t: topic_queue_snapshots(root, t) for t in topics if not is_system_topic(t)}


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
