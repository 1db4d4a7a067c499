"""Columnar puts (``MessageStore.put_columns``/``put_arrow``) store the bytes ``put_batch``
stores for the same messages, with the same rules; the batch writer's bulk window update is
``IdempotencyWindow.add`` of each entry."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.config import IoMode
from rmq_spark.store.fileio import FaultPlan, FaultyFile, FileKind, OsOpener, SegmentFile
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutStatus
from rmq_spark.store.put_state import IdempotencyWindow

_START = 1_700_000_000_000


def _pair(tmp_path: Path, **overrides: object) -> tuple[ManualClock, MessageStore, MessageStore]:
    """Two stores on one clock, opened at the same instant: the same UNIQ_KEYs in order."""
    clock = ManualClock(_START)
    overrides.setdefault("segment_size_bytes", 1 << 20)
    first = open_store(tmp_path / "batch", clock=clock, **overrides)
    second = open_store(tmp_path / "columns", clock=clock, **overrides)
    return clock, first, second


def _log(store: MessageStore) -> bytes:
    return store.commitlog.read(store.min_offset, store.max_offset - store.min_offset)


def _messages(seed: int, count: int) -> list[PutRequest]:
    rng = random.Random(seed)
    return [
        PutRequest(
            rng.choice(["TopicA", "B", "%RETRY%g"]),
            rng.randbytes(rng.choice([0, 1, 100, 333])),
            queue_id=rng.choice([0, 1, 7]),
            tags=rng.choice([None, "TagA", "étiquette"]),
            born_timestamp_ms=rng.choice([None, 0, 1_600_000_000_000, -5]),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("uniform", [True, False])
def test_put_columns_stores_the_bytes_put_batch_stores(tmp_path: Path, uniform: bool) -> None:
    clock, batch_store, column_store = _pair(tmp_path)
    general: list[object] = []
    column_store._appender.append_batch = general.append  # type: ignore[method-assign,assignment]
    messages = _messages(seed=5, count=300)
    if uniform:
        messages = [PutRequest("TopicA", m.body[:1].ljust(50), m.queue_id) for m in messages]
    for start in range(0, len(messages), 37):
        chunk = messages[start : start + 37]
        clock.advance(1)
        results = batch_store.put_batch(chunk)
        receipt = column_store.put_columns(
            [m.topic for m in chunk],
            [m.body for m in chunk],
            [m.queue_id for m in chunk],
            tags=[m.tags for m in chunk],
            born_timestamp_ms=[m.born_timestamp_ms for m in chunk],
        )
        assert receipt.ok, receipt.detail
        assert receipt.physical_offsets == [r.physical_offset for r in results]
        assert receipt.queue_offsets == [r.queue_offset for r in results]
        assert receipt.uniq_keys == [r.uniq_key for r in results]
        assert receipt.sizes == [r.total_size for r in results]
        assert receipt.store_timestamp_ms == clock.now_ms()
    assert _log(column_store) == _log(batch_store)
    assert column_store.queue_offsets() == batch_store.queue_offsets()
    assert general == []  # the packed writer took every batch


def test_put_arrow_and_properties_store_what_put_batch_stores(tmp_path: Path) -> None:
    """An Arrow table with a properties map column: properties take the general path."""
    clock, batch_store, column_store = _pair(tmp_path)
    bodies = [b"a", b"bb", b""]
    props = [{"user": "1"}, None, {"k": "v", "TAGS": "T2"}]
    table = pa.table(
        {
            "topic": ["TopicA", "TopicA", "TopicB"],
            "body": pa.array(bodies, pa.binary()),
            "queue_id": pa.array([0, 3, 1], pa.int32()),
            "tags": ["TagA", None, None],
            "properties": pa.array(
                [None if p is None else list(p.items()) for p in props],
                pa.map_(pa.string(), pa.string()),
            ),
        }
    )
    requests = [
        PutRequest("TopicA", b"a", 0, properties={"user": "1"}, tags="TagA"),
        PutRequest("TopicA", b"bb", 3),
        PutRequest("TopicB", b"", 1, properties={"k": "v", "TAGS": "T2"}),
    ]
    assert all(r.ok for r in batch_store.put_batch(requests))
    receipt = column_store.put_arrow(table)
    assert receipt.ok, receipt.detail
    clock.advance(1)
    plain = table.drop_columns(["properties"])
    assert column_store.put_arrow(plain).ok
    again = [PutRequest("TopicA", b"a", 0, tags="TagA"), requests[1], PutRequest("TopicB", b"", 1)]
    assert all(r.ok for r in batch_store.put_batch(again))
    assert _log(column_store) == _log(batch_store)


@pytest.mark.parametrize(
    ("column", "value", "status", "reason"),
    [
        ("topic", "bad topic", PutStatus.MESSAGE_ILLEGAL, "characters"),
        ("queue_id", -1, PutStatus.MESSAGE_ILLEGAL, "queue id"),
        ("queue_id", True, PutStatus.MESSAGE_ILLEGAL, "queue id"),
        ("body", "text", PutStatus.MESSAGE_ILLEGAL, "body must be bytes"),
        ("body", b"x" * 5000, PutStatus.MESSAGE_ILLEGAL, "max_message_size_bytes"),
        ("tags", "a\x02b", PutStatus.MESSAGE_ILLEGAL, "TAGS"),
        ("born_timestamp_ms", 1.5, PutStatus.MESSAGE_ILLEGAL, "born_timestamp_ms"),
        ("properties", {"k": "x" * 40_000}, PutStatus.PROPERTIES_SIZE_EXCEEDED, "properties"),
    ],
)
def test_an_illegal_message_sinks_the_whole_columnar_batch(
    tmp_path: Path, column: str, value: object, status: PutStatus, reason: str
) -> None:
    store = open_store(tmp_path, max_message_size_bytes=4096)
    columns: dict[str, list[object]] = {
        "topic": ["T"] * 4,
        "body": [b"ok"] * 4,
        "queue_id": [0] * 4,
        "tags": [None] * 4,
        "born_timestamp_ms": [None] * 4,
        "properties": [None] * 4,
    }
    columns[column][2] = value
    before = store.max_offset
    receipt = store.put_columns(
        columns["topic"],  # type: ignore[arg-type]
        columns["body"],  # type: ignore[arg-type]
        columns["queue_id"],  # type: ignore[arg-type]
        tags=columns["tags"],  # type: ignore[arg-type]
        born_timestamp_ms=columns["born_timestamp_ms"],  # type: ignore[arg-type]
        properties=columns["properties"],  # type: ignore[arg-type]
    )
    assert receipt.status is status
    assert "message #2" in receipt.detail and reason in receipt.detail
    assert receipt.physical_offsets == [] and store.max_offset == before
    assert store.queue_offset("T", 0) == 0


def test_columns_of_different_lengths_are_refused_naming_the_column(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(InvalidMessageError, match="queue_id: 2 values for 3 bodies"):
        store.put_columns("T", [b"a", b"b", b"c"], [0, 1])


def test_columnar_puts_fill_the_idempotency_window(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    receipt = store.put_columns("T", [b"a", b"b"], 1)
    key = receipt.uniq_keys[1]
    assert key is not None
    again = store.put(PutRequest("T", b"b", 1, properties={"UNIQ_KEY": key}, idempotent=True))
    assert again.duplicate and again.physical_offset == receipt.physical_offsets[1]


class _ReferenceWindow:
    """The window's rules, one pair at a time: the first copy stays, the oldest goes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: dict[tuple[str, str], tuple[int, int, int, int, int]] = {}
        self.ring: list[tuple[str, str]] = []
        self.position = 0

    def add(self, topic: str, key: str, entry: tuple[int, int, int, int, int]) -> None:
        if (topic, key) in self.entries or self.capacity <= 0:
            return
        self.entries[(topic, key)] = entry
        if len(self.ring) < self.capacity:
            self.ring.append((topic, key))
            return
        del self.entries[self.ring[self.position]]
        self.ring[self.position] = (topic, key)
        self.position = (self.position + 1) % self.capacity

    def oldest(self) -> int | None:
        return self.entries[self.ring[self.position]][0] if self.ring else None


