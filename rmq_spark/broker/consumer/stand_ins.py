"""STAND-INS until the real pieces are merged: ConsumeQueue, filters, group settings, offsets file.

Everything here is a simple, working version of a collaborator the consume path reaches only
through ``ports.py``; ``STAND_IN_WIRING`` is the one place that picks them. To plug in the
real ones, build a ``ConsumerWiring`` from them instead:

- ``LogTailIndex`` -> ``store.consume_queues`` (the ConsumeQueue the store dispatches).
- ``compile_tag_filter`` / ``FilterExpressionError`` -> ``compile_filter`` and the typed
  ``FilterExpressionError`` (TAG and SQL92).
- ``DefaultGroupSettings`` -> ``SubscriptionGroups`` (``config/subscriptionGroup.json``).
- ``read_consumer_offsets`` / ``write_consumer_offsets`` -> the config-file module's.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.broker.consumer.ports import ConsumerWiring, QueueListener
from rmq_spark.errors import RmqError, StoreMetadataError
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.properties import TAGS, parse_properties
from rmq_spark.store.reader import iter_records

__all__ = [
    "DefaultGroupSettings",
    "FilterExpressionError",
    "GroupSettings",
    "LogTailIndex",
    "STAND_IN_WIRING",
    "TagFilter",
    "compile_tag_filter",
    "read_consumer_offsets",
    "write_consumer_offsets",
]

log = logging.getLogger("rmq_spark.broker")

CONSUMER_OFFSET_FILE = Path("config") / "consumerOffset.json"


# --- filters -----------------------------------------------------------------------------------


class FilterExpressionError(RmqError, ValueError):
    """A subscription expression this broker cannot evaluate."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    """``*`` (or empty): everything; ``a || b``: messages tagged exactly a or b."""

    tags: frozenset[str] | None  # None: every message

    def matches_tags_code(self, code: int) -> bool:
        return self.tags is None or any(tags_code(tag) == code for tag in self.tags)

    def matches(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        return self.tags is None or (tags is not None and tags in self.tags)


def compile_tag_filter(kind: str, expression: str) -> TagFilter:
    """A TAG expression as a filter; SQL92 is refused (``FilterExpressionError``)."""
    if kind != "TAG":
        raise FilterExpressionError(f"{kind} filter expressions are not supported yet")
    text = expression.strip()
    if not text or text == "*":
        return TagFilter(None)
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    if not tags:
        raise FilterExpressionError(f"tag expression {expression!r} names no tag")
    return TagFilter(tags)


# --- group settings ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupSettings:
    retry_max_times: int = 16  # SubscriptionGroupConfig.retryMaxTimes
    fifo: bool = False  # SubscriptionGroupConfig.consumeMessageOrderly


@dataclass
class DefaultGroupSettings:
    """Every group gets RocketMQ's defaults, except the groups named in ``fifo_groups``."""

    fifo_groups: set[str] = field(default_factory=set)

    def get(self, group: str) -> GroupSettings:
        return GroupSettings(fifo=group in self.fifo_groups)


# --- config/consumerOffset.json ----------------------------------------------------------------

# fastjson writes integer map keys unquoted ({0:12}); JSON needs them quoted.
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def read_consumer_offsets(root: Path) -> dict[tuple[str, str], dict[int, int]]:
    """``config/consumerOffset.json``'s offsetTable as ``{(topic, group): {queue: offset}}``."""
    path = Path(root) / CONSUMER_OFFSET_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        table = json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text)).get("offsetTable", {})
        result: dict[tuple[str, str], dict[int, int]] = {}
        for key, queues in table.items():
            topic, sep, group = key.partition("@")
            if not sep:
                raise ValueError(f"key {key!r} is not topic@group")
            result[(topic, group)] = {int(q): int(offset) for q, offset in queues.items()}
        return result
    except (ValueError, AttributeError) as err:
        raise StoreMetadataError(str(path), f"not a consumerOffset.json: {err}") from err


def write_consumer_offsets(
    root: Path, offsets: Mapping[tuple[str, str], Mapping[int, int]]
) -> None:
    """Replace ``config/consumerOffset.json`` atomically, in RocketMQ's layout."""
    path = Path(root) / CONSUMER_OFFSET_FILE
    make_dirs_durably(path.parent)
    table = {
        f"{topic}@{group}": {str(q): offset for q, offset in sorted(queues.items())}
        for (topic, group), queues in sorted(offsets.items())
    }
    data = json.dumps({"offsetTable": table}, indent=1) + "\n"
    write_file_atomically(path, data.encode("utf-8"))


# --- an in-memory ConsumeQueue -----------------------------------------------------------------


@dataclass
class _Queue:
    base: int  # queue offset of units[0]
    units: list[CqUnit] = field(default_factory=list)


class LogTailIndex:
    """A ConsumeQueue in memory, built by reading the CommitLog: the whole readable log on
    first use (in the caller's thread), then each new record a thread sees (it looks every
    ``poll_s``).

    Reads stop at the store's ``confirmed_offset``, so a listed message is durable under
    the store's flush policy.
    """

    def __init__(self, store: Any, poll_s: float = 0.01) -> None:
        self._store = store
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._position = int(store.min_offset)
        self._listeners: list[QueueListener] = []
        self._stop = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _begin(self) -> None:
        """Build the index on first use: a broker nobody consumes from pays nothing."""
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._catch_up()
                thread = threading.Thread(target=self._run, name="consume-index", daemon=True)
                thread.start()
                self._thread = thread

    def min_offset(self, topic: str, queue_id: int) -> int:
        self._begin()
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            return queue.base if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        self._begin()
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            return queue.base + len(queue.units) if queue is not None else 0

    def units(self, topic: str, queue_id: int, start: int, max_count: int) -> list[CqUnit]:
        self._begin()
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            if queue is None or start < queue.base:
                return []
            first = start - queue.base
            return queue.units[first : first + max_count]

    def add_listener(self, listener: QueueListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                grown = self._catch_up()
            except Exception as err:  # a reader thread must not die silently
                log.error("broker error: consume index: %s: %s", type(err).__name__, err)
                continue
            if grown:
                with self._lock:
                    listeners = list(self._listeners)
                for listener in listeners:
                    listener(grown)

    def _catch_up(self) -> set[tuple[str, int]]:
        # Retention may have deleted the segment we were reading: go on from the oldest one.
        self._position = max(self._position, int(self._store.min_offset))
        end = int(self._store.confirmed_offset)
        if end <= self._position:
            return set()
        grown: set[tuple[str, int]] = set()
        for decoded in iter_records(self._store.commitlog, self._position, end, check_crc=False):
            record = decoded.record
            key = (record.topic, record.queue_id)
            unit = CqUnit(
                decoded.position,
                decoded.total_size,
                tags_code(parse_properties(record.properties).get(TAGS)),
            )
            with self._lock:
                queue = self._queues.get(key)
                if queue is None or queue.base + len(queue.units) != record.queue_offset:
                    queue = self._queues[key] = _Queue(record.queue_offset)
                queue.units.append(unit)
                self._position = decoded.next_position
            grown.add(key)
        return grown


STAND_IN_WIRING = ConsumerWiring(
    queue_source=LogTailIndex,
    compile_filter=compile_tag_filter,
    filter_errors=(FilterExpressionError,),
    group_settings=DefaultGroupSettings(),
    read_offsets=read_consumer_offsets,
    write_offsets=write_consumer_offsets,
)
