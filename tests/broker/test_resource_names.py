"""One name per resource: every RPC's ACL check and the service act on the same full name
(``namespace%name``), whatever namespace the request gives its topic and its group; consumer
group names are validated as RocketMQ's proxy does (system groups refused); a prefix policy
does not reach across a namespace separator.

Against a broker process with raw gRPC stubs and signed headers (the official clients always
put one namespace on every resource, so they cannot send the mixed requests tested here).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, props, read_records, wait_for

from rmq_spark.broker.consumer.send_back import SEND_BACK_REFUSED
from rmq_spark.broker.grpc.store_rpc import STORE_SERVICE, store_stub
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED, RedeliveryRef, ref_to_message
from rmq_spark.broker.security.acl import (
    Action,
    Need,
    Policy,
    User,
    allowed,
    needs_of,
    rights_names,
)
from rmq_spark.broker.security.auth import signature_metadata
from rmq_spark.broker.security.resources import Resolved, resolve, resolver_names
from rmq_spark.store.layout import RMQ_SYS_WHEEL_TIMER_TOPIC

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

[users.scheduler]
secret_key = "scheduler-secret-1"
policies = [{ resource = "Topic:rmq_sys_wheel_timer", actions = ["Redeliver"] }]
"""
ADMIN = ("admin", "admin-secret-1")
SPARK = ("spark", "spark-secret-1")
MALLORY = ("mallory", "mallory-secret-1")
SCHEDULER = ("scheduler", "scheduler-secret-1")
VICTIM_MESSAGES = 5
_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]


def auth_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    return broker_factory("broker.auth_enabled=true", f"broker.auth_users_file={users}", SMALL)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    return auth_broker(broker_factory, tmp_path)


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
_UNSERVED = {"PullMessage", "SyncLiteSubscription"}  # their answer: NOT_IMPLEMENTED
_NO_TOPIC = {"Heartbeat", "NotifyClientTermination", "CheckTransaction"}
NAMESPACES = [("", ""), ("nsA", ""), ("", "nsA"), ("nsA", "nsA"), ("nsA", "nsB")]


def _store_requests(group: Any, topic: Any) -> dict[str, Any]:
    """One request of every StoreService RPC naming ``group`` and ``topic``."""
    send_back = ssb.SendBackRequest(group=group)
    send_back.entries.add(topic=topic, receipt_handle="bogus", message_id="M1")
    redeliver = spb.SendMessageRequest(messages=[pb.Message(topic=topic)])
    check = ssb.CheckTransactionRequest()
    check.entries.add(physical_offset=0, queue_offset=0)
    return {"SendBack": send_back, "Redeliver": redeliver, "CheckTransaction": check}


def test_every_rpc_of_both_services_has_a_resolver_and_rights() -> None:
    """A new RPC cannot be served without saying which resources it names and what rights
    they need: the edge refuses an RPC it cannot resolve."""
    messaging = {method.name for method in _SERVICE.methods}
    store = {method.name for method in STORE_SERVICE.methods}
    assert not messaging & store
    assert resolver_names() == messaging | store
    group, topic = resource("gA", "nsA"), resource("tA", "nsB")
    requests = _requests(group, topic) | _store_requests(group, topic)
    assert set(requests) == messaging | store
    publishing = spb.TelemetryCommand()
    publishing.settings.publishing.topics.add(name="tA", resource_namespace="nsB")
    rights = set()
    for method, request in [*requests.items(), ("Telemetry", publishing)]:
        resolved = resolve(method, request)
        assert isinstance(resolved, Resolved), (method, resolved)
        assert needs_of(resolved) is not None, method
        topics = set() if method in _NO_TOPIC else {"nsB%tA"}
        assert {t.full for t in resolved.topics} == topics, method
        named = (
            method not in _NO_GROUP | {"Redeliver", "CheckTransaction"}
            and request is not publishing
        )
        assert (resolved.group and resolved.group.full) == ("nsA%gA" if named else None), method
        rights.add(resolved.rights)
    assert rights == rights_names()
    refused = resolve("NewRpc", spb.QueryRouteRequest())
    assert not isinstance(refused, Resolved) and refused.code == pb.NOT_IMPLEMENTED


