"""A wave of SendMessage calls is timed call by call: each counted with its own answer's code."""

from __future__ import annotations

import asyncio

import pytest

from rmq_spark.broker.grpc.rpc_timer import RpcTimer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.traffic import TrafficStats

_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"


def _answer(code: int) -> spb.SendMessageResponse:
    return spb.SendMessageResponse(status=pb.Status(code=code))


def _counts(stats: TrafficStats) -> dict[tuple[str, str, str, str], int]:
    return {key: latency.count for key, latency in stats.snapshot().rpc.items()}


def test_each_call_of_a_wave_is_counted_with_its_answers_code() -> None:
    stats = TrafficStats()
    codes = [pb.OK, pb.OK, pb.BAD_REQUEST, pb.OK]

    async def run(calls: list[tuple[object, object]]) -> list[spb.SendMessageResponse]:
        return [_answer(code) for code in codes[: len(calls)]]

    timed = RpcTimer(stats).wrap_wave(run, _METHOD)
    asyncio.run(timed([(None, None)] * 4))
    asyncio.run(timed([(None, None)] * 2))
    assert _counts(stats) == {
        ("grpc", "SendMessage", "OK", "success"): 5,
        ("grpc", "SendMessage", "BAD_REQUEST", "success"): 1,
    }


def test_a_failed_wave_counts_every_call_once() -> None:
    stats = TrafficStats()

    async def run(calls: list[tuple[object, object]]) -> list[spb.SendMessageResponse]:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError):
        asyncio.run(RpcTimer(stats).wrap_wave(run, _METHOD)([(None, None)] * 3))
    assert _counts(stats) == {("grpc", "SendMessage", "NONE", "process_request_failed"): 3}
