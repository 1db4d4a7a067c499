"""The sink answers Spark's Kafka sink habits with what to use instead, as the source does."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from rmq_spark.errors import SinkError, SourceError
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.sink_options import check_columns, parse_sink_options


def columns(*names: str) -> StructType:
    return StructType([StructField(name, StringType()) for name in names])


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("topic", "use a topic column, e.g. .withColumn(\"topic\", lit(\"Orders\")) (an option of "
         "Spark's Kafka sink)"),
        ("includeheaders", "a properties column (a map) is always written"),
        ("kafka.bootstrap.servers", "use brokers"),
        ("bathMessages", "did you mean batchMessages?"),
    ],
)  # fmt: skip
def test_sink_options_of_kafka_get_a_hint(option: str, hint: str) -> None:
    with pytest.raises(SinkError, match="for the rocketmq sink") as caught:
        parse_sink_options({"path": "/s", option: "x"})
    assert hint in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("column", "hint"),
    [
        ("value", "use body (a column of Spark's Kafka sink)"),
        ("key", "use keys"),
        ("headers", "use properties"),
        ("partition", "the broker picks the queue"),
    ],
)
def test_kafka_columns_get_a_hint_before_a_missing_body(column: str, hint: str) -> None:
    with pytest.raises(SinkError, match=f"unknown column '{column}'") as caught:
        check_columns(columns("topic", column), parse_sink_options({"path": "/s"}))
    assert hint in str(caught.value)


def test_source_hints_are_unchanged() -> None:
    with pytest.raises(SourceError, match="use topics \\(an option of Spark's Kafka source\\)"):
        parse_options({"path": "/s", "subscribe": "t"}, streaming=True)
    check_columns(
        StructType([StructField("topic", StringType()), StructField("body", BinaryType())]),
        parse_sink_options({"path": "/s"}),
    )


def test_the_source_refuses_a_name_of_neither_when_spark_builds_it() -> None:
    from rmq_spark.spark.source import RocketMQDataSource

    with pytest.raises(SourceError, match="'startingOffset' .* did you mean startingOffsets"):
        RocketMQDataSource({"path": "/s", "startingOffset": "earliest"})
    with pytest.raises(SinkError, match="'batchMesages' .*sink: did you mean batchMessages"):
        RocketMQDataSource({"path": "/s", "keyColumn": "k", "batchMesages": "1"})
    RocketMQDataSource({"path": "/s", "topic": "t", "keyColumn": "k", "store.x": "1"})  # later
