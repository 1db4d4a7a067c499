"""RocketMQ 5 gRPC servicer (``apache.rocketmq.v2.MessagingService``): protobuf <-> service calls.

Owns the servicer itself: registration with lenient deserializers (``Malformed`` input is
BAD_REQUEST), the guard every unary RPC runs under (an unexpected error is one logged line and
INTERNAL_SERVER_ERROR, never a crash), the dispatch of each RPC to the object that serves it,
and a proper status for every RPC we do not serve (NOT_IMPLEMENTED) instead of a gRPC error.
Runs on ``grpc.aio``; blocking store work goes to a thread pool.

The RPCs live beside it: producer RPCs in ``grpc_producer.py``, Telemetry in
``grpc_telemetry.py``, consumer and offset RPCs in ``consume_grpc.py`` / ``offset_grpc.py``;
the wire's small pieces (codes, timestamps, addresses) in ``grpc_wire.py``, re-exported here.

Does not own: validation rules, queue choice, stored properties (``service.py``); sockets,
ports, signals (``server.py``). See docs/BROKER.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import grpc
from google.protobuf import message_factory

from rmq_spark.broker.cluster.routes import cluster_routes
from rmq_spark.broker.grpc.consume_grpc import ConsumerRpcs
from rmq_spark.broker.grpc.edge import EdgeHandlers, Wave, WaveRun, Wrapper
from rmq_spark.broker.grpc.grpc_producer import ProducerRpcs
from rmq_spark.broker.grpc.grpc_telemetry import TelemetryRpc
from rmq_spark.broker.grpc.grpc_wire import (
    CLIENT_ID_HEADER,
    Malformed,
    delivery_timestamp_ms,
    endpoints_of,
    grpc_server_options,
    not_implemented,
    peer_address,
    status,
    status_code,
)
from rmq_spark.broker.grpc.offset_grpc import OffsetRpcs
from rmq_spark.broker.grpc.store_rpc import STORE_SERVICE, StoreRpcs
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.security.limits import InflightBytes
from rmq_spark.broker.service import BrokerService
from rmq_spark.broker.transactions.check import TransactionCheck
from rmq_spark.broker.transactions.check_job import CheckJobDesk
from rmq_spark.broker.transactions.grpc_end import end_transaction
from rmq_spark.broker.transactions.streams import ProducerStreams

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
    servicer: MessagingServicer,
    server: Any,
    inflight: InflightBytes | None = None,
    wrappers: Sequence[Wrapper] = (),
) -> None:
    """Register ``servicer`` for every MessagingService method, with lenient deserializers.

    The same as the generated ``add_MessagingServiceServicer_to_server`` except that
    undecodable request bytes reach the handler as ``Malformed`` (answered BAD_REQUEST),
    SendMessage requests book their bytes in ``inflight`` (over it: TOO_MANY_REQUESTS), and
    every handler runs inside ``wrappers`` (``edge.EdgeHandlers``, the first outermost). A
    server that serves waves of calls (``add_wave_handlers``: the native front's relay) also
    gets SendMessage's wave (``edge.Wave``), inside the same wrappers.
    """
    service = spb.DESCRIPTOR.services_by_name["MessagingService"]
    handlers, waves = {}, {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        factory = _HANDLER_FACTORIES[(method.client_streaming, method.server_streaming)]
        behaviour, deserialize = getattr(servicer, method.name), _lenient(request_cls)
        if method.name == "SendMessage":
            wave_run: WaveRun = servicer.send_message_wave
            if inflight is not None:
                refuse = lambda reason: Malformed(reason, pb.TOO_MANY_REQUESTS)  # noqa: E731
                behaviour = inflight.release_after(behaviour)
                wave_run = inflight.release_after_wave(wave_run)
                deserialize = inflight.admit(deserialize, refuse)
            path = f"/{service.full_name}/{method.name}"
            waves[path] = Wave(wave_run, deserialize, response_cls.SerializeToString)
        handlers[method.name] = factory(
            behaviour,
            request_deserializer=deserialize,
            response_serializer=response_cls.SerializeToString,
        )
    generics = (
        grpc.method_handlers_generic_handler(service.full_name, handlers),
        grpc.method_handlers_generic_handler(
            STORE_SERVICE.full_name, servicer.store_service_handlers()
        ),
    )
    edge = EdgeHandlers(generics, wrappers)
    server.add_generic_rpc_handlers((edge,) if wrappers else generics)
    add_waves = getattr(server, "add_wave_handlers", None)  # the native front's relay
    if add_waves is not None:
        add_waves(edge.waves(waves))


def _malformed(method: str, request: Malformed, response_cls: type) -> Any:
    log.warning("broker error: %s: malformed request: %s", method, request.error)
    return response_cls(status=status(request.code, request.error))


def _failed(method: str, err: Exception, response_cls: type) -> Any:
    log.error("broker error: %s failed: %s: %s", method, type(err).__name__, err)
    log.debug("details", exc_info=True)
    return response_cls(status=status(pb.INTERNAL_SERVER_ERROR, f"{method}: {err}"))


class MessagingServicer(spb_grpc.MessagingServiceServicer):
    """The gRPC face of one ``BrokerService``.

    Parameters
    ----------
    service
        Where sends and route lookups go.
    executor
        Runs the blocking calls: send-backs and redeliveries (``store_rpc.py``); sends are
        put from the loop (``service.send_async``).
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
        self._consumers = consumers
        cluster = cluster_routes(service.config, route_port)
        if consumers is not None:  # one route cache for QueryRoute and QueryAssignment
            consumers.cluster = cluster
        self._producer = ProducerRpcs(
            service,
            endpoints=endpoints_of(route_host, route_port),
            shutdown=shutdown,
            client_peer=client_peer or (lambda peer: peer),  # front.Front.client_peer
            cluster=cluster,
        )
        self._service = service
        producers = ProducerStreams()
        check = TransactionCheck(
            service.transactions, producers, service.config, service.clock, service.store_root
        )
        desk = None
        if service.config.role != "SLAVE":  # its master checks; a slave refuses writes
            desk = CheckJobDesk(
                check, service.transactions, service.config, service.clock, service.store_root
            )
        self._store_rpcs = StoreRpcs(service, executor, shutdown, desk)
        self._telemetry = TelemetryRpc(
            shutdown=shutdown,
            max_body_size=min(service.max_message_size_bytes, 2**31 - 1),
            send_max_attempts=service.config.send_max_attempts,
            consumers=consumers,
            producer_streams=producers,
        )
        self._tx_check = self._start_tx_check(check, shutdown)

    def _start_tx_check(self, check: TransactionCheck, shutdown: asyncio.Event) -> Any:
        """The check-back job (``transactions/check.py``), on the server's loop; none without
        a running loop (a servicer built outside the server)."""
        if self._service.config.role == "SLAVE":  # its master checks; a slave refuses writes
            return None
        try:
            return asyncio.get_running_loop().create_task(check.run(shutdown))
        except RuntimeError:
            return None

    def store_service_handlers(self) -> dict[str, Any]:
        """``rmq_spark.v1.StoreService``'s handlers: lenient and guarded as ours are."""
        rpcs = {
            "SendBack": self._store_rpcs.send_back,
            "Redeliver": self._store_rpcs.redeliver,
            "CheckTransaction": self._store_rpcs.check_transaction,
        }
        handlers = {}
        for method in STORE_SERVICE.methods:
            request_cls = message_factory.GetMessageClass(method.input_type)
            response_cls = message_factory.GetMessageClass(method.output_type)

            async def behaviour(
                request: Any, context: Any, name: str = method.name, out: Any = response_cls
            ) -> Any:
                work = lambda: rpcs[name](request, context)  # noqa: E731
                return await self._guard(name, request, out, work)

            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=_lenient(request_cls),
                response_serializer=response_cls.SerializeToString,
            )
        return handlers

    @property
    def telemetry_streams(self) -> int:
        """How many Telemetry streams are open."""
        return self._telemetry.streams

    async def _guard(
        self, method: str, request: Any, response_cls: type, work: Callable[[], Any]
    ) -> Any:
        """Run one unary handler: a malformed request is BAD_REQUEST, an unexpected error
        INTERNAL_SERVER_ERROR; each is logged as one line."""
        if isinstance(request, Malformed):
            return _malformed(method, request, response_cls)
        try:
            return await work()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the boundary: a bad request must never take us down
            return _failed(method, err, response_cls)

    # --- producer RPCs: grpc_producer.ProducerRpcs ----------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        work = lambda: self._producer.query_route(request, context)  # noqa: E731
        return await self._guard("QueryRoute", request, spb.QueryRouteResponse, work)

    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        if self._consumers is None:
            return spb.HeartbeatResponse(status=status(pb.OK))
        return await self._consumer_call(
            "Heartbeat", request, context, spb.HeartbeatResponse, ConsumerRpcs.heartbeat
        )

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:  # noqa: N802
        response_cls = spb.NotifyClientTerminationResponse
        if self._consumers is None:
            return response_cls(status=status(pb.OK))
        handler = ConsumerRpcs.notify_client_termination
        return await self._consumer_call(
            "NotifyClientTermination", request, context, response_cls, handler
        )

    async def SendMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return (await self.send_message_wave([(request, context)]))[0]

    async def send_message_wave(self, calls: list[tuple[Any, Any]]) -> list[Any]:
        """SendMessage for a wave of calls (``edge.Wave``), each guarded as ``_guard`` does:
        a malformed request is its own BAD_REQUEST; an unexpected error answers each call
        of the wave INTERNAL_SERVER_ERROR, logged once."""
        responses: list[Any] = [None] * len(calls)
        readable, places = [], []
        for place, (request, context) in enumerate(calls):
            if isinstance(request, Malformed):
                responses[place] = _malformed("SendMessage", request, spb.SendMessageResponse)
            else:
                readable.append((request, context))
                places.append(place)
        if readable:
            try:
                answers = await self._producer.send_wave(readable)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the boundary, as in _guard
                answers = [_failed("SendMessage", err, spb.SendMessageResponse)] * len(readable)
            for place, answer in zip(places, answers, strict=True):
                responses[place] = answer
        return responses

    # --- Telemetry ------------------------------------------------------------------------

    async def Telemetry(self, request_iterator: Any, context: Any) -> None:  # noqa: N802
        """Answer every Settings with status OK + the merged settings; end on stop or cancel."""
        await self._telemetry.stream(context)

    # --- consumer RPCs: delegated to consume_grpc.ConsumerRpcs ----------------------------

    async def _consumer_call(
        self, method: str, request: Any, context: Any, response_cls: type, handler: Any
    ) -> Any:
        """Run the ``ConsumerRpcs`` method ``handler`` under ``_guard``."""
        consumers = self._consumers
        if consumers is None:
            return response_cls(status=not_implemented(method))
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
            yield spb.ReceiveMessageResponse(status=not_implemented("ReceiveMessage"))
            return
        async for response in self._consumers.receive_message_guarded(request, context):
            yield response

    # --- everything else: a proper status, never a crash ---------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield spb.PullMessageResponse(status=not_implemented("PullMessage"))

    async def _offset_call(
        self, method: str, request: Any, context: Any, response_cls: type, handler: Any
    ) -> Any:
        """Run the ``OffsetRpcs`` method ``handler`` under ``_guard``."""
        if self._consumers is None:
            return response_cls(status=not_implemented(method))
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
        work = lambda: end_transaction(self._service, request, context)  # noqa: E731
        return await self._guard("EndTransaction", request, spb.EndTransactionResponse, work)

    async def RecallMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return spb.RecallMessageResponse(status=not_implemented("RecallMessage"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        return spb.SyncLiteSubscriptionResponse(status=not_implemented("SyncLiteSubscription"))
