"""What the front's limits add per message on the receive path, measured without the noise of a
whole broker: the CPU of the request gate and the response watch (``security/h2watch.py``)
over the HTTP/2 frames of a SimpleConsumer's drain, replayed in a loop.

The limits of issue 25 add exactly this to the front's relay, which before them wrote each
read through unchanged: per read of the client's bytes ``RequestGate.feed`` (and the budget's
``book``), per read of grpc's bytes ``ResponseWatch.feed`` and ``RequestGate.streams_ended``
(the budget's ``give``). The frames are those of ``bench/peers/limits.py``'s receive case: per
message one AckMessage unary call (request HEADERS + DATA; response HEADERS + DATA + trailers,
each side one read), and per 32 messages one ReceiveMessage call whose response streams one DATA
frame per message. Payload sizes are those of the official Python client's calls (HPACK and
protobuf bytes are not read by the front, only frame headers and gRPC length prefixes).

Prints the CPU per message (process CPU time, best of ``--repeat``) of the gate and the watch,
and that of the relay's unchanged write path stood in by ``bytes`` slicing of the same reads, so
the two can be set against a broker's ~400-450 us of CPU per received message (BENCHMARKS.md,
"Broker limits").

Usage: ``python bench/bench_front_gate.py [--messages 200000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmq_spark.broker.security.h2frames import H2_PREFACE, h2_frame  # noqa: E402
from rmq_spark.broker.security.h2watch import RequestGate, ResponseWatch  # noqa: E402

_DATA, _HEADERS = 0x0, 0x1
_END_STREAM, _END_HEADERS = 0x1, 0x4
BATCH = 32  # messages per ReceiveMessage call, as limits.py's consumers ask
ACK_REQUEST_BYTES, ACK_RESPONSE_BYTES = 170, 12
RECEIVE_REQUEST_BYTES, MESSAGE_RESPONSE_BYTES = 120, 330
HEADERS_BYTES, TRAILERS_BYTES = 160, 25


def _grpc_message(size: int) -> bytes:
    return b"\x00" + size.to_bytes(4, "big") + os.urandom(size)


def _unary(stream_id: int, request: int, response: list[int]) -> tuple[bytes, bytes]:
    """The client's read and grpc's read of one call: request HEADERS + DATA, response
    HEADERS + one DATA per message + trailers."""
    client = h2_frame(_HEADERS, _END_HEADERS, stream_id, os.urandom(HEADERS_BYTES)) + h2_frame(
        _DATA, _END_STREAM, stream_id, _grpc_message(request)
    )
    server = h2_frame(_HEADERS, _END_HEADERS, stream_id, os.urandom(12))
    for size in response:
        server += h2_frame(_DATA, 0, stream_id, _grpc_message(size))
    server += h2_frame(_HEADERS, _END_STREAM | _END_HEADERS, stream_id, os.urandom(TRAILERS_BYTES))
    return client, server


def _drain(messages: int) -> list[tuple[bytes, bytes]]:
    """The reads of a drain of ``messages``: per batch one receive call, then its acks."""
    calls, stream_id = [], 1
    for _ in range(messages // BATCH):
        calls.append(_unary(stream_id, RECEIVE_REQUEST_BYTES, [MESSAGE_RESPONSE_BYTES] * BATCH))
        stream_id += 2
        for _ in range(BATCH):
            calls.append(_unary(stream_id, ACK_REQUEST_BYTES, [ACK_RESPONSE_BYTES]))
            stream_id += 2
    return calls


def _with_limits(calls: list[tuple[bytes, bytes]], check: bool = False) -> float:
    """The gate and the watch over ``calls``; ``check``: also that every byte passes on
    unchanged (nothing held: the budget never ran out) and every booking came back."""
    booked = [0]

    def book(nbytes: int) -> bool:
        booked[0] += nbytes
        return True

    def give(nbytes: int) -> None:
        booked[0] -= nbytes

    gate, watch = RequestGate(book, give, 130 << 20), ResponseWatch()
    gate.feed(H2_PREFACE)
    start = time.process_time()
    for client, server in calls:
        passed = gate.feed(client)
        out, ended = watch.feed(server)
        if ended:
            gate.streams_ended(ended)
        if check:
            assert passed == client and out == server and not gate.waiting
    spent = time.process_time() - start
    assert booked[0] == 0, booked  # every booking given back at its stream's end
    return spent


def _pass_through(calls: list[tuple[bytes, bytes]]) -> float:
    start = time.process_time()
    for client, server in calls:
        bytes(client)
        bytes(server)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    calls = _drain(args.messages)
    _with_limits(calls, check=True)
    messages = len(calls) // (BATCH + 1) * BATCH
    for name, run in (("gate + watch", _with_limits), ("pass-through", _pass_through)):
        best = min(run(calls) for _ in range(args.repeat))
        print(f"{name:14s} {best / messages * 1e6:6.2f} us CPU per received message "
              f"({messages} messages, best of {args.repeat})")  # fmt: skip


if __name__ == "__main__":
    main()
