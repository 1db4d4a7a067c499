"""Replication with real Apache RocketMQ 5.3.3 brokers (bench/peers' peer, Maven Central jars):

* a RocketMQ slave (``brokerRole=SLAVE``, ``brokerId=1``) of an rmq-spark master: its CommitLog
  is the master's bytes. The slave is given no
  ``haMasterAddress``: 5.3.3 drops a configured one (``BrokerController`` hands it to the HA
  service before the store's ``start`` creates the HA client), so it learns the master's HA
  address as a default 5.x slave does, from the name server's register answer
  (``haServerAddr``, which our master registers). Once our master is killed, a RocketMQ 4.9.8
  push consumer reads every message from that slave (the name server keeps the topic's route
  with the slave alone; a 5.x slave serves pulls only with ``slaveReadEnable=true``, else it
  answers each ``[REJECTREQUEST]system busy``);
* an rmq-spark slave of a RocketMQ master: the same bytes, the master's topics copied by the
  config sync, and its records served to a remoting pull.

Every JVM starts inside the machine-wide bench lock (the client JVM holds it for the first
test; the second takes it for its peer)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, bench_lock, read_records, start_broker, wait_for
from replication_harness import free_port, remoting_call

from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the bench lock may be another suite's for minutes
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

TESTS = Path(__file__).resolve().parents[1]
PEERS = TESTS.parent / "bench" / "peers"
SEGMENT = 1 << 20  # RocketMQ's mappedFileSizeCommitLog must equal ours


def _imports() -> None:
    for path in (TESTS / "remoting", PEERS):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def same_prefix(ours: Path, theirs: Path, end: int) -> bool:
    """The two stores' CommitLogs hold the same bytes below ``end``."""
    for base in range(0, end, SEGMENT):
        name = f"{base:020d}"
        size = min(SEGMENT, end - base)
        a, b = ours / "commitlog" / name, theirs / "commitlog" / name
        if not b.exists() or a.read_bytes()[:size] != b.read_bytes()[:size]:
            return False
    return True


def log_end(store: Path) -> int:
    last = read_records(store)[-1]
    return last.physical_offset + len(_encode(last))


def _encode(record: object) -> bytes:
    from rmq_spark.store.record_encode import encode_record

    return encode_record(record)  # type: ignore[arg-type]


def send(rocketmq: ModuleType, address: str, count: int) -> list[str]:
    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=10)
    producer = rocketmq.Producer(config, ("orders",))
    producer.startup()
    try:
        bodies = []
        for i in range(count):
            message = rocketmq.Message()
            message.topic = "orders"
            message.body = f"interop-{i}".encode()
            producer.send(message)
            bodies.append(f"interop-{i}")
        return bodies
    finally:
        producer.shutdown()


def test_a_rocketmq_slave_copies_our_master_and_serves_a_consumer_once_it_is_gone(
    tmp_path: Path, rocketmq: ModuleType
) -> None:
    _imports()
    from java4 import compile_check
    from java_driver import Driver
    from namesrv_harness import start_namesrv
    from rocketmq_peer import RocketMQBroker

    classes = compile_check("ConsumeDriver", tmp_path / "classes")
    (tmp_path / "home").mkdir()
    with bench_lock():
        namesrv = start_namesrv(tmp_path / "namesrv")
    try:
        driver = Driver(classes, namesrv.addr, tmp_path / "home")  # holds the bench lock
    except BaseException:
        namesrv.stop()
        raise
    ha = free_port()
    master = start_broker(
        tmp_path / "master", tmp_path / "work", f"store.segment_size_bytes={SEGMENT}",
        f"broker.ha_listen=127.0.0.1:{ha}", f"broker.namesrv_addr={namesrv.addr}",
        "broker.broker_name=broker-a", "broker.cluster_name=DefaultCluster",
    )  # fmt: skip
    (tmp_path / "slave").mkdir()
    peer = RocketMQBroker(
        proxy=False, namesrv_addr=namesrv.addr, broker_name="broker-a",
        store_dir=tmp_path / "slave",
        broker_properties={"brokerRole": "SLAVE", "brokerId": 1, "slaveReadEnable": "true",
                           "mappedFileSizeCommitLog": SEGMENT},
    )  # fmt: skip
    try:
        sent = send(rocketmq, master.address, 40)
        with peer:
            end = log_end(master.store_dir)
            wait_for(lambda: "slave 127.0.0.1" in master.log_text(), 60, "the RocketMQ slave")
            wait_for(lambda: same_prefix(master.store_dir, tmp_path / "slave", end), 60,
                     "the master's bytes on the RocketMQ slave")  # fmt: skip
            _read_from_the_slave_once_the_master_is_gone(master, namesrv, driver, sent, tmp_path)
    finally:
        driver.stop()
        if master.proc.poll() is None:
            master.kill()
        namesrv.stop()


