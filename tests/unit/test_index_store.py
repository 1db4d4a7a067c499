"""The store's ``index/`` (``index_files.py``, ``index_dispatch.py``, ``index_recovery.py``):
built live from the put path's facts, it is byte for byte what a rebuild from the CommitLog
writes; every key and UNIQ_KEY of every put path is found; files roll with the checkpoint's
``indexMsgTimestamp``; after a crash the files past it are rebuilt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.store.checkpoint import read_checkpoint
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.index_files import INDEX_DIR
from rmq_spark.store.layout import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest

SMALL = {"index_hash_slots": 32, "index_entries": 16, "segment_size_bytes": 1 << 16}
EVER = (0, 1 << 62)


def _put_every_way(store: MessageStore, clock: ManualClock) -> dict[tuple[str, str], set[int]]:
    """Puts through each path; returns the offsets expected under each (topic, key)."""
    expected: dict[tuple[str, str], set[int]] = {}

    def add(topic: str, key: str, offset: int) -> None:
        expected.setdefault((topic, key), set()).add(offset)

    for _ in range(5):  # single template puts
        result = store.put(PutRequest("T", b"single", tags="a"))
        add("T", result.uniq_key, result.physical_offset)
        clock.advance(700)
    for result in store.put_batch([PutRequest("T", b"b%d" % i, tags="b") for i in range(20)]):
        add("T", result.uniq_key, result.physical_offset)  # a template batch
    clock.advance(1500)
    keyed = store.put(PutRequest("U", b"k", keys=("order-1", "ä-😀"), tags="c"))
    for key in (keyed.uniq_key, "order-1", "ä-😀"):
        add("U", key, keyed.physical_offset)
    batch = [PutRequest("U", b"g%d" % i, keys=f"shared g{i}") for i in range(6)]
    for i, result in enumerate(store.put_batch(batch)):  # a general batch
        for key in (result.uniq_key, "shared", f"g{i}"):
            add("U", key, result.physical_offset)
    half = store.put(PutRequest("U", b"p", keys="prepared", sys_flag=TRANSACTION_PREPARED_TYPE))
    add("U", "prepared", half.physical_offset)
    add("U", half.uniq_key, half.physical_offset)
    store.put(PutRequest("U", b"r", keys="rolled-back", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    clock.advance(2000)
    columns = store.put_columns("V", [b"c1", b"c2"], tags="t")
    for offset, uniq in zip(columns.physical_offsets, columns.uniq_keys, strict=True):
        add("V", uniq, offset)
    return expected


def _contents(root: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted((root / INDEX_DIR).iterdir())]


def _found(store: MessageStore, expected: dict[tuple[str, str], set[int]]) -> None:
    index = store._cq.index  # type: ignore[union-attr]
    assert index is not None
    for (topic, key), offsets in expected.items():
        assert set(index.query(topic, key, 64, *EVER)) >= offsets, (topic, key)
    assert index.query("U", "rolled-back", 64, *EVER) == []
    assert index.query("T", "order-1", 64, *EVER) == []  # another topic's key


@pytest.mark.parametrize("policy", [FlushPolicy.ASYNC, FlushPolicy.SYNC])
def test_the_live_index_is_what_a_rebuild_writes(tmp_path: Path, policy: FlushPolicy) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock, flush_policy=policy, **SMALL)
    expected = _put_every_way(store, clock)
    store.close()
    live = _contents(tmp_path)
    assert len(live) >= 3  # 16 entries a file: it rolled
    ends = [int.from_bytes(data[8:16], "big") for data in live]
    assert read_checkpoint(tmp_path).index_msg_timestamp_ms == ends[-2]  # type: ignore[union-attr]
    shutil.rmtree(tmp_path / INDEX_DIR)
    store = open_store(tmp_path, clock, flush_policy=policy, **SMALL)
    try:
        _found(store, expected)
    finally:
        store.close()
    assert _contents(tmp_path) == live


def test_after_a_crash_the_files_past_the_checkpoint_are_rebuilt(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock, **SMALL)
    expected = _put_every_way(store, clock)
    store.abandon()
    live = _contents(tmp_path)
    store = open_store(tmp_path, clock, **SMALL)
    try:
        recovery = store._cq.index_recovery  # type: ignore[union-attr]
        assert recovery is not None and recovery.dropped_files == 1
        _found(store, expected)
    finally:
        store.close()
    assert _contents(tmp_path) == live


def test_a_store_written_without_an_index_gets_one_at_open(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path, clock, message_index=False, **SMALL)
    expected = _put_every_way(store, clock)
    store.close()
    assert not (tmp_path / INDEX_DIR).exists()
    store = open_store(tmp_path, clock, **SMALL)
    try:
        _found(store, expected)
    finally:
        store.close()


def test_an_index_file_of_another_size_is_a_clear_error(tmp_path: Path) -> None:
    from rmq_spark.errors import StoreMetadataError

    store = open_store(tmp_path, **SMALL)
    store.put(PutRequest("T", b"x", keys="k"))
    store.close()
    with pytest.raises(StoreMetadataError, match="store.index_hash_slots = 64"):
        open_store(tmp_path, **{**SMALL, "index_hash_slots": 64})


def test_retention_deletes_the_index_files_of_deleted_records(tmp_path: Path) -> None:
    from store_helpers import put_many

    clock = ManualClock()
    store = open_store(
        tmp_path, clock, file_reserved_time_hours=1, **{**SMALL, "segment_size_bytes": 4096}
    )
    try:
        old = put_many(store, 40, body_size=300)
        clock.advance(2 * 3_600_000)
        recent = put_many(store, 6, body_size=300, start=40)
        assert store.consume_queues.wait_dispatched(store.max_offset, 10)
        index = store._cq.index  # type: ignore[union-attr]
        assert index is not None and len(index.files) == 4  # 15 keys a file
        assert store.delete_expired()
        assert all(f.index.header.end_phy_offset >= store.min_offset for f in index.files[:-1])
        assert len(index.files) < 4 and len(list((tmp_path / INDEX_DIR).iterdir())) == len(
            index.files
        )
        for result in recent:
            assert index.query("TopicTest", result.uniq_key, 64, *EVER) == [result.physical_offset]
        assert index.query("TopicTest", old[0].uniq_key, 64, *EVER) == []
    finally:
        store.close()


def test_a_full_disk_stops_indexing_not_the_consume_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The blocks of an index write are allocated first: ENOSPC there (injected: this
    machine's disk is not full) is an ``OSError`` that ends indexing, never a SIGBUS."""
    import errno

    from rmq_spark.store import index_files

    def full(_fd: int, _offset: int, _length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(index_files, "preallocate", full)
    store = open_store(tmp_path, **SMALL)
    try:
        first = store.put(PutRequest("T", b"x", keys="k"))
        second = store.put_batch([PutRequest("T", b"y", keys="k")])[0]
        assert store.consume_queues.wait_dispatched(store.max_offset, 10)
        units = store.consume_queues.units("T", 0, 0, 10)
        assert [u.physical_offset for u in units] == [first.physical_offset, second.physical_offset]
        assert store._cq.index.query("T", "k", 64, *EVER) == []  # type: ignore[union-attr]
        assert "index: building stopped" in caplog.text
    finally:
        store.close()
