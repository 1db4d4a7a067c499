from __future__ import annotations

import struct
from pathlib import Path

from rmq_spark.store.checkpoint import (
    Checkpoint,
    CheckpointValues,
    QueueOffsetSnapshot,
    read_checkpoint,
    read_snapshot,
    write_snapshot,
)
from rmq_spark.store.fileio import OsOpener


def test_new_checkpoint_is_4096_zero_bytes(tmp_path: Path) -> None:
    checkpoint = Checkpoint.open(tmp_path, OsOpener())
    checkpoint.close()
    assert (tmp_path / "checkpoint").read_bytes() == bytes(4096)
    assert read_checkpoint(tmp_path) == CheckpointValues()


def test_published_offsets_land_at_rocketmq_positions_big_endian(tmp_path: Path) -> None:
    checkpoint = Checkpoint.open(tmp_path, OsOpener())
    checkpoint.publish_flushed(1234, 1_700_000_000_123)
    checkpoint.publish_confirmed(5678)
    checkpoint.close()
    data = (tmp_path / "checkpoint").read_bytes()
    assert len(data) == 4096
    physic, logics, index, flushed, confirm = struct.unpack(">qqqqq", data[:40])
    assert (physic, logics, index, flushed, confirm) == (1_700_000_000_123, 0, 0, 1234, 5678)
    assert data[40:] == bytes(4056)


def test_fields_owned_by_others_are_kept(tmp_path: Path) -> None:
    data = bytearray(4096)
    struct.pack_into(">qq", data, 8, 111, 222)  # logics and index timestamps
    (tmp_path / "checkpoint").write_bytes(bytes(data))
    checkpoint = Checkpoint.open(tmp_path, OsOpener())
    checkpoint.publish_confirmed(99)
    checkpoint.close()
    values = read_checkpoint(tmp_path)
    assert values is not None
    assert (values.logics_msg_timestamp_ms, values.index_msg_timestamp_ms) == (111, 222)
    assert values.confirm_phy_offset == 99


def test_read_checkpoint_of_a_store_without_one_is_none(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path) is None


def test_snapshot_round_trips(tmp_path: Path) -> None:
    snapshot = QueueOffsetSnapshot(
        physical_offset=4096,
        last_record_offset=3900,
        window_start_offset=100,
        queue_offsets={("TopicA", 0): 7, ("%RETRY%g", 3): 1},
    )
    write_snapshot(tmp_path, snapshot)
    assert read_snapshot(tmp_path) == snapshot
    assert not list(tmp_path.glob("*.tmp"))


def test_a_damaged_snapshot_is_ignored(tmp_path: Path) -> None:
    write_snapshot(tmp_path, QueueOffsetSnapshot(10, queue_offsets={("T", 0): 5}))
    path = tmp_path / "queue_offsets.json"
    path.write_text(path.read_text().replace("0, 5]", "0, 6]"))
    assert read_snapshot(tmp_path) is None
    path.write_text("{not json")
    assert read_snapshot(tmp_path) is None
