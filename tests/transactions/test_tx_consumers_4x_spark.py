"""Consumers of what the official transactional producer left in a broker process's store: two
committed transactions, a rolled-back one and a pending one (its producer stopped before
EndTransaction), then a plain message as the end mark. RocketMQ 4.9.8's DefaultMQPushConsumer
(over remoting, routed by a name server) receives the committed messages exactly once and
never the other two; the Spark ``rocketmq`` source reading the broker's store directory shows
the committed ones once (read_committed, the default) and every half with read_uncommitted.

Everything runs inside the machine-wide bench lock (a name server JVM, the 4.x client's JVM
and Spark)."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from broker_harness import BrokerProcess
from tx_helpers import HALF, OP, bench_lock, send_half

from rmq_spark.broker.producer import Producer

_REMOTING_TESTS = str(Path(__file__).resolve().parents[1] / "remoting")
if _REMOTING_TESTS not in sys.path:
    sys.path.insert(0, _REMOTING_TESTS)

from java4 import compile_check  # noqa: E402
from java_driver import Driver  # noqa: E402
from namesrv_harness import start_namesrv  # noqa: E402
from remoting_harness import start_remoting_broker  # noqa: E402

from rmq_spark.envcheck import find_rocketmq_jars  # noqa: E402

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.timeout(1800),  # the bench lock may be another suite's for minutes
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

TOPIC = "TxRead"


def _transactions(address: str, rocketmq: ModuleType, home: Path) -> None:
    """c1, c2 committed, r1 rolled back, p1 left pending; then the plain "end"."""
    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=10)

    class Unknown(rocketmq.TransactionChecker):  # type: ignore[misc, name-defined]
        def check(self, message: object) -> int:
            return 0

    producer = rocketmq.Producer(config, (TOPIC,), checker=Unknown())
    producer.startup()
    try:
        for body in ("c1", "r1", "c2", "p1"):
            transaction, _ = send_half(rocketmq, producer, TOPIC, body.encode())
            if body.startswith("c"):
                transaction.commit()
            elif body.startswith("r"):
                transaction.rollback()
    finally:
        producer.shutdown()
    Producer(address).send(TOPIC, b"end")


def _through_the_end_mark(driver: Driver) -> bool:
    """Whether the end mark and every queue offset before it were delivered: a concurrent
    listener may print the end mark before the messages pulled with it."""
    received = driver.received("tx4")
    ends = [int(r[2]) for r in received if r[4] == "end"]
    return bool(ends) and {int(r[2]) for r in received} >= set(range(ends[0] + 1))


def _push_4x(namesrv: str, root: Path) -> list[str]:
    """The bodies a 4.x push consumer receives up to the "end" mark."""
    home = root / "home"
    home.mkdir()
    driver = Driver(compile_check("ConsumeDriver", root / "classes"), namesrv, home, lock=None)
    try:
        driver.do(f"push tx4 gTx4 {TOPIC} CLUSTERING plain")
        driver.wait(lambda _: _through_the_end_mark(driver), 120, "the end mark and before")
        return [r[4] for r in driver.received("tx4")]
    finally:
        driver.stop()


def test_4x_push_consumer_and_spark_see_committed_transactions_once(
    rocketmq: ModuleType, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    find_rocketmq_jars()
    with bench_lock():
        namesrv = start_namesrv(tmp_path / "namesrv")
        broker: BrokerProcess | None = None
        try:
            broker, _ = start_remoting_broker(
                tmp_path / "store", tmp_path / "work", f"broker.namesrv_addr={namesrv.addr}",
                f"broker.topics={TOPIC}:1", "store.segment_size_bytes=16777216",
                "broker.transaction_check_interval_ms=3600000",
            )  # fmt: skip
            _transactions(broker.address, rocketmq, tmp_path)
            assert Counter(_push_4x(namesrv.addr, tmp_path)) == {"c1": 1, "c2": 1, "end": 1}
            spark = request.getfixturevalue("spark")
            source = spark.read.format("rocketmq")
            rows = source.load(str(broker.store_dir)).select("topic", "body").collect()
            assert sorted((r.topic, bytes(r.body)) for r in rows) == [
                (TOPIC, b"c1"),
                (TOPIC, b"c2"),
                (TOPIC, b"end"),
            ]
            raw = source.option("isolation", "read_uncommitted").load(str(broker.store_dir))
            halves = raw.where(f"topic = '{HALF}'").select("body").collect()
            assert sorted(bytes(r.body) for r in halves) == [b"c1", b"c2", b"p1", b"r1"]
            assert raw.where(f"topic = '{OP}'").count() == 3
        finally:
            if broker is not None:
                broker.kill()
            namesrv.stop()
