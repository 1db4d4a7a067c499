"""RocketMQ's ``config/timercheck`` written by the schedule job (rmq_spark/broker/
rocketmq_timercheck.py): where a RocketMQ broker taking over the store resumes its timer, so it
does not deliver again the timer messages the job delivered. The takeover itself, with a real
RocketMQ 5.3.3, is tests/peers/test_rocketmq_takes_over_our_store.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from delay_world import START_MS, DelayWorld

from rmq_spark.broker.config_files.rocketmq_timercheck import (
    TimerCheckpoint,
    read_timer_checkpoint,
    write_timer_checkpoint,
)
from rmq_spark.errors import StoreMetadataError


def test_the_page_has_rocketmqs_layout(tmp_path: Path) -> None:
    assert write_timer_checkpoint(tmp_path, 7, 1_700_000_001_234, 1_700_000_009_000)
    data = (tmp_path / "config" / "timercheck").read_bytes()
    assert len(data) == 4096  # TimerCheckpoint maps one OS page
    # lastReadTimeMs (down to the 1 s slot), lastTimerLogFlushPos, lastTimerQueueOffset,
    # masterTimerQueueOffset, then dataVersion: stateVersion, timestamp, counter
    assert struct.unpack_from(">7q", data) == (1_700_000_001_000, 0, 7, 7, 0, 1_700_000_009_000, 1)
    assert not any(data[56:])


def test_each_write_bumps_the_data_version(tmp_path: Path) -> None:
    write_timer_checkpoint(tmp_path, 1, 5_000, 5_000)
    write_timer_checkpoint(tmp_path, 4, 9_000, 9_000)
    assert read_timer_checkpoint(tmp_path) == TimerCheckpoint(9_000, 0, 4, 4, 0, 9_000, 2)


def test_rocketmqs_own_timer_state_is_left_alone(tmp_path: Path) -> None:
    """A store RocketMQ's timer ran on: its checkpoint describes its timer log."""
    (tmp_path / "timerlog").mkdir()
    (tmp_path / "timerlog" / "00000000000000000000").write_bytes(b"\x00" * 52)
    theirs = struct.pack(">7q", 5_000, 104, 3, 3, 0, 5_000, 9) + bytes(4096 - 56)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "timercheck").write_bytes(theirs)
    assert not write_timer_checkpoint(tmp_path, 1, 9_000, 9_000)
    assert (tmp_path / "config" / "timercheck").read_bytes() == theirs


def test_a_short_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "timercheck").write_bytes(b"\x00" * 20)
    with pytest.raises(StoreMetadataError, match="timercheck.*20 bytes"):
        read_timer_checkpoint(tmp_path)


def test_the_job_records_the_timer_queues_low_water_mark(world: DelayWorld) -> None:
    world.put_timer("orders", b"first", START_MS + 1000)
    world.put_timer("orders", b"third", START_MS + 3000)
    world.put_timer("orders", b"second", START_MS + 2000)
    redeliverer = world.redeliverer()
    world.clock.advance(2000)
    redeliverer.run_pass()
    redeliverer.close()
    # offsets 0 and 2 delivered, 1 not yet: RocketMQ resumes at 1 (and delivers 2 again,
    # at least once), never past a message nobody delivered
    values = read_timer_checkpoint(world.root)
    assert values is not None
    assert (values.last_timer_queue_offset, values.master_timer_queue_offset) == (1, 1)
    assert values.last_read_time_ms == START_MS + 2000


def test_no_timercheck_when_the_job_leaves_timers_alone(world: DelayWorld) -> None:
    world.put_timer("orders", b"x", START_MS + 1000)
    redeliverer = world.redeliverer(timer_enabled=False)
    world.clock.advance(1000)
    redeliverer.run_pass()
    redeliverer.close()
    assert read_timer_checkpoint(world.root) is None
