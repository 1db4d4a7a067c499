"""The broker's side of the native front: relayed calls run by the registered handlers.

``RelayCalls`` is an asyncio protocol on the relay socket (``relay_wire.py``). It stands in
for grpc's server where ``grpc_api.add_servicer_to_server`` registers the handlers, so a
relayed call runs exactly the handlers grpc.aio would (the edge's timing and auth gate, the
lenient deserializers, the request-bytes budget): one Task per call, and no HTTP/2, no
grpc.aio call objects, no relay through a second socket on the loop. A method registered
with a wave handler (``edge.Wave``: SendMessage) is served a wave at a time instead: the
requests of its calls that came in one read go to one Task, whose handler does each stage
once for all of them (one store batch, one durability wait). ``CallContext`` gives a handler
what it uses of grpc's ``ServicerContext``. The answers of a loop pass leave in one write.

Does not own the front process (``native_front.py``) or any RPC's logic (``grpc_api.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

import grpc

from rmq_spark.broker.grpc import relay_wire as wire
from rmq_spark.broker.grpc.edge import Wave

__all__ = ["CallContext", "RelayCalls", "STREAM_UNREAD_MAX"]

log = logging.getLogger("rmq_spark.broker")

_UNKNOWN, _CANCELLED, _INTERNAL, _UNIMPLEMENTED, _RESOURCE_EXHAUSTED = 2, 1, 13, 12, 8
STREAM_UNREAD_MAX = 256
"""Requests a stream may have waiting for its handler (grpc.aio's flow control stops a
client; the front does not): past it the call ends ``RESOURCE_EXHAUSTED``."""
_EOF = grpc.aio.EOF


class _Details:
    """grpc's ``HandlerCallDetails``: what a generic handler looks a call up by."""

    __slots__ = ("_opened",)

    def __init__(self, opened: wire.Open) -> None:
        self._opened = opened

    @property
    def method(self) -> str:
        return self._opened.method

    @property
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._opened.metadata


class CallContext:
    """What a handler uses of grpc's ``ServicerContext``, for one relayed call."""

    def __init__(self, calls: RelayCalls, call_id: int, opened: wire.Open, handler: Any) -> None:
        self._calls = calls
        self._id = call_id
        self._opened = opened
        self._serialize = handler.response_serializer
        self._deadline = None if opened.deadline_s is None else time.monotonic() + opened.deadline_s
        self.requests: asyncio.Queue[Any] | None = None  # a request stream's, when it has one
        self.code: Any = None
        self.details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._opened.metadata

    def peer(self) -> str:
        return self._opened.peer

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    async def read(self) -> Any:
        assert self.requests is not None, "read() of a call without a request stream"
        return await self.requests.get()

    async def write(self, message: Any) -> None:
        self._calls.send(wire.frame(wire.MSG, self._id, self._serialize(message)))

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


class _Call:
    __slots__ = ("handler", "context", "task", "request")

    def __init__(self, handler: Any, context: CallContext) -> None:
        self.handler = handler
        self.context = context
        self.task: asyncio.Task[None] | None = None
        self.request: Any = None  # a unary call's, once it came

    def cancel(self) -> None:
        """The caller is gone: stop the handler, and give back what its request booked now
        (a Task cancelled before it started would hold it until a garbage collection)."""
        if self.task is not None:
            self.task.cancel()
        release = getattr(self.request, "release", None)  # limits.Admitted
        if release is not None:
            release()