def _read_from_the_slave_once_the_master_is_gone(
    master: BrokerProcess, namesrv: Any, driver: Any, sent: list[str], root: Path
) -> None:
    topics = root / "slave" / "config" / "topics.json"
    wait_for(lambda: topics.exists() and '"orders"' in topics.read_text(), 90,
             "the RocketMQ slave's SlaveSynchronize to copy our topic")  # fmt: skip
    port = int(namesrv.addr.rsplit(":", 1)[1])
    route = RequestCode.GET_ROUTEINFO_BY_TOPIC
    wait_for(lambda: remoting_call(port, route, {"topic": "orders"}).code == 0, 60,
             "our master to register the topic")  # fmt: skip
    master.kill()
    driver.do("push s1 gSlaveRead orders CLUSTERING plain")
    received = driver.received
    wait_for(lambda: set(sent) <= {r[4] for r in received("s1") if r[0] == "orders"}, 120,
             "the consumer to read every message from the RocketMQ slave")  # fmt: skip
    driver.do("stop s1")


def test_our_slave_copies_a_rocketmq_master(tmp_path: Path, rocketmq: ModuleType) -> None:
    _imports()
    from rocketmq_peer import RocketMQBroker

    (tmp_path / "master").mkdir()
    peer = RocketMQBroker(topics=("orders",), store_dir=tmp_path / "master", flush="ASYNC_FLUSH",
                          broker_properties={"mappedFileSizeCommitLog": SEGMENT})  # fmt: skip
    slave: BrokerProcess | None = None
    with bench_lock(), peer:
        port, remoting = peer.broker_port, free_port()
        slave = start_broker(
            tmp_path / "slave", tmp_path / "work", f"store.segment_size_bytes={SEGMENT}",
            "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port + 1}",
            f"broker.ha_master_remoting=127.0.0.1:{port}", "broker.ha_config_sync_interval_ms=500",
            f"broker.remoting_listen=127.0.0.1:{remoting}",
        )  # fmt: skip
        try:
            send(rocketmq, peer.endpoint, 40)
            wait_for(lambda: len(read_records(tmp_path / "master")) == 40, 30, "the sends")
            end = log_end(tmp_path / "master")
            wait_for(lambda: same_prefix(tmp_path / "master", tmp_path / "slave", end), 60,
                     "the RocketMQ master's bytes on our slave")  # fmt: skip
            queue = read_records(tmp_path / "slave")[-1].queue_id
            fields = {"consumerGroup": "g", "topic": "orders", "queueId": str(queue),
                      "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4",
                      "subscription": "*", "expressionType": "TAG"}  # fmt: skip

            def pulled() -> bool:
                answer = remoting_call(remoting, RequestCode.PULL_MESSAGE, fields)
                return answer.code == ResponseCode.SUCCESS and b"interop-" in answer.body

            wait_for(pulled, 30, "a pull from our slave (the topic synced from the master)")
        finally:
            assert slave.stop() == 0
