"""spark.readStream.format("rocketmq") through a real SparkSession: micro-batches, triggers,
checkpoints, admission control and data loss. Streams are driven with availableNow or
processAllAvailable, never with sleeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from source_support import LogWriter, make_record

pytestmark = pytest.mark.spark

SEGMENT = 4096


@dataclass
class Sink:
    """A foreachBatch sink: (batch id, Spark partition, physical offset) of every row."""

    rows: list[tuple[int, int, int]] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)

    def __call__(self, df, batch_id: int) -> None:
        from pyspark.sql.functions import spark_partition_id

        got = df.select(spark_partition_id().alias("p"), "physical_offset").collect()
        self.rows += [(batch_id, r.p, r.physical_offset) for r in got]
        self.batch_sizes.append(len(got))

    @property
    def offsets(self) -> list[int]:
        return [offset for _, _, offset in self.rows]

    def check_order_within_partitions(self) -> None:
        by_partition: dict[tuple[int, int], list[int]] = {}
        for batch_id, partition, offset in self.rows:
            by_partition.setdefault((batch_id, partition), []).append(offset)
        for offsets in by_partition.values():
            assert offsets == sorted(offsets)


def start(spark, store, checkpoint, sink, trigger, **options):
    reader = spark.readStream.format("rocketmq").option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load(str(store))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=SEGMENT)
    writer.extend(make_record(i) for i in range(60))
    writer.set_confirm()
    return writer


def offsets_of(records) -> list[int]:
    return [r.physical_offset for r in records]


@pytest.mark.slow
def test_processing_time_trigger_delivers_appended_messages_exactly_once(spark, log, tmp_path):
    sink = Sink()
    query = start(
        spark,
        log.store_dir,
        tmp_path / "ck",
        sink,
        {"processingTime": "0 seconds"},
        maxBytesPerPartition="2000",
    )
    # The writer holds the store's lock while the stream reads, as a broker does: a reader
    # judges the end of a store that nobody holds as final, and could see a lockless writer
    # mid-write there (zeros, then the next record: reported as damage).
    try:
        query.processAllAvailable()
        with log.broker_running():
            for round_index in range(3):  # each round rolls at least one segment
                log.extend(make_record(1000 * round_index + i) for i in range(40))
                log.set_confirm()
                query.processAllAvailable()
    finally:
        query.stop()
    assert sink.offsets == offsets_of(log.records)
    sink.check_order_within_partitions()
    assert len({p for _, p, _ in sink.rows}) > 1  # the partitions were read in parallel


@pytest.mark.slow
def test_available_now_with_admission_control_and_restart_from_checkpoint(spark, log, tmp_path):
    checkpoint = tmp_path / "ck"
    first = Sink()
    query = start(
        spark, log.store_dir, checkpoint, first, {"availableNow": True}, maxMessagesPerTrigger="25"
    )
    query.awaitTermination()
    assert first.offsets == offsets_of(log.records)
    assert first.batch_sizes == [25, 25, 10]
    check_backlog_progress(query, log, [35, 10, 0])
    check_canonical_checkpoint(checkpoint)

    log.extend(make_record(i) for i in range(60, 100))
    log.set_confirm()
    second = Sink()
    query = start(
        spark, log.store_dir, checkpoint, second, {"availableNow": True}, maxMessagesPerTrigger="25"
    )
    query.awaitTermination()
    assert second.offsets == offsets_of(log.records[60:])  # no duplicate, no gap
    assert second.batch_sizes == [25, 15]
    check_backlog_progress(query, log, [15, 0])
    check_canonical_checkpoint(checkpoint)


def _as_dict(value):
    return json.loads(value) if isinstance(value, str) else value


def check_backlog_progress(query, log, backlog_messages: list[int]) -> None:
    """Each batch's progress: latestOffset is the durable end plus the backlog behind the
    batch's end offset (bytes and exactly counted messages)."""
    sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    latest = [_as_dict(s["latestOffset"]) for s in sources]
    latest = [{k: v for k, v in d.items() if not k.startswith("lag")} for d in latest]
    ends = [_as_dict(s["endOffset"])["physical_offset"] for s in sources]
    assert latest == [
        {
            "physical_offset": log.end_offset,
            "backlogBytes": log.end_offset - end,
            "backlogMessages": behind,
            "backlogMessagesExact": True,
        }
        for end, behind in zip(ends, backlog_messages, strict=True)
    ]


def check_canonical_checkpoint(checkpoint) -> None:
    """The offsets Spark wrote to its offset log are exactly the canonical source offsets."""
    written = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    assert written
    for path in written:
        source_offset = json.loads(path.read_text().splitlines()[-1])
        assert set(source_offset) == {"physical_offset"}


