"""The remoting server's waves in-process (``calls.WaveHandler``): the requests of a wave code
that come in one read are gated one by one and served by one ``wave`` call; each gets its
own answer (the gate's refusal, its handler's error, nothing for a oneway request), and
their booked bytes and in-flight counts are given back when the wave ends."""

from __future__ import annotations

import asyncio

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import Call, HeaderError, WaveHandler, response_to
from rmq_spark.broker.remoting.codec import (
    FLAG_ONEWAY,
    NeedMoreData,
    RemotingCommand,
    decode_frame,
    encode_frame,
)
from rmq_spark.broker.remoting.codes import ResponseCode
from rmq_spark.broker.remoting.server import RemotingServer

WAVE, SINGLE = 9101, 9102


async def _answers(reader: asyncio.StreamReader, count: int) -> dict[int, RemotingCommand]:
    buffer, found = bytearray(), {}
    while len(found) < count:
        outcome = decode_frame(buffer)
        if isinstance(outcome, NeedMoreData):
            buffer += await asyncio.wait_for(reader.read(65536), 10)
            continue
        command, used = outcome
        del buffer[:used]
        found[command.opaque] = command
    return found


def _gate(call: Call) -> tuple[RemotingCommand | None, None]:
    if (call.command.ext_fields or {}).get("who") == "stranger":
        return response_to(call.command, ResponseCode.NO_PERMISSION, "no right"), None
    return None, None


async def _scenario() -> tuple[list[list[int]], dict[int, RemotingCommand], RemotingServer]:
    waves: list[list[int]] = []

    async def wave(calls: list[Call]) -> list[RemotingCommand | Exception]:
        waves.append([call.command.opaque for call in calls])
        answers: list[RemotingCommand | Exception] = []
        for call in calls:
            what = (call.command.ext_fields or {}).get("what")
            if what == "header":
                answers.append(HeaderError("the request header has no topic field"))
            elif what == "bug":
                answers.append(ZeroDivisionError("a bug in one request"))
            else:
                answers.append(call.reply(remark=f"served {call.command.opaque}"))
        return answers

    async def single(call: Call) -> RemotingCommand:
        return call.reply(remark="single")

    server = RemotingServer(BrokerConfig(), "127.0.0.1", 0, tls=None)
    port = server.bind()
    server.routes = {WAVE: WaveHandler(wave), SINGLE: single}
    server.gate = _gate
    server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    requests = [
        RemotingCommand(code=WAVE, opaque=1),
        RemotingCommand(code=WAVE, opaque=2, ext_fields={"who": "stranger"}),
        RemotingCommand(code=WAVE, opaque=3, ext_fields={"what": "header"}),
        RemotingCommand(code=SINGLE, opaque=4),
        RemotingCommand(code=WAVE, opaque=5, ext_fields={"what": "bug"}),
        RemotingCommand(code=WAVE, opaque=6, flag=FLAG_ONEWAY),
        RemotingCommand(code=WAVE, opaque=7),
    ]
    try:
        writer.write(b"".join(encode_frame(request) for request in requests))
        found = await _answers(reader, 6)
        await asyncio.sleep(0.05)
        assert not any(c.tasks for c in server.connections)  # every wave ended
        assert all(c._running == 0 for c in server.connections)  # noqa: SLF001
    finally:
        writer.close()
        await server.close(1.0)
    return waves, found, server


def test_the_requests_of_one_read_are_one_wave_each_answered_on_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waves, found, server = asyncio.run(_scenario())
    assert waves == [[1, 3, 5, 6, 7]]  # one wave; the refused request never reached it
    assert (found[1].code, found[1].remark) == (ResponseCode.SUCCESS, "served 1")
    assert found[2].code == ResponseCode.NO_PERMISSION
    assert (found[3].code, found[3].remark) == (
        ResponseCode.SYSTEM_ERROR,
        "the request header has no topic field",
    )
    assert found[4].remark == "single"
    assert (found[5].code, found[5].remark) == (
        ResponseCode.SYSTEM_ERROR,
        "ZeroDivisionError: a bug in one request",
    )
    assert 6 not in found  # oneway: served, never answered
    assert found[7].remark == "served 7"
    assert server.budget.used_bytes == 0
    assert sum("failed: ZeroDivisionError" in r.getMessage() for r in caplog.records) == 1
