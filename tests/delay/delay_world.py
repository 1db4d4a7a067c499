"""Helpers of the delay tests: a store with short delay levels, an embedded broker on a
ManualClock, putting delayed / timer messages and reading a real topic back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import ManualClock
from rmq_spark.delay.config import DelayConfig
from rmq_spark.delay.job import open_redeliverer
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.redeliver import Redeliverer
from rmq_spark.delay.sink import Sink, StoreSink
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.put import PutRequest

TEST_LEVELS = "1s 2s 3s"
START_MS = 1_700_000_000_000


def store_config(root: Path, **changes: object) -> StoreConfig:
    values: dict[str, object] = {
        "root_dir": root,
        "segment_size_bytes": 1 << 20,
        "flush_policy": FlushPolicy.ASYNC,
        "message_delay_level": TEST_LEVELS,
    }
    values.update(changes)
    return StoreConfig(**values)  # type: ignore[arg-type]


@dataclass
class DelayWorld:
    """A store, its embedded broker and the clock both use."""

    root: Path
    clock: ManualClock
    broker: Broker

    def put_delayed(
        self, topic: str, body: bytes, level: int, *, queue_id: int = 0, **props: str
    ) -> None:
        properties = {"DELAY": str(level), **props}
        result = self.broker.store.put(
            PutRequest(topic=topic, body=body, queue_id=queue_id, properties=properties)
        )
        assert result.ok, result

    def put_timer(self, topic: str, body: bytes, deliver_ms: int) -> None:
        outcome = self.broker.send(topic, body, delivery_timestamp_ms=deliver_ms, tag="T")
        assert outcome.ok, outcome

    def redeliverer(self, sink: Sink | None = None, **config: object) -> Redeliverer:
        return open_redeliverer(
            self.root,
            sink or StoreSink(self.broker),
            config=DelayConfig(**config),  # type: ignore[arg-type]
            delay_levels_ms=parse_message_delay_level(TEST_LEVELS),
            clock=self.clock,
        )

    def records(self, topic: str) -> list[MessageRecord]:
        with LogReader(self.root) as reader:
            return [s.record for s in reader.scan(0, {topic})]


def make_world(root: Path, clock: ManualClock | None = None, **store: object) -> DelayWorld:
    clock = clock or ManualClock(START_MS)
    broker = Broker(root, store_config=store_config(root, **store), clock=clock)
    return DelayWorld(root, clock, broker)
