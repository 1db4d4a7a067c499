"""Redelivery over gRPC is privileged and idempotent, against a broker process.

A redelivery request (a ``StoreService.Redeliver`` call whose message names a schedule record
of ``rmq_sys_wheel_timer``) is honoured only when signed by the store's identity (its secret
lives in ``<store>/config/redelivery.secret``) or, with auth on, by a user with
``Redeliver``. Forged ones, with no, a wrong or a stale signature, store nothing, and every
refusal is the same reply whatever the offset names (a due timer record, an ordinary message,
nothing), so walking offsets discloses nothing. A repeated request returns the first copy's
position, also after a broker restart. The same message sent as a SendMessage is an ordinary
send (refused: a system topic).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, props, read_records, wait_for

from rmq_spark.broker.grpc.store_rpc import store_stub
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED, RedeliveryRef, ref_to_message
from rmq_spark.broker.security.auth import (
    STORE_ACCESS_KEY,
    read_redelivery_secret,
    signature_metadata,
)
from rmq_spark.store.layout import RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import MessageRecord

_SKEW_MS = 15 * 60 * 1000
SMALL = "store.segment_size_bytes=16777216"  # 16 MiB segments: the disk is shared
USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [{ resource = "Topic:*", actions = ["All"] }]

[users.scheduler]
secret_key = "scheduler-secret-1"
policies = [{ resource = "Topic:rmq_sys_wheel_timer", actions = ["Redeliver"] }]
"""


def now_ms() -> int:
    return int(time.time() * 1000)


def send(address: str, message: Any, metadata: Any = ()) -> Any:
    channel = grpc.insecure_channel(address)
    try:
        stub = spb_grpc.MessagingServiceStub(channel)
        request = spb.SendMessageRequest(messages=[message])
        return stub.SendMessage(request, metadata=metadata, timeout=10)
    finally:
        channel.close()


def redeliver(address: str, message: Any, metadata: Any = ()) -> Any:
    channel = grpc.insecure_channel(address)
    try:
        request = spb.SendMessageRequest(messages=[message])
        return store_stub(channel).Redeliver(request, metadata=metadata, timeout=10)
    finally:
        channel.close()


def ordinary(topic: str, body: bytes, message_id: str, deliver_ms: int | None = None) -> Any:
    message = pb.Message(body=body)
    message.topic.name = topic
    props_ = message.system_properties
    props_.message_id = message_id
    props_.body_encoding = pb.IDENTITY
    props_.message_type = pb.NORMAL if deliver_ms is None else pb.DELAY
    if deliver_ms is not None:
        props_.delivery_timestamp.FromMilliseconds(deliver_ms)
    return message


def store_signed(store_dir: Path, at_ms: int | None = None) -> tuple[tuple[str, str], ...]:
    secret = read_redelivery_secret(store_dir)
    assert secret is not None, "the broker makes the secret on its first start"
    return signature_metadata(STORE_ACCESS_KEY, secret, now_ms() if at_ms is None else at_ms)


def due_timer_record(broker: BrokerProcess) -> tuple[MessageRecord, MessageRecord]:
    """Store an ordinary message and a timer message due in 1 s; wait until it is due."""
    assert send(broker.address, ordinary("orders", b"plain", "PLAIN1")).status.code == pb.OK
    deliver_ms = now_ms() + 1000
    timer = ordinary("orders", b"later", "TIMER1", deliver_ms)
    assert send(broker.address, timer).status.code == pb.OK
    records = read_records(broker.store_dir)
    [schedule] = [r for r in records if r.topic == RMQ_SYS_WHEEL_TIMER_TOPIC]
    [plain] = [r for r in records if r.topic == "orders"]
    wait_for(lambda: now_ms() > deliver_ms + 1000, 10, "the timer message to be due")
    return schedule, plain


def ref_of(record: MessageRecord, physical_offset: int | None = None) -> RedeliveryRef:
    return RedeliveryRef(
        RMQ_SYS_WHEEL_TIMER_TOPIC,
        record.queue_id,
        record.queue_offset,
        record.physical_offset if physical_offset is None else physical_offset,
        now_ms(),
        "TIMER1",
    )


def copies(broker: BrokerProcess) -> list[MessageRecord]:
    return [
        r
        for r in read_records(broker.store_dir)
        if r.topic == "orders" and props(r).get("UNIQ_KEY") == "TIMER1"
    ]


