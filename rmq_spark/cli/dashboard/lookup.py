"""The dashboard's message lookups and traffic counts, read-only and without a JVM.

Owns three things: finding the queue offset of a store time in one ConsumeQueue
(``CqView.offset_for_time``, RocketMQ's ``getOffsetInQueueByTime``), counting messages per
minute with it (the traffic chart: two searches per queue and minute, never a
scan, so a 1M-message store answers in milliseconds), and the lookups by offset message id
(straight from the CommitLog, ``spark/query.py``), by time range (the ConsumeQueue search)
and by key (the reput tables, read with ``deltalake``: ``spark/query_local.py``; the store
keeps no key index of its own). Messages come back as ``rmq-spark dump``/``query``'s JSON
objects. Knows nothing of HTTP (``app.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rmq_spark.cli.dashboard.data import application_queues, newest_store_time_ms
from rmq_spark.cli.dashboard.files import LogReader, topic_queue_snapshots
from rmq_spark.cli.query_command import record_json, row_json
from rmq_spark.errors import ConfigError
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.view import StoreView

__all__ = [
    "MINUTE_MS",
    "Traffic",
    "application_topics",
    "message_by_msg_id",
    "messages_by_key",
    "messages_by_time",
    "offset_for_time",
    "parse_time_ms",
    "traffic",
]

MINUTE_MS = 60_000
MINUTES_MAX = 24 * 60  # a day of minutes: the chart's widest window


def parse_time_ms(text: str, what: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (``2026-11-26T04:30``: UTC unless it names a
    zone, as the pages show times). Raises ``ConfigError`` naming ``what`` and the text."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(what, f"not epoch milliseconds nor ISO 8601: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def offset_for_time(log: LogReader, queue: CqView, timestamp_ms: int, low: int = 0) -> int:
    """The first queue offset (at or above ``low``) stored at or after ``timestamp_ms``;
    ``queue.max_offset`` if none."""
    return queue.offset_for_time(timestamp_ms, log.store_time_ms, low)


@dataclass(frozen=True, slots=True)
class Traffic:
    """Messages stored per minute, per application topic: ``counts[topic][i]`` is the minute
    starting at ``start_ms + i * MINUTE_MS``."""

    start_ms: int
    minutes: int
    counts: dict[str, list[int]]

    def totals(self) -> list[int]:
        return [sum(column) for column in zip(*self.counts.values(), strict=True)] or [
            0
        ] * self.minutes


def traffic(root: Path, now_ms: int, minutes: int = 60) -> Traffic:
    """Messages per minute over the ``minutes`` up to now, or up to the newest message when
    the store has been quiet for longer than that (a copied or idle store still shows its
    last hour of traffic)."""
    minutes = max(1, min(minutes, MINUTES_MAX))
    queues = application_queues(root)
    with LogReader(StoreView.open(root)) as log:
        newest = newest_store_time_ms(log, [q for qs in queues.values() for q in qs])
        quiet = newest < 0 or newest >= now_ms - minutes * MINUTE_MS
        end_ms = now_ms if quiet else newest + 1
        end_ms = -(-end_ms // MINUTE_MS) * MINUTE_MS  # the next whole minute
        start_ms = end_ms - minutes * MINUTE_MS
        counts = {topic: _per_minute(log, qs, start_ms, minutes) for topic, qs in queues.items()}
    return Traffic(start_ms, minutes, counts)


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


def messages_by_time(
    root: Path, topic: str, begin_ms: int, end_ms: int, limit: int = 50
) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` messages of ``topic`` stored in ``[begin_ms, end_ms)``, oldest
    first, and how many there are in all."""
    if end_ms <= begin_ms:
        raise ConfigError("end", f"the end ({end_ms}) must be after the begin ({begin_ms})")
    total, found = 0, []
    with LogReader(StoreView.open(root)) as log:
        for queue in topic_queue_snapshots(root, topic):
            first = offset_for_time(log, queue, begin_ms)
            after = offset_for_time(log, queue, end_ms, first)
            total += after - first
            for queue_offset in range(first, min(after, first + limit)):
                physical = queue.physical_at(queue_offset)
                decoded = log.decoded(physical) if physical is not None else None
                if decoded is not None:
                    found.append(decoded)
    found.sort(key=lambda d: (d.record.store_timestamp_ms, d.position))
    return [record_json(decoded) for decoded in found[:limit]], total


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
