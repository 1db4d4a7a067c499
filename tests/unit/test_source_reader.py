"""The stream and batch readers driven directly (initialOffset, latestOffset, partitions, read),
on stores in tmp_path, without a SparkSession."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from source_support import LogWriter, make_record, reference_rows

from rmq_spark.errors import CorruptRecordError, DataLossError, SourceError
from rmq_spark.spark import planner
from rmq_spark.spark import stream as stream_module
from rmq_spark.spark.driver_read import DriverReadStreamReader, stream_reader
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.spark.source import RocketMQBatchReader, RocketMQStreamReader
from rmq_spark.store.view import StoreView

SEGMENT = 4096


def stream(store, **options: str) -> RocketMQStreamReader:
    raw = {"path": str(store), "startingOffsets": "earliest", **options}
    return RocketMQStreamReader(parse_options(raw, streaming=True))


def batch(store, **options: str) -> RocketMQBatchReader:
    return RocketMQBatchReader(parse_options({"path": str(store), **options}, streaming=False))


def rows(reader, partitions) -> list[dict[str, object]]:
    out = []
    for partition in partitions:
        for record_batch in reader.read(partition):
            assert isinstance(record_batch, pa.RecordBatch)
            for row in record_batch.to_pylist():
                row["properties"] = dict(row["properties"])
                out.append(row)
    return out


def offsets_of(got) -> list[int]:
    return [r["physical_offset"] for r in got]


def drain(reader, start, limit=None) -> tuple[list[dict[str, object]], dict, int]:
    """Run micro-batches until latestOffset stops moving: (rows, last offset, batch count)."""
    got, batches = [], 0
    limit = limit or reader.getDefaultReadLimit()
    while True:
        end = reader.latestOffset(start, limit)
        if end == start:
            return got, start, batches
        got += rows(reader, reader.partitions(start, end))
        reader.commit(end)
        start, batches = end, batches + 1


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=SEGMENT)
    writer.extend(make_record(i) for i in range(80))
    writer.set_confirm()
    return writer


def test_batch_read_equals_what_the_store_holds(log):
    reader = batch(log.store_dir)
    assert rows(reader, reader.partitions()) == reference_rows(log.records)


def test_batch_partitions_split_a_range_and_read_each_record_once(log):
    reader = batch(log.store_dir, maxBytesPerPartition="1000", minPartitions="3")
    partitions = reader.partitions()
    assert len(partitions) > len({p.slices[0].base_offset for p in partitions})  # cuts inside
    assert rows(reader, partitions) == reference_rows(log.records)


def test_stream_reads_everything_exactly_once_while_the_log_grows(log):
    reader = stream(log.store_dir)
    start = reader.initialOffset()
    assert start == {"physical_offset": 0}
    got, start, _ = drain(reader, start)
    more = log.extend(make_record(i) for i in range(80, 200))  # rolls segments
    log.set_confirm()
    got2, start, _ = drain(reader, start)
    assert got + got2 == reference_rows(log.records)
    assert start == {"physical_offset": log.end_offset}
    assert more


def test_max_messages_per_trigger_limits_each_batch(log):
    reader = stream(log.store_dir, maxMessagesPerTrigger="7")
    assert reader.getDefaultReadLimit() == ReadMaxRows(7)
    start = reader.initialOffset()
    sizes = []
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        sizes.append(len(rows(reader, reader.partitions(start, end))))
        start = end
    assert sum(sizes) == 80
    assert max(sizes) == 7 and all(s > 0 for s in sizes)


def test_max_bytes_per_trigger_limits_bytes_and_always_progresses(log):
    reader = stream(log.store_dir, maxBytesPerTrigger="500")
    assert reader.getDefaultReadLimit() == ReadMaxBytes(500)
    start = reader.initialOffset()
    got = []
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        batch_rows = rows(reader, reader.partitions(start, end))
        assert batch_rows
        if len(batch_rows) > 1:
            assert end["physical_offset"] - start["physical_offset"] <= 500
        got += batch_rows
        start = end
    assert got == reference_rows(log.records)
    tiny = stream(log.store_dir, maxBytesPerTrigger="1")
    first = tiny.latestOffset({"physical_offset": 0}, ReadMaxBytes(1))
    assert len(rows(tiny, tiny.partitions({"physical_offset": 0}, first))) == 1


def test_read_all_available_ignores_the_configured_limits(log):
    reader = stream(log.store_dir, maxMessagesPerTrigger="3")
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert end == {"physical_offset": log.end_offset}


def test_available_now_stops_at_the_end_seen_when_prepared(log):
    reader = stream(log.store_dir, maxMessagesPerTrigger="10")
    reader.prepareForTriggerAvailableNow()
    target = log.end_offset
    log.extend(make_record(i) for i in range(80, 90))
    log.set_confirm()
    got, last, batches = drain(reader, reader.initialOffset())
    assert last == {"physical_offset": target}
    assert len(got) == 80 and batches == 8


def test_open_store_is_read_only_up_to_confirm_offset(log):
    confirm = log.records[40].physical_offset
    log.set_confirm(confirm, flushed=confirm)  # as our broker publishes
    reader = stream(log.store_dir)
    with log.broker_running():
        assert StoreView.open(log.store_dir).broker_open
        got, last, _ = drain(reader, reader.initialOffset())
        assert last == {"physical_offset": confirm}
        assert got == reference_rows(log.records[:40])
    # The broker is gone: a closed store is read to its last valid record.
    got2, last, _ = drain(reader, last)
    assert got2 == reference_rows(log.records[40:])


def test_closed_store_with_zero_checkpoint_is_read_to_its_last_record(log):
    log.set_confirm(0)  # Apache RocketMQ leaves 0 there outside controller mode
    reader = batch(log.store_dir)
    assert rows(reader, reader.partitions()) == reference_rows(log.records)


def test_closed_store_with_damage_before_valid_records_is_corrupt(log):
    last_base = log.end_offset - log.end_offset % SEGMENT
    victim = [r for r in log.records if r.physical_offset >= last_base][1]
    path = log.segment_path(last_base)
    data = bytearray(path.read_bytes())
    data[victim.physical_offset - last_base + 4] ^= 0xFF  # magic
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="followed by a valid record"):
        planner.readable_end(StoreView.open(log.store_dir))


def test_torn_tail_of_a_closed_store_is_not_read(log):
    last = log.records[-1]
    base = last.physical_offset - last.physical_offset % SEGMENT
    path = log.segment_path(base)
    data = bytearray(path.read_bytes())
    cut = last.physical_offset - base + 30
    data[cut : log.end_offset - base] = bytes(log.end_offset - base - cut)
    path.write_bytes(bytes(data))
    reader = batch(log.store_dir)
    assert rows(reader, reader.partitions()) == reference_rows(log.records[:-1])


def test_starting_offsets_json_must_be_a_record_start(log):
    good = log.records[10].physical_offset
    reader = stream(log.store_dir, startingOffsets=json.dumps({"physical_offset": good}))
    got, _, _ = drain(reader, reader.initialOffset())
    assert got == reference_rows(log.records[10:])
    bad = stream(log.store_dir, startingOffsets=json.dumps({"physical_offset": good + 3}))
    with pytest.raises(
        SourceError, match=f"next record starts at {log.records[11].physical_offset}"
    ):
        bad.initialOffset()
    past = stream(log.store_dir, startingOffsets=json.dumps({"physical_offset": 10**9}))
    with pytest.raises(SourceError, match="outside the readable log"):
        past.initialOffset()


def test_starting_offsets_latest_reads_only_new_records(log):
    reader = stream(log.store_dir, startingOffsets="latest")
    start = reader.initialOffset()
    new = log.extend(make_record(i) for i in range(80, 85))
    log.set_confirm()
    got, _, _ = drain(reader, start)
    assert got == reference_rows(new)


def test_starting_timestamp_finds_the_first_record_stored_at_or_after_it(log):
    target = log.records[33].store_timestamp_ms - 3
    reader = stream(log.store_dir, startingTimestamp=str(target))
    got, _, _ = drain(reader, reader.initialOffset())
    assert got == reference_rows(log.records[33:])
    late = stream(log.store_dir, startingTimestamp=str(10**15))
    assert late.initialOffset() == {"physical_offset": log.end_offset}
    early = stream(log.store_dir, startingTimestamp="0")
    assert early.initialOffset() == {"physical_offset": 0}


def test_batch_ending_offsets_and_timestamps(log):
    stop = log.records[50].physical_offset
    reader = batch(
        log.store_dir,
        startingOffsets=json.dumps({"physical_offset": log.records[5].physical_offset}),
        endingOffsets=json.dumps({"physical_offset": stop}),
    )
    assert rows(reader, reader.partitions()) == reference_rows(log.records[5:50])
    by_time = batch(
        log.store_dir,
        startingTimestamp=str(log.records[5].store_timestamp_ms),
        endingTimestamp=str(log.records[50].store_timestamp_ms),
    )
    assert rows(by_time, by_time.partitions()) == reference_rows(log.records[5:50])
    backwards = batch(
        log.store_dir,
        startingOffsets=json.dumps({"physical_offset": stop}),
        endingOffsets=json.dumps({"physical_offset": log.records[5].physical_offset}),
    )
    with pytest.raises(SourceError, match="after the ending offset"):
        backwards.partitions()


def test_topics_option_filters_rows(log):
    reader = batch(log.store_dir, topics="TopicB")
    assert rows(reader, reader.partitions()) == reference_rows(
        r for r in log.records if r.topic == "TopicB"
    )


def test_deleted_segments_fail_the_query_by_default(log):
    reader = stream(log.store_dir)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    log.segment_path(SEGMENT).unlink()  # retention deleted the second segment
    with pytest.raises(DataLossError, match=rf"\[{SEGMENT}, {2 * SEGMENT}\)"):
        reader.partitions(start, end)


def test_deleted_segments_are_skipped_and_reported_without_fail_on_data_loss(log):
    reader = stream(log.store_dir, failOnDataLoss="false")
    start = reader.initialOffset()
    log.segment_path(0).unlink()
    log.segment_path(SEGMENT).unlink()
    got, _, _ = drain(reader, start)
    assert got == reference_rows(r for r in log.records if r.physical_offset >= 2 * SEGMENT)
    assert reader.skipped_ranges == [(0, 2 * SEGMENT)]
    assert json.loads(reader.metrics()["dataLossSkippedRanges"]) == [[0, 2 * SEGMENT]]


def test_segment_deleted_after_planning_fails_or_skips_in_read(log):
    strict = stream(log.store_dir)
    start = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    partitions = strict.partitions(start, end)
    lenient = stream(log.store_dir, failOnDataLoss="false")
    log.segment_path(0).unlink()
    with pytest.raises(DataLossError, match="deleted before"):
        rows(strict, partitions)
    assert offsets_of(rows(lenient, partitions)) == [
        r.physical_offset for r in log.records if r.physical_offset >= SEGMENT
    ]


def test_corrupt_record_fails_read_with_segment_and_position(log):
    victim = log.records[20]
    base = victim.physical_offset - victim.physical_offset % SEGMENT
    path = log.segment_path(base)
    data = bytearray(path.read_bytes())
    data[victim.physical_offset - base + 90] ^= 0x01  # body byte
    path.write_bytes(bytes(data))
    reader = batch(log.store_dir)
    with pytest.raises(CorruptRecordError) as info:
        rows(reader, reader.partitions())
    assert info.value.position == victim.physical_offset - base
    assert info.value.path == str(path)
    assert "partition" in str(info.value)


def test_metrics_report_durable_end_and_backlog(log):
    reader = stream(log.store_dir)
    metrics = reader.metrics({"physical_offset": log.records[70].physical_offset})
    assert metrics["latestDurableOffset"] == str(log.end_offset)
    assert metrics["backlogBytes"] == str(log.end_offset - log.records[70].physical_offset)
    assert metrics["backlogMessages"] == "10"
    assert metrics["backlogMessagesExact"] == "true"
    assert reader.reportLatestOffset() == {"physical_offset": log.end_offset}


def test_reported_latest_offset_carries_the_backlog_behind_the_planned_batch(log, monkeypatch):
    reader = stream(log.store_dir, maxMessagesPerTrigger="30")
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"physical_offset": log.records[30].physical_offset}  # canonical, for Spark
    reported = reader.reportLatestOffset()
    assert {k: v for k, v in reported.items() if not k.startswith("lag")} == {
        "physical_offset": log.end_offset,
        "backlogBytes": log.end_offset - log.records[30].physical_offset,
        "backlogMessages": 50,
        "backlogMessagesExact": True,
    }
    monkeypatch.setattr(stream_module, "PROGRESS_COUNT_MAX", 10)
    estimated = reader.reportLatestOffset()
    assert estimated["backlogMessagesExact"] is False
    assert 40 <= estimated["backlogMessages"] <= 60  # sizes of the first 10 extrapolated
    reader.latestOffset(end, ReadAllAvailable())
    assert reader.reportLatestOffset()["backlogMessages"] == 0


def test_offsets_from_another_source_are_rejected(log):
    reader = stream(log.store_dir)
    with pytest.raises(SourceError, match="not issued by the rocketmq source"):
        reader.latestOffset({"topic": {"0": 5}}, ReadAllAvailable())


def test_empty_store_reads_nothing(tmp_path):
    LogWriter(tmp_path / "s")
    reader = batch(tmp_path / "s")
    assert reader.partitions() == []
    s = stream(tmp_path / "s")
    start = s.initialOffset()
    assert s.latestOffset(start, ReadAllAvailable()) == start


def test_copied_store_reads_the_same(log, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(log.store_dir, copy)
    reader = batch(copy)
    assert rows(reader, reader.partitions()) == reference_rows(log.records)


def test_missing_store_directory_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        batch(tmp_path / "nope").partitions()


def driver_stream(store, **options: str) -> DriverReadStreamReader:
    raw = {"path": str(store), "startingOffsets": "earliest", **options}
    reader = stream_reader(parse_options(raw, streaming=True), ARROW_SCHEMA)
    assert isinstance(reader, DriverReadStreamReader)
    return reader


def test_driver_read_is_off_by_default(log):
    raw = {"path": str(log.store_dir), "startingOffsets": "earliest"}
    reader = stream_reader(parse_options(raw, streaming=True), ARROW_SCHEMA)
    assert type(reader) is RocketMQStreamReader


def test_driver_read_hands_small_batches_to_spark_as_one_prefetched_partition(log):
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper

    reader = driver_stream(log.store_dir, driverReadMaxBytes="1m", maxBytesPerPartition="1000")
    assert isinstance(reader, _SimpleStreamReaderWrapper)  # what PySpark checks for the path
    assert reader.simple_reader is reader  # PySpark asks it for Trigger.AvailableNow support
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    partitions = reader.partitions(start, end)
    assert len(partitions) == 1  # Spark takes exactly one partition next to prefetched rows
    assert len(stream(log.store_dir, maxBytesPerPartition="1000").partitions(start, end)) > 1
    prefetched = [row for b in reader.getCache(start, end) for row in b.to_pylist()]
    for row in prefetched:
        row["properties"] = dict(row["properties"])
    assert prefetched == reference_rows(log.records)
    assert rows(reader, partitions) == prefetched  # a replayed batch reads the same records


def test_driver_read_leaves_larger_batches_to_the_executors(log):
    reader = driver_stream(log.store_dir, driverReadMaxBytes="1000", minPartitions="2")
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["physical_offset"] - start["physical_offset"] > 1000
    assert reader.getCache(start, end) is None
    assert rows(reader, reader.partitions(start, end)) == reference_rows(log.records)


def test_driver_read_stream_is_exactly_once_under_admission_control(log):
    reader = driver_stream(log.store_dir, driverReadMaxBytes="4m", maxMessagesPerTrigger="9")
    start, got, batches = reader.initialOffset(), [], 0
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        reader.partitions(start, end)
        batch_rows = [row for b in reader.getCache(start, end) for row in b.to_pylist()]
        assert len(batch_rows) <= 9
        got += [r["physical_offset"] for r in batch_rows]
        reader.commit(end)
        start, batches = end, batches + 1
    assert got == [r["physical_offset"] for r in reference_rows(log.records)]
    assert batches == 9  # 80 messages, 9 per batch


def test_an_ending_offset_inside_a_record_names_endingOffsets(log):
    inside = log.records[1].physical_offset + 7
    reader = batch(log.store_dir, endingOffsets=json.dumps({"physical_offset": inside}))
    with pytest.raises(SourceError, match="^endingOffsets physical_offset .* is not the start"):
        reader.partitions()
