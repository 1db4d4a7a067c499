"""The source's readers against the engine's real MessageStore, while it is being written.

No Spark: the stream reader's methods are called directly, as Spark's driver and executors
would, from another thread than the producer's.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchReader, RocketMQStreamReader
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.view import StoreView


def request(index: int) -> PutRequest:
    return PutRequest(
        topic=f"Topic{index % 3}",
        body=f"message-{index}".encode() * (1 + index % 5),
        queue_id=index % 4,
        tags=f"tag{index % 2}",
        keys=(f"key{index}",),
    )


def read_rows(reader, start: dict, end: dict) -> list[dict[str, object]]:
    rows = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            rows += pa.Table.from_batches([batch]).select(["physical_offset", "body"]).to_pylist()
    return rows


@pytest.mark.parametrize("policy", [FlushPolicy.SYNC, FlushPolicy.ASYNC])
def test_stream_reads_every_acknowledged_message_once_while_the_store_is_written(tmp_path, policy):
    config = StoreConfig(
        root_dir=tmp_path / "store",
        segment_size_bytes=8192,
        flush_policy=policy,
        flush_interval_ms=5,
        confirm_publish_interval_ms=1,
    )
    store = MessageStore.open(config)
    results = []
    done = threading.Event()

    def produce() -> None:
        try:
            for index in range(600):
                results.append(store.put(request(index)))
        finally:
            done.set()

    reader = RocketMQStreamReader(
        parse_options(
            {
                "path": str(config.root_dir),
                "startingOffsets": "earliest",
                "maxBytesPerPartition": "3000",
            },
            streaming=True,
        )
    )
    producer = threading.Thread(target=produce)
    got: list[dict[str, object]] = []
    start = reader.initialOffset()
    try:
        producer.start()
        while True:
            finished = done.is_set()
            assert StoreView.open(config.root_dir).broker_open
            end = reader.latestOffset(start, ReadAllAvailable())
            got += read_rows(reader, start, end)
            start = end
            if finished and start == reader.latestOffset(start, ReadAllAvailable()):
                if start["physical_offset"] == store.confirmed_offset == store.max_offset:
                    break
    finally:
        producer.join()
        store.close()
    assert all(r.ok for r in results)
    assert [r["physical_offset"] for r in got] == [r.physical_offset for r in results]
    assert [r["body"] for r in got] == [request(i).body for i in range(600)]


def test_batch_read_of_a_closed_store_equals_what_was_put(tmp_path):
    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=4096)
    store = MessageStore.open(config)
    results = [store.put(request(i)) for i in range(150)]
    store.close()
    reader = RocketMQBatchReader(parse_options({"path": str(config.root_dir)}, streaming=False))
    table = pa.Table.from_batches(
        [b for p in reader.partitions() for b in reader.read(p)]
    ).to_pylist()
    assert [r["physical_offset"] for r in table] == [r.physical_offset for r in results]
    assert [r["msg_id"] for r in table] == [r.msg_id for r in results]
    assert [r["queue_offset"] for r in table] == [r.queue_offset for r in results]
    assert [r["uniq_key"] for r in table] == [r.uniq_key for r in results]
    assert [r["keys"] for r in table] == [[f"key{i}"] for i in range(150)]
    assert [r["tags"] for r in table] == [f"tag{i % 2}" for i in range(150)]
    assert [r["store_host"] for r in table] == [config.store_host] * 150
