"""RocketMQ 4.9.8's Java consumers against an rmq-spark broker through RocketMQ's own name
server (issue 26): DefaultMQPushConsumer clustering (two instances of a group split the queues,
another group gets everything), broadcasting, a failing listener's message through %RETRY% into
%DLQ%, orderly (queue locks, order kept per queue across a suspended message),
DefaultLitePullConsumer with seek; mixed with the 5.x gRPC clients, the group offsets one set.
One JVM (``java/ConsumeDriver.java``) runs every scenario."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, wait_for
from consume_frames import call, records, request
from java4 import compile_check
from java_driver import Driver
from namesrv_harness import Namesrv, mqadmin
from remoting_harness import FrameClient, start_remoting_broker

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.pull_rules import FLAG_SUBSCRIPTION

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

TOPICS = "broker.topics=Split:4,Bcast:2,Retry:1,Fifo:2,Lite:1,Mixed:2,Reverse:2,Sql:2"


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The official 5.x Python client, imported with HOME in a temp dir (it logs under ~)."""
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path_factory.mktemp("client-home"))
    try:
        import rocketmq as module
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
    return module


@pytest.fixture(scope="module")
def world(
    namesrv: Namesrv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, int, Driver]]:
    root = tmp_path_factory.mktemp("java-consume")
    broker, port = start_remoting_broker(
        root / "store", root / "work", TOPICS, f"broker.namesrv_addr={namesrv.addr}"
    )
    try:  # a driver that never starts (the bench lock busy) must not leave the broker running
        class_path = compile_check("ConsumeDriver", root / "classes")
        home = root / "home"
        home.mkdir()
        driver = Driver(class_path, namesrv.addr, home)
    except BaseException:
        broker.stop()
        raise
    yield broker, port, driver
    driver.stop()
    assert broker.stop() == 0


def _send(broker: BrokerProcess, topic: str, bodies: list[str], **kw: Any) -> None:
    producer = Producer(broker.address)
    for body in bodies:
        producer.send(topic, body.encode(), **kw)


def _assigned(driver: Driver, consumer: str, topic: str) -> set[int]:
    line = next(x for x in driver.do(f"assigned {consumer} {topic}") if x.startswith("ASSIGNED"))
    queues = line.split()[2]
    return set() if queues == "-" else {int(q) for q in queues.split(",")}


def _bodies(driver: Driver, consumer: str, topic: str | None = None) -> list[str]:
    return [r[4] for r in driver.received(consumer) if topic is None or r[0] == topic]


def test_push_clustering_splits_queues_and_each_group_gets_everything(world, namesrv) -> None:
    broker, _port, driver = world
    for consumer, group in (("a1", "gA"), ("a2", "gA"), ("b1", "gB")):
        driver.do(f"push {consumer} {group} Split CLUSTERING plain")

    def split() -> bool:
        one, two = _assigned(driver, "a1", "Split"), _assigned(driver, "a2", "Split")
        whole = _assigned(driver, "b1", "Split") == {0, 1, 2, 3}
        return bool(one and two and not one & two and one | two == {0, 1, 2, 3} and whole)

    wait_for(split, 90, "gA's two instances to split the queues")
    owned = {c: _assigned(driver, c, "Split") for c in ("a1", "a2")}
    sent = [f"split-{i}" for i in range(20)]
    _send(broker, "Split", sent)
    wait_for(
        lambda: (
            set(_bodies(driver, "a1") + _bodies(driver, "a2")) == set(sent)
            and set(_bodies(driver, "b1")) == set(sent)
        ),
        60,
        "both groups to receive every message",
    )
    for consumer in ("a1", "a2"):
        assert {int(r[1]) for r in driver.received(consumer)} <= owned[consumer]
        assert driver.received(consumer)
    for consumer in ("a1", "a2", "b1"):
        driver.do(f"stop {consumer}")  # persists the offsets (UPDATE_CONSUMER_OFFSET)

    def committed(group: str) -> int:
        return sum(read_consumer_offsets(broker.store_dir).get(("Split", group), {}).values())

    wait_for(lambda: committed("gA") == committed("gB") == 20, 20, "the offsets committed")
    progress = mqadmin(namesrv, "consumerProgress", "-g", "gA")  # GET_CONSUME_STATS
    rows = [line.split() for line in progress.splitlines() if line.startswith("Split ")]
    assert sorted(int(r[2]) for r in rows) == [0, 1, 2, 3], progress
    assert sum(int(r[3]) for r in rows) == sum(int(r[4]) for r in rows) == 20, progress


def test_broadcasting_gives_every_instance_everything(world) -> None:
    broker, _port, driver = world
    for consumer in ("c1", "c2"):
        driver.do(f"push {consumer} gC Bcast BROADCASTING plain")
    wait_for(
        lambda: _assigned(driver, "c1", "Bcast") == _assigned(driver, "c2", "Bcast") == {0, 1},
        60,
        "both instances to own both queues",
    )
    sent = [f"bcast-{i}" for i in range(6)]
    _send(broker, "Bcast", sent)
    wait_for(
        lambda: sorted(_bodies(driver, "c1")) == sorted(_bodies(driver, "c2")) == sorted(sent),
        60,
        "every instance to receive every message",
    )
    for consumer in ("c1", "c2"):
        driver.do(f"stop {consumer}")


