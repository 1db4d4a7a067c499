"""End to end with Spark: the reput job indexes the schedule topics into consume_queue, the
redelivery job reads due entries from it, and the real topic is read with the ``rocketmq``
source. ManualClock throughout; store times come from it too."""

from __future__ import annotations

from pathlib import Path

import pytest
from delay_world import START_MS, TEST_LEVELS, DelayWorld, make_world

from rmq_spark.delay.config import DelayConfig, EntrySourceKind
from rmq_spark.delay.job import open_redeliverer, run_once
from rmq_spark.delay.sink import StoreSink
from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.delay_levels import parse_message_delay_level

pytestmark = pytest.mark.spark


def reput(spark, world: DelayWorld, tables: Path, levels: str) -> None:  # type: ignore[no-untyped-def]
    world.broker.store.flush()
    # One database per test: a name registered by an earlier test points at its tables.
    database = "rmq_delay_" + "".join(c if c.isalnum() else "_" for c in tables.parent.name)
    config = ReputConfig(tables_dir=tables, available_now=True, database=database)
    run_reput(spark, world.root, config, parse_message_delay_level(levels), clock=world.clock)


def redeliver_once(spark, world: DelayWorld, tables: Path) -> int:  # type: ignore[no-untyped-def]
    redeliverer = open_redeliverer(
        world.root,
        StoreSink(world.broker),
        config=DelayConfig(entry_source=EntrySourceKind.CONSUME_QUEUE),
        delay_levels_ms=parse_message_delay_level(TEST_LEVELS),
        clock=world.clock,
        spark=spark,
        tables_dir=tables,
    )
    try:
        return run_once(redeliverer).delivered
    finally:
        redeliverer.close()


def test_levels_and_timers_reach_the_real_topic_readable_by_the_source(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    world = make_world(tmp_path / "store")
    tables = tmp_path / "tables"
    try:
        for level in (1, 2, 3):
            world.put_delayed("orders", f"level-{level}".encode(), level, TAGS="TagA")
        world.put_timer("orders", b"timer", START_MS + 1500)
        reput(spark, world, tables, TEST_LEVELS)
        delivered = []
        for _ in range(4):
            delivered.append(redeliver_once(spark, world, tables))
            world.clock.advance(1000)
        assert delivered == [0, 1, 2, 1]  # +1 s: level 1; +2 s: level 2 and the timer; +3 s
        world.broker.store.flush()
        rows = (
            spark.read.format("rocketmq")
            .option("topics", "orders")
            .load(str(world.root))
            .select("body", "queue_id", "store_timestamp", "properties", "tags")
            .collect()
        )
    finally:
        world.broker.close()
    by_body = {bytes(row.body): row for row in rows}
    assert sorted(by_body) == [b"level-1", b"level-2", b"level-3", b"timer"]
    for level in (1, 2, 3):
        row = by_body[f"level-{level}".encode()]
        assert row.properties["DELAY"] == str(level)
        assert row.properties["REAL_TOPIC"] == "orders" and row.tags == "TagA"
        stored_ms = int(row.store_timestamp.timestamp() * 1000)
        assert stored_ms >= START_MS + level * 1000
    timer = by_body[b"timer"]
    assert "TIMER_DEQUEUE_MS" in timer.properties and "TIMER_ENQUEUE_MS" in timer.properties
    assert int(timer.store_timestamp.timestamp() * 1000) >= START_MS + 1500


def test_changing_the_delay_levels_affects_only_new_messages(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tables = tmp_path / "tables"
    world = make_world(tmp_path / "store")
    world.put_delayed("orders", b"old", 2)
    reput(spark, world, tables, TEST_LEVELS)
    world.broker.close()
    # Level 2 becomes 5 s: the message already stored keeps its 2 s.
    world = make_world(tmp_path / "store", world.clock, message_delay_level="1s 5s 3s")
    try:
        world.put_delayed("orders", b"new", 2)
        reput(spark, world, tables, "1s 5s 3s")
        world.clock.advance(2000)
        assert redeliver_once(spark, world, tables) == 1
        assert [r.body for r in world.records("orders")] == [b"old"]
        world.clock.advance(2999)
        assert redeliver_once(spark, world, tables) == 0
        world.clock.advance(1)
        assert redeliver_once(spark, world, tables) == 1
        assert sorted(r.body for r in world.records("orders")) == [b"new", b"old"]
    finally:
        world.broker.close()
