"""spark.read.format("rocketmq") through a real SparkSession: the wiring of the batch reader."""

from __future__ import annotations

import json
import sys

import pytest
from source_support import LogWriter, make_record, reference_rows

from rmq_spark.store.message import HostAddress

pytestmark = pytest.mark.spark

SEGMENT = 4096
BORN_V4 = HostAddress("192.168.5.5", 41000)


def collected(df) -> list[dict[str, object]]:
    out = []
    for row in df.collect():
        item = row.asDict(recursive=False)
        item["body"] = None if item["body"] is None else bytes(item["body"])
        item["properties"] = dict(item["properties"])
        out.append(item)
    return out


def normalised(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    # Spark hands timestamps back as naive local datetimes; compare them as epoch micros.
    for row in rows:
        for key in ("born_timestamp", "store_timestamp"):
            value = row[key]
            row[key] = round(value.timestamp() * 1_000_000)
    return rows


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=SEGMENT)
    writer.extend(make_record(i) for i in range(120))
    writer.set_confirm()
    return writer


def test_batch_read_equals_what_the_store_holds(spark, log):
    df = spark.read.format("rocketmq").load(str(log.store_dir))
    assert normalised(collected(df.orderBy("physical_offset"))) == normalised(
        reference_rows(log.records)
    )


def test_large_range_is_split_into_partitions_that_read_each_record_once(spark, log):
    df = (
        spark.read.format("rocketmq")
        .option("maxBytesPerPartition", "3000")
        .load(str(log.store_dir))
        .select("physical_offset")
    )
    assert df.rdd.getNumPartitions() > 4
    offsets = [r.physical_offset for r in df.collect()]
    assert offsets == [r.physical_offset for r in log.records]  # each once, in log order


def test_topics_and_include_body_options(spark, log):
    df = (
        spark.read.format("rocketmq")
        .option("topics", "TopicB")
        .option("includeBody", "false")
        .load(str(log.store_dir))
    )
    assert normalised(collected(df)) == normalised(
        reference_rows((r for r in log.records if r.topic == "TopicB"), include_body=False)
    )


def test_sql_over_the_log(spark, log):
    spark.read.format("rocketmq").load(str(log.store_dir)).createOrReplaceTempView("rmq_log")
    got = spark.sql(
        "select topic, count(*) n, sum(size(keys)) k from rmq_log "
        "where tags = 'tag1' group by topic order by topic"
    ).collect()
    expected: dict[str, int] = {}
    for record in log.records:
        if record.properties and "tag1" in record.properties:
            expected[record.topic] = expected.get(record.topic, 0) + 1
    assert {r.topic: r.n for r in got} == expected
    assert all(r.k == 2 * r.n for r in got)


def test_ending_offsets_bound_the_read(spark, log):
    df = (
        spark.read.format("rocketmq")
        .option("startingOffsets", json.dumps({"physical_offset": log.records[3].physical_offset}))
        .option("endingOffsets", json.dumps({"physical_offset": log.records[9].physical_offset}))
        .load(str(log.store_dir))
    )
    assert [r.physical_offset for r in df.collect()] == [
        r.physical_offset for r in log.records[3:9]
    ]


def test_bad_option_fails_with_its_name_and_the_valid_ones(spark, log):
    with pytest.raises(Exception, match="unknown option 'subscribe'") as info:
        spark.read.format("rocketmq").option("subscribe", "x").load(str(log.store_dir)).count()
    assert "startingOffsets" in str(info.value)
    with pytest.raises(Exception, match="option failOnDataLoss='maybe' is invalid"):
        spark.read.format("rocketmq").option("failOnDataLoss", "maybe").load(
            str(log.store_dir)
        ).count()


def test_corrupted_segment_fails_the_query_with_segment_and_position(spark, log):
    victim = log.records[30]
    base = victim.physical_offset - victim.physical_offset % SEGMENT
    path = log.segment_path(base)
    data = bytearray(path.read_bytes())
    data[victim.physical_offset - base + 89] ^= 0x10  # a body byte: BODYCRC mismatch
    path.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        spark.read.format("rocketmq").load(str(log.store_dir)).count()
    message = str(info.value)
    assert "CorruptRecordError" in message
    assert str(path) in message
    assert f"position {victim.physical_offset - base}" in message
    # The CRC check can be turned off to salvage the rest.
    salvaged = spark.read.format("rocketmq").option("checkCrc", "false").load(str(log.store_dir))
    assert salvaged.count() == len(log.records)


def test_deleted_segment_fails_or_is_skipped(spark, log):
    log.segment_path(SEGMENT).unlink()
    reader = spark.read.format("rocketmq").option("startingOffsets", '{"physical_offset": 0}')
    with pytest.raises(Exception, match="DataLossError"):
        reader.load(str(log.store_dir)).count()
    kept = reader.option("failOnDataLoss", "false").load(str(log.store_dir))
    assert [r.physical_offset for r in kept.select("physical_offset").collect()] == [
        r.physical_offset for r in log.records if not SEGMENT <= r.physical_offset < 2 * SEGMENT
    ]


def test_batch_read_equals_what_rmq_spark_dump_prints(spark, tmp_path):
    import subprocess

    from rmq_spark.cli.query_command import row_json
    from rmq_spark.store.config import StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=4096)
    store = MessageStore.open(config)
    for index in range(90):
        result = store.put(
            PutRequest(
                topic=("Orders", "Payments", "%RETRY%" + "g" * 140)[index % 3],  # v2 magic
                body=bytes([index % 256]) * (index % 50),
                queue_id=index % 4,
                tags=f"tag{index % 5}",
                keys=(f"order-{index}", f"user-{index % 7}"),
                properties={"region": "eu"} if index % 2 else None,
                born_host=HostAddress("2001:db8::7", 5000) if index % 4 == 0 else BORN_V4,
            )
        )
        assert result.ok, result
    store.close()
    dumped = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "dump", "--store", str(config.root_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    rows = (
        spark.read.format("rocketmq")
        .option("maxBytesPerPartition", "2500")
        .load(str(config.root_dir))
        .collect()
    )
    assert [row_json(r.asDict()) for r in rows] == [json.loads(line) for line in dumped]
    assert len(rows) == 90
