"""SendMessage served a wave at a time behind the native front (``native_calls.py``,
``edge.Wave``): the calls whose requests come in one relay read run as one Task through the
same edge (timing, the auth gate per call, the request-bytes budget) and one store batch, and
each call gets the answer it would have got alone.

The broker's side of the relay runs in this process on a real store, servicer and gate, with
this test as the front: a wave needs its calls in one read, which only a front that writes
them together can promise."""

from __future__ import annotations

import asyncio
import socket
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from relay_frames import answers, open_payload
from store_helpers import open_store

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.grpc import relay_wire as wire
from rmq_spark.broker.grpc.grpc_api import MessagingServicer, add_servicer_to_server
from rmq_spark.broker.grpc.native_calls import RelayCalls
from rmq_spark.broker.grpc.rpc_timer import RpcTimer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.acl import User, parse_policy
from rmq_spark.broker.security.auth import Authenticator, signature_metadata
from rmq_spark.broker.security.auth_grpc import AuthInterceptor
from rmq_spark.broker.security.limits import InflightBytes
from rmq_spark.broker.service import BrokerService
from rmq_spark.clock import SystemClock
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.message_store import MessageStore

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
USERS = {
    "alice": User("alice", "alice-secret", policies=(
        parse_policy({"resource": "Topic:orders", "actions": ["Pub"]}, "p0"),)),
    "wild": User("wild", "wild-secret", policies=(
        parse_policy({"resource": "Topic:*", "actions": ["Pub"]}, "p0"),
        parse_policy({"resource": "Topic:secret", "actions": ["Pub"], "decision": "Deny"}, "p1"),
    )),
    "bob": User("bob", "bob-secret"),
}  # fmt: skip


class Broker:
    """A store, its service and the relay's broker side, with the server's edge."""

    def __init__(self, root: Path, *, auth: bool) -> None:
        self.store: MessageStore = open_store(root, flush_policy=FlushPolicy.SYNC)
        self.service = BrokerService(self.store, BrokerConfig(default_queue_count=4))
        self.budget = InflightBytes(1 << 20)
        self.calls = RelayCalls()
        authenticator = Authenticator(
            USERS if auth else {}, enabled=auth, skew_ms=900_000, clock=SystemClock(),
            store_secret=None,
        )  # fmt: skip
        self._executor = ThreadPoolExecutor(1)
        servicer = MessagingServicer(
            self.service, self._executor, route_host="127.0.0.1", route_port=1,
            shutdown=asyncio.Event(),
        )  # fmt: skip
        edge = (RpcTimer(self.service.traffic), AuthInterceptor(authenticator))
        add_servicer_to_server(servicer, self.calls, self.budget, edge)

    def relay(self, frames: bytes, expected: int) -> tuple[dict[int, tuple[int, bytes]], list]:
        """Send ``frames`` in one write; the answers once ``expected`` calls have one, and
        the coroutines of the Tasks the relay started meanwhile."""
        return asyncio.run(self._relay(frames, expected))

    async def _relay(self, frames: bytes, expected: int) -> tuple[dict, list]:
        loop = asyncio.get_running_loop()
        started: list[str] = []

        def factory(loop: Any, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            started.append(coro.__qualname__)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)
        ours, theirs = socket.socketpair()
        await loop.connect_accepted_socket(lambda: self.calls, sock=ours)
        theirs.sendall(frames)
        theirs.setblocking(False)
        data, deadline = b"", time.monotonic() + 20
        while len(answers(data)) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            try:
                data += theirs.recv(1 << 20)
            except BlockingIOError:
                continue
        theirs.close()
        await asyncio.sleep(0.05)
        return answers(data), started

    def close(self) -> None:
        self._executor.shutdown()
        self.store.close()


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Broker]:
    made = Broker(tmp_path / "store", auth=getattr(request, "param", False))
    yield made
    made.close()


def _message(topic: str, number: int, *, digest_ok: bool = True) -> Any:
    body = f"body-{number}".encode()
    message = pb.Message(topic=pb.Resource(name=topic), body=body)
    props = message.system_properties
    props.message_id = f"01{number:030X}"
    props.body_digest.type = pb.CRC32
    props.body_digest.checksum = f"{zlib.crc32(body) ^ (0 if digest_ok else 1):08X}"
    props.message_type = pb.NORMAL
    props.born_timestamp.GetCurrentTime()
    return message


def _call(call_id: int, request: bytes, metadata: tuple = ()) -> bytes:
    encoded = [(key, value.encode()) for key, value in metadata]
    opened = open_payload(SEND, "ipv4:127.0.0.1:40000", -1, encoded)
    return (
        wire.frame(wire.OPEN, call_id, opened)
        + wire.frame(wire.MSG, call_id, request)
        + wire.frame(wire.HALF_CLOSE, call_id)
    )


def _request(*messages: Any) -> bytes:
    return spb.SendMessageRequest(messages=messages).SerializeToString()


