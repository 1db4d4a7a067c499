"""The edge (timing, auth gate) wraps a method's handler once when the wrap does not depend on
the caller, and still times, resolves and judges every call (``grpc/edge.py``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc

from rmq_spark.broker.grpc.edge import EdgeHandlers
from rmq_spark.broker.grpc.rpc_timer import RpcTimer
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security import resources
from rmq_spark.broker.security.auth import Authenticator
from rmq_spark.broker.security.auth_grpc import AuthInterceptor
from rmq_spark.broker.security.resources import resolve, resolved_of
from rmq_spark.broker.traffic import TrafficStats
from rmq_spark.clock import SystemClock

ACK = "/apache.rocketmq.v2.MessagingService/AckMessage"


def _edge(*, auth: bool) -> tuple[EdgeHandlers, TrafficStats, list[Any]]:
    seen: list[Any] = []

    async def ack(request: Any, context: Any) -> Any:
        seen.append(resolved_of(context))
        return spb.AckMessageResponse(status=pb.Status(code=pb.OK))

    generic = grpc.method_handlers_generic_handler(
        "apache.rocketmq.v2.MessagingService",
        {"AckMessage": grpc.unary_unary_rpc_method_handler(ack)},
    )
    stats = TrafficStats()
    authenticator = Authenticator(
        {}, enabled=auth, skew_ms=900_000, clock=SystemClock(), store_secret=None
    )
    edge = EdgeHandlers([generic], [RpcTimer(stats), AuthInterceptor(authenticator)])
    return edge, stats, seen


def _ack_request(group: str) -> Any:
    return spb.AckMessageRequest(
        group=pb.Resource(name=group, resource_namespace="ns"),
        topic=pb.Resource(name="T", resource_namespace="ns"),
    )


def _call(handler: Any, request: Any) -> Any:
    return asyncio.run(handler.unary_unary(request, SimpleNamespace()))


def _timed(stats: TrafficStats) -> dict[str, int]:
    return {key[2]: snap.count for key, snap in stats.snapshot().rpc.items()}


def test_with_auth_off_a_method_is_wrapped_once_and_every_call_still_gated_and_timed() -> None:
    edge, stats, seen = _edge(auth=False)
    details = SimpleNamespace(method=ACK, invocation_metadata=())
    handler = edge.service(details)
    assert edge.service(details) is handler
    assert _call(handler, _ack_request("gA")).status.code == pb.OK
    assert seen[0].group.full == "ns%gA" and seen[0].topic.full == "ns%T"
    refused = _call(edge.service(details), _ack_request("CID_RMQ_SYS_x"))
    assert refused.status.code == pb.ILLEGAL_CONSUMER_GROUP
    assert len(seen) == 1  # the handler did not run for the refused call
    assert _timed(stats) == {"OK": 1, "ILLEGAL_CONSUMER_GROUP": 1}
    assert edge.service(SimpleNamespace(method="/x.Y/Z", invocation_metadata=())) is None


def test_with_auth_on_each_call_is_judged_on_its_own_caller() -> None:
    edge, stats, seen = _edge(auth=True)
    details = SimpleNamespace(method=ACK, invocation_metadata=())
    handler = edge.service(details)
    assert edge.service(details) is not handler
    assert _call(handler, _ack_request("gA")).status.code == pb.UNAUTHORIZED
    assert seen == []
    assert _timed(stats) == {"UNAUTHORIZED": 1}


def test_judged_names_are_bounded_and_judged_alike() -> None:
    for n in range(resources._JUDGED_MAX + 10):
        resolve("AckMessage", _ack_request(f"g{n}"))
    assert len(resources._JUDGED) <= resources._JUDGED_MAX
    assert len(resources._CONSUMER_CALLS) <= resources._JUDGED_MAX
    again = resolve("AckMessage", _ack_request("g1"))
    assert again.group is not None and again.group.full == "ns%g1"
    assert resolve("AckMessage", _ack_request("bad/name")).code == pb.ILLEGAL_CONSUMER_GROUP
    assert resolve("AckMessage", _ack_request("bad/name")).code == pb.ILLEGAL_CONSUMER_GROUP
