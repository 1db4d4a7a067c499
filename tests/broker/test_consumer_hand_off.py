"""The copies one receive hands off are stored together, and only stored ones are consumed.

In-process with a ManualClock: several messages come back unacknowledged at once, so one
receive asks for several retry copies; they are stored in one batch, each with RocketMQ's
properties. A copy the store refuses (its properties would pass 32767 bytes) leaves its
message unconsumed, and the group's committed offset stops below it, while the others in the
same receive are stored one by one and consumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_harness import props, read_records

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.store.put import PutRequest

_INVISIBLE_MS = 10_000


def _broker(root: Path, clock: ManualClock) -> Broker:
    return Broker(root, broker_config=BrokerConfig(default_queue_count=1), clock=clock)


def _receive_all(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < count:  # the ConsumeQueue is dispatched behind the puts
        got += consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=1_000)
    return got


def _copies(root: Path) -> list[dict[str, str]]:
    return [props(r) for r in read_records(root) if r.topic == "SCHEDULE_TOPIC_XXXX"]


def test_messages_that_came_back_together_get_their_retry_copies_together(
    tmp_path: Path,
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    with _broker(root, clock) as broker:
        sent = [broker.send("orders", f"m{i}".encode()).message_id for i in range(3)]
        consumer = broker.consumer("billing", "orders")
        assert len(_receive_all(consumer, 3)) == 3
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        copies = _copies(root)
        assert [c["UNIQ_KEY"] for c in copies] == sent
        assert {(c["REAL_TOPIC"], c["DELAY"], c["RECONSUME_TIME"]) for c in copies} == {
            ("%RETRY%billing", "3", "1")
        }
        assert broker.consume.groups.committed_offset("billing", "orders", 0) == 3


def test_a_copy_the_store_refuses_keeps_its_message_and_the_offset_below_it(
    tmp_path: Path,
) -> None:
    clock, root = ManualClock(), tmp_path / "store"
    with _broker(root, clock) as broker:
        broker.send("orders", b"m0")
        # Its copy's properties would pass 32767 bytes: the store refuses the copy.
        broker.store.put(PutRequest("orders", b"big", properties={"p": "x" * 32_700}))
        broker.send("orders", b"m2")
        consumer = broker.consumer("billing", "orders")
        got = _receive_all(consumer, 3)
        assert [m.body for m in got] == [b"m0", b"big", b"m2"]
        clock.advance(_INVISIBLE_MS)
        assert consumer.receive(invisible_ms=_INVISIBLE_MS, wait_ms=0) == []
        assert [c["RETRY_TOPIC"] for c in _copies(root)] == ["orders", "orders"]
        assert broker.consume.groups.committed_offset("billing", "orders", 0) == 1
        assert broker.consume.groups.positions()[("billing", "orders", 0)] == (1, 1)


class _RoutesSeenAtPut:
    """The store, noting at each put whether the topic table already routed its topic."""

    def __init__(self, store: Any, topics: Any) -> None:
        self._store, self._topics = store, topics
        self.routed_at_put: list[bool] = []

    def put(self, request: PutRequest) -> Any:
        self.routed_at_put.append(self._topics.queue_count(request.topic) is not None)
        return self._store.put(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_copys_topic_is_routable_before_the_copy_is_stored(tmp_path: Path) -> None:
    """As RocketMQ creates a retry or DLQ topic before its send-back's put: a consumer that
    sees the copy (a dump, a pull) must be able to route ``%DLQ%<group>`` at once."""
    clock, root = ManualClock(), tmp_path / "store"
    with _broker(root, clock) as broker:
        sent = broker.send("orders", b"m")
        record = broker.store.read_decoded(sent.physical_offset)
        copies = broker.consume.copies
        seen = _RoutesSeenAtPut(broker.store, broker.service.topics)
        copies._store = seen  # the one seam between the copy path and the store
        assert copies.to_dlq("billing", record, dict(props(record.record)), 1)
        assert seen.routed_at_put == [True]
