"""The remoting server's dispatch in-process: a handler's HeaderError is its code and message,
any other exception is SYSTEM_ERROR with one log line (no traceback), a oneway request is
never answered, and a broker->client request is matched to the client's answer by opaque."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import Call
from rmq_spark.broker.remoting.codec import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    NeedMoreData,
    RemotingCommand,
    decode_frame,
    encode_frame,
)
from rmq_spark.broker.remoting.codes import ResponseCode
from rmq_spark.broker.remoting.server import RemotingServer

BROKEN, MISSING, ASKS_BACK = 9001, 9002, 9003


async def _broken(call: Call) -> RemotingCommand:
    raise ZeroDivisionError("a bug in a handler")


async def _missing(call: Call) -> RemotingCommand:
    return call.reply(body=call.required("topic").encode())


async def _asks_back(call: Call) -> RemotingCommand:
    answer = await call.link.send_request(RemotingCommand(code=40, ext_fields={"g": "x"}), 5000)
    assert answer is not None
    return call.reply(remark=f"client said {answer.remark}")


async def _read(reader: asyncio.StreamReader, buffer: bytearray) -> RemotingCommand:
    while True:
        outcome = decode_frame(buffer)
        if not isinstance(outcome, NeedMoreData):
            command, used = outcome
            del buffer[:used]
            return command
        buffer += await reader.read(65536)


async def _scenario(caplog: pytest.LogCaptureFixture) -> None:
    server = RemotingServer(BrokerConfig(), "127.0.0.1", 0, tls=None)
    port = server.bind()
    server.routes = {BROKEN: _broken, MISSING: _missing, ASKS_BACK: _asks_back}
    server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    buffer = bytearray()
    try:
        writer.write(encode_frame(RemotingCommand(code=BROKEN, opaque=1)))
        answer = await _read(reader, buffer)
        assert (answer.code, answer.opaque) == (ResponseCode.SYSTEM_ERROR, 1)
        assert answer.remark == "ZeroDivisionError: a bug in a handler"
        writer.write(encode_frame(RemotingCommand(code=MISSING, opaque=2)))
        answer = await _read(reader, buffer)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "the request header has no topic field"
        writer.write(encode_frame(RemotingCommand(code=BROKEN, opaque=3, flag=FLAG_ONEWAY)))
        writer.write(encode_frame(RemotingCommand(code=ASKS_BACK, opaque=4)))
        asked = await _read(reader, buffer)  # the broker's request comes first
        assert asked.code == 40 and not asked.is_response and asked.ext_fields == {"g": "x"}
        reply = RemotingCommand(code=0, opaque=asked.opaque, flag=FLAG_RESPONSE, remark="hi")
        writer.write(encode_frame(reply))
        answer = await _read(reader, buffer)
        assert (answer.opaque, answer.remark) == (4, "client said hi")
    finally:
        writer.close()
        await server.close(1.0)
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2  # the broken request and its oneway twin, one line each
    assert all(r.exc_info is None for r in failures)


def test_handler_failures_oneway_and_broker_requests(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rmq_spark.broker")
    asyncio.run(_scenario(caplog))
