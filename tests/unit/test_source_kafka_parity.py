"""Kafka-source parity of the rocketmq source, without Spark: Kafka option names fail with the
rocketmq equivalent, minMessagesPerTrigger/maxTriggerDelay, the lag keys of the progress
(subscribed topics only), per-queue startingOffsets/endingOffsets/startingOffsetsByTimestamp."""

from __future__ import annotations

import time

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows
from source_support import LogWriter, make_record

from rmq_spark.errors import SourceError
from rmq_spark.spark import planner
from rmq_spark.spark.options import StartingMode, check_options, parse_options
from rmq_spark.spark.stream import RocketMQStreamReader
from rmq_spark.store.codec import encode_record
from rmq_spark.store.view import StoreView

SEGMENT = 4096


def size(record) -> int:
    return len(encode_record(record))


def stream(store, **options: str) -> RocketMQStreamReader:
    raw = {"path": str(store), "startingOffsets": "earliest", **options}
    return RocketMQStreamReader(parse_options(raw, streaming=True))


@pytest.fixture
def log(tmp_path):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=SEGMENT)
    writer.extend(make_record(i) for i in range(60))  # TopicA: i % 3 != 0, TopicB: the rest
    writer.set_confirm()
    return writer


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("maxOffsetsPerTrigger", "use maxMessagesPerTrigger"),
        ("subscribe", "use topics"),
        ("subscribePattern", "use topicPattern"),
        ("kafka.bootstrap.servers", "give the store directory to load()"),
        ("includeHeaders", "the properties column"),
        ("maxmessagepertrigger", "did you mean maxMessagesPerTrigger?"),
        ("maxoffsetspertrigger", "use maxMessagesPerTrigger"),
    ],
)
def test_kafka_option_names_and_typos_fail_in_one_line_naming_the_equivalent(name, hint):
    with pytest.raises(SourceError) as info:
        check_options({"path": "/s", name: "1"})
    message = str(info.value)
    assert "\n" not in message
    assert f"unknown option {name!r}".lower() in message.lower()  # Spark lower-cases names
    assert hint in message


def test_check_options_reports_what_fails_in_both_modes():
    check_options({"path": "/s", "maxMessagesPerTrigger": "5"})  # a stream option: fine
    check_options({"path": "/s", "endingOffsets": "latest"})  # a batch option: fine
    with pytest.raises(SourceError, match="not an integer"):
        check_options({"path": "/s", "maxMessagesPerTrigger": "ten"})
    with pytest.raises(SourceError, match="needs a store directory"):
        check_options({})


def test_min_messages_and_max_trigger_delay_parse():
    options = parse_options(
        {"path": "/s", "minMessagesPerTrigger": "30", "maxTriggerDelay": "2s"}, streaming=True
    )
    assert (options.min_messages_per_trigger, options.max_trigger_delay_ms) == (30, 2000)
    assert parse_options({"path": "/s"}, streaming=True).max_trigger_delay_ms == 15 * 60_000
    with pytest.raises(SourceError, match="streaming queries only"):
        parse_options({"path": "/s", "minMessagesPerTrigger": "3"}, streaming=False)
    with pytest.raises(SourceError, match="is above maxMessagesPerTrigger"):
        parse_options(
            {"path": "/s", "minMessagesPerTrigger": "9", "maxMessagesPerTrigger": "3"},
            streaming=True,
        )
    with pytest.raises(SourceError, match="not a duration"):
        parse_options({"path": "/s", "maxTriggerDelay": "soon"}, streaming=True)


def test_min_messages_per_trigger_waits_until_enough_or_the_delay(log):
    reader = stream(log.store_dir, minMessagesPerTrigger="30", maxTriggerDelay="1h")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(30)
    start = reader.initialOffset()
    first = reader.latestOffset(start, limit)  # first trigger: Kafka admits without waiting
    assert first == {"physical_offset": log.end_offset}
    log.extend(make_record(i) for i in range(60, 80))
    log.set_confirm()
    assert reader.latestOffset(first, limit) == first  # 20 < 30: no batch
    log.extend(make_record(i) for i in range(80, 90))
    log.set_confirm()
    assert reader.latestOffset(first, limit) == {"physical_offset": log.end_offset}  # 30


