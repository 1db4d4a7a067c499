"""The consumer RPCs of ``apache.rocketmq.v2.MessagingService``: protobuf <-> ``ConsumeService``.

Owns the wire side of ReceiveMessage (status, then the messages, then the delivery timestamp;
the long-polling time from the request, bounded by the client's deadline), AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, QueryAssignment (the topic as one
POP assignment, per queue for a FIFO group, as the 5.x proxy does), consumer heartbeats,
client termination and the consumer part of the Telemetry settings reply. ``MessagingServicer``
delegates to ``ConsumerRpcs``. Does not own the rules (``consumer/service.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from rmq_spark.broker.cluster.assignment import cluster_assignments
from rmq_spark.broker.cluster.routes import ClusterRoutes
from rmq_spark.broker.consumer.groups import Delivery
from rmq_spark.broker.consumer.service import (
    POLL_MS_MAX,
    ConsumeCode,
    ConsumeService,
    Receive,
    Rejected,
)
from rmq_spark.broker.grpc.consume_wire import consumer_settings, delivered_message
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.resources import Name, resolved_of
from rmq_spark.broker.service import SendCode

__all__ = ["ConsumerRpcs", "consume_status_code"]

log = logging.getLogger("rmq_spark.broker")

_CODES = {
    ConsumeCode.ILLEGAL_CONSUMER_GROUP: pb.ILLEGAL_CONSUMER_GROUP,
    ConsumeCode.ILLEGAL_TOPIC: pb.ILLEGAL_TOPIC,
    ConsumeCode.TOPIC_NOT_FOUND: pb.TOPIC_NOT_FOUND,
    ConsumeCode.ILLEGAL_FILTER_EXPRESSION: pb.ILLEGAL_FILTER_EXPRESSION,
    ConsumeCode.ILLEGAL_INVISIBLE_TIME: pb.ILLEGAL_INVISIBLE_TIME,
    ConsumeCode.INVALID_RECEIPT_HANDLE: pb.INVALID_RECEIPT_HANDLE,
    ConsumeCode.SHUTTING_DOWN: pb.INTERNAL_SERVER_ERROR,
    ConsumeCode.STORE_ERROR: pb.INTERNAL_SERVER_ERROR,
    ConsumeCode.FORBIDDEN: pb.FORBIDDEN,
}
_FILTER_KINDS = {pb.TAG: "TAG", pb.SQL: "SQL92", pb.FILTER_TYPE_UNSPECIFIED: "TAG"}
_DEADLINE_RESERVE_S = 0.2  # answer this long before the client's deadline
_NACK_ON_WRITE_FAILURE_MS = 1_000  # the proxy's NACK_INVISIBLE_TIME


def consume_status_code(code: ConsumeCode) -> int:
    return _CODES[code]


def _status(code: int, message: str = "") -> Any:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def _rejected_status(rejected: Rejected) -> Any:
    return _status(consume_status_code(rejected.code), rejected.reason)


def client_id_of(context: Any) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return str(value)
    return ""


def _delivery_timestamp() -> Any:
    response = spb.ReceiveMessageResponse()
    response.delivery_timestamp.GetCurrentTime()
    return response


class ConsumerRpcs:
    """The consumer RPC handlers over one ``ConsumeService``.

    ``endpoints`` and ``broker_name`` go into QueryAssignment's queues, as in routes;
    with ``cluster`` (name servers configured) QueryAssignment spans every broker of the topic.
    """

    def __init__(
        self,
        service: ConsumeService,
        *,
        endpoints: Any,
        broker_name: str,
        cluster: ClusterRoutes | None = None,
    ) -> None:
        self.service = service
        self._endpoints = endpoints
        self._broker_name = broker_name
        self.cluster = cluster

    # --- ReceiveMessage ------------------------------------------------------------------

    async def receive_message_guarded(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """``receive_message`` behind the boundary: an undecodable request (the servicer's
        ``Malformed``) is BAD_REQUEST, an unexpected error INTERNAL_SERVER_ERROR, one log
        line each."""
        if not isinstance(request, spb.ReceiveMessageRequest):
            reason = str(getattr(request, "error", "not a ReceiveMessageRequest"))
            log.warning("broker error: ReceiveMessage: malformed request: %s", reason)
            yield spb.ReceiveMessageResponse(status=_status(pb.BAD_REQUEST, reason))
            return
        try:
            async for response in self.receive_message(request, context):
                yield response
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the boundary: a bad request must never take us down
            log.error("broker error: ReceiveMessage failed: %s: %s", type(err).__name__, err)
            log.debug("details", exc_info=True)
            yield spb.ReceiveMessageResponse(
                status=_status(pb.INTERNAL_SERVER_ERROR, f"ReceiveMessage: {err}")
            )

    async def receive_message(self, request: Any, context: Any) -> AsyncIterator[Any]:
        receive = self._prepare(request, context)
        if isinstance(receive, Rejected):
            yield spb.ReceiveMessageResponse(status=_rejected_status(receive))
            yield _delivery_timestamp()
            return
        found = await self.service.receive(receive, self._poll_s(request, context))
        if not found:
            yield spb.ReceiveMessageResponse(status=_status(pb.MESSAGE_NOT_FOUND, "no new message"))
            yield _delivery_timestamp()
            return
        sent = 0
        try:
            yield spb.ReceiveMessageResponse(status=_status(pb.OK))
            for delivery in found:
                yield spb.ReceiveMessageResponse(message=delivered_message(delivery))
                sent += 1
            yield _delivery_timestamp()
        except BaseException:  # the client went away: what it did not get comes back soon
            self._release(receive, found[sent:])
            raise

    def _prepare(self, request: Any, context: Any) -> Receive | Rejected:
        resolved = resolved_of(context)  # the names the ACL checked (resources.py)
        assert resolved.group is not None
        expression = request.filter_expression
        return self.service.prepare(
            resolved.group.full,
            resolved.topic.name,
            resolved.topic.namespace,
            filter_kind=_FILTER_KINDS.get(expression.type, "TAG"),
            expression=expression.expression or "*",
            batch_size=request.batch_size,
            invisible_ms=request.invisible_duration.ToMilliseconds(),
            auto_renew=request.auto_renew,
            client_id=client_id_of(context),
        )

    @staticmethod
    def _poll_s(request: Any, context: Any) -> float:
        """The request's long-polling time (at most 20 s, as the proxy), ending before the
        client's deadline."""
        poll_s = POLL_MS_MAX / 1000
        if request.HasField("long_polling_timeout"):
            poll_s = min(poll_s, request.long_polling_timeout.ToMilliseconds() / 1000)
        remaining = context.time_remaining()
        if remaining is not None:
            poll_s = min(poll_s, remaining - _DEADLINE_RESERVE_S)
        return max(0.0, poll_s)

    def _release(self, receive: Receive, deliveries: list[Delivery]) -> None:
        pop = receive.request
        for delivery in deliveries:
            self.service.change_invisible(
                pop.group, pop.topic, delivery.handle.encode(), _NACK_ON_WRITE_FAILURE_MS
            )

    # --- unary RPCs ----------------------------------------------------------------------

    async def ack_message(self, request: Any, context: Any) -> Any:
        group, topic = _group_and_topic(context)
        entries = []
        for entry in request.entries:
            rejected = self.service.ack(group, topic, entry.receipt_handle)
            status = _status(pb.OK) if rejected is None else _rejected_status(rejected)
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
                )
            )
        codes = {e.status.code for e in entries}
        if not entries:
            top = _status(pb.BAD_REQUEST, "AckMessageRequest has no entries")
        elif len(codes) == 1:
            top = entries[0].status
        else:
            top = _status(pb.MULTIPLE_RESULTS, "entries had different results")
        return spb.AckMessageResponse(status=top, entries=entries)

    async def change_invisible_duration(self, request: Any, context: Any) -> Any:
        group, topic = _group_and_topic(context)
        changed = self.service.change_invisible(
            group, topic, request.receipt_handle, request.invisible_duration.ToMilliseconds()
        )
        if isinstance(changed, Rejected):
            # The client stores whatever handle comes back before it checks the status.
            return spb.ChangeInvisibleDurationResponse(
                status=_rejected_status(changed), receipt_handle=request.receipt_handle
            )
        return spb.ChangeInvisibleDurationResponse(status=_status(pb.OK), receipt_handle=changed)

    async def forward_to_dlq(self, request: Any, context: Any) -> Any:
        group, topic = _group_and_topic(context)
        rejected = await asyncio.get_running_loop().run_in_executor(
            None,
            self.service.forward_to_dlq,
            group,
            topic,
            request.receipt_handle,
            request.delivery_attempt,
        )
        status = _status(pb.OK) if rejected is None else _rejected_status(rejected)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status)

    async def query_assignment(self, request: Any, context: Any) -> Any:
        self.service.seen(client_id_of(context))
        resolved = resolved_of(context)
        topic = resolved.topic
        assert resolved.group is not None
        fifo = self.service.settings_of(resolved.group.full).fifo
        across = await cluster_assignments(self.cluster, topic, fifo=fifo)
        if across is not None:
            return spb.QueryAssignmentResponse(status=_status(pb.OK), assignments=across)
        route = self.service.route(topic.name, topic.namespace)
        if route.code is not SendCode.OK:
            missing = route.code is SendCode.TOPIC_NOT_FOUND
            code = pb.TOPIC_NOT_FOUND if missing else pb.ILLEGAL_TOPIC
            return spb.QueryAssignmentResponse(status=_status(code, route.reason))
        queue_ids = range(route.queue_count) if fifo else (-1,)
        broker = pb.Broker(name=self._broker_name, id=0)
        broker.endpoints.CopyFrom(self._endpoints)
        assignments = [
            pb.Assignment(
                message_queue=pb.MessageQueue(
                    topic=pb.Resource(name=topic.name, resource_namespace=topic.namespace),
                    id=queue_id,
                    permission=pb.READ_WRITE,
                    broker=broker,
                )
            )
            for queue_id in queue_ids
        ]
        return spb.QueryAssignmentResponse(status=_status(pb.OK), assignments=assignments)

    async def heartbeat(self, request: Any, context: Any) -> Any:
        group = resolved_of(context).group  # a consumer's (resources.py), else None
        self.service.seen(client_id_of(context), "" if group is None else group.full)
        return spb.HeartbeatResponse(status=_status(pb.OK))

    async def notify_client_termination(self, request: Any, context: Any) -> Any:
        released = self.service.terminated(client_id_of(context))
        if released:
            log.debug("client %s ended with %d messages in flight", client_id_of(context), released)
        return spb.NotifyClientTerminationResponse(status=_status(pb.OK))

    # --- Telemetry -----------------------------------------------------------------------

    def settings_reply(self, reply: Any, client_id: str, group: Name) -> None:
        """Complete a consumer's settings reply (``reply`` already echoes its settings) for
        ``group``, the settings' group as the edge resolved it."""
        self.service.seen(client_id, group.full)
        consumer_settings(reply, self.service.settings_of(group.full))


def _group_and_topic(context: Any) -> tuple[str, str]:
    """The full group and topic names of a call that names one of each, as resolved."""
    resolved = resolved_of(context)
    assert resolved.group is not None
    return resolved.group.full, resolved.topic.full
