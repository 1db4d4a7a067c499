"""The wrappers every call's handler runs in (timing, the auth gate), applied once per method.

grpc.aio runs a server interceptor as a chain of coroutines on every call, and each of ours
built a new method handler per call. ``EdgeHandlers`` does the same work from the server's
generic handler lookup, which is synchronous: it finds the registered handler and wraps it in
each ``Wrapper`` in turn (the first one outermost, as the first interceptor was). A wrapped
handler that does not depend on the caller (no signature to read: auth off, or a call the
gate lets through untouched) is kept per method and reused, so a call costs a dict lookup
before its handler runs.

A unary method may also be served a *wave* of calls at a time (``Wave``: the SendMessage
calls of one relay read, ``native_calls.py``): ``waves`` wraps each registered wave in every
wrapper's ``wrap_wave``, which does per call what ``wrap`` does (the gate still judges each
call on its own metadata) and runs the handler once for the calls it admits.

Does not own what a wrapper does (``rpc_timer.py``, ``security/auth_grpc.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import grpc

__all__ = ["EdgeHandlers", "Wave", "WaveRun", "Wrapper"]

WaveRun = Callable[[list[tuple[Any, Any]]], Awaitable[list[Any]]]
"""A wave's handler: ``(request, context)`` pairs in, their responses out, in order."""


class Wave(NamedTuple):
    """A unary method served a wave of calls at a time (see the module docstring)."""

    run: WaveRun
    request_deserializer: Callable[[bytes], Any]
    response_serializer: Callable[[Any], bytes]


class Wrapper(Protocol):
    def wrap(self, handler: Any, details: Any) -> Any:
        """``handler`` of the call ``details`` (method, invocation metadata), wrapped."""

    def per_caller(self, method: str) -> bool:
        """Whether ``wrap`` of ``method`` (``/service/Method``) depends on the caller."""

    def wrap_wave(self, run: WaveRun, method: str) -> WaveRun:
        """``run``, the wave handler of ``method``, wrapped: each call as ``wrap`` would."""


class EdgeHandlers(grpc.GenericRpcHandler):
    """``handlers`` (the registered generic handlers) with ``wrappers`` around each handler."""

    def __init__(self, handlers: Sequence[Any], wrappers: Sequence[Wrapper]) -> None:
        self._handlers = tuple(handlers)
        self._wrappers = tuple(reversed(wrappers))  # innermost first
        self._kept: dict[str, Any] = {}

    def waves(self, waves: Mapping[str, Wave]) -> dict[str, Wave]:
        """Each of ``waves`` (by ``/service/Method``) inside every wrapper."""
        wrapped = {}
        for method, wave in waves.items():
            run = wave.run
            for wrapper in self._wrappers:
                run = wrapper.wrap_wave(run, method)
            wrapped[method] = wave._replace(run=run)
        return wrapped

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        kept = self._kept.get(method)
        if kept is not None:
            return kept
        handler = None
        for generic in self._handlers:
            handler = generic.service(handler_call_details)
            if handler is not None:
                break
        if handler is None:
            return None
        for wrapper in self._wrappers:
            handler = wrapper.wrap(handler, handler_call_details)
        if not any(wrapper.per_caller(method) for wrapper in self._wrappers):
            self._kept[method] = handler  # bounded: only registered methods get here
        return handler
