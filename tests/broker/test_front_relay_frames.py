"""What the native front (``native/front``) puts on the relay for each kind of call, read from
the relay socket itself with no broker behind it: a call with one request is one ``CALL``
frame (its open, request and half-close), sent once the request came; a request stream
(Telemetry) is opened at once and each request relayed as it comes."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import grpc
import pytest

from rmq_spark.broker.grpc import relay_wire as wire
from rmq_spark.broker.grpc.native_front import build

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
TELEMETRY = "/apache.rocketmq.v2.MessagingService/Telemetry"


class _Relay:
    """The broker's end of a running front's relay: frames read one by one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)

    def frame(self) -> tuple[int, int, bytes]:
        length, kind, call_id = wire.HEADER.unpack(self._exactly(wire.HEADER.size))
        return kind, call_id, self._exactly(length - 5)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "the front closed the relay"
            data += chunk
        return data


@pytest.fixture
def front() -> Iterator[tuple[_Relay, grpc.Channel]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    listener = socket.create_server(("127.0.0.1", 0))
    fds = (theirs.fileno(), listener.fileno())
    process = subprocess.Popen(
        [str(build()), "-tls-mode=disabled", f"-relay-fd={fds[0]}", f"-listen-fd={fds[1]}"],
        pass_fds=fds, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    theirs.close()
    channel = grpc.insecure_channel(f"127.0.0.1:{listener.getsockname()[1]}")
    try:
        yield _Relay(ours), channel
    finally:
        channel.close()
        process.kill()
        process.wait(10)
        ours.close()
        listener.close()


def _gated(before: list[bytes], gate: threading.Event, after: list[bytes]) -> Iterator[bytes]:
    """A client's requests: ``before``, then ``after`` once ``gate`` is set."""
    yield from before
    gate.wait(10)
    yield from after


def _next_call_is_the_next_frame(relay: _Relay, channel: grpc.Channel) -> None:
    """A new unary call's ``CALL`` is the next frame on the relay, and its reply answers it."""
    answer = _raw(channel, "unary_unary", SEND).future(b"next", timeout=20)
    kind, call_id, payload = relay.frame()
    assert kind == wire.CALL and wire.parse_call(payload)[1] == b"next"
    relay.sock.sendall(wire.frame(wire.REPLY, call_id, b"done"))
    assert answer.result(10) == b"done"


def _raw(channel: grpc.Channel, kind: str, method: str) -> grpc.UnaryUnaryMultiCallable:
    return getattr(channel, kind)(method, request_serializer=None, response_deserializer=None)


def test_a_unary_call_is_one_call_frame_and_its_reply_answers_it(
    front: tuple[_Relay, grpc.Channel],
) -> None:
    relay, channel = front
    answer: Future[bytes] = _raw(channel, "unary_unary", SEND).future(
        b"the-request", metadata=(("x-mq-client-id", "c1"),), timeout=20
    )
    kind, call_id, payload = relay.frame()
    assert kind == wire.CALL
    opened, request = wire.parse_call(payload)
    assert (opened.method, request) == (SEND, b"the-request")
    assert ("x-mq-client-id", "c1") in opened.metadata and opened.peer.startswith("ipv4:127.0.0.1")
    relay.sock.sendall(wire.frame(wire.REPLY, call_id, b"the-answer"))
    assert answer.result(10) == b"the-answer"


def test_a_server_stream_call_is_one_call_frame_too(front: tuple[_Relay, grpc.Channel]) -> None:
    relay, channel = front
    responses = _raw(channel, "unary_stream", "/apache.rocketmq.v2.MessagingService/ReceiveMessage")
    stream = responses(b"receive", timeout=20)
    kind, call_id, payload = relay.frame()
    assert kind == wire.CALL and wire.parse_call(payload)[1] == b"receive"
    relay.sock.sendall(
        wire.frame(wire.MSG, call_id, b"one") + wire.frame(wire.MSG, call_id, b"two")
        + wire.close_frame(call_id, 0)
    )  # fmt: skip
    assert list(stream) == [b"one", b"two"]


def test_a_request_stream_is_opened_at_once_and_each_request_relayed(
    front: tuple[_Relay, grpc.Channel],
) -> None:
    relay, channel = front
    sent = threading.Event()  # the second request only once the first was seen on the relay
    requests = _gated([b"settings"], sent, [b"heartbeat"])
    stream = _raw(channel, "stream_stream", TELEMETRY)(requests, timeout=20)
    frames = [relay.frame()]
    frames.append(relay.frame())
    sent.set()
    frames += [relay.frame(), relay.frame()]
    kinds = [kind for kind, _, _ in frames]
    assert kinds == [wire.OPEN, wire.MSG, wire.MSG, wire.HALF_CLOSE]
    assert wire.parse_open(frames[0][2]).method == TELEMETRY
    assert [frames[1][2], frames[2][2]] == [b"settings", b"heartbeat"]
    call_id = frames[0][1]
    relay.sock.sendall(wire.frame(wire.MSG, call_id, b"ok") + wire.close_frame(call_id, 0))
    assert list(stream) == [b"ok"]


def test_a_unary_call_cancelled_before_its_request_never_reaches_the_broker(
    front: tuple[_Relay, grpc.Channel],
) -> None:
    relay, channel = front
    unblock = threading.Event()
    call = _raw(channel, "stream_unary", SEND).future(_gated([], unblock, [b"late"]), timeout=20)
    call.cancel()
    unblock.set()
    _next_call_is_the_next_frame(relay, channel)


def test_a_second_request_on_a_unary_method_is_never_relayed(
    front: tuple[_Relay, grpc.Channel],
) -> None:
    relay, channel = front
    call = _raw(channel, "stream_unary", SEND).future(iter([b"first", b"second"]), timeout=20)
    kind, call_id, payload = relay.frame()
    assert kind == wire.CALL and wire.parse_call(payload)[1] == b"first"
    relay.sock.sendall(wire.frame(wire.REPLY, call_id, b"answered"))
    assert call.result(10) == b"answered"
    _next_call_is_the_next_frame(relay, channel)  # nothing of the second request came
