"""``RpcTimer``: times every unary gRPC call of the broker, for RocketMQ's
``rocketmq_rpc_latency`` (``metrics_rocketmq.py``).

Placed first (outermost) by ``edge.py``, so the time covers authentication and the handler (a
wave's calls each its own count, the wave's time: they were answered together). Each
call is counted into ``TrafficStats.rpc_done`` with its method (``SendMessage``), the
``status.code`` of its answer (``OK``, ``UNAUTHORIZED``... as RocketMQ's messaging protocol
puts the outcome there, not in the gRPC status) and a result: ``success`` when an answer was
returned, ``cancelled`` when the client went away, ``process_request_failed`` when the handler
raised. Streaming calls (``ReceiveMessage``, ``Telemetry``) are not timed: their length is the
client's long poll or session, not the broker's work.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from rmq_spark.broker.traffic import TrafficStats

__all__ = ["RpcTimer", "status_code_name"]


_CODE_NAMES: dict[tuple[Any, int], str] = {}  # (status type, code) -> name: few of each


def status_code_name(response: Any) -> str:
    """The name of ``response.status.code`` (``OK``); ``NONE`` for an answer without one."""
    status = getattr(response, "status", None)
    if status is None or not hasattr(status, "DESCRIPTOR"):
        return "NONE"
    key = (status.DESCRIPTOR, status.code)
    name = _CODE_NAMES.get(key)
    if name is None:
        enum = status.DESCRIPTOR.fields_by_name["code"].enum_type
        value = enum.values_by_number.get(status.code)
        name = value.name if value is not None else str(status.code)
        if len(_CODE_NAMES) < 4096:
            _CODE_NAMES[key] = name
    return name


class RpcTimer(grpc.aio.ServerInterceptor):
    """Counts each unary call's time, method, answer code and result into ``stats``."""

    def __init__(self, stats: TrafficStats) -> None:
        self._stats = stats

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        return self.wrap(await continuation(handler_call_details), handler_call_details)

    def per_caller(self, method: str) -> bool:
        return False

    def wrap(self, handler: Any, handler_call_details: Any) -> Any:
        """``handler`` timed (a unary one; others as they are)."""
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        method = str(handler_call_details.method).rpartition("/")[2]
        inner = handler.unary_unary
        rpc_done = self._stats.rpc_done
        clock = time.perf_counter

        async def timed(request: Any, context: Any) -> Any:
            started = clock()
            code, result = "NONE", "process_request_failed"
            try:
                response = await inner(request, context)
                code, result = status_code_name(response), "success"
                return response
            except asyncio.CancelledError:
                result = "cancelled"
                raise
            finally:
                rpc_done("grpc", method, code, result, clock() - started)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def wrap_wave(self, run: Any, method: str) -> Any:
        """``run`` (a wave of ``method``'s calls) timed: each call counted with its own
        answer's code and the wave's time."""
        name = method.rpartition("/")[2]
        rpc_done = self._stats.rpc_done
        clock = time.perf_counter

        async def timed(calls: list[tuple[Any, Any]]) -> list[Any]:
            started = clock()
            try:
                responses = await run(calls)
            except BaseException as err:  # every call of the wave: cancelled or failed
                cancelled = isinstance(err, asyncio.CancelledError)
                result = "cancelled" if cancelled else "process_request_failed"
                rpc_done("grpc", name, "NONE", result, clock() - started, len(calls))
                raise
            elapsed = clock() - started
            for code, times in Counter(map(status_code_name, responses)).items():
                rpc_done("grpc", name, code, "success", elapsed, times)
            return responses

        return timed
