"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: a 4.x producer's send, through the one
send path (``BrokerService``).

Single messages are ``BrokerService.send_many_async``, the sends of one read together (a
``WaveHandler``, awaited on the loop, as the gRPC front's waves are); a batch is
``BrokerService.send_batch_async``: one bad message refuses the batch and stores nothing, as
RocketMQ's all-or-nothing batch put does; one store write, its fsync awaited on the loop. The
answer is what a RocketMQ broker answers (REMOTING_PROTOCOL.md 4.1): ``msgId`` the offset
message id of the stored record (comma-joined for a batch), ``queueId``, ``queueOffset`` (the
first message's), ``transactionId`` (the UNIQ_KEY), ``MSG_REGION`` and ``TRACE_ON``. A
refusal maps its ``SendCode`` to the response code a 4.x client acts on (``_CODES``).
"""

from __future__ import annotations

import logging
from typing import Any

from rmq_spark.broker.message_id import MessageIdGenerator
from rmq_spark.broker.remoting.calls import Call, Deps, Handler, WaveHandler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.send_wire import commands_of
from rmq_spark.broker.send_model import SendCode, SendOutcome
from rmq_spark.store.message import HostAddress
from rmq_spark.store.msg_id import offset_msg_id

__all__ = ["handlers", "response_code"]

log = logging.getLogger("rmq_spark.broker")

REGION = "DefaultRegion"  # RocketMQ's default regionId

# SendCode -> what a RocketMQ broker answers for the same refusal. A 4.x producer retries
# SYSTEM_ERROR, NO_PERMISSION, TOPIC_NOT_EXIST and SERVICE_NOT_AVAILABLE (on another broker);
# a flush timeout is SYSTEM_ERROR here since the outcome carries no position (the retry is
# answered from the first put: sends are idempotent on UNIQ_KEY).
_CODES = {
    SendCode.OK: ResponseCode.SUCCESS,
    SendCode.BAD_REQUEST: ResponseCode.INVALID_PARAMETER,
    SendCode.ILLEGAL_TOPIC: ResponseCode.INVALID_PARAMETER,
    SendCode.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    SendCode.UNSUPPORTED: ResponseCode.NO_PERMISSION,
    SendCode.SHUTTING_DOWN: ResponseCode.SERVICE_NOT_AVAILABLE,
    SendCode.FLUSH_TIMEOUT: ResponseCode.SYSTEM_ERROR,
    SendCode.STORE_ERROR: ResponseCode.SYSTEM_ERROR,
    SendCode.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    SendCode.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    SendCode.NOT_MASTER: ResponseCode.SYSTEM_BUSY,  # RocketMQ 5's rejectRequest on a slave
}
# Stored on the master but not confirmed by a slave: answered with the full header (the
# client's SendResult carries the status and the position), as RocketMQ does.
_STORED = {SendCode.FLUSH_SLAVE_TIMEOUT, SendCode.SLAVE_NOT_AVAILABLE}


def response_code(code: SendCode) -> ResponseCode:
    """The remoting response code of a send outcome (the message checks: MESSAGE_ILLEGAL)."""
    return _CODES.get(code, ResponseCode.MESSAGE_ILLEGAL)


def handlers(deps: Deps) -> dict[int, Handler]:
    """The produce codes' handlers over ``deps.service``."""
    sender = _Sender(deps)
    sends = WaveHandler(sender.send_wave)
    return {
        RequestCode.SEND_MESSAGE: sends,
        RequestCode.SEND_MESSAGE_V2: sends,
        RequestCode.SEND_BATCH_MESSAGE: sender.send_batch,
    }


class _Sender:
    def __init__(self, deps: Deps) -> None:
        self._service = deps.service
        self._store_host = HostAddress.parse(deps.store.config.store_host)
        self._ids = MessageIdGenerator(deps.service.clock)

    async def send_wave(self, calls: list[Call]) -> list[RemotingCommand | Exception]:
        """SEND_MESSAGE(_V2) of each call, their messages put together
        (``BrokerService.send_many_async``: one store batch, one durability wait)."""
        service = self._service
        now_ms, body_max = service.clock.now_ms(), service.max_message_size_bytes
        answers: list[Any] = [None] * len(calls)  # each filled below
        commands, places = [], []
        for at, call in enumerate(calls):
            try:
                _, queue_id, [command] = commands_of(call, now_ms, body_max, self._ids.next_id)
            except Exception as err:  # noqa: BLE001 - the server answers it for this call
                answers[at] = err
                continue
            commands.append(command)
            places.append((at, queue_id))
        if commands:
            outcomes = await service.send_many_async(commands)
            for (at, queue_id), outcome in zip(places, outcomes, strict=True):
                answers[at] = self._answer(calls[at], queue_id, [outcome])
        return answers

    async def send_batch(self, call: Call) -> RemotingCommand:
        service = self._service
        _, queue_id, commands = commands_of(
            call, service.clock.now_ms(), service.max_message_size_bytes, self._ids.next_id
        )
        outcomes = await service.send_batch_async(commands)
        return self._answer(call, queue_id, outcomes)

    def _answer(
        self, call: Call, queue_id: int | None, outcomes: list[SendOutcome]
    ) -> RemotingCommand:
        failed = next((o for o in outcomes if not o.ok), None)
        if failed is not None and failed.code not in _STORED:
            log.debug("remoting: send refused: %s %s", failed.code.name, failed.reason)
            return call.reply(response_code(failed.code), failed.reason or failed.code.name)
        first = outcomes[0]
        msg_ids = ",".join(offset_msg_id(self._store_host, o.physical_offset) for o in outcomes)
        fields = {
            "msgId": msg_ids,
            "queueId": str(queue_id if queue_id is not None else first.queue_id),
            "queueOffset": str(first.queue_offset),
            "transactionId": first.message_id,
            "MSG_REGION": REGION,
            "TRACE_ON": "true",
        }
        if failed is not None:
            return call.reply(response_code(failed.code), failed.reason, fields)
        return call.reply(ResponseCode.SUCCESS, None, fields)
