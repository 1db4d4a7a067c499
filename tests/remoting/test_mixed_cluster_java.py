"""A real Apache RocketMQ 5.3.3 broker and an rmq-spark broker registered with the same name
server (``rmq-spark namesrv``), in one cluster (issue 26): ``mqadmin clusterList`` lists both,
``mqadmin updateTopic -c`` creates a topic on both, RocketMQ 4.9.8's producer spreads its sends
over the two brokers' queues and one push consumer receives every message from both.

The RocketMQ broker is bench/peers' peer (``rocketmq_peer.py``) run as ``BrokerStartup`` without
its own name server or proxy. It starts after the client JVM (``java/ConsumeDriver.java``), so
its start falls inside the bench lock that JVM holds."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, read_records, wait_for
from java4 import compile_check
from java_driver import Driver
from namesrv_harness import REPO_ROOT, Namesrv, mqadmin
from remoting_harness import start_remoting_broker

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

PEERS = REPO_ROOT / "bench" / "peers"
TOPIC = "Mixed"
OURS = "spark-b"
THEIRS = "rocketmq-b"


@pytest.fixture
def cluster(namesrv: Namesrv, tmp_path: Path) -> Iterator[tuple[BrokerProcess, object, Driver]]:
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    from rocketmq_peer import RocketMQBroker

    ours, _port = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", f"broker.namesrv_addr={namesrv.addr}",
        f"broker.broker_name={OURS}", "broker.cluster_name=DefaultCluster",
    )  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    driver = None
    try:
        driver = Driver(compile_check("ConsumeDriver", tmp_path / "classes"), namesrv.addr, home)
        with RocketMQBroker(proxy=False, namesrv_addr=namesrv.addr, broker_name=THEIRS) as peer:
            yield ours, peer, driver
    finally:
        if driver is not None:
            driver.stop()
        assert ours.stop() == 0


def test_both_brokers_in_one_cluster_share_a_topic(cluster, namesrv: Namesrv) -> None:
    ours, _peer, driver = cluster

    def listing(*args: str) -> str | None:
        out = mqadmin(namesrv, *args)
        return out if OURS in out and THEIRS in out else None

    listed = wait_for(lambda: listing("clusterList"), 90, "clusterList to list both brokers")
    assert "DefaultCluster" in listed
    created = mqadmin(
        namesrv, "updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4"
    )
    assert created.count("success") == 2, created
    wait_for(lambda: listing("topicRoute", "-t", TOPIC), 60, "the route to name both brokers")
    driver.do(f"push m1 gMixed {TOPIC} CLUSTERING plain")
    sent = driver.do(f"send pMixed {TOPIC} 40 mixed", 180)
    bodies = [line.split()[4] for line in sent if line.startswith("SENT ")]
    assert len(bodies) == 40
    wait_for(
        lambda: {r[4] for r in driver.received("m1") if r[0] == TOPIC} >= set(bodies),
        120,
        "the push consumer to receive every message from both brokers",
    )
    stored = Counter(r.body.decode() for r in read_records(ours.store_dir) if r.topic == TOPIC)
    assert 0 < len(stored) < 40, stored  # the rest went to the RocketMQ broker
    assert set(stored) <= set(bodies)
