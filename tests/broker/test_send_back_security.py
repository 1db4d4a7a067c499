"""Send-back is no second redelivery door (issue 25), against a broker process.

The attack: a SendMessage to ``%RETRY%<group>`` whose receipt handle named a CommitLog offset
copied *any* record into the group's retry topic, whoever asked; its refusals printed the
store's path and raw bytes. Now SendMessage is an ordinary send, and ``StoreService.SendBack``
copies only a record the group was delivered (a current receipt the broker issued, acknowledged
by the send-back) or, for the store's own identity, a record named by offset; with auth on the
caller needs ``Sub`` on the group and on the topic the record was delivered as. Every refusal
is the same ``send-back refused``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
from broker_harness import BrokerProcess, props, read_records, start_broker, wait_for

from rmq_spark.broker.consumer.send_back import SEND_BACK_REFUSED
from rmq_spark.broker.consumer_client import Consumer
from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
from rmq_spark.broker.grpc.store_rpc import send_back_request, store_signed_metadata, store_stub
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.security.auth import signature_metadata

SMALL = "store.segment_size_bytes=16777216"
USERS = """
[users.admin]
secret_key = "admin-secret-1"
policies = [{ resource = "*", actions = ["All"] }]

[users.mallory]
secret_key = "mallory-secret-1"
policies = [
  { resource = "Topic:%RETRY%gR", actions = ["Pub"] },
  { resource = "Group:gR", actions = ["Sub"] },
  { resource = "Topic:A", actions = ["Sub"] },
]
"""
ADMIN = ("admin", "admin-secret-1")
MALLORY = ("mallory", "mallory-secret-1")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _signed(who: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
    metadata = client_metadata("attacker@test")
    return metadata + signature_metadata(*who, _now_ms()) if who else metadata


def _old_send_back(address: str, group: str, offset: int, who: Any = None) -> Any:
    """The SendMessage the attack used: %RETRY%<group> with a send-back receipt handle."""
    message = pb.Message()
    message.topic.name = f"%RETRY%{group}"
    message.system_properties.message_id = f"send-back-{offset}"
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.NORMAL
    message.system_properties.receipt_handle = f"rmq-spark-send-back:{offset}"
    channel, stub = messaging_channel(address)
    with channel:
        request = spb.SendMessageRequest(messages=[message])
        return stub.SendMessage(request, timeout=10, metadata=_signed(who))


def _send_back(address: str, request: Any, metadata: Any) -> Any:
    channel, _messaging = messaging_channel(address)
    with channel:
        try:
            return store_stub(channel).SendBack(request, timeout=10, metadata=metadata)
        except grpc.RpcError as err:  # UNIMPLEMENTED before StoreService existed
            return spb.SendMessageResponse(
                status=pb.Status(code=pb.INTERNAL_ERROR, message=str(err))
            )


def _by_receipt(group: str, topic: str, receipt: str) -> Any:
    request = ssb.SendBackRequest(group=pb.Resource(name=group))
    request.entries.add(topic=pb.Resource(name=topic), receipt_handle=receipt, message_id="M")
    return request


def _copies(broker: BrokerProcess, body: bytes) -> list[str]:
    """The topics holding a copy of ``body`` besides its own message (the original)."""
    found = [r for r in read_records(broker.store_dir) if r.body == body]
    return [r.topic for r in found if "RETRY_TOPIC" in props(r) or r.topic.startswith("%")]


def _offset_of(broker: BrokerProcess, topic: str, body: bytes) -> int:
    wait_for(
        lambda: any(r.topic == topic and r.body == body for r in read_records(broker.store_dir)),
        10,
        f"{body!r} in {topic}",
    )
    [record] = [r for r in read_records(broker.store_dir) if r.topic == topic and r.body == body]
    return record.physical_offset


def test_with_auth_on_a_send_back_cannot_copy_a_topic_the_caller_may_not_read(
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker = start_broker(
        tmp_path / "store",
        tmp_path / "work",
        "broker.auth_enabled=true",
        f"broker.auth_users_file={users}",
        "broker.topics=A:1,B:1",
        SMALL,
    )
    try:
        with Producer(broker.address, credentials=ADMIN) as producer:
            producer.send("A", b"a-public")
            producer.send("B", b"b-secret")
        secret_at = _offset_of(broker, "B", b"b-secret")
        _old_send_back(broker.address, "gR", secret_at, MALLORY)
        time.sleep(0.5)
        assert _copies(broker, b"b-secret") == []  # an ordinary send now: refused
        by_offset = _send_back(
            broker.address, send_back_request("gR", [secret_at]), _signed(MALLORY)
        )
        assert by_offset.entries[0].status.message == SEND_BACK_REFUSED
        with Consumer(broker.address, "gR", "A", credentials=MALLORY) as consumer:
            [delivered] = consumer.receive(1, invisible_ms=10_000, wait_ms=3_000)
            assert delivered.body == b"a-public"
            # Its own receipt, claimed as topic B (or with B's offset patched in): refused.
            as_b = _send_back(
                broker.address, _by_receipt("gR", "B", delivered.receipt_handle), _signed(MALLORY)
            )
            assert as_b.entries[0].status.message == SEND_BACK_REFUSED
            as_a = _send_back(
                broker.address, _by_receipt("gR", "A", delivered.receipt_handle), _signed(MALLORY)
            )
            assert as_a.entries[0].status.code == pb.OK, as_a  # its own delivery: allowed
        time.sleep(0.5)
        assert _copies(broker, b"b-secret") == []
        assert _copies(broker, b"a-public") == ["SCHEDULE_TOPIC_XXXX"]
    finally:
        broker.stop()


def test_with_auth_off_an_acknowledged_message_cannot_be_sent_back_again(
    tmp_path: Path,
) -> None:
    broker = start_broker(tmp_path / "store", tmp_path / "work", "broker.topics=orders:1", SMALL)
    try:
        with Producer(broker.address) as producer:
            producer.send("orders", b"paid-once")
        with Consumer(broker.address, "billing", "orders") as consumer:
            [delivered] = consumer.receive(1, invisible_ms=10_000, wait_ms=3_000)
            consumer.ack(delivered)
        offset = _offset_of(broker, "orders", b"paid-once")
        for _ in range(17):  # the attack: 16 retries and a dead letter
            _old_send_back(broker.address, "billing", offset)
        time.sleep(0.5)
        assert _copies(broker, b"paid-once") == []
        for _ in range(17):
            refused = _send_back(broker.address, send_back_request("billing", [offset]), ())
            assert refused.entries[0].status.message == SEND_BACK_REFUSED
        stale = _send_back(
            broker.address, _by_receipt("billing", "orders", delivered.receipt_handle), ()
        )
        assert stale.entries[0].status.message == SEND_BACK_REFUSED  # acknowledged already
        time.sleep(0.5)
        assert _copies(broker, b"paid-once") == []
    finally:
        broker.stop()


def test_a_receipt_sends_its_delivery_back_once(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "store", tmp_path / "work", "broker.topics=orders:1", SMALL)
    try:
        with Producer(broker.address) as producer:
            producer.send("orders", b"retry-me")
        with Consumer(broker.address, "billing", "orders") as consumer:
            [delivered] = consumer.receive(1, invisible_ms=10_000, wait_ms=3_000)
            request = _by_receipt("billing", "orders", delivered.receipt_handle)
            first = _send_back(broker.address, request, ())
            again = _send_back(broker.address, request, ())
        assert first.entries[0].status.code == pb.OK, first
        assert again.entries[0].status.message == SEND_BACK_REFUSED  # the copy replaced it
        time.sleep(0.5)
        assert _copies(broker, b"retry-me") == ["SCHEDULE_TOPIC_XXXX"]
    finally:
        broker.stop()


def test_every_send_back_refusal_reads_the_same_and_shows_nothing_of_the_store(
    tmp_path: Path,
) -> None:
    broker = start_broker(tmp_path / "store", tmp_path / "work", "broker.topics=orders:1", SMALL)
    try:
        with Producer(broker.address) as producer:
            producer.send("orders", b"x" * 200)
        end = _offset_of(broker, "orders", b"x" * 200) + 400
        store_identity = store_signed_metadata(broker.store_dir, "spark@test", _now_ms())
        assert store_identity is not None
        replies = set()
        for offset in [*range(1, end, 37), 10**12]:  # inside records, past the end
            old = _old_send_back(broker.address, "billing", offset)
            text = str(old)
            assert "commitlog" not in text and str(broker.store_dir) not in text, text
            assert "magic" not in text and "0x" not in text, text
            for metadata in ((), store_identity):
                request = send_back_request("billing", [offset])
                request.entries[0].message_id = "same"
                reply = _send_back(broker.address, request, metadata)
                replies.add(reply.SerializeToString())
        assert len(replies) == 1, replies
        [reply] = replies
        status = spb.SendMessageResponse.FromString(reply).status
        assert (status.code, status.message) == (pb.FORBIDDEN, SEND_BACK_REFUSED)
    finally:
        broker.stop()


def test_a_malformed_or_empty_send_back_gets_a_typed_answer(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "store", tmp_path / "work", SMALL)
    try:
        channel, _messaging = messaging_channel(broker.address)
        with channel:
            raw = channel.unary_unary("/rmq_spark.v1.StoreService/SendBack")
            reply = spb.SendMessageResponse.FromString(raw(b"\xff\xff\xff", timeout=10))
            assert reply.status.code == pb.BAD_REQUEST, reply
            nothing = ssb.SendBackRequest(group=pb.Resource(name="billing"))
            nothing.entries.add(message_id="no-record")
            reply = store_stub(channel).SendBack(nothing, timeout=10)
            assert reply.entries[0].status.message == SEND_BACK_REFUSED
            bad_group = send_back_request("bad group!", [0])
            reply = store_stub(channel).SendBack(
                bad_group,
                timeout=10,
                metadata=store_signed_metadata(broker.store_dir, "t", _now_ms()),
            )
            assert reply.entries[0].status.message == SEND_BACK_REFUSED
    finally:
        broker.stop()
