"""The producer RPCs of the gRPC servicer: QueryRoute and SendMessage, protobuf <-> service calls.

Owns the translation of a ``SendMessageRequest`` into ``SendCommand``s (after the wire-level
prechecks: shutdown, encoding, message type, digest, timestamps), the messages of a wave of
calls awaited together on the loop (``BrokerService.send_many_async``), and the route reply.
Every message is an ordinary send: send-back and redelivery have their own RPCs
(``store_rpc.py``). Does not own validation, queue choice or stored properties
(``service.py``, ``send_rules.py``); ``grpc_api.MessagingServicer`` calls it under its guard.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from rmq_spark.broker.cluster.route_data import BrokerRoute
from rmq_spark.broker.cluster.routes import ClusterRoutes
from rmq_spark.broker.grpc.grpc_wire import (
    delivery_timestamp_ms,
    digest_problem,
    endpoints_of,
    peer_address,
    status,
    status_code,
    timestamp_problem,
)
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.resources import Name, resolved_of
from rmq_spark.broker.send_model import MessageKind, SendCode, SendCommand, SendOutcome
from rmq_spark.broker.service import BrokerService
from rmq_spark.broker.transactions.records import HalfRef, transaction_id
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC
from rmq_spark.store.message import HostAddress

__all__ = ["ProducerRpcs"]

log = logging.getLogger("rmq_spark.broker")

_ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_KINDS = {kind.value: kind for kind in MessageKind}  # a dict look-up, not Enum's __call__


class ProducerRpcs:
    """QueryRoute and SendMessage for one ``BrokerService`` (see ``MessagingServicer``)."""

    def __init__(
        self,
        service: BrokerService,
        *,
        endpoints: pb.Endpoints,
        shutdown: asyncio.Event,
        client_peer: Callable[[str], str],
        cluster: ClusterRoutes | None = None,
    ) -> None:
        self._service = service
        self._cluster = cluster
        self._endpoints = endpoints
        self._shutdown = shutdown
        self._client_peer = client_peer

    async def query_route(self, request: Any, context: Any) -> Any:
        """The ``QueryRouteResponse``: every queue of the topic, at the endpoints of the broker
        that owns it (every live broker of the cluster when name servers are configured)."""
        topic = resolved_of(context).topic  # the name the ACL checked (resources.py)
        if self._cluster is not None:
            routes = await self._cluster.lookup(topic.full)
            if routes:
                return spb.QueryRouteResponse(
                    status=status(pb.OK), message_queues=_cluster_queues(topic, routes)
                )
            if routes is None:
                log.warning("cluster: no name server answered; routing %s here only", topic.name)
        peer = peer_address(self._client_peer(context.peer()))
        client = peer.ip if peer is not None else ""
        outcome = self._service.route(topic.name, topic.namespace, reading=True, client=client)
        if outcome.code is not SendCode.OK:
            return spb.QueryRouteResponse(status=status(status_code(outcome.code), outcome.reason))
        broker = pb.Broker(name=self._service.config.broker_name, id=0)
        broker.endpoints.CopyFrom(self._endpoints)
        queues = [_queue(topic, queue_id, broker) for queue_id in range(outcome.queue_count)]
        return spb.QueryRouteResponse(status=status(pb.OK), message_queues=queues)

    async def send_message(self, request: Any, context: Any) -> Any:
        """The ``SendMessageResponse``: one result entry per message, in order."""
        return (await self.send_wave(((request, context),)))[0]

    async def send_wave(self, calls: Sequence[tuple[Any, Any]]) -> list[Any]:
        """``send_message`` of each ``(request, context)``: the messages of all of them put
        as one ``send_many_async`` (one batch, one durability wait), the answers in order.
        Each answer is built in place (a result entry made apart and then added is copied)."""
        responses = []
        commands: list[SendCommand] = []
        slots: list[Any] = []  # each command's result entry, in its call's response
        for request, context in calls:
            born_host = peer_address(self._client_peer(context.peer()))
            topics = resolved_of(context).topics  # one per message, as the ACL checked them
            response = spb.SendMessageResponse()
            add = response.entries.add
            for message, topic in zip(request.messages, topics, strict=True):
                mid = message.system_properties.message_id
                problem = self._precheck(message)
                if problem is None:
                    slots.append(add(message_id=mid))
                    commands.append(self._command(message, topic, born_host))
                else:
                    add(status=status(*problem), message_id=mid)
            responses.append(response)
        if commands:
            outcomes = await self._service.send_many_async(commands)
            for entry, outcome in zip(slots, outcomes, strict=True):
                _fill(entry, outcome)
        for response in responses:
            _settle(response)
        return responses

    def _precheck(self, message: Any) -> tuple[int, str] | None:
        """Wire-level problems (encoding, digest, unknown type) as ``(code, reason)``."""
        props = message.system_properties
        if self._shutdown.is_set():
            return status_code(SendCode.SHUTTING_DOWN), "broker is shutting down"
        if props.body_encoding == pb.GZIP:
            return pb.UNSUPPORTED, "GZIP-encoded bodies are not supported"
        if props.message_type not in _KINDS:
            return pb.BAD_REQUEST, f"unknown message type {props.message_type}"
        problem = digest_problem(message)
        if problem is not None:
            return pb.MESSAGE_CORRUPTED, problem
        return timestamp_problem(props)

    def _command(self, message: Any, topic: Name, born_host: HostAddress | None) -> SendCommand:
        props = message.system_properties
        has = props.HasField
        user = message.user_properties
        born = props.born_timestamp  # unset: zero, the born time of a message without one
        # Positional, in SendCommand's field order: keywords cost a fifth more on this path.
        return SendCommand(
            topic.name,
            message.body,
            props.message_id,
            topic.namespace,
            _KINDS[props.message_type],
            props.tag if has("tag") else None,
            tuple(props.keys),
            dict(user) if user else {},
            props.message_group if has("message_group") else None,
            delivery_timestamp_ms(props.delivery_timestamp) if has("delivery_timestamp") else None,
            born.seconds * 1000 + born.nanos // 1_000_000,
            born_host,
            props.born_host,
            props.trace_context,  # unset: ""
        )


def _fill(entry: Any, outcome: SendOutcome) -> None:
    """A command's result entry (its message id set already) from its outcome."""
    if outcome.ok:
        entry.status.code = pb.OK
        entry.offset = outcome.queue_offset
        if outcome.topic == RMQ_SYS_TRANS_HALF_TOPIC:  # a half: EndTransaction names it
            half = HalfRef(outcome.physical_offset, outcome.queue_offset)
            entry.transaction_id = transaction_id(half)
        return
    log.debug("send refused: %s %s", outcome.code.name, outcome.reason)
    entry.status.code = status_code(outcome.code)
    entry.status.message = outcome.reason


