"""The redelivery job over two stores (one per broker): each store's due delay-level and
timer messages go back into their real topic in the same store, exactly once, with progress
per store, across a run that failed for one store and its restart; continuously too."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from delay_world import START_MS, TEST_LEVELS, make_world

from rmq_spark.broker.config_files.rocketmq_config_files import read_delay_offsets
from rmq_spark.cli import schedule_command
from rmq_spark.clock import ManualClock
from rmq_spark.config import load_config
from rmq_spark.delay.job import ScheduleJobSpec
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.delay.stores import run_schedule_stores, store_specs
from rmq_spark.errors import ConfigError, RedeliveryFailedError

CONFIG = load_config(
    None,
    {
        "store.message_delay_level": TEST_LEVELS,
        "store.segment_size_bytes": str(1 << 20),  # delay_world's stores
        "store.flush_policy": "ASYNC",
    },
)


def _two_stores(tmp_path: Path, clock: ManualClock) -> tuple[Path, Path]:
    """Store 1: levels 1, 2, 3 and a timer; store 2: levels 1, 3 and a timer (closed)."""
    s1, s2 = tmp_path / "s1", tmp_path / "s2"
    for root, levels in ((s1, (1, 2, 3)), (s2, (1, 3))):
        world = make_world(root, clock)
        for level in levels:
            world.put_delayed("orders", f"{root.name}-{level}".encode(), level)
        world.put_timer("orders", f"{root.name}-timer".encode(), START_MS + 1500)
        world.broker.close()
    return s1, s2


def _delivered(root: Path) -> list[bytes]:
    with LogReader(root) as reader:
        return sorted(s.record.body for s in reader.scan(0, {"orders"}))


def test_each_store_gets_its_own_due_messages_once_across_a_run_failed_for_one_store(
    tmp_path: Path,
) -> None:
    clock = ManualClock(START_MS)
    s1, s2 = _two_stores(tmp_path, clock)
    specs = store_specs(ScheduleJobSpec(store_dir=Path(), once=True), [s1, s2])
    clock.advance(2000)  # levels 1 and 2 and both timers are due
    holder = ProgressFiles(s2)
    holder.lock()  # another job runs on store 2: this run fails there, store 1 goes on
    try:
        with pytest.raises(RedeliveryFailedError, match=r"1 of 2 stores failed .*s2"):
            run_schedule_stores(specs, CONFIG, clock=clock)
    finally:
        holder.unlock()
    assert _delivered(s1) == [b"s1-1", b"s1-2", b"s1-timer"]
    assert _delivered(s2) == []

    run_schedule_stores(specs, CONFIG, clock=clock)  # the restart: store 2 catches up
    assert _delivered(s1) == [b"s1-1", b"s1-2", b"s1-timer"]  # nothing twice
    assert _delivered(s2) == [b"s2-1", b"s2-timer"]
    clock.advance(2000)
    run_schedule_stores(specs, CONFIG, clock=clock)
    assert _delivered(s1) == [b"s1-1", b"s1-2", b"s1-3", b"s1-timer"]
    assert _delivered(s2) == [b"s2-1", b"s2-3", b"s2-timer"]
    for root, levels in ((s1, {1: 1, 2: 1, 3: 1}), (s2, {1: 1, 3: 1})):  # each store's own file
        assert read_delay_offsets(root) == levels


def test_a_continuous_run_over_two_stores_delivers_each_once_and_stops_on_request(
    tmp_path: Path,
) -> None:
    clock = ManualClock(START_MS)
    s1, s2 = _two_stores(tmp_path, clock)
    clock.advance(4000)  # everything is due
    spec = ScheduleJobSpec(store_dir=Path(), trigger_interval_ms=20)
    stop = threading.Event()
    job = threading.Thread(
        target=run_schedule_stores,
        args=(store_specs(spec, [s1, s2]), CONFIG),
        kwargs={"clock": clock, "stop": stop},
    )
    job.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(_delivered(s1)), len(_delivered(s2))) != (4, 3):
        time.sleep(0.05)
    stop.set()
    job.join(30)
    assert not job.is_alive()
    assert _delivered(s1) == [b"s1-1", b"s1-2", b"s1-3", b"s1-timer"]
    assert _delivered(s2) == [b"s2-1", b"s2-3", b"s2-timer"]


def test_several_stores_take_no_broker_or_one_per_store(tmp_path: Path) -> None:
    parser = schedule_command.argparse.ArgumentParser()
    schedule_command.add_schedule_arguments(parser)
    args = parser.parse_args(["--store", "a,b", "--store", "c", "--once"])
    specs = schedule_command.specs_from_args(args)
    assert [spec.store_dir.name for spec in specs] == ["a", "b", "c"]
    assert all(spec.once and spec.broker is None for spec in specs)
    args = parser.parse_args(["--store", "a", "--store", "b", "--broker", "h:1"])
    with pytest.raises(ConfigError, match="one --broker per --store"):
        schedule_command.specs_from_args(args)
    with pytest.raises(ConfigError, match="named twice"):
        store_specs(ScheduleJobSpec(store_dir=Path()), [tmp_path, tmp_path])
