"""CONSUMER_SEND_MSG_BACK: a 4.x consumer failed a message; the broker stores its retry copy
in ``%RETRY%<group>`` (delayed) or, out of attempts, its dead letter in ``%DLQ%<group>``.

Through the one send-back entry point, ``BrokerService.send_back`` with a
``send_back.ByPulled``: the record is named by its CommitLog offset and must be a record of
the ``originTopic`` the request names (the ACL checked ``Sub`` on it and on the group), so the
offset cannot copy another topic's record into a retry topic the caller reads. The delay level
(0: ``3 + reconsume times``; below 0: straight to the DLQ) and ``maxReconsumeTimes`` are the
consumer's, as RocketMQ takes them from the request (missing or negative: the group's
``retry_max_times``). Every refusal answers the same text; the reason is logged.
"""

from __future__ import annotations

import asyncio
import logging

from rmq_spark.broker.consumer.send_back import SEND_BACK_REFUSED, ByPulled, Refused
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.topics import group_name_problem

__all__ = ["RECONSUME_TIMES_MAX", "handlers"]

log = logging.getLogger("rmq_spark.broker")

RECONSUME_TIMES_MAX = 1_000  # a consumer's maxReconsumeTimes above this is taken as this


def _pulled(call: Call) -> ByPulled:
    asked = call.int_field("maxReconsumeTimes", default=-1)
    return ByPulled(
        physical_offset=call.int_field("offset"),
        topic=call.required("originTopic"),
        delay_level=call.int_field("delayLevel", default=0),
        max_reconsume=None if asked < 0 else min(asked, RECONSUME_TIMES_MAX),
    )


def _handler(deps: Deps) -> Handler:
    async def send_back(call: Call) -> RemotingCommand:
        group = call.required("group")
        problem = group_name_problem(group)
        if problem is not None:
            return call.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, problem)
        pulled = _pulled(call)
        result = await asyncio.to_thread(deps.service.send_back, group, pulled)
        if isinstance(result, Refused):
            log.warning(
                "send-back by %s of group %s refused: %s", call.link.peer_host, group, result.reason
            )
            return call.reply(ResponseCode.SYSTEM_ERROR, SEND_BACK_REFUSED)
        if not result.ok:
            status = result.status.name
            return call.reply(ResponseCode.SYSTEM_ERROR, f"send-back not stored: {status}")
        return call.reply()

    return send_back


def handlers(deps: Deps) -> dict[int, Handler]:
    if deps.consume is None:
        return {}
    return {RequestCode.CONSUMER_SEND_MSG_BACK: _handler(deps)}
