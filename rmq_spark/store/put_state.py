"""PURE: the put path's state that recovery rebuilds: the next queue offset of every (topic,
queue id) and the idempotency window of recent UNIQ_KEYs.

The appender updates both under the put lock; recovery (``recovery.py``) rebuilds them from
the log and the queue-offset snapshot. Neither knows how a record is encoded or written.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
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


class _Block:
    """One batch's generated UNIQ_KEYs (``head`` then 4 hex digits of consecutive 16-bit
    counters from ``first``) and their entries as the writer's columns; ``start``: how many
    of its oldest were evicted."""

    __slots__ = ("topic", "head", "first", "keys", "offsets", "sizes", "queue_offsets",
                 "queue_ids", "now", "start")  # fmt: skip

    def __init__(
        self, topic: str, head: str, keys: list[str], columns: Sequence[Sequence[int]], now: int
    ) -> None:
        self.topic, self.head, self.keys, self.now, self.start = topic, head, keys, now, 0
        self.first = int(keys[0][-4:], 16)
        self.offsets, self.sizes, self.queue_offsets, self.queue_ids = columns

    def index(self, uniq_key: str) -> int:
        """Where ``uniq_key`` is among the live keys, else -1."""
        try:
            index = (int(uniq_key[-4:], 16) - self.first) & 0xFFFF
        except ValueError:
            return -1
        keys = self.keys
        return index if self.start <= index < len(keys) and keys[index] == uniq_key else -1

    def live(self) -> range:
        """The 16-bit counters of the live keys, as (unwrapped) integers."""
        return range(self.first + self.start, self.first + len(self.keys))

    def entry(self, index: int) -> tuple[int, int, int, int, int]:
        return (self.offsets[index], self.sizes[index], self.queue_offsets[index],
                self.queue_ids[index], self.now)  # fmt: skip


class IdempotencyWindow:
    """The last ``capacity`` (stored topic, UNIQ_KEY) pairs and where they were stored.

    A pair added alone (``add``: recovery, the general path, copies) is a plain tuple in one
    dict per topic keyed by UNIQ_KEY; a batch of keys the store generated (``add_block``:
    one head, consecutive counters) is one ``_Block`` holding the writer's columns, found by
    (topic, head): no dict entry or tuple per message. ``runs`` keeps both in the order they
    were added, oldest first, and eviction takes from its left, a block's keys one by one.
    A key is never held twice (a block that could repeat a held key is added key by key), so
    a lookup finds at most one entry, the first copy. A block is checked against the lone
    keys of its topic, if there are any: a batch writer that also takes single puts of the
    same topic pays a dict lookup per key.
    """

    __slots__ = ("capacity", "topics", "blocks", "runs", "size")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.topics: dict[str, dict[str, tuple[int, int, int, int, int]]] = {}
        self.blocks: dict[tuple[str, str], list[_Block]] = {}
        self.runs: deque[_Block | tuple[str, str]] = deque()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def get(self, topic: str, uniq_key: str) -> WindowEntry | None:
        keys = self.topics.get(topic)
        entry = None if keys is None else keys.get(uniq_key)
        if entry is None and self.blocks:
            entry = self._in_blocks(topic, uniq_key)
        return None if entry is None else WindowEntry._make(entry)

    def _in_blocks(self, topic: str, uniq_key: str) -> tuple[int, int, int, int, int] | None:
        for block in self.blocks.get((topic, uniq_key[:-4]), ()):
            index = block.index(uniq_key)
            if index >= 0:
                return block.entry(index)
        return None

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
        if self.blocks and self._in_blocks(topic, uniq_key) is not None:
            return
        keys[uniq_key] = entry
        self.runs.append((topic, uniq_key))
        self.size += 1
        if self.size > self.capacity:
            self._evict(self.size - self.capacity)

    def add_block(
        self,
        topic: str,
        uniq_keys: list[str],
        columns: Sequence[Sequence[int]],
        now: int,
    ) -> None:
        """``add`` of each key of a batch the store generated (``uniq_keys``: one head,
        consecutive counters, at most 65536; ``columns``: their physical offsets, sizes,
        queue offsets and queue ids, kept, not copied; store timestamp ``now``)."""
        count = len(uniq_keys)
        if self.capacity <= 0 or not count:
            return
        head = uniq_keys[0][:-4]
        block = _Block(topic, head, uniq_keys, columns, now)
        if self._may_repeat(block):
            for index in range(count):
                self.add(topic, uniq_keys[index], block.entry(index))
            return
        self.blocks.setdefault((topic, head), []).append(block)
        self.runs.append(block)
        self.size += count
        if self.size > self.capacity:
            self._evict(self.size - self.capacity)

    def _may_repeat(self, block: _Block) -> bool:
        """Whether ``block`` might hold a key already held (then it is added key by key)."""
        keys = block.keys
        last = f"{block.head}{(block.first + len(keys) - 1) & 0xFFFF:04X}"
        if len(keys) > 1 << 16 or keys[-1] != last:
            return True
        lone = self.topics.get(block.topic)
        if lone and not lone.keys().isdisjoint(keys):
            return True
        span = block.live()
        for other in self.blocks.get((block.topic, block.head), ()):
            live = other.live()
            for shift in (-(1 << 16), 0, 1 << 16):  # counters wrap at 16 bits
                if live.start + shift < span.stop and span.start < live.stop + shift:
                    return True
        return False

    def _evict(self, count: int) -> None:
        """Forget the ``count`` oldest pairs."""
        runs = self.runs
        self.size -= count
        while count:
            run = runs[0]
            if type(run) is tuple:
                keys = self.topics[run[0]]
                del keys[run[1]]
                if not keys:
                    del self.topics[run[0]]
                runs.popleft()
                count -= 1
                continue
            assert isinstance(run, _Block)
            taken = min(count, len(run.keys) - run.start)
            run.start += taken
            count -= taken
            if run.start == len(run.keys):
                runs.popleft()
                same = self.blocks[(run.topic, run.head)]
                same.remove(run)
                if not same:
                    del self.blocks[(run.topic, run.head)]

    def start_offset(self, default: int) -> int:
        """Physical offset of the oldest record in the window (``default`` if empty)."""
        if not self.runs:
            return default
        run = self.runs[0]
        if isinstance(run, tuple):
            return self.topics[run[0]][run[1]][0]
        return run.offsets[run.start]
