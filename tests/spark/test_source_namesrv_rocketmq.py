"""Spark over a real Apache RocketMQ 5.3.3 deployment: its name server lists its broker, the
broker reports its ``storePathRootDir`` (``GET_BROKER_CONFIG``), and the source reads the
messages the official client sent straight from that store, with no connector in between
(``bench/peers/rocketmq_peer.py``: name server + proxy with the broker in-process)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rmq_spark.broker.config_files.rocketmq_config import TopicConfig
from rmq_spark.broker.config_files.rocketmq_config_files import write_topics
from rmq_spark.spark.cluster_discovery import discover
from rmq_spark.spark.options import parse_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers"
TOPIC = "RealTopic"
COUNT = 12
WAIT_S = 60.0


def _send_when_routed(rocketmq, endpoint: str) -> None:  # noqa: ANN001
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=10)
    producer = rocketmq.Producer(config, (TOPIC,))
    producer.startup()
    try:
        for i in range(COUNT):
            message = rocketmq.Message()
            message.topic, message.body = TOPIC, f"real-{i}".encode()
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


def _readable(spark, options: dict[str, str]) -> int:  # noqa: ANN001
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().where(f"topic = '{TOPIC}'").count()


def test_a_real_rocketmq_brokers_store_is_discovered_and_read(spark, tmp_path: Path) -> None:
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    from produce import import_client
    from rocketmq_peer import RocketMQBroker

    store = tmp_path / "rocketmq-store"
    store.mkdir()
    write_topics(store, {TOPIC: TopicConfig(TOPIC, 4, 4)})  # routes without updateTopic
    properties = {"flushConsumeQueueThoroughInterval": 500}  # the checkpoint every 0.5 s
    with RocketMQBroker(store_dir=store, broker_properties=properties) as peer:
        _send_when_routed(import_client(), peer.endpoint)
        options = {"namesrv": peer.namesrv_addr, "cluster": "DefaultCluster"}
        found = discover(parse_options(options, streaming=False))
        assert {n: s.path for n, s in found.items()} == {"broker-a": str(store.resolve())}
        deadline = time.monotonic() + WAIT_S
        while (count := _readable(spark, options)) < COUNT and time.monotonic() < deadline:
            time.sleep(1)  # RocketMQ makes its end durable in the checkpoint now and then
        assert count == COUNT
        rows = (
            spark.read.format("rocketmq").option("namesrv", peer.namesrv_addr).load()
            .where(f"topic = '{TOPIC}'").select("broker_name", "body").collect()
        )  # fmt: skip
    assert sorted((r.broker_name, bytes(r.body).decode()) for r in rows) == sorted(
        ("broker-a", f"real-{i}") for i in range(COUNT)
    )
