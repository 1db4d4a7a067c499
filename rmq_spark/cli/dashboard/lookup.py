"""The dashboard's message lookups and traffic counts, read-only and without a JVM.

Owns three things: finding the queue offset of a store time in one ConsumeQueue
(``CqView.offset_for_time``, RocketMQ's ``getOffsetInQueueByTime``), counting messages per
minute with it (the traffic chart over a window the data spans or the user picks, and the
rate of the last minute: two searches per queue and minute, never a scan, so a 1M-message
store answers in milliseconds), and the lookups by offset message id (straight from the
CommitLog, ``spark/query.py``), by time range and by queue offset, a page at a time (the
ConsumeQueue search), and by key (the reput tables, read with ``deltalake``:
``spark/query_local.py``; the store keeps no key index of its own). Messages come back as
``rmq-spark dump``/``query``'s JSON objects. Knows nothing of HTTP (``app.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.cli.dashboard.data import application_queues, newest_store_time_ms
from rmq_spark.cli.dashboard.files import LogReader, topic_queue_snapshots
from rmq_spark.cli.dashboard.params import parse_time_ms
from rmq_spark.cli.query_command import record_json, row_json
from rmq_spark.errors import ConfigError, MessageNotFoundError
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.view import StoreView

__all__ = [
    "MINUTE_MS",
    "Page",
    "Traffic",
    "application_topics",
    "message_by_msg_id",
    "messages_by_key",
    "messages_by_time",
    "offset_for_time",
    "offset_page",
    "parse_time_ms",
    "time_page",
    "traffic",
]

MINUTE_MS = 60_000
MINUTES_MAX = 24 * 60  # a day of minutes: the chart's widest window


def offset_for_time(log: LogReader, queue: CqView, timestamp_ms: int, low: int = 0) -> int:
    """The first queue offset (at or above ``low``) stored at or after ``timestamp_ms``;
    ``queue.max_offset`` if none."""
    return queue.offset_for_time(timestamp_ms, log.store_time_ms, low)


@dataclass(frozen=True, slots=True)
class Traffic:
    """Messages stored per minute, per topic: ``counts[topic][i]`` is the minute starting at
    ``start_ms + i * MINUTE_MS``; ``current[topic]`` the messages stored in the minute up to
    now; ``chosen``: the window was asked for (else it spans the data)."""

    start_ms: int
    minutes: int
    counts: dict[str, list[int]]
    current: dict[str, int] = field(default_factory=dict)
    chosen: bool = True

    def totals(self) -> list[int]:
        return [sum(column) for column in zip(*self.counts.values(), strict=True)] or [
            0
        ] * self.minutes

    def average(self, topic: str) -> float:
        """Messages per minute of ``topic`` over the window."""
        return sum(self.counts.get(topic, ())) / self.minutes


def traffic(
    root: Path, now_ms: int, minutes: int | None = None, topics: list[str] | None = None
) -> Traffic:
    """Messages per minute of ``topics`` (default: every application topic). ``minutes``
    ``None``: the window spans the data, from the minute of the oldest message to that of the
    newest (at most ``MINUTES_MAX``, the newest kept). A number: that many minutes up to now,
    or up to the newest message when the store has been quiet for longer (a copied or idle
    store still shows its last traffic)."""
    if topics is None:
        queues = application_queues(root)
    else:
        queues = {topic: topic_queue_snapshots(root, topic) for topic in topics}
    every = [q for qs in queues.values() for q in qs]
    with LogReader(StoreView.open(root)) as log:
        newest = newest_store_time_ms(log, every)
        start_ms, span = _window(now_ms, newest, _oldest_store_time_ms(log, every), minutes)
        counts = {topic: _per_minute(log, qs, start_ms, span) for topic, qs in queues.items()}
        current = {topic: _since(log, qs, now_ms - MINUTE_MS) for topic, qs in queues.items()}
    return Traffic(start_ms, span, counts, current, minutes is not None)


def _window(now_ms: int, newest: int, oldest: int, minutes: int | None) -> tuple[int, int]:
    """(first minute, minutes) of the chart."""
    if minutes is None and newest >= 0:
        end_ms = _next_minute(newest + 1)
        first = max(0, oldest) // MINUTE_MS * MINUTE_MS
        start_ms = max(first, end_ms - MINUTES_MAX * MINUTE_MS)
        return start_ms, max(1, (end_ms - start_ms) // MINUTE_MS)
    minutes = max(1, min(minutes or 60, MINUTES_MAX))
    quiet = newest < 0 or newest >= now_ms - minutes * MINUTE_MS
    end_ms = _next_minute(now_ms if quiet else newest + 1)
    return end_ms - minutes * MINUTE_MS, minutes


def _next_minute(ms: int) -> int:
    return -(-ms // MINUTE_MS) * MINUTE_MS


def _oldest_store_time_ms(log: LogReader, queues: list[CqView]) -> int:
    """The oldest store time among the queues' first messages; -1 when they hold none."""
    stamps = []
    for queue in queues:
        first = queue.physical_at(queue.min_offset)
        stamp = log.store_time_ms(first) if first is not None else -1
        if stamp >= 0:
            stamps.append(stamp)
    return min(stamps, default=-1)


def _since(log: LogReader, queues: list[CqView], from_ms: int) -> int:
    """How many messages of the queues were stored at or after ``from_ms``."""
    return sum(q.max_offset - offset_for_time(log, q, from_ms) for q in queues)


