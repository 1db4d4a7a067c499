"""The front's HTTP/2 reading (``h2watch.py``) on hand-made frames: bookings by declared
size, held streams released in order, refusal past the held bound, SETTINGS rewritten, our
frames put in only at a frame boundary of grpc's."""

from __future__ import annotations

from rmq_spark.broker.security.h2watch import (
    FRAME_SIZE_MAX,
    H2_PREFACE,
    HELD_BYTES_MAX,
    RequestGate,
    ResponseWatch,
)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _message(size: int) -> bytes:
    return b"\x00" + size.to_bytes(4, "big") + b"x" * size


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def book(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


def test_declared_sizes_are_booked_and_a_stream_that_does_not_fit_waits() -> None:
    budget = _Budget(100)
    gate = RequestGate(budget.book, budget.give, 1000)
    assert gate.feed(H2_PREFACE) == H2_PREFACE
    first = _frame(1, 4, 1, b"h") + _frame(0, 1, 1, _message(80))
    assert gate.feed(first) == first and budget.used == 80
    second_headers = _frame(1, 4, 3, b"h")
    second = _frame(0, 1, 3, _message(50))
    ping = _frame(6, 0, 0, b"12345678")
    # The second stream's DATA waits; its HEADERS and connection frames go on.
    assert gate.feed(second_headers + second + ping) == second_headers + ping
    assert gate.waiting and budget.used == 80
    gate.stream_ended(1)  # grpc answered the first call
    assert budget.used == 0
    assert gate.retry() == second and budget.used == 50 and not gate.waiting
    gate.close()
    assert budget.used == 0


def test_a_message_over_the_receive_limit_is_passed_unbooked_for_grpc_to_refuse() -> None:
    budget = _Budget(100)
    gate = RequestGate(budget.book, budget.give, 200)
    gate.feed(H2_PREFACE)
    big = _frame(1, 4, 1, b"h") + _frame(0, 0, 1, b"\x00" + (10**6).to_bytes(4, "big"))
    assert gate.feed(big) == big and budget.used == 0


def test_past_the_held_bound_the_stream_is_refused_and_the_window_given_back() -> None:
    budget = _Budget(10)
    gate = RequestGate(budget.book, budget.give, 1 << 30)
    gate.feed(H2_PREFACE)
    gate.feed(_frame(1, 4, 1, b"h"))
    body = _message(HELD_BYTES_MAX + FRAME_SIZE_MAX)
    frames = [body[at : at + FRAME_SIZE_MAX] for at in range(0, len(body), FRAME_SIZE_MAX)]
    out = b"".join(gate.feed(_frame(0, 0, 1, chunk)) for chunk in frames)
    assert out == _frame(3, 0, 1, (8).to_bytes(4, "big"))  # CANCEL to grpc
    to_client = bytes(gate.to_client)
    assert b"grpc-status\x018" in to_client and b"inflight_request_bytes_max" in to_client
    assert to_client[3] == 1 and to_client[4] == 5  # HEADERS, END_STREAM | END_HEADERS
    given_back, at = 0, 0
    while at < len(to_client):
        length = int.from_bytes(to_client[at : at + 3], "big")
        if to_client[at + 3] == 8:  # WINDOW_UPDATE on the connection
            given_back += int.from_bytes(to_client[at + 9 : at + 13], "big")
        at += 9 + length
    assert given_back == len(body)  # every byte dropped, none passed to grpc
    assert not gate.waiting and budget.used == 0


def test_settings_are_rewritten_and_our_frames_wait_for_a_boundary() -> None:
    watch = ResponseWatch()
    settings = _frame(4, 0, 0, (5).to_bytes(2, "big") + (4 << 20).to_bytes(4, "big"))
    out, ended = watch.feed(settings[:12])  # cut inside the payload
    out2, _ = watch.feed(settings[12:])
    assert out + out2 == _frame(4, 0, 0, (5).to_bytes(2, "big") + FRAME_SIZE_MAX.to_bytes(4, "big"))
    data = _frame(0, 0, 1, b"abcdef")
    out, _ = watch.feed(data[:11])  # mid-frame: an injected frame must wait
    assert watch.inject(b"OURS") == b""
    out2, _ = watch.feed(data[11:] + _frame(1, 5, 1, b"t"))
    assert out + out2 == data + b"OURS" + _frame(1, 5, 1, b"t")
    assert watch.answered
    assert watch.inject(b"NOW") == b"NOW"
    _, ended = watch.feed(_frame(3, 0, 3, b"\x00\x00\x00\x08"))
    assert ended == [3]


def test_reading_does_not_depend_on_where_reads_cut_the_frames() -> None:
    # The readers take whole frame headers straight from a read and fall back to carrying a
    # cut one over: every cut must give the same bytes, ended streams and bookings.
    settings = _frame(4, 0, 0, (5).to_bytes(2, "big") + (4 << 20).to_bytes(4, "big"))
    answers = settings + b"".join(
        _frame(1, 4, s, b"hd") + _frame(0, 0, s, _message(7)) + _frame(1, 5, s, b"t")
        for s in (1, 3)
    )
    body = _message(30)  # its length prefix cut across two DATA frames
    requests = H2_PREFACE + b"".join(
        _frame(1, 4, s, b"h") + _frame(0, 0, s, body[:3]) + _frame(0, 1, s, body[3:])
        for s in (1, 3)
    )
    whole_out, whole_ended = ResponseWatch().feed(answers)
    whole_budget = _Budget(1000)
    whole_gate = RequestGate(whole_budget.book, whole_budget.give, 1000)
    assert whole_gate.feed(requests) == requests and whole_budget.used == 60
    for step in (1, 2, 5, 9, 10, 13):
        watch, out, ended = ResponseWatch(), b"", []
        budget = _Budget(1000)
        gate, passed = RequestGate(budget.book, budget.give, 1000), b""
        for at in range(0, max(len(answers), len(requests)), step):
            piece, gone = watch.feed(answers[at : at + step])
            out, ended = out + piece, ended + gone
            passed += gate.feed(requests[at : at + step])
        assert (out, ended, watch.answered) == (whole_out, whole_ended, True)
        assert passed == requests and budget.used == whole_budget.used
        assert ended == [1, 3] and FRAME_SIZE_MAX.to_bytes(4, "big") in out


def test_every_shape_of_a_calls_data_frames_is_booked_by_its_last_declared_length() -> None:
    # A unary call's HEADERS and one-message DATA frame take a shorter path than the rest:
    # the reserved bit, padding, several messages in a frame, a stream's next message, and
    # a message that does not fit must all be booked as on the long one.
    budget = _Budget(100)
    gate = RequestGate(budget.book, budget.give, 1000)
    gate.feed(H2_PREFACE)
    reserved = 1 | 0x80000000  # grpc ignores the bit: the same stream as 1
    gate.feed(_frame(1, 4, reserved, b"h") + _frame(0, 0, 1, _message(40)))
    assert budget.used == 40
    gate.feed(_frame(1, 4, 3, b"h") + _frame(0, 0, 3, _message(10) + _message(20)))
    assert budget.used == 60  # the last message's length
    padded = b"\x02" + _message(15) + b"\x00\x00"
    gate.feed(_frame(1, 4, 5, b"h") + _frame(0, 0x8, 5, padded))
    assert budget.used == 75
    gate.feed(_frame(0, 0, 1, _message(25)))  # stream 1's next message: 15 given back
    assert budget.used == 60
    late = _frame(0, 1, 1, _message(70))  # does not fit: it waits, nothing booked for it
    assert gate.feed(late) == b"" and gate.waiting and budget.used == 60
    for stream_id in (3, 5):
        gate.stream_ended(stream_id)
    assert gate.retry() == late and budget.used == 70 and gate.request_sent
    gate.stream_ended(1)
    assert budget.used == 0 and not gate.waiting
