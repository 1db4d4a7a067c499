"""Spark streaming over two real Apache RocketMQ 5.3.3 brokers (``bench/peers/rocketmq_peer.py``:
a name server, each broker in its own proxy JVM), found through their name server: one query
reads both stores with offsets per broker, exactly once across query restarts and across a
restart of one broker on its store (it leaves the name server, comes back, is read on from
its offset: a restarted RocketMQ broker writes a stale confirmPhyOffset, which must not cap
the end the source reads to)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rmq_spark.broker.config_files.rocketmq_config import TopicConfig
from rmq_spark.broker.config_files.rocketmq_config_files import write_topics

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers"
TOPICS = {"broker-a": "RealA", "broker-b": "RealB"}  # one topic per broker: a local proxy
COUNT = 8  # sends only to its own broker
WAIT_S = 90.0
# the checkpoint (the end the source reads to) every 0.5 s
PROPERTIES = {"flushConsumeQueueThoroughInterval": 500}


def _peers() -> tuple[Any, Any]:
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    from produce import import_client
    from rocketmq_peer import RocketMQBroker

    return import_client(), RocketMQBroker


def _send(rocketmq: Any, endpoint: str, topic: str, bodies: list[str]) -> None:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)
    producer = rocketmq.Producer(config, (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = rocketmq.Message()
            message.topic, message.body = topic, body.encode()
            deadline = time.monotonic() + WAIT_S
            while True:  # the proxy's port opens before the broker registers its topics
                try:
                    producer.send(message)
                    break
                except Exception as err:  # the client raises its own exception types
                    if "route" not in str(err).lower() or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    finally:
        producer.shutdown()


def _store(tmp_path: Path, name: str) -> Path:
    store = tmp_path / name
    store.mkdir()
    write_topics(store, {TOPICS[name]: TopicConfig(TOPICS[name], 2, 2)})
    return store


def _drain(spark: Any, namesrv: str, checkpoint: Path, seen: list, expected: int) -> None:
    """Runs of an ``availableNow`` query from ``checkpoint`` until ``expected`` rows were seen
    (RocketMQ makes its end durable in the checkpoint now and then)."""

    def sink(df: Any, _batch_id: int) -> None:
        rows = df.select("broker_name", "topic", "body", "physical_offset").collect()
        seen.extend((r.broker_name, r.topic, bytes(r.body).decode(), r.physical_offset)
                    for r in rows)  # fmt: skip

    deadline = time.monotonic() + WAIT_S
    while len(seen) < expected and time.monotonic() < deadline:
        query = (
            spark.readStream.format("rocketmq").option("namesrv", namesrv)
            .option("cluster", "DefaultCluster").option("startingOffsets", "earliest")
            .option("topics", ",".join(TOPICS.values())).load()
            .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        time.sleep(0.5)
    assert len(seen) >= expected, f"{len(seen)} of {expected} rows read in {WAIT_S} s"


def _bodies(name: str, start: int) -> list[str]:
    return [f"{name}-{i}" for i in range(start, start + COUNT)]


def _expected(*parts: tuple[str, int]) -> list[tuple[str, str, str]]:
    return sorted((name, TOPICS[name], body) for name, start in parts
                  for body in _bodies(name, start))  # fmt: skip


def test_stream_over_two_real_rocketmq_brokers_exactly_once_across_a_broker_restart(
    spark: Any, tmp_path: Path
) -> None:
    rocketmq, rocketmq_broker = _peers()
    stores = {name: _store(tmp_path, name) for name in TOPICS}
    checkpoint, seen = tmp_path / "checkpoint", []
    with rocketmq_broker(store_dir=stores["broker-a"], broker_properties=PROPERTIES) as a:
        namesrv = a.namesrv_addr
        b = rocketmq_broker(store_dir=stores["broker-b"], broker_properties=PROPERTIES,
                            namesrv_addr=namesrv, broker_name="broker-b")  # fmt: skip
        with b:
            _send(rocketmq, a.endpoint, TOPICS["broker-a"], _bodies("broker-a", 0))
            _send(rocketmq, b.endpoint, TOPICS["broker-b"], _bodies("broker-b", 0))
            _drain(spark, namesrv, checkpoint, seen, 2 * COUNT)
        # broker-b stopped: it left the name server; broker-a goes on
        _send(rocketmq, a.endpoint, TOPICS["broker-a"], _bodies("broker-a", COUNT))
        _drain(spark, namesrv, checkpoint, seen, 3 * COUNT)
        kept = _last_offset(checkpoint)["brokers"]["broker-b"]
        b = rocketmq_broker(store_dir=stores["broker-b"], broker_properties=PROPERTIES,
                            namesrv_addr=namesrv, broker_name="broker-b")  # fmt: skip
        with b:  # back on its store (new ports): read on from its offset
            _send(rocketmq, b.endpoint, TOPICS["broker-b"], _bodies("broker-b", COUNT))
            _drain(spark, namesrv, checkpoint, seen, 4 * COUNT)
            offsets = _last_offset(checkpoint)["brokers"]
    assert len(seen) == len({(n, offset) for n, _, _, offset in seen}), "a record read twice"
    assert sorted((n, t, body) for n, t, body, _ in seen) == _expected(
        ("broker-a", 0), ("broker-b", 0), ("broker-a", COUNT), ("broker-b", COUNT)
    )
    assert set(offsets) == set(TOPICS)
    assert offsets["broker-b"]["physical_offset"] > kept["physical_offset"]


def _last_offset(checkpoint: Path) -> dict:
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(offsets[-1].read_text().splitlines()[-1])