def _reply(found: dict[int, tuple[int, bytes]], call_id: int) -> Any:
    kind, payload = found[call_id]
    assert kind == wire.REPLY, f"call {call_id}: frame kind {kind}"
    return spb.SendMessageResponse.FromString(payload)


def _signed(user: str, secret: str) -> tuple[tuple[str, str], ...]:
    return signature_metadata(user, secret, int(time.time() * 1000))


def _stored_topics(store: MessageStore) -> list[str]:
    return sorted(topic for topic, _ in store.queue_offsets())


def test_the_sends_of_one_read_are_one_wave_and_each_call_gets_its_own_answer(
    broker: Broker,
) -> None:
    frames = b"".join(_call(n, _request(_message("orders", n))) for n in range(1, 7))
    frames += _call(7, b"\xff\xff not protobuf")
    frames += _call(8, _request(_message("orders", 8, digest_ok=False)))
    frames += _call(9, _request())  # no messages
    frames += _call(10, _request(_message("orders", 10), _message("payments", 11)))
    found, tasks = broker.relay(frames, expected=10)

    assert tasks.count("RelayCalls._run_wave") == 1 and "RelayCalls._run_unary" not in tasks
    for n in range(1, 7):
        reply = _reply(found, n)
        assert reply.status.code == pb.OK
        assert reply.entries[0].message_id == f"01{n:030X}"  # its own entry, not another's
    assert _reply(found, 7).status.code == pb.BAD_REQUEST
    assert _reply(found, 8).status.code == pb.MESSAGE_CORRUPTED
    assert _reply(found, 9).status.code == pb.BAD_REQUEST
    both = _reply(found, 10)
    assert [e.status.code for e in both.entries] == [pb.OK, pb.OK]
    assert sum(broker.store.queue_offsets().values()) == 8  # 6 + the two of call 10
    assert broker.budget.used_bytes == 0
    counted = {key[2]: snap.count for key, snap in broker.service.traffic.snapshot().rpc.items()}
    assert counted == {"OK": 7, "BAD_REQUEST": 2, "MESSAGE_CORRUPTED": 1}


@pytest.mark.parametrize("broker", [True], indirect=True)
def test_with_auth_on_each_call_of_a_wave_is_judged_on_its_own_signature(broker: Broker) -> None:
    frames = _call(1, _request(_message("orders", 1)), _signed("alice", "alice-secret"))
    frames += _call(2, _request(_message("orders", 2)))  # unsigned
    frames += _call(3, _request(_message("orders", 3)), _signed("bob", "bob-secret"))
    frames += _call(4, _request(_message("payments", 4)), _signed("alice", "alice-secret"))
    frames += _call(5, _request(_message("orders", 5)), _signed("alice", "wrong-secret"))
    frames += _call(6, _request(_message("secret", 6)), _signed("wild", "wild-secret"))
    frames += _call(7, _request(_message("billing", 7)), _signed("wild", "wild-secret"))
    # a request naming one allowed and one denied topic is refused whole
    both = _request(_message("orders", 8), _message("secret", 9))
    frames += _call(8, both, _signed("wild", "wild-secret"))
    found, _ = broker.relay(frames, expected=8)

    admitted = [n for n in range(1, 9) if _reply(found, n).status.code == pb.OK]
    refused = {_reply(found, n).status.code for n in range(1, 9) if n not in admitted}
    assert admitted == [1, 7] and refused == {pb.UNAUTHORIZED}
    assert _stored_topics(broker.store) == ["billing", "orders"]
    assert sum(broker.store.queue_offsets().values()) == 2  # nothing of a refused call stored
    assert broker.budget.used_bytes == 0


def test_a_call_cancelled_in_its_wave_gets_no_answer_and_the_others_do(broker: Broker) -> None:
    frames = b"".join(_call(n, _request(_message("orders", n))) for n in (1, 2, 3))
    frames += wire.frame(wire.CANCEL, 2)
    found, _ = broker.relay(frames, expected=2)
    assert sorted(found) == [1, 3]
    assert all(_reply(found, n).status.code == pb.OK for n in (1, 3))
    assert broker.budget.used_bytes == 0


def test_an_unexpected_error_answers_each_call_of_the_wave_and_is_logged_once(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(commands: Any) -> Any:
        raise RuntimeError("the service broke")

    monkeypatch.setattr(broker.service, "send_many_async", broken)
    frames = b"".join(_call(n, _request(_message("orders", n))) for n in (1, 2, 3))
    found, _ = broker.relay(frames, expected=3)
    for n in (1, 2, 3):
        reply = _reply(found, n)
        assert reply.status.code == pb.INTERNAL_SERVER_ERROR
        assert "the service broke" in reply.status.message
    assert caplog.text.count("SendMessage failed: RuntimeError") == 1
    assert broker.budget.used_bytes == 0
