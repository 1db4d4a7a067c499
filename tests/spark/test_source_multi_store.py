"""Several stores in one query (``load("/s1,/s2")``): every store's records once, each row
tagged with its store, offsets per store in the checkpoint, admission limits shared."""

from __future__ import annotations

import json

import pytest
from source_support import LogWriter, make_record

pytestmark = pytest.mark.spark


def _stores(tmp_path, counts=(30, 20)):
    writers = []
    for number, count in enumerate(counts):
        writer = LogWriter(tmp_path / f"store{number}", segment_size_bytes=4096)
        writer.extend(make_record(1000 * number + i) for i in range(count))
        writers.append(writer)
    return writers


def _paths(tmp_path, count=2):
    return ",".join(str(tmp_path / f"store{number}") for number in range(count))


def test_batch_read_over_two_stores_tags_each_row(spark, tmp_path):
    _stores(tmp_path)
    df = spark.read.format("rocketmq").load(_paths(tmp_path))
    assert df.columns[-1] == "store"
    rows = df.select("store", "physical_offset", "body").collect()
    by_store = {}
    for row in rows:
        by_store.setdefault(row.store, []).append(row.physical_offset)
    assert {k: len(v) for k, v in by_store.items()} == {
        str(tmp_path / "store0"): 30,
        str(tmp_path / "store1"): 20,
    }
    for offsets in by_store.values():
        assert len(set(offsets)) == len(offsets)


def test_one_store_keeps_its_schema(spark, tmp_path):
    _stores(tmp_path, counts=(5,))
    df = spark.read.format("rocketmq").load(str(tmp_path / "store0"))
    assert "store" not in df.columns
    with pytest.raises(Exception, match="not a column of the rocketmq source"):
        spark.read.format("rocketmq").schema("store string").load(
            str(tmp_path / "store0")
        ).collect()


def test_store_column_alone_and_projection(spark, tmp_path):
    _stores(tmp_path)
    df = spark.read.format("rocketmq").schema("store string, topic string").load(_paths(tmp_path))
    assert df.count() == 50
    assert {row.store for row in df.collect()} == {
        str(tmp_path / "store0"),
        str(tmp_path / "store1"),
    }
    only = spark.read.format("rocketmq").schema("store string").load(_paths(tmp_path))
    assert only.count() == 50


def test_explicit_offsets_json_is_refused_with_several_stores(spark, tmp_path):
    _stores(tmp_path)
    reader = spark.read.format("rocketmq").option("startingOffsets", '{"physical_offset": 0}')
    with pytest.raises(Exception, match="names one store's offsets"):
        reader.load(_paths(tmp_path)).collect()


def test_stream_over_two_stores_restarts_with_offsets_per_store(spark, tmp_path):
    writers = _stores(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[str, int]] = []

    def sink(df, _batch_id):
        seen.extend((row.store, row.physical_offset) for row in df.collect())

    def run(**options):
        reader = spark.readStream.format("rocketmq").option("startingOffsets", "earliest")
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load(_paths(tmp_path))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return query

    first = run(maxMessagesPerTrigger=10)
    assert len(seen) == 50 and len(set(seen)) == 50
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 10  # 5 per store per trigger
    offsets = json.loads(first.lastProgress["sources"][0]["endOffset"])
    assert set(offsets["stores"]) == {str(tmp_path / "store0"), str(tmp_path / "store1")}

    writers[1].extend(make_record(5000 + i) for i in range(7))
    run()
    assert len(seen) == 57 and len(set(seen)) == 57
    assert sum(1 for store, _ in seen if store.endswith("store1")) == 27
