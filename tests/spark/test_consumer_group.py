"""A Spark query as a RocketMQ consumer group, against a real broker process.

``consumerGroup`` commits each batch's end per queue through the broker (``rmq-spark groups``
shows lag 0 once caught up), ``startingOffsets=group`` takes a group over from an official
SimpleConsumer (and hands it back), and failed rows go back through ``%RETRY%<group>`` and
end in ``%DLQ%<group>``, once each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, read_records, start_broker

from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
)
from rmq_spark.broker.producer import Producer

pytestmark = pytest.mark.spark

_FAST = "store.message_delay_level=" + " ".join(["1s"] * 18)
_REPO = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], Any], deadline_s: float, what: str) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path / "store", tmp_path / "work", "broker.topics=orders:2,jobs:1,other:1", _FAST
    )
    yield process
    if process.proc.poll() is None:
        process.stop()


class Rows:
    """A foreachBatch sink keeping (topic, body, reconsume_times) of every row."""

    def __init__(self, on_batch: Callable[[Any], None] | None = None) -> None:
        self.rows: list[tuple[str, bytes, int]] = []
        self.on_batch = on_batch

    def __call__(self, df: Any, batch_id: int) -> None:
        got = df.select("topic", "body", "reconsume_times").collect()
        self.rows += [(r.topic, bytes(r.body), r.reconsume_times) for r in got]
        if self.on_batch is not None:
            self.on_batch(df)

    def bodies(self, topic: str = "") -> list[bytes]:
        return sorted(b for t, b, _ in self.rows if not topic or t == topic)


def start(spark: Any, broker: BrokerProcess, tmp_path: Path, sink: Rows, **options: str) -> Any:
    reader = spark.readStream.format("rocketmq")
    for key, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    return (
        reader.load(str(broker.store_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def groups_json(store: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "groups", "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=_REPO,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def caught_up(store: Path, group: str, topic: str, messages: int) -> bool:
    rows = [r for r in groups_json(store) if r["group"] == group and r["topic"] == topic]
    return (
        bool(rows)
        and sum(r["max_offset"] for r in rows) == messages
        and all(r["lag"] == 0 for r in rows)
    )


def test_a_group_query_commits_each_batch_and_shows_lag_zero(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    sink = Rows()
    with Producer(broker.address) as producer:
        for i in range(40):
            producer.send("orders", f"o{i:02}".encode())
        producer.send("other", b"not ours")
        query = start(
            spark, broker, tmp_path, sink, topics="orders", consumerGroup="sparky",
            brokers=broker.address,
        )  # fmt: skip
        try:
            wait_for(lambda: len(sink.rows) >= 40, 60, "the first 40 rows")
            wait_for(lambda: caught_up(broker.store_dir, "sparky", "orders", 40), 30, "lag 0")
            for i in range(40, 50):
                producer.send("orders", f"o{i:02}".encode())
            wait_for(lambda: caught_up(broker.store_dir, "sparky", "orders", 50), 60, "lag 0")
        finally:
            query.stop()
    assert sink.bodies() == [f"o{i:02}".encode() for i in range(50)]  # once each, no "other"
    offsets = read_consumer_offsets(broker.store_dir)[("orders", "sparky")]
    assert sum(offsets.values()) == 50


def _simple_consumer(rocketmq: ModuleType, address: str, group: str, topic: str) -> Any:
    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=5)
    subscription = {topic: rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, group, subscription, await_duration=2)
    consumer.startup()
    return consumer


def _take(consumer: Any, count: int) -> list[bytes]:
    got: list[Any] = []
    end = time.monotonic() + 30
    while len(got) < count:
        assert time.monotonic() < end, f"received {len(got)} of {count}"
        got += consumer.receive(count - len(got), 30)
    for message in got:
        consumer.ack(message)
    return sorted(bytes(m.body) for m in got)


def test_startingoffsets_group_takes_over_from_a_simple_consumer_and_hands_back(
    spark: Any, broker: BrokerProcess, tmp_path: Path, rocketmq: ModuleType
) -> None:
    group = "handover"
    with Producer(broker.address) as producer:
        for i in range(20):
            producer.send("jobs", f"j{i:02}".encode())
        app = _simple_consumer(rocketmq, broker.address, group, "jobs")
        try:
            assert _take(app, 8) == [f"j{i:02}".encode() for i in range(8)]
        finally:
            app.shutdown()  # its progress: 8 consumed in queue 0
        wait_for(
            lambda: read_consumer_offsets(broker.store_dir).get(("jobs", group)) == {0: 8},
            10,
            "the app's committed offset",
        )
        sink = Rows()
        query = start(
            spark, broker, tmp_path, sink, topics="jobs", consumerGroup=group,
            brokers=broker.address, startingOffsets="group",
        )  # fmt: skip
        try:
            wait_for(lambda: len(sink.rows) >= 12, 60, "the rows after the app's offset")
            wait_for(lambda: caught_up(broker.store_dir, group, "jobs", 20), 30, "lag 0")
        finally:
            query.stop()
        assert sink.bodies() == [f"j{i:02}".encode() for i in range(8, 20)]
        # And back: the application consumer goes on after what Spark committed.
        producer.send("jobs", b"j20")
        app = _simple_consumer(rocketmq, broker.address, group, "jobs")
        try:
            assert _take(app, 1) == [b"j20"]
        finally:
            app.shutdown()


def test_failed_rows_come_back_through_retry_and_end_in_the_dlq_once(
    spark: Any, tmp_path: Path
) -> None:
    from rmq_spark.spark.retry import send_to_retry

    group = "fragile"
    store = tmp_path / "store"
    SubscriptionGroups(store).update(group, retry_max_times=2)  # read when the broker starts
    broker = start_broker(store, tmp_path / "work", "broker.topics=orders:2", _FAST)

    def fail_tag_f(df: Any) -> None:
        failed = df.filter("tags = 'TagF'")
        for _replay in range(2):  # a replayed batch sends the same rows back again
            send_to_retry(failed, group, store=store, brokers=broker.address)

    sink = Rows(fail_tag_f)
    with Producer(broker.address) as producer:
        for i in range(6):
            producer.send("orders", f"p{i}".encode(), tag="TagF" if i % 3 == 0 else "TagG")
    query = start(
        spark, broker, tmp_path, sink, topics="orders", consumerGroup=group,
        brokers=broker.address,
    )  # fmt: skip
    dlq = f"%DLQ%{group}"
    try:
        wait_for(
            lambda: len([r for r in read_records(broker.store_dir) if r.topic == dlq]) >= 2,
            90,
            "the failed rows in the DLQ",
        )
        time.sleep(2.0)  # anything extra would show up now
    finally:
        query.stop()
        broker.stop()
    retry = f"%RETRY%{group}"
    # Each failed message: read from orders, then from %RETRY% after 1 and 2 reconsumes.
    assert sorted(b for t, b, _ in sink.rows if t == "orders") == [
        f"p{i}".encode() for i in range(6)
    ]
    assert sorted((b, n) for t, b, n in sink.rows if t == retry) == [
        (b"p0", 1), (b"p0", 2), (b"p3", 1), (b"p3", 2)
    ]  # fmt: skip
    dead = [r for r in read_records(broker.store_dir) if r.topic == dlq]
    assert sorted(r.body for r in dead) == [b"p0", b"p3"]
    assert {r.reconsume_times for r in dead} == {3}
