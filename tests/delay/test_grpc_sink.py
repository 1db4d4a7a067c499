"""Redelivery through a broker over gRPC (``--broker``): the broker down, then up."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from delay_world import START_MS, TEST_LEVELS, make_world, store_config

from rmq_spark.broker.embedded import Broker
from rmq_spark.config import load_config
from rmq_spark.delay.job import RedeliveryFailedError, ScheduleJobSpec, run_schedule
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.store.properties import parse_properties


def dead_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once closed


def test_once_with_the_broker_down_fails_clearly_and_marks_nothing_done(tmp_path: Path) -> None:
    root = tmp_path / "store"
    world = make_world(root)
    world.put_delayed("orders", b"a", 1, UNIQ_KEY="UA")
    world.put_timer("orders", b"t", START_MS + 1200)
    clock = world.clock
    world.broker.close()
    clock.advance(2000)
    config = load_config(None, {"store.message_delay_level": TEST_LEVELS})
    spec = ScheduleJobSpec(store_dir=root, broker=dead_address(), once=True)

    with pytest.raises(RedeliveryFailedError, match="broker unreachable"):
        run_schedule(spec, config, clock=clock)

    journal = json.loads((root / "config" / "scheduleJournal.json").read_text())
    assert journal["levels"] == {} and journal["timer"]["low_water"] == 0
    assert journal["intent"] is not None  # settled by the next run
    assert '"offsetTable":{}' in (root / "config" / "delayOffset.json").read_text()

    # The broker comes back: the next run delivers both, once.
    broker = Broker(root, store_config=store_config(root), clock=clock, listen="127.0.0.1:0")
    try:
        spec = ScheduleJobSpec(store_dir=root, broker=broker.address, once=True)
        assert run_schedule(spec, config, clock=clock) == 0
        assert run_schedule(spec, config, clock=clock) == 0
        broker.store.flush()
        with LogReader(root) as reader:
            delivered = [s.record for s in reader.scan(0, {"orders"})]
    finally:
        broker.close()
    assert sorted(r.body for r in delivered) == [b"a", b"t"]
    by_body = {r.body: parse_properties(r.properties) for r in delivered}
    assert by_body[b"a"]["UNIQ_KEY"] == "UA"  # the original message id travels as UNIQ_KEY
    assert all(r.store_timestamp_ms >= START_MS + 1200 for r in delivered)
    journal = json.loads((root / "config" / "scheduleJournal.json").read_text())
    assert journal["intent"] is None and journal["levels"]["1"]["low_water"] == 1
