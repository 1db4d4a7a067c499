"""The native front's relay frames (``relay_wire.py``) and the broker's side of the relay
(``native_calls.RelayCalls``) on a real socket pair, with no front: bad frames are typed
errors that close the relay, never a crash or a hang."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from pathlib import Path

import grpc
import pytest
from relay_frames import answers, open_payload

from rmq_spark.broker.grpc import relay_wire as wire
from rmq_spark.broker.grpc.native_calls import STREAM_UNREAD_MAX, RelayCalls
from rmq_spark.broker.proto import service_pb2
from rmq_spark.broker.security.limits import InflightBytes


def test_an_open_frame_parses_with_its_metadata_read_on_first_use() -> None:
    payload = open_payload(
        "/apache.rocketmq.v2.MessagingService/SendMessage", "ipv4:127.0.0.1:5000", 2_500_000,
        [("x-mq-client-id", b"c1"), ("trace-bin", b"\x00\x01")],
    )  # fmt: skip
    opened = wire.parse_open(payload)
    assert (opened.method, opened.peer, opened.deadline_s) == (
        "/apache.rocketmq.v2.MessagingService/SendMessage", "ipv4:127.0.0.1:5000", 2.5
    )  # fmt: skip
    assert opened.metadata == (("x-mq-client-id", "c1"), ("trace-bin", b"\x00\x01"))
    assert wire.parse_open(open_payload("/m", "", -1, [])).deadline_s is None


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_a_truncated_open_frame_is_a_relay_error(cut: int) -> None:
    payload = open_payload("/s/M", "ipv4:1.2.3.4:5", -1, [("k", b"value")])
    with pytest.raises(wire.RelayError):
        opened = wire.parse_open(payload[: len(payload) - cut])
        opened.metadata  # noqa: B018 - parsed on first use


def test_a_repeated_call_name_is_read_from_the_kept_one_and_a_cut_frame_still_fails() -> None:
    method, peer = "/apache.rocketmq.v2.MessagingService/SendMessage", "ipv4:10.0.0.1:7"
    first = open_payload(method, peer, 1_000_000, [("k", b"one")])
    second = open_payload(method, peer, -1, [("k", b"two"), ("j", b"2")])
    assert wire.parse_open(first).deadline_s == 1.0
    opened = wire.parse_open(second)  # its method and peer as kept from the first
    assert (opened.method, opened.peer, opened.deadline_s) == (method, peer, None)
    assert opened.metadata == (("k", "two"), ("j", "2"))
    for cut in range(1, len(second) - len(method) - len(peer) - 4 + 1):
        with pytest.raises(wire.RelayError):
            wire.parse_open(second[: len(second) - cut]).metadata  # noqa: B018


def test_a_long_method_name_is_parsed_but_not_kept() -> None:
    method = "/x/" + "M" * 300
    assert wire.parse_open(open_payload(method, "", -1, [])).method == method
    assert all(len(key) <= 256 for key in wire._NAMED_CALLS)


def test_a_close_frame_carries_code_and_details() -> None:
    data = wire.close_frame(7, 12, "Method not found!")
    length, kind, call_id = wire.HEADER.unpack_from(data)
    assert (length, kind, call_id) == (len(data) - 4, wire.CLOSE, 7)
    assert data[9:] == struct.pack(">IH", 12, 17) + b"Method not found!" + struct.pack(">H", 0)


async def _relay(frames: bytes, handlers: tuple = ()) -> tuple[RelayCalls, bytes, bool]:
    """Send ``frames`` to a ``RelayCalls``; what it answered, and whether it had closed the
    relay itself before this end closed it."""
    ours, theirs = socket.socketpair()
    calls = RelayCalls()
    calls.add_generic_rpc_handlers(handlers)
    await asyncio.get_running_loop().connect_accepted_socket(lambda: calls, sock=ours)
    theirs.sendall(frames)
    theirs.setblocking(False)
    answer = b""
    for _ in range(50):
        await asyncio.sleep(0.01)
        try:
            chunk = theirs.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        answer += chunk
    closed_by_broker = calls.lost.is_set()
    theirs.close()
    return calls, answer, closed_by_broker


def test_a_frame_of_an_impossible_length_closes_the_relay(caplog: pytest.LogCaptureFixture) -> None:
    bad = struct.pack(">IBI", 2, wire.MSG, 1)
    _, _, closed_by_broker = asyncio.run(_relay(bad))
    assert closed_by_broker
    assert "the native front's relay: a frame of 2 bytes" in caplog.text


def test_an_unknown_method_is_answered_unimplemented_and_a_late_frame_ignored() -> None:
    opened = wire.frame(wire.OPEN, 3, open_payload("/no.Such/Method", "", -1, []))
    late = wire.frame(wire.MSG, 3, b"\x0a\x00") + wire.frame(wire.CANCEL, 99)
    calls, answer, _ = asyncio.run(_relay(opened + late))
    assert answer == wire.close_frame(
        3, grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!"
    )
    assert calls.calls == 0


def test_a_call_cancelled_before_its_handler_runs_gives_its_booked_bytes_back() -> None:
    # OPEN, the request and CANCEL in one read: the handler's Task is cancelled before it
    # starts, so only the booking's own release (when the request is dropped) can give the
    # bytes back; a caller repeating this must not fill the budget for everyone.
    budget = InflightBytes(1 << 20)
    started: list[bytes] = []

    async def behaviour(request: bytes, context: object) -> bytes:
        started.append(request)
        return request

    handler = grpc.unary_unary_rpc_method_handler(
        InflightBytes.release_after(behaviour),
        request_deserializer=budget.admit(bytes, lambda reason: reason),
        response_serializer=bytes,
    )
    generic = grpc.method_handlers_generic_handler("t.S", {"M": handler})
    frames = b"".join(
        wire.frame(wire.OPEN, n, open_payload("/t.S/M", "", -1, []))
        + wire.frame(wire.MSG, n, b"x" * 1000)
        + wire.frame(wire.CANCEL, n)
        for n in range(1, 101)
    )
    calls, answer, _ = asyncio.run(_relay(frames, (generic,)))
    assert started == [] and answer == b"" and calls.calls == 0
    assert budget.used_bytes == 0


def test_a_call_whose_metadata_does_not_parse_is_refused_alone() -> None:
    class ReadsMetadata(grpc.GenericRpcHandler):  # as the auth gate does with auth on
        def service(self, details: object) -> None:
            tuple(details.invocation_metadata)  # type: ignore[attr-defined]

    bad = open_payload("/t.S/M", "", -1, [("k", b"v")])[:-2]  # the value runs past the frame
    frames = wire.frame(wire.OPEN, 1, bad) + wire.frame(
        wire.OPEN, 2, open_payload("/x/Y", "", -1, [])
    )
    _, answer, closed_by_broker = asyncio.run(_relay(frames, (ReadsMetadata(),)))
    assert answer == wire.close_frame(1, 13, "unreadable metadata") + wire.close_frame(
        2, grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!"
    )
    assert not closed_by_broker


def test_a_stream_flooding_requests_its_handler_has_not_read_is_ended_alone() -> None:
    async def slow_stream(requests: object, context: object) -> None:
        await asyncio.sleep(60)  # reads nothing: a client must not pile requests up for it

    handler = grpc.stream_stream_rpc_method_handler(
        slow_stream, request_deserializer=bytes, response_serializer=bytes
    )
    generic = grpc.method_handlers_generic_handler("t.S", {"Stream": handler})
    flood = b"".join(wire.frame(wire.MSG, 5, b"c") for _ in range(STREAM_UNREAD_MAX + 50))
    frames = wire.frame(wire.OPEN, 5, open_payload("/t.S/Stream", "", -1, [])) + flood
    frames += wire.frame(wire.OPEN, 6, open_payload("/x/Y", "", -1, []))
    calls, answer, closed_by_broker = asyncio.run(_relay(frames, (generic,)))
    exhausted = wire.close_frame(5, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                 "too many requests unread on a stream")  # fmt: skip
    unimplemented = wire.close_frame(6, 12, "Method not found!")
    assert answer == exhausted + unimplemented and not closed_by_broker


def test_a_call_frame_carries_an_open_and_its_one_request() -> None:
    opened = open_payload("/t.S/M", "ipv4:1.2.3.4:5", -1, [("k", b"v")])
    payload = struct.pack(">I", 3) + b"abc" + opened
    call, request = wire.parse_call(payload)
    assert (call.method, call.peer, call.metadata, request) == ("/t.S/M", "ipv4:1.2.3.4:5",
                                                                (("k", "v"),), b"abc")  # fmt: skip
    for bad in (payload[:3], struct.pack(">I", 99) + b"abc" + opened[:80]):
        with pytest.raises(wire.RelayError):
            wire.parse_call(bad)


def test_a_call_frame_runs_a_unary_handler_and_feeds_a_stream_its_one_request() -> None:
    async def echo(request: bytes, context: object) -> bytes:
        return b"unary:" + request

    async def collect(requests: object, context: object) -> bytes:
        return b"stream:" + b"+".join([r async for r in requests])  # type: ignore[attr-defined]

    generic = grpc.method_handlers_generic_handler("t.S", {
        "U": grpc.unary_unary_rpc_method_handler(echo, bytes, bytes),
        "S": grpc.stream_unary_rpc_method_handler(collect, bytes, bytes),
    })  # fmt: skip
    frames = b"".join(
        wire.frame(wire.CALL, n, struct.pack(">I", 3) + b"req" + open_payload(method))
        for n, method in ((1, "/t.S/U"), (2, "/t.S/S"), (3, "/x/Y"))
    )
    calls, answer, closed_by_broker = asyncio.run(_relay(frames, (generic,)))
    found = answers(answer)
    assert found[1] == (wire.REPLY, b"unary:req") and found[2] == (wire.REPLY, b"stream:req")
    assert found[3] == (wire.CLOSE, wire.close_frame(3, 12, "Method not found!")[9:])
    assert calls.calls == 0 and not closed_by_broker


def test_a_call_frame_whose_request_runs_past_it_closes_the_relay() -> None:
    bad = wire.frame(wire.CALL, 1, struct.pack(">I", 50) + b"short")
    _, _, closed_by_broker = asyncio.run(_relay(bad))
    assert closed_by_broker


def test_the_front_streams_the_requests_of_exactly_the_client_streaming_methods() -> None:
    """The Go front relays any other call as one ``CALL`` frame and reads no second request:
    a method that streams requests and is missing there would lose all but its first."""
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    streaming = {f"/{service.full_name}/{m.name}" for m in service.methods if m.client_streaming}
    source = (Path(__file__).parents[2] / "native" / "front" / "calls.go").read_text()
    assert streaming == set(re.findall(r'telemetryMethod = "([^"]+)"', source)) != set()
