"""df.write.format("rocketmq") through a real SparkSession: into a store (embedded) and through
a real broker process, read back with the rocketmq source and the official SimpleConsumer;
bad input refused at plan time or naming the row."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sink_support import BrokerProcess, start_broker, stored_messages

from rmq_spark.spark.source import register

pytestmark = pytest.mark.spark

ROWS = 3000
SMALL = {"store.segment_size_bytes": str(4 << 20)}
BROKER_SETTINGS = ("broker.default_queue_count=2", "store.segment_size_bytes=4194304")


@pytest.fixture
def rocketmq_spark(spark: Any) -> Any:
    register(spark)
    return spark


def input_frame(spark: Any, rows: int = ROWS, partitions: int = 3) -> Any:
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "'orders' AS topic",
        "concat('order ', id) AS body",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
        "concat('k', id, ' all') AS keys",
        "map('n', cast(id AS string)) AS properties",
    )


def write(df: Any, **options: str) -> None:
    writer = df.write.format("rocketmq").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def check_read_back(spark: Any, root: Path, rows: int = ROWS) -> list[Any]:
    got = (
        spark.read.format("rocketmq")
        .load(str(root))
        .where("topic = 'orders'")
        .select("body", "tags", "keys", "properties", "uniq_key")
        .collect()
    )
    assert sorted(r.body.decode() for r in got) == sorted(f"order {i}" for i in range(rows))
    for r in got:
        n = int(r.body.decode().split()[1])
        assert r.tags == ("even" if n % 2 == 0 else "odd")
        assert r.keys == [f"k{n}", "all"]
        assert r.properties["n"] == str(n)
    assert len({r.uniq_key for r in got}) == rows
    return got


def test_batch_write_into_a_store_reads_back_and_a_rerun_with_the_write_id_adds_nothing(
    rocketmq_spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    df = input_frame(rocketmq_spark)
    write(df, path=str(root), writeId="w1", **SMALL)
    got = check_read_back(rocketmq_spark, root)
    assert {r.uniq_key.rsplit("-", 2)[0] for r in got} == {"w1-0"}
    write(df, path=str(root), writeId="w1", **SMALL)  # a rerun of the same write
    check_read_back(rocketmq_spark, root)
    write(df.where("id < 10"), path=str(root), **SMALL)  # a new write: new keys
    assert len(stored_messages(root)) == ROWS + 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path / "broker-store",
        tmp_path / "work",
        *BROKER_SETTINGS,
    )
    yield process
    process.kill()


def test_batch_write_through_a_broker_reaches_the_official_simple_consumer(
    rocketmq_spark: Any, tmp_path: Path, broker: BrokerProcess, rocketmq: Any
) -> None:
    rows = 200
    df = input_frame(rocketmq_spark, rows)
    write(df, brokers=broker.address, writeId="viaBroker")
    write(df, brokers=broker.address, writeId="viaBroker")  # stored once
    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    consumer = rocketmq.SimpleConsumer(
        config, "sink-readers", {"orders": rocketmq.FilterExpression("*")}, await_duration=5
    )
    consumer.startup()
    try:
        got: list[Any] = []
        end = time.monotonic() + 60
        while len(got) < rows and time.monotonic() < end:
            batch = consumer.receive(32, 10)
            for message in batch:
                consumer.ack(message)
            got += batch
    finally:
        consumer.shutdown()
    assert sorted(m.body.decode() for m in got) == sorted(f"order {i}" for i in range(rows))
    ids = {m.message_id for m in got}
    assert len(ids) == rows and all(re.fullmatch(r"viaBroker-0-\d+-\d+", i) for i in ids)
    assert all(m.keys == {f"k{m.body.decode().split()[1]}", "all"} for m in got)
    assert all(m.tag == ("even" if int(m.body.split()[1]) % 2 == 0 else "odd") for m in got)
    assert broker.stop() == 0
    restarted = start_broker(broker.store_dir, tmp_path / "work", *BROKER_SETTINGS)
    try:  # the restarted broker rebuilt its idempotency window from the log
        write(df, brokers=restarted.address, writeId="viaBroker")
    finally:
        assert restarted.stop() == 0
    stored = check_read_back(rocketmq_spark, broker.store_dir, rows)
    assert {r.uniq_key for r in stored} == ids


def test_bad_input_is_refused_at_plan_time_or_naming_the_row(
    rocketmq_spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    no_topic = rocketmq_spark.range(3).selectExpr("cast(id AS string) AS body")
    with pytest.raises(Exception, match="SinkError: the rocketmq sink needs a 'topic' column"):
        write(no_topic, path=str(root), **SMALL)
    extra = input_frame(rocketmq_spark, 3).selectExpr("*", "1 AS value")
    with pytest.raises(Exception, match="unknown column 'value'"):
        write(extra, path=str(root), **SMALL)
    bad_level = rocketmq_spark.range(5, numPartitions=1).selectExpr(
        "'t' AS topic",
        "cast(id AS string) AS body",
        "CASE WHEN id = 3 THEN 0 ELSE 1 END AS delay_level",
    )
    with pytest.raises(
        Exception, match=r"partition 0, row 3 \(UNIQ_KEY bad-0-0-3\): delay_level 0"
    ):
        write(bad_level, path=str(root), writeId="bad", **SMALL)
    assert [m["body"] for m in stored_messages(root)] == []  # the batch had one bad row