def test_a_forged_redelivery_stores_nothing_and_every_refusal_reads_the_same(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(SMALL)
    schedule, plain = due_timer_record(broker)
    secret = read_redelivery_secret(broker.store_dir) or "no secret yet"
    stale_ms = now_ms() - _SKEW_MS - 60_000
    forgeries: list[tuple[str, Any]] = [
        ("no credential", ()),
        ("wrong secret", signature_metadata(STORE_ACCESS_KEY, "guessed", now_ms())),
        ("a user's name", signature_metadata("alice", secret, now_ms())),
        ("stale", signature_metadata(STORE_ACCESS_KEY, secret, stale_ms)),
    ]
    targets = [schedule.physical_offset, plain.physical_offset, 10**12]
    targets += range(0, schedule.physical_offset + 400, 50)  # walking the log
    replies = set()
    for what, metadata in forgeries:
        for offset in targets:
            message = ref_to_message(ref_of(schedule, offset))
            response = redeliver(broker.address, message, metadata)
            replies.add(response.SerializeToString())
            assert response.entries[0].status.message == REDELIVERY_REFUSED, (what, offset)
    assert len(replies) == 1  # the same bytes whatever the offset holds: nothing disclosed
    [reply] = replies
    assert spb.SendMessageResponse.FromString(reply).status.code == pb.BAD_REQUEST
    assert copies(broker) == []


def test_a_repeated_redelivery_returns_the_first_copy_and_stores_one_also_after_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(SMALL)
    schedule, _plain = due_timer_record(broker)
    message = ref_to_message(ref_of(schedule))
    signed = store_signed(broker.store_dir)
    first = redeliver(broker.address, message, signed)
    assert first.status.code == pb.OK, first
    for _ in range(4):  # retried, or the same signed request replayed inside the window
        again = redeliver(broker.address, message, signed)
        assert again.status.code == pb.OK
        assert again.entries[0].offset == first.entries[0].offset
    assert len(copies(broker)) == 1

    assert broker.stop() == 0
    restarted = broker_factory(SMALL, store_dir=broker.store_dir)
    later = redeliver(restarted.address, message, store_signed(restarted.store_dir))
    assert later.status.code == pb.OK
    assert later.entries[0].offset == first.entries[0].offset
    [copy] = copies(restarted)
    assert (copy.body, copy.queue_offset) == (b"later", first.entries[0].offset)


@pytest.mark.parametrize(
    ("who", "allowed"),
    [("alice", False), ("scheduler", True), ("store", True)],
)
def test_with_auth_on_only_a_redeliver_user_or_the_store_identity_may_redeliver(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path, who: str, allowed: bool
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)  # the broker refuses a users file others may read
    broker = broker_factory("broker.auth_enabled=true", f"broker.auth_users_file={users}", SMALL)
    alice = signature_metadata("alice", "alice-secret-1", now_ms())
    assert send(broker.address, ordinary("orders", b"plain", "PLAIN1"), alice).status.code == (
        pb.OK
    )
    deliver_ms = now_ms() + 1000
    timer = ordinary("orders", b"later", "TIMER1", deliver_ms)
    assert send(broker.address, timer, alice).status.code == pb.OK
    [schedule] = [r for r in read_records(broker.store_dir) if r.topic == RMQ_SYS_WHEEL_TIMER_TOPIC]
    wait_for(lambda: now_ms() > deliver_ms + 1000, 10, "the timer message to be due")
    metadata = {
        "alice": signature_metadata("alice", "alice-secret-1", now_ms()),
        "scheduler": signature_metadata("scheduler", "scheduler-secret-1", now_ms()),
        "store": store_signed(broker.store_dir),
    }[who]
    response = redeliver(broker.address, ref_to_message(ref_of(schedule)), metadata)
    if allowed:
        assert response.status.code == pb.OK, response
        assert len(copies(broker)) == 1
    else:
        assert (response.status.code, response.status.message) == (
            pb.BAD_REQUEST,
            REDELIVERY_REFUSED,
        )
        assert copies(broker) == []


def test_a_redelivery_request_sent_as_a_send_message_is_an_ordinary_refused_send(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(SMALL)
    schedule, _plain = due_timer_record(broker)
    message = ref_to_message(ref_of(schedule))
    message.system_properties.ClearField("delivery_timestamp")
    message.body = b"x"  # an ordinary send, then: the topic rule refuses it
    response = send(broker.address, message, store_signed(broker.store_dir))
    assert response.entries[0].status.code == pb.ILLEGAL_TOPIC, response
    assert copies(broker) == []
