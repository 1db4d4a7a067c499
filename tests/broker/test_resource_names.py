"""One name per resource: every RPC's ACL check and the service act on the same full name
(``namespace%name``), whatever namespace the request gives its topic and its group; consumer
group names are validated as RocketMQ's proxy does (system groups refused); a prefix policy
does not reach across a namespace separator.

Against a broker process with raw gRPC stubs and signed headers (the official clients always
put one namespace on every resource, so they cannot send the mixed requests tested here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess

from rmq_spark.broker.acl import Action, Need, Policy, User, allowed
from rmq_spark.broker.auth import signature_metadata
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

SMALL = "store.segment_size_bytes=16777216"  # 16 MiB segments: the disk is shared
USERS = """
[users.admin]
secret_key = "admin-secret-1"
user_type = "Super"

# conf/users.example.toml's Spark user.
[users.spark]
secret_key = "spark-secret-1"
policies = [
  { resource = "Topic:*", actions = ["Sub"] },
  { resource = "Group:spark-*", actions = ["Sub", "Update", "Get"] },
]

# Every group but gA, every topic.
[users.mallory]
secret_key = "mallory-secret-1"
policies = [
  { resource = "Topic:*", actions = ["All"] },
  { resource = "Group:*", actions = ["All"] },
  { resource = "Group:gA", actions = ["All"], decision = "Deny" },
]
"""
ADMIN = ("admin", "admin-secret-1")
SPARK = ("spark", "spark-secret-1")
MALLORY = ("mallory", "mallory-secret-1")
VICTIM_MESSAGES = 5
_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    return broker_factory("broker.auth_enabled=true", f"broker.auth_users_file={users}", SMALL)


def signed(credentials: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    now_ms = int(time.time() * 1000)
    return (("x-mq-client-id", f"{credentials[0]}-client"),) + signature_metadata(
        *credentials, now_ms
    )


def call_all(address: str, method: str, request: Any, metadata: Any) -> list[Any]:
    """Every response of one RPC (a unary call's one)."""
    with grpc.insecure_channel(address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        if method == "Telemetry":
            return [next(stub.Telemetry(iter([request]), metadata=metadata, timeout=10))]
        answer = getattr(stub, method)(request, metadata=metadata, timeout=10)
        if method in ("ReceiveMessage", "PullMessage"):
            return list(answer)
        return [answer]


def call(address: str, method: str, request: Any, metadata: Any) -> Any:
    return call_all(address, method, request, metadata)[0]


def resource(name: str, namespace: str) -> Any:
    return pb.Resource(name=name, resource_namespace=namespace)


def receive_request(group: Any, topic: Any) -> Any:
    request = spb.ReceiveMessageRequest(group=group, batch_size=32, auto_renew=False)
    request.message_queue.topic.CopyFrom(topic)
    request.filter_expression.type = pb.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.FromMilliseconds(60_000)
    request.long_polling_timeout.FromMilliseconds(1_000)
    return request


def received(responses: list[Any]) -> list[Any]:
    return [r.message for r in responses if r.WhichOneof("content") == "message"]


def send_victim_messages(address: str) -> None:
    messages = []
    for index in range(VICTIM_MESSAGES):
        message = pb.Message(topic=resource("tA", ""), body=f"victim-{index}".encode())
        message.system_properties.message_id = f"V{index}"
        message.system_properties.body_encoding = pb.IDENTITY
        message.system_properties.message_type = pb.NORMAL
        messages.append(message)
    request = spb.SendMessageRequest(messages=messages)
    assert call(address, "SendMessage", request, signed(ADMIN)).status.code == pb.OK


def victim_receives_all(address: str) -> None:
    """Group ``gA`` (no namespace) still has every victim message of ``tA`` to deliver."""
    expected = [f"victim-{i}".encode() for i in range(VICTIM_MESSAGES)]
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while sorted(got) != expected and time.monotonic() < deadline:
        request = receive_request(resource("gA", ""), resource("tA", ""))
        responses = call_all(address, "ReceiveMessage", request, signed(ADMIN))
        got += [m.body for m in received(responses) if m.body.startswith(b"victim-")]
    assert sorted(got) == expected


def test_a_group_namespace_cannot_borrow_a_prefix_grant_and_take_another_groups_messages(
    broker: BrokerProcess,
) -> None:
    """Issue 25, item 2: ``Group:spark-*`` once let ``{gA, namespace spark-x}`` consume as gA."""
    send_victim_messages(broker.address)
    attack = receive_request(resource("gA", "spark-x"), resource("tA", ""))
    responses = call_all(broker.address, "ReceiveMessage", attack, signed(SPARK))
    assert responses[0].status.code == pb.UNAUTHORIZED, responses[0]
    assert "Group:spark-x%gA" in responses[0].status.message
    assert received(responses) == []
    victim_receives_all(broker.address)


def _requests(group: Any, topic: Any) -> dict[str, Any]:
    """One request of every MessagingService RPC naming ``group`` and ``topic``."""
    queue = pb.MessageQueue(topic=topic, id=0)
    message = pb.Message(topic=topic, body=b"x")
    message.system_properties.message_id = "M1"
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.NORMAL
    settings = spb.TelemetryCommand()
    settings.settings.client_type = pb.SIMPLE_CONSUMER
    settings.settings.subscription.group.CopyFrom(group)
    settings.settings.subscription.subscriptions.add(topic=topic)
    handle = {"group": group, "topic": topic, "receipt_handle": "bogus"}
    return {
        "QueryRoute": spb.QueryRouteRequest(topic=topic),
        "Heartbeat": spb.HeartbeatRequest(group=group, client_type=pb.SIMPLE_CONSUMER),
        "SendMessage": spb.SendMessageRequest(messages=[message]),
        "QueryAssignment": spb.QueryAssignmentRequest(group=group, topic=topic),
        "ReceiveMessage": receive_request(group, topic),
        "AckMessage": spb.AckMessageRequest(
            group=group, topic=topic, entries=[{"message_id": "M1", "receipt_handle": "bogus"}]
        ),
        "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueRequest(**handle),
        "PullMessage": spb.PullMessageRequest(group=group, message_queue=queue),
        "UpdateOffset": spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=3),
        "GetOffset": spb.GetOffsetRequest(group=group, message_queue=queue),
        "QueryOffset": spb.QueryOffsetRequest(message_queue=queue),
        "EndTransaction": spb.EndTransactionRequest(topic=topic),
        "Telemetry": settings,
        "NotifyClientTermination": spb.NotifyClientTerminationRequest(group=group),
        "ChangeInvisibleDuration": spb.ChangeInvisibleDurationRequest(**handle),
        "RecallMessage": spb.RecallMessageRequest(topic=topic),
        "SyncLiteSubscription": spb.SyncLiteSubscriptionRequest(group=group, topic=topic),
    }


_NO_GROUP = {"QueryRoute", "SendMessage", "QueryOffset", "EndTransaction", "RecallMessage"}


@pytest.mark.parametrize(
    ("group_namespace", "topic_namespace"),
    [("", ""), ("nsA", ""), ("", "nsA"), ("nsA", "nsA"), ("nsA", "nsB")],
)
def test_every_rpc_checks_and_uses_the_same_full_names(
    broker: BrokerProcess, group_namespace: str, topic_namespace: str
) -> None:
    """``mallory`` may act as every group but ``gA``: a request is refused exactly when its
    group's full name is ``gA``, and an allowed one never reaches group ``gA``."""
    send_victim_messages(broker.address)
    group, topic = resource("gA", group_namespace), resource("tA", topic_namespace)
    requests = _requests(group, topic)
    assert set(requests) == {method.name for method in _SERVICE.methods}  # a new RPC: add it
    for method, request in requests.items():
        status = call(broker.address, method, request, signed(MALLORY)).status
        refused = method not in _NO_GROUP and not group_namespace
        assert (status.code == pb.UNAUTHORIZED) == refused, (method, status)
    for queue_id in range(8):
        queue = pb.MessageQueue(topic=resource("tA", ""), id=queue_id)
        offset = spb.GetOffsetRequest(group=resource("gA", ""), message_queue=queue)
        status = call(broker.address, "GetOffset", offset, signed(ADMIN)).status
        assert status.code in (pb.OFFSET_NOT_FOUND, pb.BAD_REQUEST), status  # never committed
    victim_receives_all(broker.address)


BAD_GROUPS = ["../../x", "a\x00b", "g" * 10_000, "%RETRY%x", "%DLQ%x", "CID_RMQ_SYS_x"]


@pytest.mark.parametrize("name", BAD_GROUPS, ids=["path", "nul", "long", "retry", "dlq", "sys"])
def test_bad_and_system_group_names_are_illegal_for_heartbeat_receive_offsets_and_settings(
    broker: BrokerProcess, name: str
) -> None:
    group, topic = resource(name, ""), resource("tA", "")
    requests = _requests(group, topic)
    for method in ("Heartbeat", "ReceiveMessage", "UpdateOffset", "Telemetry"):
        status = call(broker.address, method, requests[method], signed(ADMIN)).status
        assert status.code == pb.ILLEGAL_CONSUMER_GROUP, (method, status)
        assert "\n" not in status.message and len(status.message) < 400


def test_a_namespaced_group_name_is_limited_to_255_characters_in_all(
    broker: BrokerProcess,
) -> None:
    fits, too_long = resource("g" * 251, "nsA"), resource("g" * 252, "nsA")
    heartbeat = _requests(fits, resource("tA", ""))["Heartbeat"]
    assert call(broker.address, "Heartbeat", heartbeat, signed(ADMIN)).status.code == pb.OK
    heartbeat = _requests(too_long, resource("tA", ""))["Heartbeat"]
    status = call(broker.address, "Heartbeat", heartbeat, signed(ADMIN)).status
    assert status.code == pb.ILLEGAL_CONSUMER_GROUP and "256 characters" in status.message


def test_a_prefix_policy_does_not_reach_across_a_namespace_separator() -> None:
    prefix = Policy("Topic", "A", prefix=True, actions=frozenset({Action.SUB}))
    namespace = Policy("Topic", "A%", prefix=True, actions=frozenset({Action.SUB}))
    every = Policy("Topic", "", prefix=True, actions=frozenset({Action.SUB}))

    def may(policy: Policy, name: str) -> bool:
        return allowed(
            User("u", "secret-123", policies=(policy,)), Need("Topic", name, (Action.SUB,))
        )

    assert [may(prefix, n) for n in ("A", "A-1", "Ab", "A%orders", "Ab%orders")] == [
        True, True, True, False, False,
    ]  # fmt: skip
    assert [may(namespace, n) for n in ("A%orders", "A%b%c", "Ab%orders", "A")] == [
        True, False, False, False,
    ]  # fmt: skip
    assert all(may(every, n) for n in ("A", "A%orders", "x%y%z"))