def _settle(response: Any) -> None:
    """A call's top status: its entries' one status, or MULTIPLE_RESULTS (none: BAD_REQUEST)."""
    entries = response.entries
    if not entries:
        response.status.code = pb.BAD_REQUEST
        response.status.message = "SendMessageRequest has no messages"
    elif len(entries) == 1 or len({entry.status.code for entry in entries}) == 1:
        response.status.CopyFrom(entries[0].status)
    else:
        response.status.code = pb.MULTIPLE_RESULTS
        response.status.message = "messages of this batch had different results"


def _queue(topic: Name, queue_id: int, broker: Any, permission: int = pb.READ_WRITE) -> Any:
    return pb.MessageQueue(
        topic=pb.Resource(name=topic.name, resource_namespace=topic.namespace),
        id=queue_id,
        permission=permission,
        broker=broker,
        accept_message_types=_ACCEPTED_TYPES,
    )


def _cluster_queues(topic: Name, routes: tuple[BrokerRoute, ...]) -> list[Any]:
    """Every queue of every broker in ``routes``, each at its broker's own gRPC endpoint."""
    queues = []
    for route in routes:
        broker = pb.Broker(name=route.broker_name, id=0)
        broker.endpoints.CopyFrom(endpoints_of(route.grpc_host, route.grpc_port))
        permission = _PERMISSIONS[(route.readable, route.writable)]
        queues += [_queue(topic, qid, broker, permission) for qid in range(route.queue_count)]
    return queues


_PERMISSIONS = {
    (True, True): pb.READ_WRITE,
    (True, False): pb.READ,
    (False, True): pb.WRITE,
    (False, False): pb.NONE,
}