def _everything(port: int, topic: str) -> list[Any]:
    client = FrameClient(port)
    try:
        fields = {
            "consumerGroup": "gAudit", "topic": topic, "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": FLAG_SUBSCRIPTION, "commitOffset": 0,
            "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
        }  # fmt: skip
        answer = call(client, request(RequestCode.PULL_MESSAGE, fields))
        return records(answer.body) if answer.code == 0 else []
    finally:
        client.close()


def test_a_failing_message_retries_through_retry_and_ends_in_the_dlq(world) -> None:
    broker, port, driver = world
    driver.do("push r1 gR Retry CLUSTERING poison")
    _send(broker, "Retry", ["fine-0", "poison-0"])
    wait_for(
        lambda: [r[3] for r in driver.received("r1") if r[4] == "poison-0"] == ["0", "1", "2"],
        120,
        "the poison message's three attempts",
    )
    poisoned = [r for r in driver.received("r1") if r[4] == "poison-0"]
    assert {r[0] for r in poisoned} == {"Retry"}  # retries show their original topic
    assert len({r[5] for r in poisoned}) == 1  # one message id across the retries
    (dead,) = wait_for(lambda: _everything(port, "%DLQ%gR"), 60, "the dead letter")
    assert dead.body == b"poison-0"
    assert _bodies(driver, "r1").count("fine-0") == 1
    driver.do("stop r1")


def test_orderly_consumption_keeps_each_queues_order_across_a_suspension(world) -> None:
    broker, _port, driver = world
    driver.do("push o1 gO Fifo CLUSTERING orderly")
    wait_for(lambda: _assigned(driver, "o1", "Fifo") == {0, 1}, 60, "the orderly consumer's queues")
    producer = Producer(broker.address)
    for i in range(12):
        body = "again-5" if i == 5 else f"m-{i}"
        producer.send("Fifo", body.encode(), message_group=f"k{i % 2}")
    wait_for(lambda: len(driver.received("o1")) >= 13, 60, "every message (one twice)")
    by_queue: dict[str, list[int]] = {}
    for _topic, queue, offset, _times, _body, _id in driver.received("o1"):
        by_queue.setdefault(queue, []).append(int(offset))
    for offsets in by_queue.values():
        deduped = [o for i, o in enumerate(offsets) if i == 0 or o != offsets[i - 1]]
        assert deduped == sorted(set(offsets)), offsets  # in order, the suspended one again
    assert _bodies(driver, "o1").count("again-5") == 2
    driver.do("stop o1")


def test_a_push_consumer_with_an_sql92_selector_gets_only_matches(world) -> None:
    broker, _port, driver = world
    driver.do("push s1 gSql Sql CLUSTERING sql")  # CHECK_CLIENT_CONFIG, then the heartbeat
    producer = Producer(broker.address)
    for n in range(6):
        producer.send("Sql", f"n-{n}".encode(), properties={"n": str(n)})
    wait_for(lambda: sorted(_bodies(driver, "s1")) == ["n-3", "n-4", "n-5"], 60, "the matches")
    driver.do("stop s1")


def test_lite_pull_consumer_seeks(world) -> None:
    broker, _port, driver = world
    _send(broker, "Lite", [f"lite-{i}" for i in range(5)])
    driver.do("lite gL Lite 0 5 2 3")
    first = [r for r in driver.received("litefirst") if r[0] == "Lite"]
    assert [r[4] for r in first] == [f"lite-{i}" for i in range(5)]
    got = [r for r in driver.received("lite") if r[0] == "Lite"]
    assert [(r[2], r[4]) for r in got] == [("2", "lite-2"), ("3", "lite-3"), ("4", "lite-4")]


def test_mixed_a_4x_group_resumes_over_grpc_and_a_4x_producer_feeds_grpc(
    world, official: ModuleType
) -> None:
    rocketmq = official
    broker, _port, driver = world
    driver.do("push m1 gMixed Mixed CLUSTERING plain")
    first = [f"mixed-{i}" for i in range(6)]
    _send(broker, "Mixed", first)
    wait_for(lambda: sorted(_bodies(driver, "m1")) == sorted(first), 60, "the 4.x consumer")
    driver.do("stop m1")
    later = [f"later-{i}" for i in range(4)]
    _send(broker, "Mixed", later)
    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    simple = rocketmq.SimpleConsumer(config, "gMixed", {"Mixed": rocketmq.FilterExpression("*")})
    simple.startup()
    try:
        got = _receive(simple, len(later))
        assert sorted(m.body.decode() for m in got) == sorted(later)  # not the 4.x-consumed six
        sent = [
            line.split()[4]
            for line in driver.do("send pRev Reverse 5 rev")
            if line.startswith("SENT")
        ]
        reverse = rocketmq.SimpleConsumer(
            config, "gRev", {"Reverse": rocketmq.FilterExpression("*")}
        )
        reverse.startup()
        try:
            assert sorted(m.body.decode() for m in _receive(reverse, 5)) == sorted(sent)
        finally:
            reverse.shutdown()
    finally:
        simple.shutdown()


def _receive(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []

    def more() -> bool:
        for message in consumer.receive(32, 20):
            consumer.ack(message)
            got.append(message)
        return len(got) >= count

    wait_for(more, 60, f"{count} messages over gRPC")
    return got
