"""RocketMQ 5 gRPC servicer (``apache.rocketmq.v2.MessagingService``): protobuf <-> service calls.

Owns the wire translation only: request fields -> ``SendCommand``/route lookups on
``service.BrokerService``, ``SendCode`` -> RocketMQ ``Code``, route and Telemetry settings
replies, the client's wire quirks (delivery timestamps in seconds or milliseconds, peer
address parsing, body digests), and a proper status for every RPC we do not serve
(NOT_IMPLEMENTED) instead of a gRPC error. Runs on ``grpc.aio``; blocking store work goes to a
thread pool.

Does not own: validation rules, queue choice, stored properties (``service.py``); sockets,
ports, signals (``server.py``). See docs/BROKER.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import zlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc
from google.protobuf import message_factory

from rmq_spark.broker.consume_grpc import ConsumerRpcs
from rmq_spark.broker.limits import InflightBytes
from rmq_spark.broker.offset_grpc import OffsetRpcs, is_send_back_message, send_back_entry
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.redelivery import is_redelivery_message, ref_from_message
from rmq_spark.broker.service import (
    BrokerService,
    MessageKind,
    SendCode,
    SendCommand,
    SendOutcome,
)
from rmq_spark.store.message import HostAddress

__all__ = [
    "CLIENT_ID_HEADER",
    "Malformed",
    "MessagingServicer",
    "add_servicer_to_server",
    "delivery_timestamp_ms",
    "endpoints_of",
    "grpc_server_options",
    "peer_address",
    "status_code",
]

log = logging.getLogger("rmq_spark.broker")

CLIENT_ID_HEADER = "x-mq-client-id"
# Above this a Timestamp.seconds value is really milliseconds (year ~5138 in seconds): the
# Python client copies the user's number verbatim and its docs use milliseconds.
_SECONDS_THAT_ARE_MS = 10**11
_ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY)

_CODES: dict[SendCode, int] = {
    SendCode.OK: pb.OK,
    SendCode.BAD_REQUEST: pb.BAD_REQUEST,
    SendCode.ILLEGAL_TOPIC: pb.ILLEGAL_TOPIC,
    SendCode.ILLEGAL_MESSAGE_TAG: pb.ILLEGAL_MESSAGE_TAG,
    SendCode.ILLEGAL_MESSAGE_KEY: pb.ILLEGAL_MESSAGE_KEY,
    SendCode.ILLEGAL_MESSAGE_GROUP: pb.ILLEGAL_MESSAGE_GROUP,
    SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    SendCode.ILLEGAL_MESSAGE_ID: pb.ILLEGAL_MESSAGE_ID,
    SendCode.ILLEGAL_DELIVERY_TIME: pb.ILLEGAL_DELIVERY_TIME,
    SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    SendCode.TOPIC_NOT_FOUND: pb.TOPIC_NOT_FOUND,
    SendCode.MESSAGE_BODY_EMPTY: pb.MESSAGE_BODY_EMPTY,
    SendCode.MESSAGE_BODY_TOO_LARGE: pb.MESSAGE_BODY_TOO_LARGE,
    SendCode.MESSAGE_PROPERTIES_TOO_LARGE: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    SendCode.UNSUPPORTED: pb.UNSUPPORTED,
    # RocketMQ's SERVICE_NOT_AVAILABLE has no v2 code of its own; the proxy answers 50001.
    SendCode.SHUTTING_DOWN: pb.INTERNAL_SERVER_ERROR,
    SendCode.FLUSH_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    SendCode.STORE_ERROR: pb.INTERNAL_SERVER_ERROR,
}


def status_code(code: SendCode) -> int:
    """The ``apache.rocketmq.v2.Code`` value for a service outcome."""
    return _CODES[code]


def grpc_server_options(receive_limit_bytes: int) -> list[tuple[str, Any]]:
    """Channel options for our server: a raised inbound limit, and no SO_REUSEPORT.

    grpc enables SO_REUSEPORT by default, which lets a second broker bind the same port
    silently; we want "port taken" to be an error.
    """
    return [
        ("grpc.max_receive_message_length", receive_limit_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
    ]


def delivery_timestamp_ms(timestamp: Any) -> int:
    """A ``google.protobuf.Timestamp`` from the client as epoch milliseconds.

    The Python client 5.1.2 writes the user's number into ``seconds`` unchanged; its example
    passes seconds, its docs milliseconds. Values above 10**11 are taken as milliseconds.
    """
    seconds = int(timestamp.seconds)
    if seconds > _SECONDS_THAT_ARE_MS:
        return seconds
    return seconds * 1000 + int(timestamp.nanos) // 1_000_000


# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)


def _timestamp_problem(props: Any) -> tuple[int, str] | None:
    """A delivery or born timestamp that breaks ``Timestamp``'s rules as ``(code, reason)``:
    nanos outside [0, 10**9), born seconds outside years 1..9999. Delivery seconds may be
    milliseconds (``delivery_timestamp_ms``): the service checks the instant they make."""
    for name, code, seconds_range in (
        ("delivery_timestamp", pb.ILLEGAL_DELIVERY_TIME, None),
        ("born_timestamp", pb.BAD_REQUEST, _TIMESTAMP_SECONDS),
    ):
        if not props.HasField(name):
            continue
        stamp = getattr(props, name)
        bad_seconds = seconds_range is not None and not (
            seconds_range[0] <= stamp.seconds <= seconds_range[1]
        )
        if bad_seconds or not 0 <= stamp.nanos < 1_000_000_000:
            return (
                code,
                f"{name} seconds={stamp.seconds} nanos={stamp.nanos} is not a valid Timestamp",
            )
    return None


def peer_address(peer: str) -> HostAddress | None:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` (grpc's ``context.peer()``) as an address."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    try:
        return HostAddress.parse(rest)
    except ValueError:
        return None


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    """``Endpoints`` for ``host:port`` with the address scheme the client needs."""
    try:
        version = ipaddress.ip_address(host).version
        scheme = pb.IPv4 if version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)


def _not_implemented(method: str) -> pb.Status:
    return _status(pb.NOT_IMPLEMENTED, f"{method} is not implemented by this broker")


def _digest_problem(message: Any) -> str | None:
    """Check ``system_properties.body_digest`` when the client sent one."""
    props = message.system_properties
    if not props.HasField("body_digest") or props.body_digest.type == pb.DIGEST_TYPE_UNSPECIFIED:
        return None
    digest, body = props.body_digest, message.body
    if digest.type == pb.CRC32:
        expected = f"{zlib.crc32(body):08X}"
    elif digest.type == pb.MD5:
        expected = hashlib.md5(body).hexdigest().upper()
    elif digest.type == pb.SHA1:
        expected = hashlib.sha1(body).hexdigest().upper()
    else:
        return f"unknown body digest type {digest.type}"
    if digest.checksum.upper() != expected:
        return f"body digest mismatch: sent {digest.checksum}, computed {expected}"
    return None


class Malformed:
    """Stands for a request whose bytes are not the expected protobuf message.

    Our deserializers return it instead of raising, so the handler can answer BAD_REQUEST
    (grpc would log a traceback and answer a bare UNKNOWN/INTERNAL).
    """

    __slots__ = ("code", "error")

    def __init__(self, error: str, code: int = pb.BAD_REQUEST) -> None:
        self.error = error
        self.code = code  # TOO_MANY_REQUESTS: refused unparsed by limits.InflightBytes


def _lenient(message_cls: Any) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return message_cls.FromString(data)
        except Exception as err:  # DecodeError and friends: bytes from the wire
            return Malformed(f"not a valid {message_cls.DESCRIPTOR.name}: {err}")

    return deserialize


_HANDLER_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_servicer_to_server(
    servicer: MessagingServicer, server: Any, inflight: InflightBytes | None = None
) -> None:
    """Register ``servicer`` for every MessagingService method, with lenient deserializers.

    The same as the generated ``add_MessagingServiceServicer_to_server`` except that
    undecodable request bytes reach the handler as ``Malformed`` (answered BAD_REQUEST), and
    SendMessage requests book their bytes in ``inflight`` (over it: TOO_MANY_REQUESTS).
    """
    service = spb.DESCRIPTOR.services_by_name["MessagingService"]
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        factory = _HANDLER_FACTORIES[(method.client_streaming, method.server_streaming)]
        behaviour, deserialize = getattr(servicer, method.name), _lenient(request_cls)
        if inflight is not None and method.name == "SendMessage":
            refuse = lambda reason: Malformed(reason, pb.TOO_MANY_REQUESTS)  # noqa: E731
            behaviour = inflight.release_after(behaviour)
            deserialize = inflight.admit(deserialize, refuse)
        handlers[method.name] = factory(
            behaviour,
            request_deserializer=deserialize,
            response_serializer=response_cls.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


_R = TypeVar("_R")


class MessagingServicer(spb_grpc.MessagingServiceServicer):
    """The gRPC face of one ``BrokerService``.

    Parameters
    ----------
    service
        Where sends and route lookups go.
    executor
        Runs the blocking ``service.send`` calls of a store without ``put_async`` (a store
        with it is put from the loop: ``service.send_async``).
    route_host, route_port
        The address advertised in routes; clients send every RPC but QueryRoute there.
    shutdown
        Set when the broker stops: Telemetry streams end, new sends are refused.
    consumers
        The consumer RPCs (``consume_grpc.py``); ``None``: they answer NOT_IMPLEMENTED.
    client_peer
        Maps grpc's ``context.peer()`` to the client's address (the front splices clients).
    """

    def __init__(
        self,
        service: BrokerService,
        executor: Executor,
        *,
        route_host: str,
        route_port: int,
        shutdown: asyncio.Event,
        consumers: ConsumerRpcs | None = None,
        client_peer: Callable[[str], str] | None = None,
    ) -> None:
        self._client_peer = client_peer or (lambda peer: peer)  # front.Front.client_peer
        self._service = service
        self._consumers = consumers
        self._executor = executor
        self._endpoints = endpoints_of(route_host, route_port)
        self._shutdown = shutdown
        config = service.config
        self._max_body_size = min(service.max_message_size_bytes, 2**31 - 1)
        self._send_max_attempts = config.send_max_attempts
        self.telemetry_streams = 0

    async def _guard(
        self, method: str, request: Any, response_cls: type, work: Callable[[], Any]
    ) -> Any:
        """Run one unary handler: a malformed request is BAD_REQUEST, an unexpected error
        INTERNAL_SERVER_ERROR; each is logged as one line."""
        if isinstance(request, Malformed):
            log.warning("broker error: %s: malformed request: %s", method, request.error)
            return response_cls(status=_status(request.code, request.error))
        try:
            return await work()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the boundary: a bad request must never take us down
            log.error("broker error: %s failed: %s: %s", method, type(err).__name__, err)
            log.debug("details", exc_info=True)
            return response_cls(status=_status(pb.INTERNAL_SERVER_ERROR, f"{method}: {err}"))

    # --- producer RPCs --------------------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        async def work() -> Any:
            topic, namespace = request.topic.name, request.topic.resource_namespace
            outcome = self._service.route(topic, namespace, reading=True)
            if outcome.code is not SendCode.OK:
                return spb.QueryRouteResponse(
                    status=_status(status_code(outcome.code), outcome.reason)
                )
            broker = pb.Broker(name=self._service.config.broker_name, id=0)
            broker.endpoints.CopyFrom(self._endpoints)
            queues = [
                pb.MessageQueue(
                    topic=pb.Resource(
                        name=request.topic.name,
                        resource_namespace=request.topic.resource_namespace,
                    ),
                    id=queue_id,
                    permission=pb.READ_WRITE,
                    broker=broker,
                    accept_message_types=_ACCEPTED_TYPES,
                )
                for queue_id in range(outcome.queue_count)
            ]
            return spb.QueryRouteResponse(status=_status(pb.OK), message_queues=queues)

        return await self._guard("QueryRoute", request, spb.QueryRouteResponse, work)

    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        if self._consumers is None:
            return spb.HeartbeatResponse(status=_status(pb.OK))
        return await self._consumer_call(
            "Heartbeat", request, context, spb.HeartbeatResponse, ConsumerRpcs.heartbeat
        )

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls = spb.NotifyClientTerminationResponse
        if self._consumers is None:
            return response_cls(status=_status(pb.OK))
        handler = ConsumerRpcs.notify_client_termination
        return await self._consumer_call(
            "NotifyClientTermination", request, context, response_cls, handler
        )

    async def SendMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            if not request.messages:
                return spb.SendMessageResponse(
                    status=_status(pb.BAD_REQUEST, "SendMessageRequest has no messages")
                )
            born_host = peer_address(self._client_peer(context.peer()))
            loop = asyncio.get_running_loop()
            entries = []
            redelivered = False
            for message in request.messages:
                entry = self._precheck(message)
                if entry is None and is_send_back_message(message):  # spark/retry.py's
                    entry = await self._send_back(message)
                if entry is None:
                    command = self._command(message, born_host)
                    redelivered |= command.redelivery is not None  # put by a thread, journaled
                    if self._service.puts_async and command.redelivery is None:
                        outcome = await self._service.send_async(command)  # awaits its fsync
                    else:
                        outcome = await loop.run_in_executor(
                            self._executor, self._service.send, command
                        )
                    entry = self._entry(outcome)
                entries.append(entry)
            if redelivered:  # the redelivery journal is durable before the reply says OK
                await loop.run_in_executor(self._executor, self._service.sync_redeliveries)
            codes = {entry.status.code for entry in entries}
            if len(codes) == 1:
                top = entries[0].status
            else:
                top = _status(pb.MULTIPLE_RESULTS, "messages of this batch had different results")
            return spb.SendMessageResponse(status=top, entries=entries)

        return await self._guard("SendMessage", request, spb.SendMessageResponse, work)

    async def _send_back(self, message: Any) -> Any:
        """A send-back request (``offset_grpc.send_back_entry``): a copy of a stored message."""
        if self._consumers is None:
            return spb.SendResultEntry(status=_not_implemented("send-back"))
        service = self._consumers.service
        work = lambda: send_back_entry(service, message)  # noqa: E731
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def _precheck(self, message: Any) -> Any | None:
        """Wire-level problems (encoding, digest, unknown type) as a ready result entry."""
        props = message.system_properties
        mid = props.message_id
        if self._shutdown.is_set():
            return spb.SendResultEntry(
                status=_status(status_code(SendCode.SHUTTING_DOWN), "broker is shutting down"),
                message_id=mid,
            )
        if props.body_encoding == pb.GZIP:
            return spb.SendResultEntry(
                status=_status(pb.UNSUPPORTED, "GZIP-encoded bodies are not supported"),
                message_id=mid,
            )
        if props.message_type not in MessageKind._value2member_map_:
            return spb.SendResultEntry(
                status=_status(pb.BAD_REQUEST, f"unknown message type {props.message_type}"),
                message_id=mid,
            )
        problem = _digest_problem(message)
        if problem is not None:
            return spb.SendResultEntry(
                status=_status(pb.MESSAGE_CORRUPTED, problem), message_id=mid
            )
        bad_time = _timestamp_problem(props)
        if bad_time is not None:
            return spb.SendResultEntry(status=_status(*bad_time), message_id=mid)
        return None

    def _command(self, message: Any, born_host: HostAddress | None) -> SendCommand:
        props = message.system_properties
        born_ms = 0
        if props.HasField("born_timestamp"):
            born_ms = props.born_timestamp.seconds * 1000 + props.born_timestamp.nanos // 10**6
        redelivery = None
        if is_redelivery_message(message):  # the schedule job's; docs/DELAY.md
            redelivery = ref_from_message(message)
        return SendCommand(
            redelivery=redelivery,
            topic=message.topic.name,
            namespace=message.topic.resource_namespace,
            body=message.body,
            message_id=props.message_id,
            kind=MessageKind(props.message_type),
            tag=props.tag if props.HasField("tag") else None,
            keys=tuple(props.keys),
            user_properties=dict(message.user_properties),
            message_group=props.message_group if props.HasField("message_group") else None,
            delivery_timestamp_ms=(
                delivery_timestamp_ms(props.delivery_timestamp)
                if props.HasField("delivery_timestamp")
                else None
            ),
            born_timestamp_ms=born_ms,
            born_host=born_host,
            born_host_text=props.born_host,
            trace_context=props.trace_context if props.HasField("trace_context") else "",
        )

    @staticmethod
    def _entry(outcome: SendOutcome) -> Any:
        if outcome.ok:
            return spb.SendResultEntry(
                status=_status(pb.OK),
                message_id=outcome.message_id,
                offset=outcome.queue_offset,
            )
        log.debug("send refused: %s %s", outcome.code.name, outcome.reason)
        return spb.SendResultEntry(
            status=_status(status_code(outcome.code), outcome.reason),
            message_id=outcome.message_id,
        )

    # --- Telemetry ------------------------------------------------------------------------

    async def Telemetry(self, request_iterator: Any, context: Any) -> None:  # noqa: N802
        """Answer every Settings with status OK + the merged settings; end on stop or cancel."""
        client_id = dict(context.invocation_metadata()).get(CLIENT_ID_HEADER, "")
        self.telemetry_streams += 1
        stop_wait = asyncio.ensure_future(self._shutdown.wait())
        try:
            while True:
                read = asyncio.ensure_future(context.read())
                done, _ = await asyncio.wait({read, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    read.cancel()
                    return
                command = read.result()
                if command is grpc.aio.EOF:
                    return
                if isinstance(command, Malformed):
                    log.warning("broker error: Telemetry of %r: %s", client_id, command.error)
                    continue
                if command.WhichOneof("command") == "settings":
                    await context.write(self._settings_reply(command.settings, client_id))
                # thread_stack_trace / verify_message_result: we never ask for them.
        except asyncio.CancelledError:
            raise  # the client cancelling its stream is the normal end of it
        except Exception as err:
            log.error("broker error: Telemetry stream of %r: %s", client_id, err)
            log.debug("details", exc_info=True)
        finally:
            stop_wait.cancel()
            self.telemetry_streams -= 1

    def _settings_reply(self, settings: Any, client_id: str = "") -> Any:
        """What the Java proxy answers: the client's settings merged with the broker's."""
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.Clear()
        reply.metric.on = False
        if settings.client_type == pb.PRODUCER or settings.HasField("publishing"):
            reply.publishing.max_body_size = self._max_body_size
            reply.publishing.validate_message_type = True
            reply.backoff_policy.max_attempts = self._send_max_attempts
            backoff = reply.backoff_policy.exponential_backoff
            backoff.initial.FromMilliseconds(10)
            backoff.max.FromMilliseconds(1000)
            backoff.multiplier = 2.0
        elif self._consumers is not None and settings.HasField("subscription"):
            self._consumers.settings_reply(reply, client_id)
        elif settings.HasField("subscription"):
            reply.subscription.long_polling_timeout.FromSeconds(20)
        return spb.TelemetryCommand(status=_status(pb.OK), settings=reply)

    # --- consumer RPCs: delegated to consume_grpc.ConsumerRpcs ----------------------------

    async def _consumer_call(
        self, method: str, request: Any, context: Any, response_cls: type, handler: Any
    ) -> Any:
        """Run the ``ConsumerRpcs`` method ``handler`` under ``_guard``."""
        consumers = self._consumers
        if consumers is None:
            return response_cls(status=_not_implemented(method))
        work = lambda: handler(consumers, request, context)  # noqa: E731
        return await self._guard(method, request, response_cls, work)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls = spb.QueryAssignmentResponse
        handler = ConsumerRpcs.query_assignment
        return await self._consumer_call("QueryAssignment", request, context, response_cls, handler)

    async def AckMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls, handler = spb.AckMessageResponse, ConsumerRpcs.ack_message
        return await self._consumer_call("AckMessage", request, context, response_cls, handler)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls = spb.ForwardMessageToDeadLetterQueueResponse
        method, handler = "ForwardMessageToDeadLetterQueue", ConsumerRpcs.forward_to_dlq
        return await self._consumer_call(method, request, context, response_cls, handler)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls = spb.ChangeInvisibleDurationResponse
        method, handler = "ChangeInvisibleDuration", ConsumerRpcs.change_invisible_duration
        return await self._consumer_call(method, request, context, response_cls, handler)

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        if self._consumers is None:
            yield spb.ReceiveMessageResponse(status=_not_implemented("ReceiveMessage"))
            return
        async for response in self._consumers.receive_message_guarded(request, context):
            yield response

    # --- everything else: a proper status, never a crash ---------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield spb.PullMessageResponse(status=_not_implemented("PullMessage"))

    async def _offset_call(
        self, method: str, request: Any, context: Any, response_cls: type, handler: Any
    ) -> Any:
        """Run the ``OffsetRpcs`` method ``handler`` under ``_guard``."""
        if self._consumers is None:
            return response_cls(status=_not_implemented(method))
        rpcs = OffsetRpcs(self._consumers.service)
        work = lambda: handler(rpcs, request, context)  # noqa: E731
        return await self._guard(method, request, response_cls, work)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls, handler = spb.UpdateOffsetResponse, OffsetRpcs.update_offset
        return await self._offset_call("UpdateOffset", request, context, response_cls, handler)

    async def GetOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls, handler = spb.GetOffsetResponse, OffsetRpcs.get_offset
        return await self._offset_call("GetOffset", request, context, response_cls, handler)

    async def QueryOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls, handler = spb.QueryOffsetResponse, OffsetRpcs.query_offset
        return await self._offset_call("QueryOffset", request, context, response_cls, handler)

    async def EndTransaction(self, request: Any, context: Any) -> Any:  # noqa: N802
        return spb.EndTransactionResponse(
            status=_status(pb.UNSUPPORTED, "transactional messages are not supported")
        )

    async def RecallMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return spb.RecallMessageResponse(status=_not_implemented("RecallMessage"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        return spb.SyncLiteSubscriptionResponse(status=_not_implemented("SyncLiteSubscription"))
