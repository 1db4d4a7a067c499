"""kill -9 of the rmq-spark broker under RocketMQ 4.9.8's Java producers and push consumer
(issue 26), through RocketMQ's own name server: every send the client saw SEND_OK for is in
the store after the restart and reaches the consumer (at least once, as docs/REMOTING.md and
docs/REMOTING_CONSUME.md say), the group's offsets end committed at the queues' ends, and a
new instance of the group resumes there (it gets only what is sent after). One JVM
(``java/CrashDriver.java``) runs the clients, across the crash."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, read_records, start_broker, wait_for
from java4 import compile_check
from java_driver import Driver
from namesrv_harness import Namesrv, free_port

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

TOPIC = "Crash"
GROUP = "gCrash"
QUEUES = 4


def _lines(driver: Driver, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in driver.snapshot() if line.startswith(f"{kind} ")]


def _acked(driver: Driver) -> set[str]:
    return {fields[0] for fields in _lines(driver, "ACK")}


def _received(driver: Driver, consumer: str) -> list[str]:
    return [f[5] for f in _lines(driver, "RECV") if f[0] == consumer and f[1] == TOPIC]


@pytest.fixture
def world(namesrv: Namesrv, tmp_path: Path) -> Iterator[tuple[list[BrokerProcess], Driver]]:
    port = free_port()
    settings = (
        f"broker.remoting_listen=127.0.0.1:{port}",
        f"broker.namesrv_addr={namesrv.addr}",
        f"broker.topics={TOPIC}:{QUEUES}",
    )
    brokers = [start_broker(tmp_path / "store", tmp_path / "work", *settings)]
    driver = None
    try:
        classes = compile_check("CrashDriver", tmp_path / "classes")
        driver = Driver(classes, namesrv.addr, tmp_path, "CrashDriver")
        yield brokers, driver  # the test appends the restarted broker
    finally:
        if driver is not None:
            driver.stop()
        for broker in brokers:
            if broker.proc.poll() is None:
                broker.kill()


def test_kill9_loses_no_acknowledged_send_and_offsets_resume(world, tmp_path: Path) -> None:
    brokers, driver = world
    broker = brokers[-1]
    driver.do(f"push c1 {GROUP} {TOPIC}")
    driver.do(f"produce {TOPIC} 2")
    wait_for(lambda: len(_acked(driver)) >= 300 and len(_received(driver, "c1")) >= 100, 120,
             "sends acknowledged and consumed before the crash")  # fmt: skip
    broker.kill()  # SIGKILL: no shutdown code runs
    before = len(_acked(driver))
    restarted = start_broker(broker.store_dir, tmp_path / "work", *_settings(broker))
    brokers.append(restarted)
    wait_for(lambda: len(_acked(driver)) >= before + 300, 180, "sends acknowledged after restart")
    driver.do("stopproduce")
    acked = _acked(driver)
    stored = Counter(r.body.decode() for r in read_records(restarted.store_dir) if r.topic == TOPIC)
    assert acked <= set(stored), sorted(acked - set(stored))[:10]
    try:
        wait_for(lambda: acked <= set(_received(driver, "c1")), 120, "every ack consumed")
    except AssertionError:
        raise AssertionError(_unconsumed(driver, restarted, acked)) from None
    driver.do("stop c1")  # persists the group's offsets
    wait_for(
        lambda: (
            read_consumer_offsets(restarted.store_dir).get((TOPIC, GROUP), {})
            == _queue_ends(restarted)
        ),
        30,
        "the group's offsets committed at the queues' ends",
    )

    driver.do(f"push c2 {GROUP} {TOPIC}")  # a new instance of the group: resumes at the ends
    producer = Producer(restarted.address)
    after = [f"after-{i}" for i in range(8)]
    for body in after:
        producer.send(TOPIC, body.encode())
    wait_for(lambda: set(_received(driver, "c2")) >= set(after), 120, "c2 to get the new sends")
    assert sorted(_received(driver, "c2")) == sorted(after)
    duplicates = sum(n - 1 for n in Counter(_received(driver, "c1")).values())
    assert duplicates < len(acked) // 2, duplicates  # redelivery, not a restart from offset 0


def _settings(broker: BrokerProcess) -> list[str]:
    """The ``--set`` values the broker was started with."""
    return [broker.args[i + 1] for i, arg in enumerate(broker.args) if arg == "--set"]


def _queue_ends(broker: BrokerProcess) -> dict[int, int]:
    """Queue id -> records stored in it, from the CommitLog."""
    counts = Counter(r.queue_id for r in read_records(broker.store_dir) if r.topic == TOPIC)
    return dict(counts)


def _unconsumed(driver: Driver, broker: BrokerProcess, acked: set[str]) -> str:
    """Why acknowledged sends were not consumed: the queues' ends, what c1 got, the misses."""
    missing = acked - set(_received(driver, "c1"))
    where = sorted((int(f[1]), int(f[2])) for f in _lines(driver, "ACK") if f[0] in missing)
    got: dict[int, int] = {}
    for f in _lines(driver, "RECV"):
        if f[0] == "c1" and f[1] == TOPIC:
            got[int(f[2])] = max(got.get(int(f[2]), -1), int(f[3]))
    return (
        f"{len(missing)} of {len(acked)} acknowledged sends not consumed; first (queue, offset) "
        f"{where[:8]}; c1's highest offset per queue {sorted(got.items())}; stored per queue "
        f"{sorted(_queue_ends(broker).items())}; "
        f"client lines {[x for x in driver.snapshot() if not x.startswith(('ACK', 'RECV'))][-20:]}"
    )
