"""``rmq_spark.cli.dashboard.data`` and ``lookup``: what the pages show, without HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_world import ACKED, ORDERS, PAYMENTS, READER, START_MS, World

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.cli.dashboard import data, lookup
from rmq_spark.cli.dashboard.chart import traffic_svg
from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConfigError, InvalidMessageIdError, OffsetOutOfRangeError

MINUTE = lookup.MINUTE_MS


def test_topics_and_queues_count_messages_and_bytes(world: World) -> None:
    topics = {row.topic: row for row in data.topic_rows(world.root)}
    assert topics["orders"].queue_count == 2
    assert topics["orders"].message_count == ORDERS
    assert topics["payments"].message_count == PAYMENTS
    assert topics["SCHEDULE_TOPIC_XXXX"].system
    assert not topics["orders"].system
    queues = data.topic_queues(world.root, "orders")
    assert [q.queue_id for q in queues] == [0, 1]
    assert sum(q.message_count for q in queues) == ORDERS
    # Every unit's size is its record's size: the bytes are the records' total sizes.
    records = lookup.messages_by_time(world.root, "orders", 0, START_MS + 3_600_000, 100)[0]
    assert sum(q.size_bytes for q in queues) == sum(r["total_size"] for r in records)
    assert data.topic_queues(world.root, "no-such-topic") == []


def test_groups_show_the_lag_of_what_was_not_acknowledged(world: World) -> None:
    [row] = [r for r in data.group_rows(world.root) if r.group == "billing"]
    assert (row.topic, row.offset, row.max_offset) == ("payments", ACKED, PAYMENTS)
    assert row.lag == PAYMENTS - ACKED


def test_reader_lag_is_the_distance_to_the_store_end(world: World) -> None:
    [reader] = data.reader_rows(world.root)
    summary = data.store_summary(world.root)
    assert reader.name == READER
    assert reader.lag_bytes == summary.end_offset - world.reader_offset > 0
    # Message i >= 4 was stored at START + 2 min + i s; the newest one (payments) at + 12 s.
    assert reader.lag_seconds == pytest.approx(7.0)
    assert not summary.broker_open and summary.segment_count >= 1


def test_delay_rows_show_the_pending_delayed_message(world: World) -> None:
    rows, passes = data.delay_rows(world.root)
    assert passes == 0
    [level] = [r for r in rows if r.name == "level 2"]
    assert (level.queue_id, level.delivered_below, level.pending) == (1, 0, 1)


def test_traffic_counts_messages_per_minute_of_each_topic(world: World) -> None:
    now = START_MS + 30 * 24 * 3_600_000  # the store is long quiet: its last hour is shown
    traffic = lookup.traffic(world.root, now, minutes=5)
    assert traffic.start_ms == START_MS - 2 * MINUTE
    assert traffic.counts["orders"] == [0, 0, 4, 0, 8]
    assert sum(traffic.counts["payments"]) == PAYMENTS
    assert "SCHEDULE_TOPIC_XXXX" not in traffic.counts
    assert sum(traffic.totals()) == ORDERS + PAYMENTS  # the delayed one waits in a system topic
    svg = traffic_svg(traffic.start_ms, traffic.counts)
    assert svg.startswith("<svg") and svg.count("<polyline") == len(traffic.counts)


def test_lookup_by_time_range_and_by_msg_id(world: World) -> None:
    found, total = lookup.messages_by_time(
        world.root, "orders", START_MS + 2 * MINUTE, START_MS + 2 * MINUTE + 10_000, limit=3
    )
    assert total == 6
    assert [m["body_text"] for m in found] == ["order body 4", "order body 5", "order body 6"]
    message = lookup.message_by_msg_id(world.root, world.msg_id)
    assert message["body_text"] == world.body and message["msg_id"] == world.msg_id


def test_bad_lookups_raise_one_line_errors(world: World) -> None:
    with pytest.raises(InvalidMessageIdError):
        lookup.message_by_msg_id(world.root, "not-an-id")
    with pytest.raises(OffsetOutOfRangeError):
        lookup.message_by_msg_id(world.root, "7F00000100002A9F00000000FFFFFFFF")
    with pytest.raises(ConfigError, match="begin: not epoch milliseconds nor ISO 8601"):
        lookup.parse_time_ms("yesterday", "begin")
    with pytest.raises(ConfigError, match="--tables"):
        lookup.messages_by_key(None, "orders", "order-1")
    assert lookup.parse_time_ms("2025-11-24T16:00", "begin") == START_MS
    assert lookup.parse_time_ms(str(START_MS), "begin") == START_MS


def test_queue_snapshots_agree_with_the_brokers_queue_files(world: World) -> None:
    from rmq_spark.cli.dashboard.files import topic_queue_snapshots
    from rmq_spark.store.cq_files import CQ_FILE_UNITS, CqQueueFiles

    for topic in ("orders", "payments", "SCHEDULE_TOPIC_XXXX"):
        for snapshot in topic_queue_snapshots(world.root, topic):
            files = CqQueueFiles.load(snapshot.directory, CQ_FILE_UNITS)
            try:
                assert (snapshot.min_offset, snapshot.max_offset) == (
                    files.min_offset,
                    files.max_offset,
                )
                units = files.units(files.min_offset, files.max_offset - files.min_offset)
                expected = [(u.physical_offset, u.size) for u in units]
                assert [snapshot.unit(i) for i in range(files.min_offset, files.max_offset)] == (
                    expected
                )
            finally:
                files.close()


def test_the_window_spans_the_data_and_the_current_rate_is_the_last_minute(world: World) -> None:
    # Orders 0..3 at START + 0..3 s, 4..11 at START + 124..131 s; payments at START + 132 s.
    now = START_MS + 150_000
    traffic = lookup.traffic(world.root, now)
    assert (traffic.start_ms, traffic.minutes, traffic.chosen) == (START_MS, 3, False)
    assert traffic.counts["orders"] == [4, 0, 8]
    assert traffic.average("orders") == ORDERS / 3  # not diluted over an hour of nothing
    assert traffic.current == {"orders": 8, "payments": PAYMENTS}  # stored in [now - 60 s, now]
    later = lookup.traffic(world.root, START_MS + 30 * 24 * 3_600_000)
    assert later.counts == traffic.counts and later.current == {"orders": 0, "payments": 0}
    one = lookup.traffic(world.root, now, topics=["orders"])
    assert list(one.counts) == ["orders"] and one.minutes == 3


def test_paging_by_queue_offset_and_by_time_visits_every_message_once(world: World) -> None:
    queue = lookup.offset_page(world.root, "orders", 0, 0, 2)
    assert len(queue.messages) == 2 and queue.previous is None
    assert queue.next is not None and queue.next["offset"] == "2"
    seen, args = [], {"offset": "0"}
    while args is not None:
        page = lookup.offset_page(world.root, "orders", 1, int(args["offset"]), 2)
        seen += [(m["queue_id"], m["queue_offset"]) for m in page.messages]
        args = page.next
    assert seen == [(1, i) for i in range(len(seen))] and len(seen) > 2
    # Payments were all stored in the same millisecond: the pages step over them by count.
    bodies: list[str] = []
    cursor: dict[str, str] | None = {"begin": "0", "skip": "0"}
    while cursor is not None:
        end = START_MS + 3_600_000
        page = lookup.time_page(
            world.root, "payments", int(cursor["begin"]), end, 2, int(cursor["skip"])
        )
        assert page.total >= len(page.messages)
        bodies += [m["body_text"] for m in page.messages]
        cursor = page.next
    assert sorted(bodies) == [f"payment {i}" for i in range(PAYMENTS)]
    orders = lookup.time_page(world.root, "orders", START_MS, START_MS + 3_600_000, 5, 0)
    assert orders.total == ORDERS and len(orders.messages) == 5
    assert orders.next is not None and orders.next["skip"] == "1"


def test_a_topic_at_500_a_minute_shows_500_now_and_on_average(tmp_path: Path) -> None:
    # The case: two minutes at ~500/min once showed 16.7 (1000 over a fixed hour).
    clock = ManualClock(START_MS)
    with Broker(tmp_path / "store", broker_config=BrokerConfig(), clock=clock) as broker:
        for i in range(1000):
            assert broker.send("busy", f"m{i}".encode()).ok
            clock.advance(120)  # 500 a minute
        assert broker.store.consume_queues.wait_dispatched(broker.store.confirmed_offset, 10)
    traffic = lookup.traffic(tmp_path / "store", clock.now_ms())
    assert traffic.minutes == 2 and traffic.counts["busy"] == [500, 500]
    assert traffic.average("busy") == 500.0 and traffic.current["busy"] == 500
