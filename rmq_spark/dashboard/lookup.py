"""The dashboard's message lookups and traffic counts, read-only and without a JVM.

Owns three things: finding the queue offset of a store time in one ConsumeQueue by binary
search over its messages' store timestamps (RocketMQ's ``getOffsetInQueueByTime``), counting
messages per minute with it (the traffic chart: two searches per queue and minute, never a
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

from rmq_spark.cli.groups_command import QueueFiles
from rmq_spark.cli.query_command import record_json, row_json
from rmq_spark.dashboard.data import (
    all_queues,
    decoded_at,
    is_system_topic,
    newest_store_time_ms,
    store_time_of_unit,
    topic_rows,
)
from rmq_spark.errors import ConfigError
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


def offset_for_time(view: StoreView, queue: QueueFiles, timestamp_ms: int, low: int = 0) -> int:
    """The first queue offset (at or above ``low``) stored at or after ``timestamp_ms``;
    ``queue.max_offset`` if none."""
    low, high = max(low, queue.min_offset), queue.max_offset
    while low < high:
        middle = (low + high) // 2
        [(offset, size)] = queue.units(middle, middle + 1)
        if store_time_of_unit(view, offset, size) >= timestamp_ms:
            high = middle
        else:
            low = middle + 1
    return low


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
    view = StoreView.open(root)
    queues = {t.topic: all_queues(root, t.topic) for t in topic_rows(root) if not t.system}
    newest = newest_store_time_ms(view, [q for qs in queues.values() for q in qs])
    end_ms = now_ms if newest < 0 or newest >= now_ms - minutes * MINUTE_MS else newest + 1
    end_ms = -(-end_ms // MINUTE_MS) * MINUTE_MS  # the next whole minute
    start_ms = end_ms - minutes * MINUTE_MS
    counts: dict[str, list[int]] = {}
    for topic, topic_queues in sorted(queues.items()):
        row = [0] * minutes
        for queue in topic_queues:
            offset = offset_for_time(view, queue, start_ms)
            for index in range(minutes):
                after = offset_for_time(view, queue, start_ms + (index + 1) * MINUTE_MS, offset)
                row[index] += after - offset
                offset = after
        counts[topic] = row
    return Traffic(start_ms, minutes, counts)


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
    view = StoreView.open(root)
    total, found = 0, []
    for queue in all_queues(root, topic):
        first = offset_for_time(view, queue, begin_ms)
        after = offset_for_time(view, queue, end_ms, first)
        total += after - first
        for offset, size in queue.units(first, min(after, first + limit)):
            decoded = decoded_at(view, offset, size)
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
    return [row.topic for row in topic_rows(root) if not is_system_topic(row.topic)]
