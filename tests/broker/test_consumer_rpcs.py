"""Consumer RPCs on the wire, with our generated stubs: what the clients read from the replies.

The consumer Telemetry settings reply (the Java PushConsumer refuses to start without its
backoff policy), QueryAssignment, and a status (never a gRPC error) for bad consumer requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, start_broker

from rmq_spark.broker.consumer_client import Consumer
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.errors import ConsumeRejectedError

_METADATA = (("x-mq-client-id", "raw-consumer"), ("x-mq-language", "JAVA"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("consumer-rpcs")
    process = start_broker(root / "store", root / "work", "broker.topics=orders:3")
    yield process
    process.stop()


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker.address) as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def test_a_push_consumer_gets_complete_settings(stub: Any) -> None:
    settings = pb.Settings(client_type=pb.PUSH_CONSUMER)
    settings.subscription.group.name = "runners"
    settings.subscription.subscriptions.add().topic.name = "orders"
    call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=_METADATA)
    reply = next(call)
    call.cancel()
    assert reply.status.code == pb.OK
    got = reply.settings
    assert got.backoff_policy.WhichOneof("strategy") == "customized_backoff"
    assert got.backoff_policy.max_attempts == 17
    delays = [d.ToMilliseconds() for d in got.backoff_policy.customized_backoff.next]
    assert delays[:4] == [1_000, 5_000, 10_000, 30_000] and len(delays) == 18
    assert got.subscription.long_polling_timeout.ToMilliseconds() == 20_000
    assert got.subscription.receive_batch_size == 32
    assert got.subscription.fifo is False
    assert [s.topic.name for s in got.subscription.subscriptions] == ["orders"]
    assert not got.metric.on


def test_query_assignment_gives_the_topic_as_one_pop_queue(
    stub: Any, broker: BrokerProcess
) -> None:
    request = spb.QueryAssignmentRequest()
    request.topic.name = "orders"
    request.group.name = "runners"
    response = stub.QueryAssignment(request, timeout=10, metadata=_METADATA)
    assert response.status.code == pb.OK
    [assignment] = response.assignments
    queue = assignment.message_queue
    assert queue.id == -1 and queue.permission == pb.READ_WRITE
    assert queue.topic.name == "orders" and queue.broker.id == 0
    host, port = broker.address.rsplit(":", 1)
    assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [(host, int(port))]
    request.topic.name = "bad topic!"
    bad = stub.QueryAssignment(request, timeout=10, metadata=_METADATA)
    assert bad.status.code == pb.ILLEGAL_TOPIC


def _receive(stub: Any, **fields: Any) -> list[Any]:
    request = spb.ReceiveMessageRequest(batch_size=1, **fields)
    request.message_queue.topic.name = "orders"
    request.long_polling_timeout.FromMilliseconds(0)
    if not request.group.name:
        request.group.name = "readers"
    if not request.HasField("invisible_duration"):
        request.invisible_duration.FromSeconds(30)
    return list(stub.ReceiveMessage(request, timeout=10, metadata=_METADATA))


def test_bad_receives_get_the_proxys_status_codes(stub: Any) -> None:
    bad_group = _receive(stub, group=pb.Resource(name="no spaces allowed"))
    assert bad_group[0].status.code == pb.ILLEGAL_CONSUMER_GROUP
    assert bad_group[-1].HasField("delivery_timestamp")
    short = spb.ReceiveMessageRequest().invisible_duration
    short.FromSeconds(1)
    assert _receive(stub, invisible_duration=short)[0].status.code == pb.ILLEGAL_INVISIBLE_TIME
    sql = pb.FilterExpression(type=pb.SQL, expression="a >")
    assert _receive(stub, filter_expression=sql)[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
    empty = _receive(stub)
    assert empty[0].status.code == pb.MESSAGE_NOT_FOUND and len(empty) == 2


def test_bad_handles_are_invalid_receipt_handles(stub: Any) -> None:
    ack = spb.AckMessageRequest()
    ack.group.name, ack.topic.name = "readers", "orders"
    ack.entries.add(message_id="01AB", receipt_handle="not a handle")
    response = stub.AckMessage(ack, timeout=10, metadata=_METADATA)
    assert response.status.code == pb.INVALID_RECEIPT_HANDLE
    assert response.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    change = spb.ChangeInvisibleDurationRequest(receipt_handle="0 1 2 3 0 broker-a 0 0 0 1 ff")
    change.group.name, change.topic.name = "readers", "orders"
    change.invisible_duration.FromSeconds(5)
    changed = stub.ChangeInvisibleDuration(change, timeout=10, metadata=_METADATA)
    assert changed.status.code == pb.INVALID_RECEIPT_HANDLE
    assert changed.receipt_handle == change.receipt_handle  # the client stores it regardless


def test_the_thin_consumer_reads_what_the_thin_producer_sent(broker: BrokerProcess) -> None:
    with (
        Producer(broker.address) as producer,
        Consumer(broker.address, "thin", "orders", "TagT") as consumer,
    ):
        receipt = producer.send("orders", b"over grpc", tag="TagT", properties={"k": "v"})
        producer.send("orders", b"other tag", tag="TagU")
        got = consumer.receive(invisible_ms=10_000, wait_ms=5_000)
        while not got:
            got = consumer.receive(invisible_ms=10_000, wait_ms=5_000)
        [message] = got
        assert message.message_id == receipt.message_id and message.body == b"over grpc"
        assert message.tag == "TagT" and message.properties == {"k": "v"}
        assert message.delivery_attempt == 1 and message.topic == "orders"
        consumer.change_invisible_duration(message, 20_000)
        consumer.ack(message)
        with pytest.raises(ConsumeRejectedError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack(message)
        with pytest.raises(ConsumeRejectedError, match="ILLEGAL_INVISIBLE_TIME"):
            consumer.receive(invisible_ms=5)


@pytest.mark.parametrize(
    ("method", "response_cls", "stream"),
    [
        ("ReceiveMessage", spb.ReceiveMessageResponse, True),
        ("AckMessage", spb.AckMessageResponse, False),
        ("ChangeInvisibleDuration", spb.ChangeInvisibleDurationResponse, False),
    ],
)
def test_bytes_that_are_not_protobuf_are_answered_bad_request(
    broker: BrokerProcess, method: str, response_cls: Any, stream: bool
) -> None:
    with grpc.insecure_channel(broker.address) as channel:
        kind = channel.unary_stream if stream else channel.unary_unary
        call = kind(
            f"/apache.rocketmq.v2.MessagingService/{method}",
            request_serializer=lambda data: data,
            response_deserializer=response_cls.FromString,
        )
        answer = call(b"\xff\xff\xff\xff garbage", timeout=10)
        first = next(iter(answer)) if stream else answer
    assert first.status.code == pb.BAD_REQUEST
