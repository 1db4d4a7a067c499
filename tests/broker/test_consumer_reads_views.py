"""The consume path reads every queue through ``store.cq_view.CqView``, the one reader of a
ConsumeQueue (Spark, the CLI and the dashboard read queues by path through it too): the
store's ``ConsumeQueues.view`` is a live view over the writer's files, read under its lock.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from store_helpers import open_store

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer.ports import QueueListener
from rmq_spark.broker.consumer.wiring import broker_wiring
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_view import CqView, queue_dirs
from rmq_spark.store.put import PutRequest

_INVISIBLE_MS = 10_000
_LEVEL_3_MS = 10_000  # a first retry comes back after RocketMQ's delay level 3


class _OnlyViews:
    """A queue source that answers only what ``ports.QueueSource`` names: views and the
    listener; any other read of the store's queues fails the test."""

    def __init__(self, queues: ConsumeQueues) -> None:
        self._queues = queues
        self.viewed: set[tuple[str, int]] = set()

    def view(self, topic: str, queue_id: int) -> CqView:
        self.viewed.add((topic, queue_id))
        return self._queues.view(topic, queue_id)

    def add_listener(self, listener: QueueListener) -> None:
        self._queues.add_listener(listener)


def test_receive_filter_retry_and_offsets_read_queues_only_through_views(tmp_path: Path) -> None:
    root, clock = tmp_path / "store", ManualClock()
    sources: list[_OnlyViews] = []

    def source(store: object) -> _OnlyViews:
        sources.append(_OnlyViews(store.consume_queues))  # type: ignore[attr-defined]
        return sources[-1]

    wiring = dataclasses.replace(broker_wiring(root, clock), queue_source=source)
    config = BrokerConfig(topics=("orders",), default_queue_count=2)
    with Broker(root, broker_config=config, clock=clock, consumer_wiring=wiring) as broker:
        tags = ["B", "A"] * 4
        sent = [broker.send("orders", f"o{i}".encode(), tag=tag) for i, tag in enumerate(tags)]
        consumer = broker.consumer("billing", "orders", "A")
        got = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        while len(got) < 4:
            got += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        assert sorted(m.message_id for m in got) == sorted(s.message_id for s in sent[1::2])
        for message in got[1:]:
            consumer.ack(message)
        consumer.change_invisible_duration(got[0], 0)  # a nack: a retry copy, level 3
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        clock.advance(_LEVEL_3_MS)
        store = broker.store  # the reviver reads the ConsumeQueue, dispatched behind puts
        assert store.consume_queues.wait_dispatched(store.confirmed_offset, 30)
        broker.consume.reviver.revive_due()
        [again] = consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=5_000)
        assert again.message_id == got[0].message_id and again.delivery_attempt == 2
        consumer.ack(again)
        low, high = broker.consume.queue_bounds("orders", 0)
        assert (low, high) == (0, 4)
        assert broker.consume.offset_for_time("orders", 0, 0) == 0
        assert broker.consume.offset_for_time("orders", 0, clock.now_ms() + 1) == high
    [only] = sources
    assert ("orders", 0) in only.viewed and ("%RETRY%billing", 0) in only.viewed


def test_a_live_view_moves_with_the_writer_and_reads_as_the_view_by_path(tmp_path: Path) -> None:
    store = open_store(tmp_path, clock=ManualClock(), consume_queue_file_units=4)
    try:
        placed = [store.put(PutRequest("t", b"x" * i, tags="a", queue_id=0)) for i in range(6)]
        queues = store.consume_queues
        assert queues.wait_dispatched(store.confirmed_offset, 10)
        live = queues.view("t", 0)
        assert isinstance(live, CqView) and queues.view("t", 0) is live
        with CqView.open(queue_dirs(tmp_path, "t")[0]) as by_path:
            assert live.entries(0, 10) == by_path.entries(0, 10)
            assert [e[0] for e in live.entries(0, 10)] == [p.physical_offset for p in placed]
            assert (live.min_offset, live.max_offset) == (by_path.min_offset, 6)
            stamps = {p.physical_offset: p.store_timestamp_ms for p in placed}.get
            for p in placed:
                assert live.first_at_or_after(p.physical_offset) == p.queue_offset
                at = live.offset_for_time(p.store_timestamp_ms, stamps)
                assert at == by_path.offset_for_time(p.store_timestamp_ms, stamps)
            live.close()  # the writer's files are the writer's: a view does not close them
            more = store.put(PutRequest("t", b"later", queue_id=0))
            assert queues.wait_dispatched(store.confirmed_offset, 10)
            assert live.max_offset == 7 and by_path.max_offset == 6  # the snapshot stays
            assert live.entries(6, 5) == [(more.physical_offset, more.total_size, 0)]
        assert live.entries(7, 1) == [] and live.entries(-1, 2) == []
        assert queues.view("nothing", 0).max_offset == 0
        assert queues.view("nothing", 0).entries(0, 1) == []
    finally:
        store.close()
