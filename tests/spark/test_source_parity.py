"""Kafka-source parity through a real SparkSession: Kafka option names fail at load(), the
lag of the subscribed topics in query.lastProgress, minMessagesPerTrigger, per-queue starts."""

from __future__ import annotations

import json
import time

import pytest
from source_support import LogWriter, make_record

from rmq_spark.store.codec import encode_record

pytestmark = pytest.mark.spark


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=4096)
    writer.extend(make_record(i) for i in range(60))  # TopicA: i % 3 != 0, TopicB: the rest
    writer.set_confirm()
    return writer


class Sink:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, df, batch_id: int) -> None:
        self.batches.append([r.physical_offset for r in df.select("physical_offset").collect()])


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("maxOffsetsPerTrigger", "use maxMessagesPerTrigger"),
        ("subscribe", "use topics"),
        ("kafka.bootstrap.servers", "give the store directory to load()"),
    ],
)
def test_a_kafka_option_fails_at_load_naming_the_rocketmq_one(spark, log, name, hint):
    with pytest.raises(Exception) as info:  # noqa: B017 - PySpark's AnalysisException
        spark.readStream.format("rocketmq").option(name, "1").load(str(log.store_dir))
    message = str(info.value)
    assert f"unknown option {name!r} for the rocketmq source: " in message
    assert hint in message
    assert "UnboundLocalError" not in message
    with pytest.raises(Exception, match="not an integer"):  # noqa: B017
        spark.read.format("rocketmq").option("minPartitions", "x").load(str(log.store_dir))


def test_last_progress_reports_the_lag_of_the_subscribed_topics(spark, log, tmp_path):
    sink = Sink()
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .option("topics", "TopicB")
        .option("maxMessagesPerTrigger", "15")
        .load(str(log.store_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    first = progress[0]["sources"][0]
    latest = json.loads(first["latestOffset"])
    end = json.loads(first["endOffset"])["physical_offset"]
    behind = [r for r in log.records if r.physical_offset >= end]
    unread = [r for r in behind if r.topic == "TopicB"]
    assert first["numInputRows"] == 15  # maxMessagesPerTrigger counts TopicB only
    assert latest["lagMessages"] == len(unread) == 5
    assert latest["lagBytes"] == sum(len(encode_record(r)) for r in unread)
    age = time.time() - unread[0].store_timestamp_ms / 1000
    assert abs(latest["lagSeconds"] - age) < 120 and latest["lagExact"] is True
    assert latest["backlogMessages"] == len(behind) == 17  # the log behind: every topic
    last = json.loads(query.lastProgress["sources"][0]["latestOffset"])
    assert (last["lagMessages"], last["lagBytes"], last["lagSeconds"]) == (0, 0, 0.0)
    # Spark 4.2 forwards no ReportsSourceMetrics of Python sources: metrics stay empty.
    assert not query.lastProgress["sources"][0].get("metrics")


def test_min_messages_per_trigger_holds_small_batches_back(spark, log, tmp_path):
    sink = Sink()
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", "earliest")
        .option("minMessagesPerTrigger", "30")
        .option("maxTriggerDelay", "1h")
        .load(str(log.store_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert [len(b) for b in sink.batches] == [60]  # the first trigger does not wait
        with log.broker_running():  # writes while the stream reads: as a broker, with the lock
            log.extend(make_record(i) for i in range(60, 80))
            log.set_confirm()
            query.processAllAvailable()
            assert [len(b) for b in sink.batches] == [60]  # 20 < 30: held back
            log.extend(make_record(i) for i in range(80, 95))
            log.set_confirm()
            query.processAllAvailable()
    finally:
        query.stop()
    assert [len(b) for b in sink.batches] == [60, 35]
    assert sum(sink.batches, []) == [r.physical_offset for r in log.records]


def test_a_stream_starts_each_queue_at_its_own_offset(spark, tmp_path):
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=8192)
    with MessageStore.open(config) as store:
        results = [store.put(PutRequest("Q", b"x%04d" % i, queue_id=i % 2)) for i in range(100)]
    sink = Sink()
    query = (
        spark.readStream.format("rocketmq")
        .option("startingOffsets", json.dumps({"Q": {"0": 40, "1": 5}}))
        .option("maxMessagesPerTrigger", "20")
        .load(str(config.root_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    low = {0: 40, 1: 5}
    expected = [r.physical_offset for r in results if r.queue_offset >= low[r.queue_id]]
    assert sum(sink.batches, []) == expected


def test_a_batch_reads_each_queue_between_its_offsets(spark, tmp_path):
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=8192)
    with MessageStore.open(config) as store:
        results = [store.put(PutRequest("Q", b"y%04d" % i, queue_id=i % 3)) for i in range(90)]
    rows = (
        spark.read.format("rocketmq")
        .schema("physical_offset long")
        .option("startingOffsets", json.dumps({"Q": {"0": 5, "1": -2, "2": 20}}))
        .option("endingOffsets", json.dumps({"Q": {"0": 9, "1": 2, "2": -1}}))
        .load(str(config.root_dir))
        .collect()
    )
    bounds = {0: (5, 9), 1: (0, 2), 2: (20, 30)}
    expected = [
        r.physical_offset
        for r in results
        if bounds[r.queue_id][0] <= r.queue_offset < bounds[r.queue_id][1]
    ]
    assert [r.physical_offset for r in rows] == expected
