"""Authentication and ACL against a broker process: the official Python client signs with
``Credentials(ak, sk)``; bad, missing and replayed signatures and rights a user lacks are
refused with the Java proxy's ``UNAUTHORIZED`` (40100), and nothing is stored.

Raw requests are built with grpc and the broker's protos, signed with ``auth.signature_metadata``
(the same bytes as the client's ``Signature``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, read_records, start_broker, wait_for

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.security.auth import signature_metadata

USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [
  { resource = "Topic:orders", actions = ["Pub", "Sub"] },
  { resource = "Group:billing", actions = ["Sub"] },
]

[users.admin]
secret_key = "admin-secret-1"
user_type = "Super"
"""
ALICE = ("alice", "alice-secret-1")
ADMIN = ("admin", "admin-secret-1")
_SKEW_MS = 15 * 60 * 1000
SMALL = "store.segment_size_bytes=16777216"  # 16 MiB segments: the disk is shared


@pytest.fixture
def auth_broker(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> Callable[..., BrokerProcess]:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)  # the broker refuses a users file others may read

    def start(*settings: str) -> BrokerProcess:
        return broker_factory(
            "broker.auth_enabled=true", f"broker.auth_users_file={users}", SMALL, *settings
        )

    return start


@pytest.fixture
def clients(rocketmq: ModuleType) -> Iterator[Callable[..., Any]]:
    """``clients(kind, address, credentials, ...)``: started Producer / SimpleConsumer."""
    started: list[Any] = []

    def make(kind: str, address: str, credentials: tuple[str, str], *args: Any) -> Any:
        config = rocketmq.ClientConfiguration(
            address, rocketmq.Credentials(*credentials), request_timeout=5
        )
        if kind == "producer":
            client = rocketmq.Producer(config, *args)
        else:
            group, topics = args
            subscription = {t: rocketmq.FilterExpression("*") for t in topics}
            client = rocketmq.SimpleConsumer(config, group, subscription, await_duration=5)
        started.append(client)
        client.startup()
        return client

    yield make
    for client in started:
        if client.is_running:
            client.shutdown()


def signed(credentials: tuple[str, str], now_ms: int | None = None) -> tuple[tuple[str, str], ...]:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return (("x-mq-client-id", "test-client"),) + signature_metadata(*credentials, now_ms)


def call(address: str, method: str, request: Any, metadata: Any = ()) -> Any:
    """One RPC with a raw stub; the first response of a stream."""
    channel = grpc.insecure_channel(address)
    try:
        stub = spb_grpc.MessagingServiceStub(channel)
        metadata = metadata or (("x-mq-client-id", "test-client"),)
        if method == "Telemetry":
            responses = stub.Telemetry(iter([request]), metadata=metadata, timeout=10)
            return next(responses)
        answer = getattr(stub, method)(request, metadata=metadata, timeout=10)
        return next(answer) if method in ("ReceiveMessage", "PullMessage") else answer
    finally:
        channel.close()


def send_request(topic: str, body: bytes = b"x", message_id: str = "M1") -> Any:
    message = pb.Message(body=body)
    message.topic.name = topic
    message.system_properties.message_id = message_id
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.NORMAL
    return spb.SendMessageRequest(messages=[message])


def bodies(broker: BrokerProcess, topic: str) -> list[bytes]:
    return [r.body for r in read_records(broker.store_dir) if r.topic == topic]


def _send(rocketmq: ModuleType, producer: Any, topic: str, body: bytes) -> str:
    message = rocketmq.Message()
    message.topic = topic
    message.body = body
    return str(producer.send(message).message_id)


