"""The one place every RPC is authenticated and authorised: a ``grpc.aio`` server interceptor.

Owns ``AuthInterceptor``: for each MessagingService call it reads the signature headers once
(``auth.Authenticator``), then, before the handler sees a request, checks the rights the
request needs (``acl.needs_of``): unary calls, server streams (ReceiveMessage) and every
command of a Telemetry stream. A refused call gets the handler's own response type with
status ``UNAUTHORIZED`` (40100), as the Java proxy answers both an AuthenticationException and
an AuthorizationException; the handler never runs, so nothing is stored.

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

from rmq_spark.broker.acl import Action, Need, missing_rights, needs_of
from rmq_spark.broker.auth import Authenticator, Identity, Refusal
from rmq_spark.broker.limits import Admitted
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.store_gate import StoreGate
from rmq_spark.broker.store_rpc import STORE_SERVICE

__all__ = ["AuthInterceptor", "Gate"]

log = logging.getLogger("rmq_spark.broker")

_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
_RESPONSES = {
    method.name: message_factory.GetMessageClass(method.output_type) for method in _SERVICE.methods
}


class Gate:
    """The decision for one call: ``refusal(request)`` is the reply to send instead of
    running the handler, or ``None`` to let it run."""

    def __init__(self, method: str, identity: Identity | Refusal | None, *, enabled: bool) -> None:
        self.method = method
        self.identity = identity
        self.enabled = enabled
        self._response_cls = _RESPONSES[method]

    def refusal(self, request: Any) -> Any | None:
        if self.enabled and not isinstance(self.identity, Identity):
            reason = (
                self.identity.message
                if isinstance(self.identity, Refusal)
                else "authentication required: sign requests with Credentials(access key, "
                "secret key)"
            )
            return self._unauthorized(reason)
        if isinstance(request, Admitted):  # a SendMessage booked in the in-flight budget
            request = request.message
        if not hasattr(request, "DESCRIPTOR"):  # Malformed: the handler answers BAD_REQUEST
            return None
        if not self.enabled:
            return None
        assert isinstance(self.identity, Identity)
        needs = needs_of(self.method, request)
        if needs is None:
            return self._unauthorized(f"{self.method} is not allowed to {self.identity.name}")
        missing = self._missing(self.identity, needs)
        if missing:
            return self._unauthorized(f"user {self.identity.name} may not {missing[0]}")
        return None

    @staticmethod
    def _missing(identity: Identity, needs: list[Need]) -> list[Need]:
        if identity.user is None:  # the store identity: StoreService only (store_gate.py)
            return [need for need in needs if Action.REDELIVER not in need.actions]
        return missing_rights(identity.user, needs)

    def _unauthorized(self, message: str) -> Any:
        log.info("broker: %s refused: %s", self.method, message)
        status = pb.Status(code=pb.UNAUTHORIZED, message=message)
        if self.method == "Telemetry":
            return spb.TelemetryCommand(status=status)
        return self._response_cls(status=status)


class _GatedContext:
    """A stream's context whose ``read`` answers refused commands itself (Telemetry)."""

    def __init__(self, context: Any, gate: Gate) -> None:
        self._context = context
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def read(self) -> Any:
        while True:
            command = await self._context.read()
            if command is grpc.aio.EOF:
                return command
            refusal = self._gate.refusal(command)
            if refusal is None:
                return command
            await self._context.write(refusal)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Runs a ``Gate`` in front of every MessagingService handler.

    With auth off only StoreService is gated; MessagingService calls pass untouched.
    """

    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        service, _, method = str(handler_call_details.method).rpartition("/")
        store_call = service.strip("/") == STORE_SERVICE.full_name
        if (
            handler is None
            or not store_call
            and (service.strip("/") != _SERVICE.full_name or method not in _RESPONSES)
        ):
            return handler
        if not self._auth.enabled and not store_call:
            return handler
        metadata = {
            key: value
            for key, value in handler_call_details.invocation_metadata or ()
            if isinstance(value, str)
        }
        identity, enabled = self._auth.authenticate(metadata), self._auth.enabled
        if store_call:
            return _gated(handler, StoreGate(method, identity, enabled=enabled))
        return _gated(handler, Gate(method, identity, enabled=enabled))


def _gated(handler: Any, gate: Gate | StoreGate) -> Any:
    """``handler`` with ``gate`` in front, same (de)serializers."""
    codecs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        inner_stream = handler.stream_stream

        async def stream_stream(request_iterator: Any, context: Any) -> Any:
            return await inner_stream(request_iterator, _GatedContext(context, gate))

        return grpc.stream_stream_rpc_method_handler(stream_stream, **codecs)
    if handler.response_streaming:
        inner_server_stream = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            refusal = gate.refusal(request)
            if refusal is not None:
                yield refusal
                return
            async for response in inner_server_stream(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream, **codecs)
    if handler.request_streaming:
        return handler  # no client-streaming MessagingService method exists
    inner = handler.unary_unary

    async def unary_unary(request: Any, context: Any) -> Any:
        refusal = gate.refusal(request)
        if refusal is not None:
            return refusal
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(unary_unary, **codecs)
