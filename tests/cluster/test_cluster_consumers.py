"""Consumers of one group across two rmq-spark brokers and a real name server: gRPC
QueryAssignment answers for the whole cluster (each broker at its own endpoint); the official
Python 5.x PushConsumer and SimpleConsumer get every message of both brokers (receive, change
invisible time and ack each at the message's broker); each broker keeps
its queues' offsets, which survive a restart of each broker (nothing consumed comes back)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import grpc
import pytest
from broker.broker_harness import wait_for
from cluster_harness import ClusterBroker, create_topic, wait_route
from namesrv_harness import Namesrv

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

pytestmark = pytest.mark.slow

TOPIC = "Orders"
GROUP = "billing"
BOTH = {"broker-a", "broker-b"}


def _topic(namesrv: Namesrv, brokers: list[ClusterBroker], topic: str) -> None:
    create_topic(namesrv, topic)
    for broker in brokers:
        wait_route(broker.address, topic, BOTH)


def query_assignment(address: str, topic: str, group: str) -> Any:
    with grpc.insecure_channel(address) as channel:
        request = spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic), group=pb.Resource(name=group)
        )
        metadata = (("x-mq-client-id", "assignment-test"),)
        return spb_grpc.MessagingServiceStub(channel).QueryAssignment(
            request, timeout=10, metadata=metadata
        )


def send(producer: Producer, prefix: str, count: int) -> dict[str, str]:
    """``count`` messages: message id -> the broker that stored it."""
    sent = {}
    for i in range(count):
        receipt = producer.send(TOPIC, f"{prefix} {i}".encode())
        sent[receipt.message_id] = receipt.broker
    assert set(sent.values()) == BOTH
    return sent


def committed(broker: ClusterBroker, topic: str, group: str) -> int:
    return sum(read_consumer_offsets(broker.store).get((topic, group), {}).values())


@pytest.fixture
def consumers(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def make(kind: str, address: str, **kw: Any) -> Any:
        config = rocketmq.ClientConfiguration(address, rocketmq.Credentials(), request_timeout=5)
        subscription = {TOPIC: rocketmq.FilterExpression("*")}
        if kind == "simple":
            client = rocketmq.SimpleConsumer(config, GROUP, subscription, **kw)
        else:
            client = rocketmq.PushConsumer(config, GROUP, kw.pop("listener"), subscription)
        client.startup()
        started.append(client)
        return client

    yield make
    for client in started:
        if client.is_running:
            client.shutdown()


def test_query_assignment_lists_every_broker_at_its_own_endpoint(
    namesrv: Namesrv, brokers: list[ClusterBroker]
) -> None:
    a, b = brokers
    _topic(namesrv, brokers, "Assigned")
    for access in (a, b):
        response = query_assignment(access.address, "Assigned", GROUP)
        assert response.status.code == pb.OK, response.status
        found = {}
        for assignment in response.assignments:
            queue = assignment.message_queue
            first = queue.broker.endpoints.addresses[0]
            found[queue.broker.name] = (f"{first.host}:{first.port}", queue.id)
        assert found == {"broker-a": (a.address, -1), "broker-b": (b.address, -1)}


def test_official_python_consumers_get_every_message_and_offsets_survive_restarts(
    namesrv: Namesrv, brokers: list[ClusterBroker], consumers: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:  # fmt: skip
    a, b = brokers
    _topic(namesrv, brokers, TOPIC)
    with Producer(a.address) as producer:
        first = send(producer, "first", 200)
    seen: set[str] = set()
    lock = threading.Lock()

    class Listener(rocketmq.MessageListener):  # type: ignore[misc,name-defined]
        def consume(self, message: Any) -> Any:
            with lock:
                seen.add(message.message_id)
            return rocketmq.ConsumeResult.SUCCESS

    push = consumers("push", a.address, listener=Listener())
    wait_for(lambda: first.keys() <= seen, 90, "the push consumer to get every message")
    push.shutdown()
    for broker in brokers:  # every ack saved on the broker that owns the queue
        count = sum(1 for owner in first.values() if owner == broker.name)
        wait_for(lambda broker=broker, count=count: committed(broker, TOPIC, GROUP) == count,
                 30, f"{broker.name}'s offsets to count its {count} messages")  # fmt: skip
    for broker in brokers:  # a restart of each: its offsets come back from its store
        assert broker.proc is not None and broker.proc.stop() == 0
        broker.start(namesrv)
        wait_route(a.address if broker is b else b.address, TOPIC, BOTH)
    with Producer(b.address) as producer:
        second = send(producer, "second", 100)
    simple = consumers("simple", b.address, await_duration=2)
    got: dict[str, str] = {}
    wait_for(lambda: _receive_into(simple, got) >= second.keys(), 90, "the second batch")
    assert not got.keys() & first.keys(), "acknowledged messages came back after the restarts"
    assert got.keys() == second.keys()


def _receive_into(consumer: Any, got: dict[str, str]) -> set[str]:
    """Receive, change the invisible time, ack: each call goes to the message's broker (a
    receipt handle of one broker is refused by the other)."""
    for message in consumer.receive(32, 30):
        got[message.message_id] = message.body.decode()
        consumer.change_invisible_duration(message, 60)
        consumer.ack(message)
    return set(got)