def test_max_trigger_delay_admits_a_small_batch(log):
    reader = stream(
        log.store_dir, minMessagesPerTrigger="50", maxMessagesPerTrigger="100", maxTriggerDelay="0"
    )
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(100)  # the minimum rides in the options
    reader._last_trigger_ms = int(time.time() * 1000)
    log.extend(make_record(i) for i in range(60, 61))
    log.set_confirm()
    start = {"physical_offset": log.records[60].physical_offset}
    assert reader.latestOffset(start, limit) == {"physical_offset": log.end_offset}
    waiting = stream(log.store_dir, minMessagesPerTrigger="50", maxTriggerDelay="1h")
    waiting._last_trigger_ms = int(time.time() * 1000)
    assert waiting.latestOffset(start, waiting.getDefaultReadLimit()) == start


def test_min_messages_counts_only_subscribed_topics(log):
    reader = stream(log.store_dir, minMessagesPerTrigger="15", topics="TopicB")
    reader._last_trigger_ms = int(time.time() * 1000)
    start = {"physical_offset": log.records[30].physical_offset}  # 30 records, 10 of TopicB
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
    everything = stream(log.store_dir, minMessagesPerTrigger="15")
    everything._last_trigger_ms = int(time.time() * 1000)
    assert everything.latestOffset(start, everything.getDefaultReadLimit()) != start


def test_lag_counts_subscribed_topics_and_the_oldest_unread_store_time(log):
    view = StoreView.open(log.store_dir)
    start = log.records[10].physical_offset
    behind = log.records[10:]
    all_topics = planner.lag(view, start, log.end_offset, 1000)
    assert (all_topics.messages, all_topics.exact) == (50, True)
    assert all_topics.bytes == log.end_offset - start  # the log bytes, BLANK tails included
    assert all_topics.oldest_store_ms == behind[0].store_timestamp_ms
    b_records = [r for r in behind if r.topic == "TopicB"]
    only_b = planner.lag(view, start, log.end_offset, 1000, topics=("TopicB",))
    assert only_b == planner.Lag(
        len(b_records), sum(size(r) for r in b_records), True, b_records[0].store_timestamp_ms
    )
    by_pattern = planner.lag(view, start, log.end_offset, 1000, topic_pattern="Topic[B]")
    assert by_pattern == only_b
    estimate = planner.lag(view, start, log.end_offset, 9, topics=("TopicB",))
    assert not estimate.exact and 10 <= estimate.messages <= 25
    nothing = planner.lag(view, log.end_offset, log.end_offset, 1000, topics=("TopicB",))
    assert nothing == planner.Lag(0, 0, True, -1)


def test_progress_and_metrics_carry_the_lag_in_messages_bytes_and_seconds(log):
    reader = stream(log.store_dir, maxMessagesPerTrigger="20", topics="TopicA")
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    reported = reader.reportLatestOffset()
    behind = [r for r in log.records if r.physical_offset >= end["physical_offset"]]
    unread = [r for r in behind if r.topic == "TopicA"]
    assert len(unread) == 40 - 20  # maxMessagesPerTrigger counts TopicA only
    assert reported["lagMessages"] == len(unread)
    assert reported["lagBytes"] == sum(size(r) for r in unread)
    assert reported["lagExact"] is True
    age = time.time() - unread[0].store_timestamp_ms / 1000
    assert abs(reported["lagSeconds"] - age) < 60
    assert reported["backlogMessages"] == len(behind)  # the log behind the batch, every topic
    metrics = reader.metrics(end)
    assert metrics["lagMessages"] == str(len(unread))
    assert metrics["lagBytes"] == str(sum(size(r) for r in unread))
    assert float(metrics["lagSeconds"]) > 0
    caught_up = reader.metrics({"physical_offset": log.end_offset})
    assert (caught_up["lagMessages"], caught_up["lagSeconds"]) == ("0", "0.0")


def test_starting_mode_default_is_unchanged():
    assert parse_options({"path": "/s"}, streaming=True).starting_mode is StartingMode.LATEST


def test_max_messages_per_trigger_counts_only_subscribed_topics(log):
    reader = stream(log.store_dir, maxMessagesPerTrigger="4", topics="TopicB")
    start = reader.initialOffset()
    sizes = []
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        partitions = reader.partitions(start, end)
        sizes.append(sum(b.num_rows for p in partitions for b in reader.read(p)))
        start = end
    assert sizes[:5] == [4, 4, 4, 4, 4]  # 20 TopicB messages among 60
    assert sizes[5:] in ([], [0])  # (the TopicA records after the last TopicB one)
    view = StoreView.open(log.store_dir)
    ends = [r.physical_offset + size(r) for r in log.records]
    b_ends = [e for r, e in zip(log.records, ends, strict=True) if r.topic == "TopicB"]
    only_b = planner.advance(view, 0, log.end_offset, records_max=3, topics=("TopicB",))
    assert only_b == b_ends[2]
    assert planner.advance(view, 0, log.end_offset, records_max=3) == ends[2]
