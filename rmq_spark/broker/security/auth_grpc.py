"""The one place every RPC is authenticated, resolved and authorised: the gate around handlers.

Owns ``AuthInterceptor`` (applied per method by ``grpc/edge.py``, or as a ``grpc.aio``
interceptor): for each MessagingService call it reads the signature headers once
(``auth.Authenticator``), then, before the handler sees a request, resolves the resources it
names (``resources.resolve``: once per call, per command of a Telemetry stream) and checks the
rights it needs on exactly those names (``acl.needs_of``): unary calls, server streams
(ReceiveMessage) and every command of a Telemetry stream. The handler runs on the same
``Resolved`` (``context.resolved``), with auth on or off. An illegal name gets its typed
status (``ILLEGAL_CONSUMER_GROUP``, ``ILLEGAL_TOPIC``); a refused call gets the handler's own
response type with status ``UNAUTHORIZED`` (40100), as the Java proxy answers both an
AuthenticationException and an AuthorizationException; the handler never runs, so nothing is
stored.

rmq-spark's own ``StoreService`` (send-back, redelivery: ``store_rpc.py``) is gated with auth
on *and* off by ``store_gate.StoreGate``.

Does not own: signatures and users (``auth.py``, ``acl.py``), what an RPC does
(``grpc_api.py``, ``consume_grpc.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import message_factory

from rmq_spark.broker.grpc.edge import WaveRun
from rmq_spark.broker.grpc.store_rpc import STORE_SERVICE
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.acl import missing_rights, needs_of
from rmq_spark.broker.security.auth import Authenticator, Identity, Refusal
from rmq_spark.broker.security.limits import Admitted
from rmq_spark.broker.security.resources import Refused, Resolved, resolve
from rmq_spark.broker.security.store_gate import StoreGate

__all__ = ["AuthInterceptor", "Gate"]

log = logging.getLogger("rmq_spark.broker")

_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
_RESPONSES = {
    method.name: message_factory.GetMessageClass(method.output_type) for method in _SERVICE.methods
}


class Gate:
    """The decision for one call: ``admit(request)`` is ``(reply, None)`` to send ``reply``
    (a tuple of replies for a refused ReceiveMessage) instead of running the handler, or
    ``(None, resolved)`` to run it on ``resolved``."""

    def __init__(self, method: str, identity: Identity | Refusal | None, *, enabled: bool) -> None:
        self.method = method
        self.identity = identity
        self.enabled = enabled
        self._response_cls = _RESPONSES[method]

    def admit(self, request: Any) -> tuple[Any | None, Resolved | None]:
        if self.enabled and not isinstance(self.identity, Identity):
            reason = (
                self.identity.message
                if isinstance(self.identity, Refusal)
                else "authentication required: sign requests with Credentials(access key, "
                "secret key)"
            )
            return self._unauthorized(reason), None
        if isinstance(request, Admitted):  # a SendMessage booked in the in-flight budget
            request = request.message
        if not hasattr(request, "DESCRIPTOR"):  # Malformed: the handler answers BAD_REQUEST
            return None, None
        resolved = resolve(self.method, request)
        if isinstance(resolved, Refused):
            log.debug("broker: %s refused: %s", self.method, resolved.message)
            reply = self._reply(resolved.code, resolved.message)
            if self.method == "ReceiveMessage":  # as the handler answers a refused receive
                timestamp = spb.ReceiveMessageResponse()
                timestamp.delivery_timestamp.GetCurrentTime()
                return (reply, timestamp), None
            return reply, None
        if not self.enabled:
            return None, resolved
        assert isinstance(self.identity, Identity)
        needs = needs_of(resolved)
        if needs is None:
            return self._unauthorized(f"{self.method} is not allowed to {self.identity.name}"), None
        # The store identity holds no MessagingService right (its RPCs are StoreService's).
        user = self.identity.user
        missing = list(needs) if user is None else missing_rights(user, needs)
        if missing:
            return self._unauthorized(f"user {self.identity.name} may not {missing[0]}"), None
        return None, resolved

    def _unauthorized(self, message: str) -> Any:
        log.info("broker: %s refused: %s", self.method, message)
        return self._reply(pb.UNAUTHORIZED, message)

    def _reply(self, code: int, message: str) -> Any:
        status = pb.Status(code=code, message=message)
        if self.method == "Telemetry":
            return spb.TelemetryCommand(status=status)
        return self._response_cls(status=status)


class _EdgeContext:
    """A call's context as its handler sees it: ``resolved`` is what the gate resolved the
    request to (``resources.resolved_of``); a stream's ``read`` answers refused commands
    itself and resolves each command it returns (Telemetry)."""

    def __init__(self, context: Any, gate: Gate | StoreGate) -> None:
        self._context = context
        self._gate = gate
        self.resolved: Resolved | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    # What a handler asks of every call, spelled out: __getattr__ runs only after the normal
    # look-up failed (an AttributeError raised and caught), eight times the cost.
    def peer(self) -> str:
        return self._context.peer()  # type: ignore[no-any-return]

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def admit(self, request: Any) -> Any | None:
        """The gate's reply instead of the handler, or ``None`` (then ``resolved`` is set)."""
        refusal, self.resolved = self._gate.admit(request)
        return refusal

    async def read(self) -> Any:
        while True:
            command = await self._context.read()
            if command is grpc.aio.EOF:
                return command
            refusal = self.admit(command)
            if refusal is None:
                return command
            await self._context.write(refusal)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Runs a ``Gate`` (a ``StoreGate`` for StoreService) in front of every handler, with
    auth on or off: each request is resolved there once (``resources.resolve``)."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        return self.wrap(await continuation(handler_call_details), handler_call_details)

    def per_caller(self, method: str) -> bool:
        """Whether the gate of ``method`` (``/service/Method``) depends on the caller: with
        auth on, and for StoreService always (its calls are the store identity's)."""
        return self._auth.enabled or method.rpartition("/")[0].strip("/") == STORE_SERVICE.full_name

    def wrap(self, handler: Any, handler_call_details: Any) -> Any:
        """``handler`` behind the gate of its call (a handler of another service: as it is)."""
        service, _, method = str(handler_call_details.method).rpartition("/")
        store_call = service.strip("/") == STORE_SERVICE.full_name
        if (
            handler is None
            or not store_call
            and (service.strip("/") != _SERVICE.full_name or method not in _RESPONSES)
        ):
            return handler
        enabled, identity = self._auth.enabled, None
        if enabled or store_call:
            identity = self._identity(handler_call_details.invocation_metadata)
        if store_call:
            return _gated(handler, StoreGate(method, identity, enabled=enabled))
        return _gated(handler, Gate(method, identity, enabled=enabled))

    def _identity(self, invocation_metadata: Any) -> Identity | Refusal | None:
        """Who signed a call, from its metadata (``-bin`` values are never signature headers)."""
        metadata = {
            key: value for key, value in invocation_metadata or () if isinstance(value, str)
        }
        return self._auth.authenticate(metadata)

    def wrap_wave(self, run: WaveRun, method: str) -> WaveRun:
        """``run`` (a wave of a MessagingService method's calls) behind a gate per call, each
        judged on its own metadata as ``wrap`` judges it: ``run`` sees only the calls the
        gate admitted, each with its ``resolved``; a refused call gets the gate's reply."""
        service, _, name = method.rpartition("/")
        if service.strip("/") != _SERVICE.full_name or name not in _RESPONSES:
            raise ValueError(f"no gate serves a wave of {method}")
        enabled = self._auth.enabled
        shared = None if enabled else Gate(name, None, enabled=False)

        async def gated(calls: list[tuple[Any, Any]]) -> list[Any]:
            responses: list[Any] = [None] * len(calls)
            admitted, places = [], []
            for place, (request, context) in enumerate(calls):
                gate = shared or Gate(
                    name, self._identity(context.invocation_metadata()), enabled=True
                )
                edge = _EdgeContext(context, gate)
                refusal = edge.admit(request)
                if refusal is None:
                    admitted.append((request, edge))
                    places.append(place)
                else:
                    responses[place] = refusal
            if admitted:
                for place, response in zip(places, await run(admitted), strict=True):
                    responses[place] = response
            return responses

        return gated


def _gated(handler: Any, gate: Gate | StoreGate) -> Any:
    """``handler`` with ``gate`` in front, same (de)serializers."""
    codecs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        inner_stream = handler.stream_stream

        async def stream_stream(request_iterator: Any, context: Any) -> Any:
            return await inner_stream(request_iterator, _EdgeContext(context, gate))

        return grpc.stream_stream_rpc_method_handler(stream_stream, **codecs)
    if handler.response_streaming:
        inner_server_stream = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            edge = _EdgeContext(context, gate)
            refusal = edge.admit(request)
            if refusal is not None:
                for response in refusal if isinstance(refusal, tuple) else (refusal,):
                    yield response
                return
            async for response in inner_server_stream(request, edge):
                yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream, **codecs)
    if handler.request_streaming:
        return handler  # no client-streaming MessagingService method exists
    inner = handler.unary_unary

    async def unary_unary(request: Any, context: Any) -> Any:
        edge = _EdgeContext(context, gate)
        refusal = edge.admit(request)
        if refusal is not None:
            return refusal
        return await inner(request, edge)

    return grpc.unary_unary_rpc_method_handler(unary_unary, **codecs)