def test_window_blocks_follow_the_rules_of_one_pair_at_a_time() -> None:
    """Blocks of generated keys (overlapping counters, wrapping at 16 bits, heads shared
    with lone keys) and lone adds, against the reference, over many random rounds."""
    rng = random.Random(9)
    heads = ["7F00000100002A9F1234ABCD0000000" + c for c in "AB"]
    for capacity in (0, 1, 5, 64, 300):
        window, reference = IdempotencyWindow(capacity), _ReferenceWindow(capacity)
        seen: set[tuple[str, str]] = set()
        for round_ in range(150):
            topic, head = rng.choice(["T", "U"]), rng.choice(heads)
            if rng.random() < 0.6:
                count, first = (
                    rng.choice([1, 3, 70, 400]),
                    rng.choice([0, 65_530, rng.randrange(1 << 16)]),
                )
                keys = [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(count)]
                columns = [list(range(round_ * 1000, round_ * 1000 + count))] + [
                    [rng.randrange(9) for _ in range(count)] for _ in range(3)
                ]
                window.add_block(topic, keys, columns, round_)
                for i, key in enumerate(keys):
                    reference.add(topic, key, tuple(c[i] for c in columns) + (round_,))  # type: ignore[arg-type]
            else:
                keys = [
                    rng.choice([f"{head}{rng.randrange(1 << 16):04X}", f"k{rng.randrange(50)}"])
                ]
                entry = (round_ * 1000, 1, 2, 3, round_)
                window.add(topic, keys[0], entry)
                reference.add(topic, keys[0], entry)
            seen.update((topic, key) for key in keys)
            assert len(window) == len(reference.entries)
            assert window.start_offset(-1) == (reference.oldest() if reference.ring else -1)
            for pair in rng.sample(sorted(seen), min(len(seen), 200)):
                expected = reference.entries.get(pair)
                found = window.get(*pair)
                assert (None if found is None else tuple(found)) == expected, pair


