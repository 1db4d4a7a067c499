"""With Spark, two stores: the reput job indexes both stores' schedule topics into one
consume_queue table (a ``store`` column), and each store's redelivery job takes its entries
from that table, only its own store's rows, back into the same store, once."""

from __future__ import annotations

from pathlib import Path

import pytest
from delay_world import START_MS, TEST_LEVELS, DelayWorld, make_world

from rmq_spark.clock import ManualClock
from rmq_spark.delay.config import DelayConfig, EntrySourceKind
from rmq_spark.delay.job import open_redeliverer, run_once
from rmq_spark.delay.sink import StoreSink
from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.delay_levels import parse_message_delay_level

pytestmark = [pytest.mark.spark, pytest.mark.slow]
LEVELS_MS = parse_message_delay_level(TEST_LEVELS)


def _redeliver_once(spark, world: DelayWorld, tables: Path) -> int:  # type: ignore[no-untyped-def]
    redeliverer = open_redeliverer(
        world.root,
        StoreSink(world.broker),
        config=DelayConfig(entry_source=EntrySourceKind.CONSUME_QUEUE),
        delay_levels_ms=LEVELS_MS,
        clock=world.clock,
        spark=spark,
        tables_dir=tables,
    )
    try:
        return run_once(redeliverer).delivered
    finally:
        redeliverer.close()


def test_each_store_redelivers_its_own_rows_of_a_two_store_consume_queue(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(START_MS)
    worlds = [make_world(tmp_path / name, clock) for name in ("s1", "s2")]
    tables = tmp_path / "tables"
    try:
        for world, levels in zip(worlds, ((1, 2, 3), (1,)), strict=True):
            for level in levels:  # the same queues and queue offsets in both stores
                world.put_delayed("orders", f"{world.root.name}-{level}".encode(), level)
            world.put_timer("orders", f"{world.root.name}-timer".encode(), START_MS + 1500)
            world.broker.store.flush()
        config = ReputConfig(tables_dir=tables, available_now=True, database="rmq_delay_stores")
        run_reput(spark, [w.root for w in worlds], config, LEVELS_MS, clock=clock)
        clock.advance(2000)
        assert [_redeliver_once(spark, w, tables) for w in worlds] == [3, 2]
        assert [_redeliver_once(spark, w, tables) for w in worlds] == [0, 0]  # once
        bodies = [sorted(r.body for r in w.records("orders")) for w in worlds]
    finally:
        for world in worlds:
            world.broker.close()
    assert bodies == [[b"s1-1", b"s1-2", b"s1-timer"], [b"s2-1", b"s2-timer"]]
