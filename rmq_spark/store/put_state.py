"""PURE: the put path's state that recovery rebuilds: the next queue offset of every (topic,
queue id) and the idempotency window of recent UNIQ_KEYs.

The appender updates both under the put lock; recovery (``recovery.py``) rebuilds them from
the log and the queue-offset snapshot. Neither knows how a record is encoded or written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["IdempotencyWindow", "QueueOffsetTable", "WindowEntry"]


# --- queue offsets ----------------------------------------------------------------------------


class QueueOffsetTable:
    """Next queue offset of every (topic, queue id): RocketMQ's ``topicQueueTable``."""

    __slots__ = ("offsets",)

    def __init__(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        self.offsets: dict[tuple[str, int], int] = dict(offsets or {})

    def next_offset(self, topic: str, queue_id: int) -> int:
        return self.offsets.get((topic, queue_id), 0)

    def observe(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Recovery: a stored record used ``queue_offset``; the next one is after it."""
        key = (topic, queue_id)
        if queue_offset + 1 > self.offsets.get(key, 0):
            self.offsets[key] = queue_offset + 1

    def copy(self) -> dict[tuple[str, int], int]:
        return dict(self.offsets)


# --- idempotency window -----------------------------------------------------------------------


class WindowEntry(NamedTuple):
    """Where the first copy of an idempotent message was stored."""

    physical_offset: int
    total_size: int
    queue_offset: int
    queue_id: int
    store_timestamp_ms: int


class IdempotencyWindow:
    """The last ``capacity`` (stored topic, UNIQ_KEY) pairs and where they were stored.

    Entries are kept as plain tuples (cheaper on the put path) and handed out as
    ``WindowEntry``. ``entries`` is a plain dict; ``ring`` holds its keys in the order they
    were added (it grows to ``capacity``, then wraps), ``position`` is the slot of the oldest
    once it is full. A dict plus a ring cost about a third less per put than the
    ``OrderedDict`` evicting its first item that this replaced (bench_put.py).
    """

    __slots__ = ("capacity", "entries", "ring", "position")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: dict[tuple[str, str], tuple[int, int, int, int, int]] = {}
        self.ring: list[tuple[str, str]] = []
        self.position = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, topic: str, uniq_key: str) -> WindowEntry | None:
        entry = self.entries.get((topic, uniq_key))
        return None if entry is None else WindowEntry._make(entry)

    def add(self, topic: str, uniq_key: str, entry: tuple[int, int, int, int, int]) -> None:
        """Remember ``entry`` = (physical_offset, total_size, queue_offset, queue_id,
        store_timestamp_ms) unless the key is already known (the first copy stays)."""
        entries = self.entries
        key = (topic, uniq_key)
        if key in entries or self.capacity <= 0:
            return
        entries[key] = entry
        ring = self.ring
        if len(ring) < self.capacity:
            ring.append(key)
            return
        position = self.position
        del entries[ring[position]]
        ring[position] = key
        position += 1
        self.position = 0 if position == self.capacity else position

    def add_many(
        self, keys: list[tuple[str, str]], entries: list[tuple[int, int, int, int, int]]
    ) -> None:
        """``add`` of each (key, entry) pair in order, with one dict update and one ring
        splice when the keys are new and distinct (a batch's generated UNIQ_KEYs)."""
        capacity = self.capacity
        table = self.entries
        count = len(keys)
        if capacity <= 0 or not count:
            return
        if count > capacity or len(set(keys)) != count or not table.keys().isdisjoint(keys):
            for key, entry in zip(keys, entries, strict=True):
                self.add(*key, entry)
            return
        table.update(zip(keys, entries, strict=True))
        ring = self.ring
        room = capacity - len(ring)
        if room > 0:
            ring.extend(keys[:room])
            keys = keys[room:]
        position = self.position
        while keys:  # evict the oldest, in ring order (the ring is full here)
            take = keys[: capacity - position]
            evicted = ring[position : position + len(take)]
            for key in evicted:
                del table[key]
            ring[position : position + len(take)] = take
            keys = keys[len(take) :]
            position = (position + len(take)) % capacity
        self.position = position

    def start_offset(self, default: int) -> int:
        """Physical offset of the oldest record in the window (``default`` if empty)."""
        if not self.ring:
            return default
        return self.entries[self.ring[self.position]][0]