def test_the_official_client_with_correct_credentials_produces_and_consumes(
    auth_broker: Callable[..., BrokerProcess], clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = auth_broker()
    producer = clients("producer", broker.address, ALICE, ("orders",))
    sent = _send(rocketmq, producer, "orders", b"paid")
    consumer = clients("simple", broker.address, ALICE, "billing", ("orders",))

    def received() -> list[Any]:
        return list(consumer.receive(8, 10))

    [message] = wait_for(received, 30, "the signed consumer to receive")
    assert (message.message_id, message.body) == (sent, b"paid")
    consumer.ack(message)
    assert bodies(broker, "orders") == [b"paid"]
    assert "broker: auth on: 2 users from" in broker.log_text()


@pytest.mark.parametrize(
    "credentials",
    [("alice", "not-the-secret"), ("mallory", "alice-secret-1"), ("", "")],
    ids=["wrong-secret", "unknown-user", "no-credentials"],
)
def test_a_wrong_secret_an_unknown_user_or_no_credentials_are_refused_and_store_nothing(
    auth_broker: Callable[..., BrokerProcess],
    clients: Callable[..., Any],
    rocketmq: ModuleType,
    credentials: tuple[str, str],
) -> None:
    broker = auth_broker()
    with pytest.raises(Exception, match="route"):  # the client cannot even get a route
        producer = clients("producer", broker.address, credentials, ("orders",))
        _send(rocketmq, producer, "orders", b"forged")
    metadata = signed(credentials) if credentials[0] else ()
    response = call(broker.address, "SendMessage", send_request("orders"), metadata)
    assert response.status.code == pb.UNAUTHORIZED, response
    assert "authentication" in response.status.message
    route = call(broker.address, "QueryRoute", spb.QueryRouteRequest(topic={"name": "orders"}))
    assert route.status.code == pb.UNAUTHORIZED and not route.message_queues
    assert bodies(broker, "orders") == []


def test_a_signature_replayed_outside_the_skew_window_is_refused(
    auth_broker: Callable[..., BrokerProcess],
) -> None:
    broker = auth_broker()
    now_ms = int(time.time() * 1000)
    for stale_ms in (now_ms - _SKEW_MS - 60_000, now_ms + _SKEW_MS + 60_000):
        request = send_request("orders", b"replayed")
        response = call(broker.address, "SendMessage", request, signed(ALICE, stale_ms))
        assert response.status.code == pb.UNAUTHORIZED, response
        assert "x-mq-date-time" in response.status.message
    garbled = dict(signed(ALICE))
    garbled["x-mq-date-time"] = "yesterday"
    response = call(broker.address, "SendMessage", send_request("orders"), tuple(garbled.items()))
    assert response.status.code == pb.UNAUTHORIZED  # the signature no longer matches
    assert bodies(broker, "orders") == []

    fresh = call(broker.address, "SendMessage", send_request("orders", b"ok"), signed(ALICE))
    assert fresh.status.code == pb.OK, fresh  # inside the window the same user is served
    assert bodies(broker, "orders") == [b"ok"]


def test_a_user_allowed_only_topic_a_cannot_send_to_b_nor_consume_as_a_group_it_lacks(
    auth_broker: Callable[..., BrokerProcess], clients: Callable[..., Any], rocketmq: ModuleType
) -> None:
    broker = auth_broker()
    with pytest.raises(Exception, match="route"):
        producer = clients("producer", broker.address, ALICE, ("payments",))
        _send(rocketmq, producer, "payments", b"not allowed")
    response = call(broker.address, "SendMessage", send_request("payments"), signed(ALICE))
    assert response.status.code == pb.UNAUTHORIZED
    assert "Pub on Topic:payments" in response.status.message

    admin = call(broker.address, "SendMessage", send_request("payments", b"a"), signed(ADMIN))
    assert admin.status.code == pb.OK  # the Super user may
    assert bodies(broker, "payments") == [b"a"]

    receive = spb.ReceiveMessageRequest(group={"name": "auditors"}, batch_size=1)
    receive.message_queue.topic.name = "orders"
    receive.filter_expression.expression = "*"
    response = call(broker.address, "ReceiveMessage", receive, signed(ALICE))
    assert response.status.code == pb.UNAUTHORIZED
    assert "Group:auditors" in response.status.message
    heartbeat = spb.HeartbeatRequest(group={"name": "auditors"}, client_type=pb.SIMPLE_CONSUMER)
    assert call(broker.address, "Heartbeat", heartbeat, signed(ALICE)).status.code == (
        pb.UNAUTHORIZED
    )
    settings = spb.TelemetryCommand()
    settings.settings.client_type = pb.SIMPLE_CONSUMER
    settings.settings.subscription.group.name = "auditors"
    reply = call(broker.address, "Telemetry", settings, signed(ALICE))
    assert reply.status.code == pb.UNAUTHORIZED
    consumer = clients("simple", broker.address, ALICE, "auditors", ("orders",))
    with pytest.raises(Exception, match="40100|UNAUTHORIZED|auditors"):
        consumer.receive(8, 10)


def _requests() -> dict[str, Any]:
    queue = pb.MessageQueue(topic={"name": "orders"})
    group = {"name": "billing"}
    settings = spb.TelemetryCommand()
    settings.settings.client_type = pb.PRODUCER
    settings.settings.publishing.topics.add(name="orders")
    return {
        "QueryRoute": spb.QueryRouteRequest(topic={"name": "orders"}),
        "Heartbeat": spb.HeartbeatRequest(group=group, client_type=pb.SIMPLE_CONSUMER),
        "SendMessage": send_request("orders"),
        "EndTransaction": spb.EndTransactionRequest(topic={"name": "orders"}),
        "ReceiveMessage": spb.ReceiveMessageRequest(group=group, message_queue=queue),
        "AckMessage": spb.AckMessageRequest(group=group, topic={"name": "orders"}),
        "ChangeInvisibleDuration": spb.ChangeInvisibleDurationRequest(
            group=group, topic={"name": "orders"}
        ),
        "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic={"name": "orders"}
        ),
        "QueryAssignment": spb.QueryAssignmentRequest(group=group, topic={"name": "orders"}),
        "NotifyClientTermination": spb.NotifyClientTerminationRequest(group=group),
        "UpdateOffset": spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=0),
        "GetOffset": spb.GetOffsetRequest(group=group, message_queue=queue),
        "QueryOffset": spb.QueryOffsetRequest(message_queue=queue),
        "PullMessage": spb.PullMessageRequest(group=group, message_queue=queue),
        "RecallMessage": spb.RecallMessageRequest(topic={"name": "orders"}),
        "Telemetry": settings,
    }


