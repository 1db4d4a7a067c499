"""Bad options reach the user as our one-line message in every path: read or readStream,
with or without .schema(), and the sink's Kafka habits get a hint (no UnboundLocalError, no
Python traceback inside Spark's error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from source_support import LogWriter, make_record

from rmq_spark.spark.schema import spark_schema

pytestmark = pytest.mark.spark

TYPO = "unknown option 'startingoffset' for the rocketmq source: did you mean startingOffsets?"
ENDING = "option endingOffsets applies to batch queries only"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    writer = LogWriter(tmp_path / "store", segment_size_bytes=8192)
    writer.extend(make_record(i) for i in range(5))
    writer.set_confirm()
    return writer.store_dir


def first_line(err: BaseException) -> str:
    text = str(err)
    assert "Traceback" not in text and "UnboundLocalError" not in text, text
    return text.splitlines()[0]


@pytest.mark.parametrize("stream", [False, True], ids=["read", "readStream"])
def test_a_typo_fails_at_load_in_one_line(spark, store: Path, stream: bool):
    reader = spark.readStream if stream else spark.read
    with pytest.raises(Exception) as caught:
        reader.format("rocketmq").option("startingOffset", "earliest").load(str(store))
    assert TYPO in first_line(caught.value)


def test_with_a_schema_a_typo_fails_the_first_action_in_one_line(spark, store: Path):
    # .schema(...) skips schema(): Spark builds the source when it plans, not at load()
    frame = spark.read.format("rocketmq").schema(spark_schema()).option("startingOffset", "0")
    with pytest.raises(Exception) as caught:
        frame.load(str(store)).count()
    assert TYPO in first_line(caught.value)


def test_with_a_schema_a_typo_fails_the_stream_in_one_line(spark, store: Path, tmp_path: Path):
    frame = (
        spark.readStream.format("rocketmq")
        .schema(spark_schema())
        .option("startingOffset", "earliest")
        .load(str(store))
    )
    with pytest.raises(Exception) as caught:
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    assert TYPO in first_line(caught.value)


@pytest.mark.parametrize("with_schema", [False, True], ids=["schema", "user-schema"])
def test_ending_offsets_on_a_stream_fail_the_query_with_our_line(
    spark, store: Path, tmp_path: Path, with_schema: bool
):
    reader = spark.readStream.format("rocketmq").option("endingOffsets", "latest")
    if with_schema:
        reader = reader.schema(spark_schema())
    frame = reader.load(str(store))
    with pytest.raises(Exception) as caught:
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    assert ENDING in first_line(caught.value)


def test_a_batch_read_with_schema_refuses_a_stream_option_in_one_line(spark, store: Path):
    frame = spark.read.format("rocketmq").schema(spark_schema())
    with pytest.raises(Exception) as caught:
        frame.option("maxMessagesPerTrigger", "5").load(str(store)).count()
    assert "option maxMessagesPerTrigger applies to streaming queries only" in first_line(
        caught.value
    )


def test_the_sink_hints_at_kafka_habits(spark, tmp_path: Path):
    frame = spark.range(2).selectExpr("'T' AS topic", "cast(id AS string) AS value")
    sink = str(tmp_path / "sink")
    with pytest.raises(Exception) as caught:
        frame.write.format("rocketmq").mode("append").option("topic", "T").save(sink)
    assert "unknown option 'topic' for the rocketmq sink: use a topic column" in first_line(
        caught.value
    )
    with pytest.raises(Exception) as caught:
        frame.write.format("rocketmq").mode("append").save(sink)
    assert "unknown column 'value' for the rocketmq sink: use body (a column of Spark's Kafka" in (
        first_line(caught.value)
    )