_HANDLERS = [
    "consume_grpc.py",
    "offset_grpc.py",
    "grpc_producer.py",
    "grpc_telemetry.py",
    "store_rpc.py",
]


# Reading a resource from a request (``request.group``, ``entry.topic``, ``message_queue.topic``,
# ``subscription.group``, ``.resource_namespace``) or deriving or judging a name.
_FROM_THE_PROTOBUF = re.compile(
    r"\b(?:request|message|entry|command|settings|reply|queue|message_queue|subscription)"
    r"\.(?:group|topic)\b"
    r"|\.resource_namespace\b"
    r"|\b(?:full_topic_name|full_group_name|group_name_problem|topic_name_problem)\b"
)


@pytest.mark.parametrize("module", _HANDLERS)
def test_handlers_take_names_only_from_the_edge(module: str) -> None:
    """No handler reads, computes or validates a name from the protobuf: the ACL and it share
    the one ``Resolved`` the edge made (``resources.py``)."""
    source = (Path(__file__).parents[2] / "rmq_spark" / "broker" / "grpc" / module).read_text()
    code = [line for line in source.splitlines() if not line.lstrip().startswith(("#", "``"))]
    found = [line.strip() for line in code if _FROM_THE_PROTOBUF.search(line)]
    assert found == [], module


@pytest.mark.parametrize(("group_namespace", "topic_namespace"), NAMESPACES)
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
SYSTEM_GROUPS = {"%RETRY%x", "%DLQ%x", "CID_RMQ_SYS_x"}  # GetOffset may read theirs


@pytest.mark.parametrize("auth", ["on", "off"])
@pytest.mark.parametrize("name", BAD_GROUPS, ids=["path", "nul", "long", "retry", "dlq", "sys"])
def test_bad_and_system_group_names_are_illegal_for_every_rpc_that_names_a_group(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path, name: str, auth: str
) -> None:
    """Refused at the edge with auth on or off, before any handler or ACL sees the name (an
    unsigned caller, with auth on, is refused first)."""
    server = auth_broker(broker_factory, tmp_path) if auth == "on" else broker_factory(SMALL)
    group, topic = resource(name, ""), resource("tA", "")
    requests = _requests(group, topic)
    for method in sorted(set(requests) - _NO_GROUP - _UNSERVED):
        status = call(server.address, method, requests[method], signed(ADMIN)).status
        if method == "GetOffset" and name in SYSTEM_GROUPS:
            assert status.code != pb.ILLEGAL_CONSUMER_GROUP, (method, status)
            continue
        assert status.code == pb.ILLEGAL_CONSUMER_GROUP, (method, status)
        assert "\n" not in status.message and len(status.message) < 400
        if auth == "on":  # who may not call learns nothing about the name
            unsigned = (("x-mq-client-id", "anonymous"),)
            status = call(server.address, method, requests[method], unsigned).status
            assert status.code == pb.UNAUTHORIZED, (method, status)


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


def store_call(address: str, method: str, request: Any, metadata: Any) -> Any:
    with grpc.insecure_channel(address) as channel:
        return getattr(store_stub(channel), method)(request, metadata=metadata, timeout=10)


