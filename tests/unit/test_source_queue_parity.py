"""Per-queue startingOffsets / endingOffsets / startingOffsetsByTimestamp (Kafka's
per-partition JSON) over a store whose ConsumeQueues the store engine wrote, driven without
Spark: the rows are exactly those of each queue between its positions."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from rmq_spark.clock import ManualClock
from rmq_spark.errors import DataLossError, SourceError
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.partitions import open_view, resolve_start
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.spark.source import RocketMQBatchReader
from rmq_spark.spark.stream import RocketMQStreamReader
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutResult


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """300 messages: topic T over queues 0-3, U over queues 0-1, store times 10 ms apart."""
    root = tmp_path_factory.mktemp("queues") / "store"
    clock = ManualClock(1_700_000_000_000)
    config = StoreConfig(root_dir=root, segment_size_bytes=8192, consume_queue_file_units=16)
    results: list[PutResult] = []
    with MessageStore.open(config, clock) as opened:
        for index in range(300):
            topic, queues = ("T", 4) if index % 3 else ("U", 2)
            body = b"m%05d" % index * (1 + index % 5)
            results.append(opened.put(PutRequest(topic, body, queue_id=index % queues)))
            clock.advance(10)
    assert all(r.ok for r in results)
    return root, results


def key(result: PutResult) -> tuple[str, int, int]:
    return result.topic, result.queue_id, result.queue_offset


def read_keys(reader, partitions) -> list[tuple[str, int, int]]:
    got = []
    for partition in partitions:
        for batch in reader.read(partition):
            for row in batch.to_pylist():
                got.append((row["topic"], row["queue_id"], row["queue_offset"]))
    return got


def batch(root, **options: str) -> list[tuple[str, int, int]]:
    reader = RocketMQBatchReader(parse_options({"path": str(root), **options}, streaming=False))
    return read_keys(reader, reader.partitions())


def test_per_queue_starting_offsets_read_each_queue_from_its_position(store):
    root, results = store
    starts = {"0": 30, "1": -2, "2": 45, "3": 0}
    got = batch(root, startingOffsets=json.dumps({"T": starts}))
    low = {int(q): max(v, 0) for q, v in starts.items()}
    expected = [key(r) for r in results if r.topic == "T" and r.queue_offset >= low[r.queue_id]]
    assert got == expected


def test_per_queue_ending_offsets_stop_each_queue_at_its_position(store):
    root, results = store
    ends = {"T": {"0": 4, "1": -1, "2": 0, "3": 50}, "U": {"0": 7, "1": 40}}
    got = batch(root, endingOffsets=json.dumps(ends))

    def wanted(r: PutResult) -> bool:
        end = ends[r.topic][str(r.queue_id)]
        return end == -1 or r.queue_offset < end

    assert got == [key(r) for r in results if wanted(r)]


def test_per_queue_start_and_end_together_and_a_narrow_schema(store):
    root, results = store
    options = {
        "startingOffsets": json.dumps({"U": {"0": 10, "1": 20}}),
        "endingOffsets": json.dumps({"U": {"0": 12, "1": 21}}),
    }
    got = batch(root, **options)
    assert got == [("U", 0, 10), ("U", 0, 11), ("U", 1, 20)]
    only_offsets = pa.schema([ARROW_SCHEMA.field("physical_offset")])
    narrow = RocketMQBatchReader(
        parse_options({"path": str(root), **options}, streaming=False), only_offsets
    )
    rows = [r for p in narrow.partitions() for b in narrow.read(p) for r in b.to_pylist()]
    assert rows == [{"physical_offset": r.physical_offset} for r in results if key(r) in got]


def test_a_stream_with_per_queue_starts_reads_exactly_once_in_small_batches(store):
    root, results = store
    starts = {"T": {"0": 40, "1": 10, "2": 45, "3": 20}}
    raw = {"path": str(root), "startingOffsets": json.dumps(starts), "maxMessagesPerTrigger": "9"}
    reader = RocketMQStreamReader(parse_options(raw, streaming=True))
    start = reader.initialOffset()
    first_t = min(r.physical_offset for r in results if r.topic == "T" and r.queue_offset >= 10)
    assert start["physical_offset"] <= first_t
    got, filtered_batches, plain_batches = [], 0, 0
    while True:
        end = reader.latestOffset(start, ReadMaxRows(9))
        if end == start:
            break
        partitions = reader.partitions(start, end)
        filtered_batches += any(p.queue_bounds for p in partitions)
        plain_batches += not any(p.queue_bounds for p in partitions)
        got += read_keys(reader, partitions)
        start = end
    low = {int(q): v for q, v in starts["T"].items()}
    assert got == [key(r) for r in results if r.topic == "T" and r.queue_offset >= low[r.queue_id]]
    assert filtered_batches and plain_batches  # past the highest start no filter runs


def test_starting_offsets_by_timestamp_per_queue(store):
    root, results = store
    times = {"T": {"0": results[150].store_timestamp_ms, "1": 0, "2": 0, "3": 0}}
    got = batch(root, startingOffsetsByTimestamp=json.dumps(times))
    since = {0: results[150].store_timestamp_ms, 1: 0, 2: 0, 3: 0}
    assert got == [
        key(r) for r in results if r.topic == "T" and r.store_timestamp_ms >= since[r.queue_id]
    ]
    late = {"U": {"0": results[-1].store_timestamp_ms + 1, "1": 0}}
    with pytest.raises(SourceError, match="no message stored at or after"):
        batch(root, startingOffsetsByTimestamp=json.dumps(late))
    got = batch(
        root,
        startingOffsetsByTimestamp=json.dumps(late),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert got == [key(r) for r in results if r.topic == "U" and r.queue_id == 1]


def test_per_queue_positions_are_checked_against_the_store(store):
    root, _ = store
    with pytest.raises(SourceError, match=r"no position for queue\(s\) T/2, T/3"):
        batch(root, startingOffsets=json.dumps({"T": {"0": 1, "1": 1}}))
    with pytest.raises(SourceError, match="past the queue's end"):
        batch(root, startingOffsets=json.dumps({"U": {"0": 1000, "1": 0}}))
    with pytest.raises(SourceError, match="has no ConsumeQueue"):
        batch(root, startingOffsets=json.dumps({"U": {"0": 0, "1": 0, "7": 3}}))
    with pytest.raises(SourceError, match=r"-1 \(latest\) per queue is not supported"):
        parse_options({"path": "/s", "startingOffsets": '{"T": {"0": -1}}'}, streaming=True)
    with pytest.raises(SourceError, match="does not subscribe"):
        parse_options(
            {"path": "/s", "topics": "U", "startingOffsets": '{"T": {"0": 1}}'}, streaming=True
        )
    options = parse_options(
        {"path": str(root), "startingOffsets": '{"U": {"0": 0, "1": 0}}'}, streaming=False
    )
    assert options.topics == ("U",)


def test_a_deleted_queue_position_is_data_loss(store, tmp_path):
    import shutil

    root, _ = store
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    first = sorted((copy / "consumequeue" / "U" / "0").iterdir())[0]
    first.unlink()  # units 0-15 of U/0 deleted as retention would
    options = parse_options(
        {"path": str(copy), "startingOffsets": '{"U": {"0": 3, "1": 0}}'}, streaming=False
    )
    with pytest.raises(DataLossError, match="U/0"):
        resolve_start(open_view(options), options, 1 << 40)


def test_ending_offsets_by_timestamp_per_queue(store):
    root, results = store
    cut = results[100].store_timestamp_ms
    times = {"U": {"0": cut, "1": results[-1].store_timestamp_ms + 1}}  # U/1: no match: latest
    got = batch(root, endingOffsetsByTimestamp=json.dumps(times))
    assert got == [
        key(r)
        for r in results
        if r.topic == "U" and (r.queue_id == 1 or r.store_timestamp_ms < cut)
    ]
    with pytest.raises(SourceError, match="batch queries only"):
        parse_options({"path": "/s", "endingOffsetsByTimestamp": json.dumps(times)}, streaming=True)


def test_driver_reads_keep_the_per_queue_filter(store):
    from rmq_spark.spark.driver_read import DriverReadStreamReader, stream_reader

    root, results = store
    raw = {
        "path": str(root),
        "startingOffsets": json.dumps({"U": {"0": 45, "1": 48}}),
        "driverReadMaxBytes": "64m",
        "maxBytesPerPartition": "4096",  # several partitions, merged into one for the driver
    }
    reader = stream_reader(parse_options(raw, streaming=True), ARROW_SCHEMA)
    assert isinstance(reader, DriverReadStreamReader)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    reader.partitions(start, end)
    got = [
        (row["topic"], row["queue_id"], row["queue_offset"])
        for batch in reader.getCache(start, end)
        for row in batch.to_pylist()
    ]
    assert got == [
        key(r) for r in results if r.topic == "U" and r.queue_offset >= 45 + r.queue_id * 3
    ]


def test_a_restarted_stream_resolves_the_same_queue_positions(store):
    from rmq_spark.spark import partitions as partitions_module

    root, results = store
    raw = {
        "path": str(root),
        "startingOffsetsByTimestamp": json.dumps(
            {"U": {"0": results[120].store_timestamp_ms, "1": results[30].store_timestamp_ms}}
        ),
        "maxMessagesPerTrigger": "7",
    }
    options = parse_options(raw, streaming=True)
    first = RocketMQStreamReader(options)
    start = first.initialOffset()
    got = []
    for _ in range(2):  # two batches, then the driver process dies
        end = first.latestOffset(start, first.getDefaultReadLimit())
        got += read_keys(first, first.partitions(start, end))
        start = end
    partitions_module._queue_filter.cache_clear()  # a new driver process
    again = RocketMQStreamReader(parse_options(raw, streaming=True))
    while (end := again.latestOffset(start, again.getDefaultReadLimit())) != start:
        got += read_keys(again, again.partitions(start, end))
        start = end
    since = {0: results[120].store_timestamp_ms, 1: results[30].store_timestamp_ms}
    assert got == [
        key(r) for r in results if r.topic == "U" and r.store_timestamp_ms >= since[r.queue_id]
    ]
