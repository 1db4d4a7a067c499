"""PURE: the put path's state that recovery rebuilds: the next queue offset of every (topic,
queue id) and the idempotency window of recent UNIQ_KEYs.

The appender updates both under the put lock; recovery (``recovery.py``) rebuilds them from
the log and the queue-offset snapshot. Neither knows how a record is encoded or written.
"""

from __future__ import annotations

from collections import deque
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
    ``WindowEntry``, in one dict per topic keyed by UNIQ_KEY (a batch of one topic is one
    ``dict.update`` whose keys hash once, as strings; (topic, key) tuples would hash on every
    lookup). ``ring_topics``/``ring_keys`` hold the pairs in the order they were added (they
    grow to ``capacity``, then wrap), ``position`` is the slot of the oldest once full.
    """

    __slots__ = ("capacity", "topics", "ring_topics", "ring_keys", "position")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.topics: dict[str, dict[str, tuple[int, int, int, int, int]]] = {}
        self.ring_topics: list[str] = []
        self.ring_keys: list[str] = []
        self.position = 0

    def __len__(self) -> int:
        return len(self.ring_keys)

    def get(self, topic: str, uniq_key: str) -> WindowEntry | None:
        keys = self.topics.get(topic)
        entry = None if keys is None else keys.get(uniq_key)
        return None if entry is None else WindowEntry._make(entry)

    def add(self, topic: str, uniq_key: str, entry: tuple[int, int, int, int, int]) -> None:
        """Remember ``entry`` = (physical_offset, total_size, queue_offset, queue_id,
        store_timestamp_ms) unless the key is already known (the first copy stays)."""
        if self.capacity <= 0:
            return
        keys = self.topics.get(topic)
        if keys is None:
            keys = self.topics[topic] = {}
        elif uniq_key in keys:
            return
        keys[uniq_key] = entry
        if len(self.ring_keys) < self.capacity:
            self.ring_topics.append(topic)
            self.ring_keys.append(uniq_key)
            return
        position = self.position
        self._evict(self.ring_topics[position : position + 1], [self.ring_keys[position]])
        self.ring_topics[position] = topic
        self.ring_keys[position] = uniq_key
        position += 1
        self.position = 0 if position == self.capacity else position

    def add_many(
        self,
        topic: str,
        uniq_keys: list[str],
        entries: list[tuple[int, int, int, int, int]],
        distinct: bool = False,
    ) -> None:
        """``add`` of each (``topic``, key, entry) in order, with one dict update and one ring
        splice when the keys are new and distinct (a batch's generated UNIQ_KEYs);
        ``distinct``: the caller knows ``uniq_keys`` holds no key twice."""
        capacity = self.capacity
        count = len(uniq_keys)
        if capacity <= 0 or not count:
            return
        keys = self.topics.get(topic)
        if keys is None:
            keys = self.topics[topic] = {}
        if (
            count > capacity
            or len(set(uniq_keys)) != count
            or not keys.keys().isdisjoint(uniq_keys)
        ):
            for uniq_key, entry in zip(uniq_keys, entries, strict=True):
                self.add(topic, uniq_key, entry)
            return
        keys.update(zip(uniq_keys, entries, strict=True))
        ring_topics, ring_keys = self.ring_topics, self.ring_keys
        room = capacity - len(ring_keys)
        if room > 0:
            ring_keys.extend(uniq_keys[:room])
            ring_topics.extend([topic] * min(room, count))
            uniq_keys = uniq_keys[room:]
        position = self.position
        while uniq_keys:  # evict the oldest, in ring order (the ring is full here)
            take = uniq_keys[: capacity - position]
            end = position + len(take)
            self._evict(ring_topics[position:end], ring_keys[position:end])
            ring_keys[position:end] = take
            ring_topics[position:end] = [topic] * len(take)
            uniq_keys = uniq_keys[len(take) :]
            position = end % capacity
        self.position = position

    def _evict(self, topics: list[str], uniq_keys: list[str]) -> None:
        """Forget these pairs (all in the window); drop a topic left with none."""
        first = topics[0]
        if topics.count(first) == len(topics):
            keys = self.topics[first]
            deque(map(keys.__delitem__, uniq_keys), maxlen=0)
            if not keys:
                del self.topics[first]
            return
        for topic, uniq_key in zip(topics, uniq_keys, strict=True):
            self._evict([topic], [uniq_key])

    def start_offset(self, default: int) -> int:
        """Physical offset of the oldest record in the window (``default`` if empty)."""
        if not self.ring_keys:
            return default
        position = self.position
        return self.topics[self.ring_topics[position]][self.ring_keys[position]][0]
