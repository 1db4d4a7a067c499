"""A 4.x ``TransactionMQProducer`` over remoting: END_TRANSACTION (37) and the broker's
CHECK_TRANSACTION_STATE (39), through the one ``TransactionService``.

END_TRANSACTION names the half by ``commitLogOffset`` and ``tranStateTableOffset`` and its
``producerGroup`` must be the half's PGROUP (EndTransactionProcessor's checks); with auth on,
the caller must also hold Pub on the half's real topic (the 4.x header names no topic). It is
oneway in the 4.x client; a request that wants an answer gets SUCCESS, or SYSTEM_ERROR when no
half matches. CHECK_TRANSACTION_STATE goes oneway to every open connection of the half's
producer group (registered by HEART_BEAT), with the half as a v1 record of its real topic and
queue (REMOTING_PROTOCOL.md section 9).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import FLAG_ONEWAY, RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.consume import RemoteConsumers, remote_consumers
from rmq_spark.broker.security.acl import Action, Need, allowed
from rmq_spark.broker.transactions.records import HalfRef, transaction_id
from rmq_spark.broker.transactions.service import EndStatus, Resolution
from rmq_spark.store.codec import encode_record
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import (
    PRODUCER_GROUP,
    REAL_QID,
    REAL_TOPIC,
    UNIQ_KEY,
    parse_properties,
)

__all__ = ["handlers"]

log = logging.getLogger("rmq_spark.broker")

CHECK_TIMEOUT_MS = 10  # Broker2Client's oneway timeout
_RESOLUTIONS = {8: Resolution.COMMIT, 12: Resolution.ROLLBACK}


def handlers(deps: Deps) -> dict[int, Handler]:
    """END_TRANSACTION's handler; the remoting producers become the check's ``Asker``."""
    consumers = remote_consumers(deps)
    deps.service.transactions.askers.append(_RemotingAsker(consumers))
    return {RequestCode.END_TRANSACTION: _end_handler(deps)}


def _end_handler(deps: Deps) -> Handler:
    service = deps.service

    async def end(call: Call) -> RemotingCommand:
        if service.config.role == "SLAVE":
            return call.reply(ResponseCode.SLAVE_NOT_AVAILABLE, "end transaction to a slave")
        group = call.required("producerGroup")
        ref = HalfRef(call.int_field("commitLogOffset"), call.int_field("tranStateTableOffset"))
        resolution = _RESOLUTIONS.get(call.int_field("commitOrRollback"), Resolution.UNKNOWN)
        user = call.principal.user if call.principal is not None else None

        def may_publish(topic: str) -> bool:
            return user is None or allowed(user, Need("Topic", topic, (Action.PUB,)))

        outcome = await service.transactions.end(
            topic=None,
            group=group,
            message_id="",
            transaction_id=transaction_id(ref),
            resolution=resolution,
            may_publish=may_publish if call.principal is not None else None,
        )
        if outcome.status is EndStatus.OK:
            return call.reply(ResponseCode.SUCCESS, None)
        log.info("remoting: END_TRANSACTION of %s refused: %s", group, outcome.reason)
        return call.reply(ResponseCode.SYSTEM_ERROR, outcome.reason)

    return end


class _RemotingAsker:
    """CHECK_TRANSACTION_STATE to the 4.x producers of a half's group."""

    def __init__(self, consumers: RemoteConsumers) -> None:
        self._consumers = consumers

    async def ask(self, half: MessageRecord, renewed: Any, properties: str) -> int:
        props = parse_properties(properties)
        links = self._consumers.producer_links(props.get(PRODUCER_GROUP, ""))
        if not links:
            return 0
        command = _check_command(half, renewed, properties, props)
        asked = 0
        for link in links:
            try:
                await link.send_request(command, CHECK_TIMEOUT_MS)
                asked += 1
            except (ConnectionError, TimeoutError, OSError) as err:
                log.debug("remoting: transaction check to %s failed: %s", link.peer_host, err)
        return asked


def _check_command(
    half: MessageRecord, renewed: HalfRef, properties: str, props: dict[str, str]
) -> RemotingCommand:
    record = replace(
        half,
        topic=props.get(REAL_TOPIC, ""),
        queue_id=int(props.get(REAL_QID, "0") or 0),
        properties=properties,
        queue_offset=renewed.queue_offset,
        physical_offset=renewed.physical_offset,
    )
    uniq = props.get(UNIQ_KEY, "")
    return RemotingCommand(
        code=RequestCode.CHECK_TRANSACTION_STATE,
        flag=FLAG_ONEWAY,
        ext_fields={
            "tranStateTableOffset": str(renewed.queue_offset),
            "commitLogOffset": str(renewed.physical_offset),
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": offset_msg_id(half.store_host, renewed.physical_offset),
            "topic": RMQ_SYS_TRANS_HALF_TOPIC,
        },
        body=encode_record(record),
    )
