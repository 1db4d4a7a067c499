"""The producer's routes: a topic's queues across brokers, asked of an access-point broker.

``PublishRoutes.queues`` answers from a per-topic cache refreshed every ``refresh_s`` with a
gRPC ``QueryRoute`` to the access point (any broker: with name servers it answers with every
live broker's queues, each at that broker's gRPC endpoint). A failed refresh keeps the last
route (a dead access point must not stop sends to the live brokers). An empty answer means
"no route": the caller sends to the access point itself, as a single-broker producer does (a
broker that refuses QueryRoute to this caller, an older broker). ``stub`` opens one channel per
endpoint, reused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc

from rmq_spark.broker.cluster.fault import RoutedQueue
from rmq_spark.broker.grpc.grpc_client import messaging_channel
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb

__all__ = ["PublishRoutes", "ROUTE_REFRESH_S"]

log = logging.getLogger("rmq_spark.broker.cluster")
ROUTE_REFRESH_S = 30.0  # RocketMQ clients' pollNameServerInterval
_WRITABLE = (pb.WRITE, pb.READ_WRITE)


class PublishRoutes:
    """Routes and channels of one producer (thread-safe).

    ``access_stub``: the access point's stub; ``metadata``: the headers of one call (signed
    afresh each time); ``now_s``: a monotonic clock."""

    def __init__(
        self,
        access_stub: Any,
        metadata: Callable[[], Any],
        *,
        namespace: str,
        timeout_s: float,
        refresh_s: float,
        now_s: Callable[[], float],
    ) -> None:
        self._access = access_stub
        self._metadata = metadata
        self._namespace = namespace
        self._timeout_s = timeout_s
        self._refresh_s = refresh_s
        self._now = now_s
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[float, tuple[RoutedQueue, ...]]] = {}
        self._channels: dict[str, tuple[Any, Any]] = {}

    def queues(self, topic: str) -> tuple[RoutedQueue, ...]:
        """The writable queues of ``topic`` (empty: send to the access point)."""
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and self._now() < cached[0]:
            return cached[1]
        fresh = self._query(topic)
        if fresh is None:  # the access point did not answer: keep what we had
            fresh = cached[1] if cached is not None else ()
        with self._lock:
            self._routes[topic] = (self._now() + self._refresh_s, fresh)
        return fresh

    def _query(self, topic: str) -> tuple[RoutedQueue, ...] | None:
        request = spb.QueryRouteRequest(
            topic=pb.Resource(name=topic, resource_namespace=self._namespace)
        )
        try:
            response = self._access.QueryRoute(
                request, timeout=self._timeout_s, metadata=self._metadata()
            )
        except grpc.RpcError as err:
            log.debug("route of %s: QueryRoute failed: %s", topic, err)
            return None
        if response.status.code != pb.OK:
            log.debug("route of %s: %s", topic, response.status.message)
            return ()
        found = tuple(
            RoutedQueue(queue.broker.name, _address(queue.broker.endpoints), queue.id)
            for queue in response.message_queues
            if queue.permission in _WRITABLE and queue.broker.endpoints.addresses
        )
        brokers = sorted({queue.broker_name for queue in found})
        log.debug("route of %s: %d queues on brokers %s", topic, len(found), brokers)
        return found

    def stub(self, endpoint: str) -> Any:
        with self._lock:
            if endpoint not in self._channels:
                self._channels[endpoint] = messaging_channel(endpoint)
            return self._channels[endpoint][1]

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel, _stub in channels:
            channel.close()


def _address(endpoints: Any) -> str:
    first = endpoints.addresses[0]
    host = f"[{first.host}]" if ":" in first.host else first.host
    return f"{host}:{first.port}"
