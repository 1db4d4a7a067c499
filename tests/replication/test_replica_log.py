"""The store's raw-append path of a slave (``store/replica_log.py``): the master's bytes, in
arbitrary chunks (records split across chunks, BLANKs, untouched tails), give byte-identical
segments, the same queue offsets and a ConsumeQueue rebuilt from the records; a gap, a
diverged log and a corrupt record are refused with a one-line error."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.replica_log import ReplicaRefusedError


def stream(master: MessageStore, start: int, chunk_max: int, rng: random.Random):
    """(offset, bytes) chunks as a master sends them: never across a file boundary."""
    size = master.commitlog.segment_size_bytes
    offset, end = start, master.max_offset
    while offset < end:
        room = min(end, offset - offset % size + size) - offset
        n = min(room, rng.randint(1, chunk_max))
        yield offset, master.commitlog.read(offset, n)
        offset += n


def replicate(master: MessageStore, slave: MessageStore, seed: int, chunk_max: int = 700):
    log = slave.replica_log()
    start = log.start()
    for offset, data in stream(master, start, chunk_max, random.Random(seed)):
        log.feed(offset, data)
    slave.flush()


def test_chunks_give_identical_segments_offsets_and_queue(tmp_path: Path) -> None:
    with open_store(tmp_path / "m") as master, open_store(tmp_path / "s") as slave:
        put_many(master, 90, body_size=150, queue_id=1)  # ~3 segments of 4 KiB
        replicate(master, slave, seed=1)
        assert slave.max_offset == master.max_offset
        assert slave.queue_offset("TopicTest", 1) == 90
        put_many(master, 20, body_size=90, queue_id=1, start=90)  # resumes from its last record
        replicate(master, slave, seed=2)
        master.flush()
        mine = [p.read_bytes() for p in segment_paths(tmp_path / "m")]
        theirs = [p.read_bytes() for p in segment_paths(tmp_path / "s")]
        assert [p.name for p in segment_paths(tmp_path / "s")] == [
            p.name for p in segment_paths(tmp_path / "m")
        ]
        assert theirs == mine
        assert slave.read(0).body == master.read(0).body
        slave.flush()
        units = _wait_units(slave, 110)
        assert [u.physical_offset for u in units] == [
            u.physical_offset for u in master.consume_queues.units("TopicTest", 1, 0, 200)
        ]


def _wait_units(store: MessageStore, count: int):
    import time

    for _ in range(200):
        units = store.consume_queues.units("TopicTest", 1, 0, 200)
        if len(units) >= count:
            return units
        time.sleep(0.02)
    raise AssertionError(f"ConsumeQueue has {len(units)} units, wanted {count}")


def test_diverged_slave_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path / "m") as master, open_store(tmp_path / "s") as slave:
        put_many(master, 5, queue_id=0)
        put_many(slave, 5, queue_id=0, start=100)  # same sizes, different bytes
        with pytest.raises(ReplicaRefusedError, match="diverged: the master's byte at offset"):
            replicate(master, slave, seed=3)


def test_gap_and_corrupt_record_are_refused(tmp_path: Path) -> None:
    with open_store(tmp_path / "m") as master, open_store(tmp_path / "s") as slave:
        results = put_many(master, 3, queue_id=0)
        log = slave.replica_log()
        assert log.start() == 0
        with pytest.raises(ReplicaRefusedError, match="log starts at offset 10, not 0"):
            log.feed(10, b"x")
        log.start()
        data = bytearray(master.commitlog.read(0, master.max_offset))
        data[results[1].physical_offset + 60] ^= 0xFF  # inside the second record
        with pytest.raises(ReplicaRefusedError, match="corrupt record.*00000000000000000000"):
            log.feed(0, bytes(data))