def test_put_arrow_keeps_a_null_queue_id_a_null_not_a_nan(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "queue_id": [1, None]})
    receipt = store.put_arrow(table)
    assert receipt.status is PutStatus.MESSAGE_ILLEGAL
    assert "message #1" in receipt.detail and "got None" in receipt.detail
    missing = pa.table({"topic": ["T"]})
    with pytest.raises(InvalidMessageError, match="body: no 'body' column"):
        store.put_arrow(missing)


class _MappedFaultyFile(FaultyFile):
    """A memory-mapped segment that fails its next ``write_through`` (a batch's pwrite)."""

    @property
    def mapping(self) -> object:
        return self._inner.mapping  # type: ignore[attr-defined]


class _MappedFaultyOpener:
    def __init__(self) -> None:
        self._inner = OsOpener(IoMode.MMAP)
        self.plan = FaultPlan(fail_at="append", times=0)

    def open(self, path: Path, kind: FileKind, *, read_only: bool = False) -> SegmentFile:
        return self._wrap(self._inner.open(path, kind, read_only=read_only), kind)

    def create(self, path: Path, size_bytes: int, kind: FileKind) -> SegmentFile:
        return self._wrap(self._inner.create(path, size_bytes, kind), kind)

    def _wrap(self, file: SegmentFile, kind: FileKind) -> SegmentFile:
        return _MappedFaultyFile(file, self.plan) if kind is FileKind.SEGMENT else file


def test_a_failed_batch_write_into_a_mapped_segment_stores_nothing(tmp_path: Path) -> None:
    """A batch of 4 KiB or more goes through the descriptor of a memory-mapped segment: when
    that write fails, no message of the batch is stored and the next batch goes where it
    would have gone."""
    opener = _MappedFaultyOpener()
    store = open_store(tmp_path, opener=opener, segment_size_bytes=1 << 20)  # type: ignore[arg-type]
    assert store.commitlog.active is None or store.commitlog.active.mapping is not None
    first = store.put_batch([PutRequest("T", b"a" * 100) for _ in range(3)])  # under 4 KiB
    assert all(r.ok for r in first) and opener.plan.failures == 0
    end = store.max_offset
    opener.plan.times = 1
    failed = store.put_batch([PutRequest("T", b"b" * 100) for _ in range(64)])
    assert opener.plan.failures == 1
    assert {r.status for r in failed} == {PutStatus.UNKNOWN_ERROR}
    assert store.max_offset == end and store.queue_offset("T", 0) == 3
    again = store.put_batch([PutRequest("T", b"c" * 100) for _ in range(64)])
    assert all(r.ok for r in again) and again[0].physical_offset == end
    assert store.read(again[-1].physical_offset).body == b"c" * 100
    store.close()