def _per_minute(log: LogReader, queues: list[CqView], start_ms: int, minutes: int) -> list[int]:
    row = [0] * minutes
    for queue in queues:
        offset = offset_for_time(log, queue, start_ms)
        for index in range(minutes):
            after = offset_for_time(log, queue, start_ms + (index + 1) * MINUTE_MS, offset)
            row[index] += after - offset
            offset = after
    return row


def message_by_msg_id(root: Path, msg_id: str) -> dict[str, Any]:
    """The message an offset message id names, read from the CommitLog.

    Raises
    ------
    InvalidMessageIdError
        Not an offset message id (32 or 56 hex digits).
    OffsetOutOfRangeError, MessageNotFoundError, CorruptRecordError
        No message there (deleted, never written) or a damaged one.
    """
    from rmq_spark.spark.query import record_at
    from rmq_spark.store.msg_id import decode_offset_msg_id

    _host, physical_offset = decode_offset_msg_id(msg_id.strip())
    return record_json(record_at(root, physical_offset))


@dataclass(frozen=True, slots=True)
class Page:
    """One page of messages, oldest first; ``total``: how many the lookup matches in all;
    ``next``/``previous``: the query arguments of the neighbouring pages (``None``: none)."""

    messages: list[dict[str, Any]]
    total: int
    next: dict[str, str] | None = None
    previous: dict[str, str] | None = None


def offset_page(root: Path, topic: str, queue_id: int, offset: int, limit: int) -> Page:
    """The messages of one queue at queue offsets ``[offset, offset + limit)`` (from the
    oldest still there when ``offset`` is below it).

    Raises
    ------
    MessageNotFoundError
        The topic has no such queue.
    """
    queue = {q.queue_id: q for q in topic_queue_snapshots(root, topic)}.get(queue_id)
    if queue is None:
        raise MessageNotFoundError(f"topic {topic!r} has no queue {queue_id}")
    first = max(offset, queue.min_offset)
    after = min(first + limit, queue.max_offset)
    with LogReader(StoreView.open(root)) as log:
        physicals = map(queue.physical_at, range(first, after))
        found = [log.decoded(p) for p in physicals if p is not None]
    here = {"topic": topic, "queue": str(queue_id), "limit": str(limit)}
    previous = None
    if first > queue.min_offset:
        previous = {**here, "offset": str(max(queue.min_offset, first - limit))}
    following = {**here, "offset": str(after)} if after < queue.max_offset else None
    messages = [record_json(d) for d in found if d is not None]
    return Page(messages, queue.max_offset - queue.min_offset, following, previous)


def time_page(
    root: Path, topic: str, begin_ms: int, end_ms: int, limit: int, skip: int = 0
) -> Page:
    """Messages of ``topic`` stored in ``[begin_ms, end_ms)``, ordered by (store time, log
    position): the ``limit`` after the first ``skip``. The next page starts at the last
    one's store time, skipping those of that millisecond already shown."""
    if end_ms <= begin_ms:
        raise ConfigError("end", f"the end ({end_ms}) must be after the begin ({begin_ms})")
    total, stamped = 0, []
    with LogReader(StoreView.open(root)) as log:
        for queue in topic_queue_snapshots(root, topic):
            first = offset_for_time(log, queue, begin_ms)
            after = offset_for_time(log, queue, end_ms, first)
            total += after - first
            # Whatever sorts before the page's end is within the first skip + limit of its queue.
            for physical in map(queue.physical_at, range(first, min(after, first + skip + limit))):
                if physical is not None:
                    stamped.append((log.store_time_ms(physical), physical))
        stamped.sort()
        shown = stamped[skip : skip + limit]
        found = [log.decoded(physical) for _, physical in shown]
    here = {"topic": topic, "end": str(end_ms), "limit": str(limit)}
    following = None
    if shown and total > skip + len(shown):
        last = shown[-1][0]
        same = sum(1 for stamp, _ in stamped[: skip + len(shown)] if stamp == last)
        following = {**here, "begin": str(last), "skip": str(same)}
    messages = [record_json(d) for d in found if d is not None]
    return Page(messages, total, following)


def messages_by_time(
    root: Path, topic: str, begin_ms: int, end_ms: int, limit: int = 50
) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` messages of ``topic`` stored in ``[begin_ms, end_ms)``, oldest
    first, and how many there are in all."""
    page = time_page(root, topic, begin_ms, end_ms, limit)
    return page.messages, page.total


def messages_by_key(
    tables_dir: Path | None, topic: str, key: str, limit: int = 50
) -> list[dict[str, Any]]:
    """Messages of ``topic`` with ``key`` as UNIQ_KEY or a KEYS token, from the reput tables.

    Raises
    ------
    ConfigError
        No tables directory was given to the dashboard.
    TableError
        The directory holds no reput tables.
    """
    if tables_dir is None:
        raise ConfigError(
            "--tables", "a key lookup reads the reput tables: start the dashboard with --tables"
        )
    from rmq_spark.spark.query_local import local_messages_by_key

    rows = local_messages_by_key(tables_dir, topic, key).slice(0, limit).to_pylist()
    return [row_json(row) for row in rows]


def application_topics(root: Path) -> list[str]:
    """Topic names a lookup form offers (the system ones left out)."""
    return sorted(application_queues(root))