def receipt_of(address: str, group: Any, topic: Any, body: bytes, who: Any) -> str:
    """The receipt handle of ``body``'s delivery to ``group`` (received as ``who``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        responses = call_all(address, "ReceiveMessage", receive_request(group, topic), signed(who))
        for message in received(responses):
            if message.body == body:
                return str(message.system_properties.receipt_handle)
    raise AssertionError(f"{body!r} was not delivered")


@pytest.mark.parametrize(("group_namespace", "topic_namespace"), NAMESPACES)
def test_send_back_checks_and_uses_the_same_full_names(
    broker: BrokerProcess, group_namespace: str, topic_namespace: str
) -> None:
    """``mallory`` may send back a delivery of any group but ``gA``: its own delivery to
    ``{gA, nsA}`` is copied to that group's retry topic; group ``gA``'s is refused."""
    group, topic = resource("gA", group_namespace), resource("tA", topic_namespace)
    body = f"send-back-{group_namespace}-{topic_namespace}".encode()
    message = pb.Message(topic=topic, body=body)
    message.system_properties.message_id = "SB1"
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.NORMAL
    request = spb.SendMessageRequest(messages=[message])
    assert call(broker.address, "SendMessage", request, signed(ADMIN)).status.code == pb.OK
    receiver = MALLORY if group_namespace else ADMIN  # mallory may not receive as gA
    receipt = receipt_of(broker.address, group, topic, body, receiver)
    send_back = ssb.SendBackRequest(group=group)
    send_back.entries.add(topic=topic, receipt_handle=receipt, message_id="SB1")
    reply = store_call(broker.address, "SendBack", send_back, signed(MALLORY))
    records = [r for r in read_records(broker.store_dir) if r.body == body][1:]
    copies = [props(r).get("REAL_TOPIC", r.topic) for r in records]
    if group_namespace:
        assert reply.status.code == pb.OK, reply
        assert copies == [f"%RETRY%{group_namespace}%gA"]
    else:
        assert reply.status.message == SEND_BACK_REFUSED, reply
        assert copies == []
        assert "SendBack from mallory refused: may not Sub on Group:gA" in broker.log_text()


def _due_timer_ref(broker: BrokerProcess) -> RedeliveryRef:
    deliver_ms = int(time.time() * 1000) + 1000
    message = pb.Message(topic=resource("orders", ""), body=b"later")
    message.system_properties.message_id = "TIMER1"
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.DELAY
    message.system_properties.delivery_timestamp.FromMilliseconds(deliver_ms)
    request = spb.SendMessageRequest(messages=[message])
    assert call(broker.address, "SendMessage", request, signed(ADMIN)).status.code == pb.OK
    records = read_records(broker.store_dir)
    [timer] = [r for r in records if r.topic == RMQ_SYS_WHEEL_TIMER_TOPIC]
    wait_for(lambda: time.time() * 1000 > deliver_ms + 1000, 10, "the timer message to be due")
    now_ms = int(time.time() * 1000)
    return RedeliveryRef(
        RMQ_SYS_WHEEL_TIMER_TOPIC,
        timer.queue_id,
        timer.queue_offset,
        timer.physical_offset,
        now_ms,
        "TIMER1",
    )


@pytest.mark.parametrize("namespace", ["", "nsA"])
def test_redeliver_checks_the_schedule_topic_under_the_name_the_request_gives(
    broker: BrokerProcess, namespace: str
) -> None:
    """``scheduler`` holds ``Redeliver`` on ``Topic:rmq_sys_wheel_timer``: not on the same
    topic in a namespace, which the ACL checks as ``nsA%rmq_sys_wheel_timer``."""
    message = ref_to_message(_due_timer_ref(broker))
    message.topic.resource_namespace = namespace
    request = spb.SendMessageRequest(messages=[message])
    reply = store_call(broker.address, "Redeliver", request, signed(SCHEDULER))
    copies = [r for r in read_records(broker.store_dir) if r.topic == "orders"]
    if not namespace:
        assert reply.status.code == pb.OK, reply
        assert [r.body for r in copies] == [b"later"]
    else:
        assert reply.entries[0].status.message == REDELIVERY_REFUSED, reply
        assert copies == []
        refused = "may not Redeliver on Topic:nsA%rmq_sys_wheel_timer"
        assert f"Redeliver from scheduler refused: {refused}" in broker.log_text()