class RelayCalls(asyncio.Protocol):
    """The relayed calls of one front (see the module docstring). ``lost`` is set when the
    relay socket ends."""

    def __init__(self) -> None:
        self._handlers: tuple[Any, ...] = ()
        self._waves: dict[str, Wave] = {}
        self._joining: dict[Wave, list[tuple[int, _Call]]] = {}  # this read's, per wave
        self._running_waves: set[asyncio.Task[None]] = set()
        self._calls: dict[int, _Call] = {}
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.lost = asyncio.Event()

    def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
        """grpc's server API: the handlers every call is looked up in."""
        self._handlers = tuple(handlers)

    def add_wave_handlers(self, waves: Mapping[str, Wave]) -> None:
        """The methods (``/service/Method``) served a wave of calls at a time."""
        self._waves = dict(waves)

    @property
    def handlers(self) -> tuple[Any, ...]:
        return self._handlers

    @property
    def waves(self) -> dict[str, Wave]:
        return self._waves

    @property
    def calls(self) -> int:
        """How many relayed calls are running."""
        return len(self._calls)

    # --- the socket ---------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for call in list(self._calls.values()):
            call.cancel()
        self._calls.clear()
        for wave in list(self._running_waves):
            wave.cancel()
        self.lost.set()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        size, at = len(buffer), 0
        unpack = wire.HEADER.unpack_from
        try:
            while size - at >= 9:
                length, kind, call_id = unpack(buffer, at)
                if length < 5 or length > wire.MAX_FRAME_BYTES:
                    raise wire.RelayError(f"a frame of {length} bytes")
                end = at + 4 + length
                if end > size:
                    break
                self._on_frame(kind, call_id, bytes(buffer[at + 9 : end]))
                at = end
        except wire.RelayError as err:
            log.error("broker error: the native front's relay: %s; closing it", err)
            self._joining.clear()
            if self._transport is not None:
                self._transport.close()
            return
        del buffer[:at]
        if self._joining:
            self._start_waves()

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the front; what a loop pass queued leaves in one write."""
        out = self._out
        out.append(data)
        if len(out) == 1 and self._loop is not None:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self._transport is not None and out:
            self._transport.write(b"".join(out))

    # --- calls --------------------------------------------------------------------------

    def _on_frame(self, kind: int, call_id: int, payload: bytes) -> None:
        if kind == wire.CALL:
            self._one_request_call(call_id, *wire.parse_call(payload))
            return
        if kind == wire.OPEN:
            self._open(call_id, wire.parse_open(payload))
            return
        call = self._calls.get(call_id)
        if call is None:
            return  # ended already (refused, answered or cancelled)
        if kind == wire.MSG:
            self._request(call_id, call, payload)
        elif kind == wire.HALF_CLOSE:
            self._half_close(call_id, call)
        elif kind == wire.CANCEL:
            del self._calls[call_id]
            call.cancel()
        else:
            raise wire.RelayError(f"frame kind {kind} from the front")

    def _one_request_call(self, call_id: int, opened: wire.Open, request: bytes) -> None:
        """``CALL``: open, request and half-close at once (a handler that reads a request
        stream gets the one request, then its end)."""
        self._open(call_id, opened)
        call = self._calls.get(call_id)
        if call is not None:
            self._request(call_id, call, request)
            if call.context.requests is not None:
                self._half_close(call_id, call)

    def _open(self, call_id: int, opened: wire.Open) -> None:
        wave = self._waves.get(opened.method)
        if wave is not None:
            self._calls[call_id] = _Call(wave, CallContext(self, call_id, opened, wave))
            return
        try:
            handler = self._lookup(_Details(opened))
        except wire.RelayError as err:  # this call's metadata: refuse it, keep the others
            log.warning("broker error: a relayed call's %s", err)
            self.send(wire.close_frame(call_id, _INTERNAL, "unreadable metadata"))
            return
        if handler is None:
            self.send(wire.close_frame(call_id, _UNIMPLEMENTED, "Method not found!"))
            return
        call = _Call(handler, CallContext(self, call_id, opened, handler))
        self._calls[call_id] = call
        if handler.request_streaming:
            call.context.requests = asyncio.Queue()
            call.task = self._start(self._run_stream(call_id, call))

    def _lookup(self, details: _Details) -> Any:
        for generic in self._handlers:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None

    def _request(self, call_id: int, call: _Call, payload: bytes) -> None:
        request = call.handler.request_deserializer(payload)
        requests = call.context.requests
        if requests is not None:
            if requests.qsize() >= STREAM_UNREAD_MAX:
                self._fail(call_id, _RESOURCE_EXHAUSTED, "too many requests unread on a stream")
                return
            requests.put_nowait(request)
        elif call.request is None:
            call.request = request
            if isinstance(call.handler, Wave):
                self._joining.setdefault(call.handler, []).append((call_id, call))
            else:
                call.task = self._start(self._run_unary(call_id, call, request))
        else:
            self._fail(call_id, _INTERNAL, "a second request on a unary call")

    def _half_close(self, call_id: int, call: _Call) -> None:
        if call.context.requests is not None:
            call.context.requests.put_nowait(_EOF)
        elif call.request is None:
            self._fail(call_id, _INTERNAL, "a unary call ended without its request")

    def _start(self, handling: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        loop = self._loop
        assert loop is not None, "a frame before the relay connected"
        return loop.create_task(handling)

    def _fail(self, call_id: int, code: int, details: str) -> None:
        call = self._calls.pop(call_id, None)
        if call is not None:
            call.cancel()
        self.send(wire.close_frame(call_id, code, details))

    async def _run_unary(self, call_id: int, call: _Call, request: Any) -> None:
        handler = call.handler
        try:
            if handler.response_streaming:
                responses = handler.unary_stream(request, call.context)
                await self._stream_out(call_id, call, responses)
                return
            response = await handler.unary_unary(request, call.context)
            payload = handler.response_serializer(response)
        except asyncio.CancelledError:
            self._cancelled(call_id)
            raise
        except Exception as err:  # noqa: BLE001 - grpc answers UNKNOWN and logs it too
            self._crashed([call_id], err)
            return
        if self._calls.pop(call_id, None) is not None:
            self.send(wire.frame(wire.REPLY, call_id, payload))

    def _start_waves(self) -> None:
        """One Task per wave for the calls whose requests came in this read."""
        joining, self._joining = self._joining, {}
        for wave, calls in joining.items():
            task = self._start(self._run_wave(wave, calls))
            self._running_waves.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._running_waves.discard)

    async def _run_wave(self, wave: Wave, calls: list[tuple[int, _Call]]) -> None:
        """Answer each call of the wave still open (a cancelled one's answer is dropped;
        its request may still be served, as a unary call's already running may be)."""
        try:
            responses = await wave.run([(call.request, call.context) for _, call in calls])
        except asyncio.CancelledError:
            for call_id, _ in calls:
                self._cancelled(call_id)
            raise
        except Exception as err:  # noqa: BLE001 - as grpc: UNKNOWN, logged once
            self._crashed([call_id for call_id, _ in calls], err)
            return
        serialize = wave.response_serializer
        for (call_id, _), response in zip(calls, responses, strict=True):
            if self._calls.pop(call_id, None) is not None:
                self.send(wire.frame(wire.REPLY, call_id, serialize(response)))

    async def _run_stream(self, call_id: int, call: _Call) -> None:
        context = call.context
        requests = context.requests
        assert requests is not None

        async def request_iterator() -> AsyncIterator[Any]:
            while (request := await requests.get()) is not _EOF:
                yield request

        try:
            handler = call.handler
            run = handler.stream_stream if handler.response_streaming else handler.stream_unary
            outcome = run(request_iterator(), context)
            if inspect.isasyncgen(outcome):
                await self._stream_out(call_id, call, outcome)
                return
            response = await outcome  # a stream's own writes went out through the context
            if not handler.response_streaming and self._calls.pop(call_id, None) is not None:
                self.send(wire.frame(wire.REPLY, call_id, handler.response_serializer(response)))
                return
        except asyncio.CancelledError:
            self._cancelled(call_id)
            raise
        except Exception as err:  # noqa: BLE001 - as grpc: UNKNOWN, logged
            self._crashed([call_id], err)
            return
        self._closed_ok(call_id, call)

    async def _stream_out(self, call_id: int, call: _Call, responses: Any) -> None:
        serialize = call.handler.response_serializer
        async for response in responses:
            self.send(wire.frame(wire.MSG, call_id, serialize(response)))
        self._closed_ok(call_id, call)

    def _closed_ok(self, call_id: int, call: _Call) -> None:
        if self._calls.pop(call_id, None) is not None:
            code = call.context.code
            number = 0 if code is None else code.value[0]
            self.send(wire.close_frame(call_id, number, call.context.details))

    def _cancelled(self, call_id: int) -> None:
        if self._calls.pop(call_id, None) is not None:  # not the client's cancel: say so
            self.send(wire.close_frame(call_id, _CANCELLED, "cancelled by the broker"))

    def _crashed(self, call_ids: list[int], err: Exception) -> None:
        log.error("broker error: a relayed call failed: %s: %s", type(err).__name__, err)
        log.debug("details", exc_info=True)
        for call_id in call_ids:
            if self._calls.pop(call_id, None) is not None:
                details = f"Unexpected {type(err).__name__}"
                self.send(wire.close_frame(call_id, _UNKNOWN, details))
