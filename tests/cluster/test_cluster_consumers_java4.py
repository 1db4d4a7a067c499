"""RocketMQ 4.9.8's Java ``DefaultMQPushConsumer`` (``tests/remoting/java/ConsumeDriver.java``)
over two rmq-spark brokers' remoting ports: it rebalances from the name server's routes and
pulls every queue of both brokers; its offsets go to the broker owning each queue and survive
a restart of each broker (a second consumer of the group gets only the new messages). The JVM
runs under the bench lock held for this directory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import wait_for
from cluster_harness import ClusterBroker, create_topic, wait_route
from java4 import compile_check
from java_driver import Driver
from namesrv_harness import Namesrv

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

TOPIC = "Ledger"
GROUP = "auditors"
BOTH = {"broker-a", "broker-b"}


@pytest.fixture
def driver(namesrv: Namesrv, tmp_path: Path) -> Iterator[Driver]:
    home = tmp_path / "home"
    home.mkdir()
    class_path = compile_check("ConsumeDriver", tmp_path / "classes")
    started = Driver(class_path, namesrv.addr, home, lock=None)  # this directory holds it
    yield started
    started.stop()


def _send(producer: Producer, prefix: str, count: int) -> dict[str, str]:
    """Body -> the broker that stored it."""
    sent = {f"{prefix}-{i}": producer.send(TOPIC, f"{prefix}-{i}".encode()).broker
            for i in range(count)}  # fmt: skip
    assert set(sent.values()) == BOTH
    return sent


def _bodies(driver: Driver, consumer: str) -> list[str]:
    return [fields[4] for fields in driver.received(consumer)]


def test_java4_push_consumer_reads_both_brokers_and_offsets_survive_restarts(
    namesrv: Namesrv, brokers: list[ClusterBroker], driver: Driver
) -> None:
    a, b = brokers
    create_topic(namesrv, TOPIC)
    wait_route(a.address, TOPIC, BOTH)
    with Producer(a.address) as producer:
        first = _send(producer, "first", 200)
    driver.do(f"push c1 {GROUP} {TOPIC} CLUSTERING plain")
    wait_for(lambda: set(_bodies(driver, "c1")) >= first.keys(), 120, "c1 to get every message")
    driver.do("stop c1")  # the client commits its offsets to each queue's broker on shutdown
    for broker in brokers:
        count = sum(1 for owner in first.values() if owner == broker.name)
        wait_for(lambda broker=broker, count=count: _committed(broker) == count, 30,
                 f"{broker.name}'s offsets to count its {count} messages")  # fmt: skip
    for broker in brokers:
        assert broker.proc is not None and broker.proc.stop() == 0
        broker.start(namesrv)
        wait_route(a.address if broker is b else b.address, TOPIC, BOTH)
    with Producer(b.address) as producer:
        second = _send(producer, "second", 100)
    driver.do(f"push c2 {GROUP} {TOPIC} CLUSTERING plain")
    wait_for(lambda: set(_bodies(driver, "c2")) >= second.keys(), 120, "c2 to get the new ones")
    assert not set(_bodies(driver, "c2")) & first.keys(), "committed messages came back"


def _committed(broker: ClusterBroker) -> int:
    return sum(read_consumer_offsets(broker.store).get((TOPIC, GROUP), {}).values())