@pytest.mark.slow
def test_max_bytes_per_trigger_and_starting_timestamp(spark, log, tmp_path):
    sink = Sink()
    since = log.records[20].store_timestamp_ms
    query = start(
        spark,
        log.store_dir,
        tmp_path / "ck",
        sink,
        {"availableNow": True},
        maxBytesPerTrigger="1000",
        startingTimestamp=str(since),
    )
    query.awaitTermination()
    assert sink.offsets == offsets_of(log.records[20:])
    assert len(sink.batch_sizes) > 5
    assert max(sink.batch_sizes) <= 1000 // 170


@pytest.mark.slow
def test_data_loss_fails_the_stream_or_is_skipped(spark, log, tmp_path):
    sink = Sink()
    query = start(
        spark,
        log.store_dir,
        tmp_path / "ck1",
        sink,
        {"availableNow": True},
        maxMessagesPerTrigger="10",
    )
    query.awaitTermination()
    log.extend(make_record(i) for i in range(60, 120))
    log.set_confirm()
    lost = sorted(p for p in log.commitlog.iterdir())[1]
    lost.unlink()  # retention deleted a segment the query had not read yet... or had
    failing = start(spark, log.store_dir, tmp_path / "ck2", Sink(), {"availableNow": True})
    with pytest.raises(Exception, match="DataLossError"):
        failing.awaitTermination()

    skipping = Sink()
    query = start(
        spark,
        log.store_dir,
        tmp_path / "ck3",
        skipping,
        {"availableNow": True},
        failOnDataLoss="false",
    )
    query.awaitTermination()
    lost_base = int(lost.name)
    assert skipping.offsets == [
        o for o in offsets_of(log.records) if not lost_base <= o < lost_base + SEGMENT
    ]


def test_topic_filter_in_a_stream(spark, log, tmp_path):
    sink = Sink()
    query = start(
        spark, log.store_dir, tmp_path / "ck", sink, {"availableNow": True}, topics="TopicB"
    )
    query.awaitTermination()
    assert sink.offsets == offsets_of(r for r in log.records if r.topic == "TopicB")


def test_stream_with_ending_offsets_is_refused(spark, log):
    df = (
        spark.readStream.format("rocketmq")
        .option("endingOffsets", "latest")
        .load(str(log.store_dir))
    )
    with pytest.raises(Exception, match="endingOffsets applies to batch queries only"):
        df.writeStream.format("noop").start().awaitTermination()


# driverReadMaxBytes: the batches are read on the driver and handed to Spark as prefetched rows.
DRIVER_READ = [{}, {"driverReadMaxBytes": "1m"}]


@pytest.mark.slow
@pytest.mark.parametrize("options", DRIVER_READ, ids=["executors", "driver-read"])
def test_replayed_batch_after_a_crash_reads_the_same_records(spark, log, tmp_path, options):
    checkpoint = tmp_path / "ck"
    first = Sink()
    limits = {"maxMessagesPerTrigger": "25", **options}
    query = start(spark, log.store_dir, checkpoint, first, {"availableNow": True}, **limits)
    query.awaitTermination()
    # Crash after batch 2 was planned (offset log) but before it was committed.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    log.extend(make_record(i) for i in range(60, 70))
    log.set_confirm()
    replay = Sink()
    query = start(spark, log.store_dir, checkpoint, replay, {"availableNow": True}, **limits)
    query.awaitTermination()
    by_batch = {}
    for batch_id, _, offset in replay.rows:
        by_batch.setdefault(batch_id, []).append(offset)
    assert by_batch[2] == [o for b, _, o in first.rows if b == 2]  # the same records again
    assert [o for b, _, o in replay.rows if b > 2] == offsets_of(log.records[60:])
    assert first.batch_sizes == [25, 25, 10]


@pytest.mark.slow
@pytest.mark.parametrize("options", DRIVER_READ, ids=["executors", "driver-read"])
def test_stream_over_a_store_a_broker_is_writing(spark, tmp_path, options):
    import threading

    from rmq_spark.store.config import FlushPolicy, StoreConfig
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    config = StoreConfig(
        root_dir=tmp_path / "store", segment_size_bytes=16384, flush_policy=FlushPolicy.ASYNC
    )
    store = MessageStore.open(config)
    results = []

    def produce(count: int) -> None:
        for index in range(count):
            results.append(store.put(PutRequest(topic="Live", body=b"%06d" % index * 20)))

    sink = Sink()
    trigger = {"processingTime": "0 seconds"}
    query = start(spark, config.root_dir, tmp_path / "ck", sink, trigger, **options)
    try:
        for _ in range(3):  # the query runs while the producer appends (and rolls segments)
            producer = threading.Thread(target=produce, args=(400,))
            producer.start()
            producer.join()
            # ASYNC publishes its written end every confirm_publish_interval_ms, and readers
            # see only what is published: publish now, or the last puts may come a tick late.
            store.flush()
            query.processAllAvailable()
    finally:
        query.stop()
        store.close()
    assert all(r.ok for r in results)
    assert sink.offsets == [r.physical_offset for r in results]
    sink.check_order_within_partitions()
