"""Bad input never takes the broker down: each gets a proper status and the broker keeps serving.

Raw requests go through our generated stubs (the official client refuses to send most of these);
after each one a normal send must still succeed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, by_uniq_key, read_records, start_broker

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

_METADATA = (("x-mq-client-id", "raw-test-client"), ("x-mq-language", "PYTHON"))


_SETTINGS = ("store.max_message_size_bytes=1024",)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that only send bad input (each checks it still serves)."""
    work = tmp_path_factory.mktemp("bad-input")
    broker = start_broker(work / "store", work, *_SETTINGS)
    yield broker
    assert broker.stop() == 0
    assert "Traceback" not in broker.log_text()


@pytest.fixture
def channel(shared_broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(shared_broker.address) as opened:
        yield opened


@pytest.fixture
def stub(channel: grpc.Channel) -> Any:
    return spb_grpc.MessagingServiceStub(channel)


def _message(message_id: str, body: bytes = b"x", **system: Any) -> Any:
    message = pb.Message(body=body)
    message.topic.name = system.pop("topic", "raw")
    message.system_properties.message_id = message_id
    message.system_properties.message_type = system.pop("message_type", pb.NORMAL)
    message.system_properties.body_encoding = pb.IDENTITY
    for key, value in system.items():
        setattr(message.system_properties, key, value)
    return message


def _send(stub: Any, *messages: Any) -> Any:
    return stub.SendMessage(
        spb.SendMessageRequest(messages=list(messages)), timeout=10, metadata=_METADATA
    )


def _still_serves(stub: Any, message_id: str) -> None:
    response = _send(stub, _message(message_id, b"still here"))
    assert response.status.code == pb.OK, response


@pytest.mark.parametrize(
    ("request_messages", "code"),
    [
        ([], pb.BAD_REQUEST),
        ([_message("01BIG", b"x" * 1025)], pb.MESSAGE_BODY_TOO_LARGE),
        ([_message("01EMPTY", b"")], pb.MESSAGE_BODY_EMPTY),
        ([_message("01T", topic="no spaces allowed")], pb.ILLEGAL_TOPIC),
        ([_message("01T", topic="rmq_sys_wheel_timer")], pb.ILLEGAL_TOPIC),
        ([_message("")], pb.ILLEGAL_MESSAGE_ID),
        ([_message("01TYPE", message_type=99)], pb.BAD_REQUEST),
        (
            [_message("01TX", message_type=pb.TRANSACTION, message_group="g")],
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        ([_message("01FIFO", message_type=pb.FIFO)], pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ([_message("01TAG", tag="a|b")], pb.ILLEGAL_MESSAGE_TAG),
        ([_message("01GZ", body_encoding=pb.GZIP)], pb.UNSUPPORTED),
    ],
)
def test_bad_sends_get_the_matching_rocketmq_code_and_the_broker_keeps_serving(
    stub: Any, request_messages: list[Any], code: int
) -> None:
    response = _send(stub, *request_messages)
    assert response.status.code == code, response
    assert response.status.message  # a readable reason
    _still_serves(stub, "01AFTER")


def test_a_body_digest_that_does_not_match_is_refused_as_corrupted(stub: Any) -> None:
    message = _message("01DIGEST", b"payload")
    message.system_properties.body_digest.type = pb.MD5
    message.system_properties.body_digest.checksum = "0" * 32
    assert _send(stub, message).status.code == pb.MESSAGE_CORRUPTED
    message.system_properties.body_digest.checksum = "321C3CF486ED509164EDEC1E1981FEC8"
    assert _send(stub, message).status.code == pb.OK


def test_a_batch_with_mixed_results_reports_each_entry(stub: Any) -> None:
    response = _send(stub, _message("01GOOD"), _message("01BAD", b""))
    assert response.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in response.entries] == [pb.OK, pb.MESSAGE_BODY_EMPTY]
    assert [e.message_id for e in response.entries] == ["01GOOD", "01BAD"]
    assert response.entries[0].offset >= 0 and response.entries[1].status.message


def test_a_send_without_messages_is_a_bad_request(stub: Any) -> None:
    response = _send(stub)
    assert response.status.code == pb.BAD_REQUEST
    assert response.status.message == "SendMessageRequest has no messages"
    assert not response.entries


@pytest.mark.parametrize(
    ("method", "response_cls"),
    [("SendMessage", spb.SendMessageResponse), ("QueryRoute", spb.QueryRouteResponse)],
)
def test_bytes_that_are_not_protobuf_are_answered_bad_request(
    channel: grpc.Channel, stub: Any, method: str, response_cls: Any
) -> None:
    raw = channel.unary_unary(
        f"/apache.rocketmq.v2.MessagingService/{method}",
        request_serializer=lambda data: data,
        response_deserializer=response_cls.FromString,
    )
    response = raw(b"\xff\xff\xff\xff garbage", timeout=10)
    assert response.status.code == pb.BAD_REQUEST
    assert "not a valid" in response.status.message
    _still_serves(stub, "01AFTERGARBAGE")


def test_a_request_of_another_type_is_read_leniently_and_refused(channel: grpc.Channel) -> None:
    wrong = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        request_serializer=spb.HeartbeatRequest.SerializeToString,
        response_deserializer=spb.SendMessageResponse.FromString,
    )
    response = wrong(spb.HeartbeatRequest(client_type=pb.PRODUCER), timeout=10)
    assert response.status.code == pb.BAD_REQUEST


def test_rpcs_the_broker_does_not_serve_answer_a_status(stub: Any) -> None:
    empty_update = stub.UpdateOffset(spb.UpdateOffsetRequest(), timeout=10)
    assert (
        empty_update.status.code == pb.ILLEGAL_CONSUMER_GROUP
    )  # served: tests/broker/test_offset_rpc.py
    assert (
        stub.GetOffset(spb.GetOffsetRequest(), timeout=10).status.code == pb.ILLEGAL_CONSUMER_GROUP
    )
    assert (
        stub.EndTransaction(spb.EndTransactionRequest(), timeout=10).status.code
        == pb.INVALID_TRANSACTION_ID  # served: tests/transactions/
    )
    [reply] = list(stub.PullMessage(spb.PullMessageRequest(), timeout=10))
    assert reply.status.code == pb.NOT_IMPLEMENTED
    assert stub.Heartbeat(spb.HeartbeatRequest(), timeout=10).status.code == pb.OK


def test_telemetry_answers_settings_with_the_store_size_limit_and_ok(stub: Any) -> None:
    settings = pb.Settings(client_type=pb.PRODUCER)
    settings.publishing.max_body_size = 128 * 1024 * 1024
    call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=_METADATA)
    reply = next(call)
    call.cancel()
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 1024
    assert reply.settings.backoff_policy.max_attempts == 3
    assert not reply.settings.metric.on


def test_clients_vanishing_mid_stream_and_mid_call_leave_the_broker_serving(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(*_SETTINGS)
    channel = grpc.insecure_channel(broker.address)
    stub = spb_grpc.MessagingServiceStub(channel)
    for _ in range(5):
        with grpc.insecure_channel(broker.address) as doomed:
            doomed_stub = spb_grpc.MessagingServiceStub(doomed)
            settings = spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
            call = doomed_stub.Telemetry(iter([settings]), metadata=_METADATA)
            next(call)
            future = doomed_stub.SendMessage.future(
                spb.SendMessageRequest(messages=[_message("01GONE", b"y" * 1000)]), timeout=10
            )
        # leaving the block closed the channel under the open stream and the pending call
        assert future.cancelled() or future.done()
    _still_serves(stub, "01SURVIVOR")
    channel.close()
    assert broker.stop() == 0
    assert "Traceback" not in broker.log_text()
    assert by_uniq_key(read_records(broker.store_dir))["01SURVIVOR"]