def test_every_rpc_refuses_an_unsigned_caller_when_auth_is_on(
    auth_broker: Callable[..., BrokerProcess],
) -> None:
    broker = auth_broker()
    for method, request in _requests().items():
        response = call(broker.address, method, request)
        assert response.status.code == pb.UNAUTHORIZED, (method, response)
    assert read_records(broker.store_dir) == []


def test_committing_a_group_offset_needs_the_update_right(
    auth_broker: Callable[..., BrokerProcess],
) -> None:
    broker = auth_broker()
    request = _requests()["UpdateOffset"]
    refused = call(broker.address, "UpdateOffset", request, signed(ALICE))
    assert refused.status.code == pb.UNAUTHORIZED
    assert "Update on Group:billing" in refused.status.message
    served = call(broker.address, "UpdateOffset", request, signed(ADMIN))
    assert served.status.code != pb.UNAUTHORIZED  # the admin reaches the handler


def test_the_quick_start_needs_no_credentials_and_a_public_listen_without_auth_warns(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory(SMALL)
    response = call(broker.address, "SendMessage", send_request("orders", b"open"))
    assert response.status.code == pb.OK
    assert "auth off" not in broker.log_text()

    public = start_broker(tmp_path / "public", tmp_path / "work", SMALL, listen="0.0.0.0:0")
    try:
        assert "with auth off: anyone who can reach the port" in public.log_text()
    finally:
        public.stop()


def test_doctor_warns_when_the_broker_would_listen_publicly_without_auth(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rmq_spark.cli.main import main

    main(["doctor", "--set", "broker.listen=0.0.0.0:8081"])
    assert (
        "WARN broker auth  broker.listen is 0.0.0.0:8081 with auth off" in capsys.readouterr().out
    )
    main(["doctor"])  # the quick start: loopback
    assert "WARN" not in capsys.readouterr().out
    secured = ["broker.listen=0.0.0.0:8081", "broker.auth_enabled=true"]
    secured.append("broker.auth_users_file=conf/users.example.toml")
    main(["doctor", *(arg for item in secured for arg in ("--set", item))])
    assert "WARN" not in capsys.readouterr().out


def test_our_producer_and_consumer_sign_with_credentials(
    auth_broker: Callable[..., BrokerProcess],
) -> None:
    from rmq_spark.broker.consumer_client import Consumer
    from rmq_spark.broker.producer import Producer
    from rmq_spark.errors import BrokerError

    broker = auth_broker()
    with pytest.raises(BrokerError, match="40100|authentication"):
        with Producer(broker.address, max_attempts=1) as unsigned:
            unsigned.send("orders", b"unsigned")
    with Producer(broker.address, credentials=ALICE) as producer:
        producer.send("orders", b"signed")
    with Consumer(broker.address, "billing", "orders", credentials=ALICE) as consumer:
        received = wait_for(lambda: consumer.receive(8, 30_000, wait_ms=1000), 30, "a receive")
        assert [m.body for m in received] == [b"signed"]
    assert bodies(broker, "orders") == [b"signed"]


def test_a_missing_users_file_stops_the_start_with_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    settings = ("broker.auth_enabled=true", f"broker.auth_users_file={missing}")
    with pytest.raises(AssertionError, match="broker exited with 2") as failure:
        start_broker(tmp_path / "store", tmp_path / "work", *settings)
    assert f"broker error: broker.auth_users_file: cannot read {missing}" in str(failure.value)
    assert "Traceback" not in str(failure.value)


@pytest.mark.parametrize("mode", [0o644, 0o640], ids=["0644", "0640"])
def test_a_users_file_others_may_read_stops_the_start_as_the_redelivery_secret_does(
    tmp_path: Path, mode: int
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(mode)
    settings = ("broker.auth_enabled=true", f"broker.auth_users_file={users}")
    with pytest.raises(AssertionError, match="broker exited with 2") as failure:
        start_broker(tmp_path / "store", tmp_path / "work", *settings)
    expected = (
        f"broker error: broker.auth_users_file: mode {mode:04o} of {users} lets other users "
        f"read every user's secret key; chmod 600 {users}"
    )
    assert expected in str(failure.value)
    assert "Traceback" not in str(failure.value)


def test_groups_reset_through_an_auth_broker_signs_with_the_operators_key(
    auth_broker: Callable[..., BrokerProcess],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rmq_spark.broker.producer import Producer
    from rmq_spark.cli.main import main

    broker = auth_broker("broker.default_queue_count=1")
    with Producer(broker.address, credentials=ALICE) as producer:
        producer.send("orders", b"one")
    queue = broker.store_dir / "consumequeue" / "orders" / "0"
    deadline = time.monotonic() + 30  # the dispatch writes the unit just after the ack
    while not any(queue.glob("0*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    argv = ["groups", "reset", "--store", str(broker.store_dir), "--broker", broker.address,
            "--group", "billing", "--topic", "orders", "--to-offset", "1"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) != 0  # unsigned: refused
    assert "UNAUTHORIZED" in capsys.readouterr().err
    monkeypatch.delenv("RMQ_SECRET_KEY", raising=False)
    assert main([*argv, "--access-key", "admin"]) != 0
    assert "RMQ_SECRET_KEY" in capsys.readouterr().err
    monkeypatch.setenv("RMQ_SECRET_KEY", ADMIN[1])
    assert main([*argv, "--access-key", "admin"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["offset"] == 1
