"""A broker's view of the cluster: a topic's brokers, from RocketMQ name servers, cached briefly.

``ClusterRoutes.lookup`` asks the name servers in order (GET_ROUTEINFO_BY_TOPIC, 105) over one
long-lived connection each, on the caller's asyncio loop (the gRPC server's). An answer is
cached for ``ttl_s`` (a client asks for every topic every 30 s, and on every new producer);
a name server that is down or answers garbage is logged once per change and the next one is
tried (the failed one is skipped for ``RETRY_AFTER_S``, so a name server that swallows packets
costs one timeout, not one per route). ``None`` means no name server answered: the caller
falls back to its own queues.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rmq_spark.broker.cluster.route_data import BrokerRoute, RouteDataError, parse_route
from rmq_spark.broker.config import BrokerConfig, parse_namesrv_addr
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.namesrv_client import NamesrvConnection
from rmq_spark.errors import RemotingFrameError

__all__ = ["ClusterRoutes", "GET_ROUTEINFO_BY_TOPIC", "ROUTE_TTL_S", "cluster_routes"]

log = logging.getLogger(__name__)
GET_ROUTEINFO_BY_TOPIC = 105
TOPIC_NOT_EXIST = 17
ROUTE_TTL_S = 3.0  # short: a broker that leaves is out of answers within this after its expiry
LOOKUP_TIMEOUT_S = 3.0  # RocketMQ's client timeout for route look-ups
RETRY_AFTER_S = 5.0  # a name server that failed is skipped this long (no 3 s wait per route)


class ClusterRoutes:
    """The routes of topics across the brokers registered with ``addresses``.

    ``default_grpc_port``: the gRPC port assumed for a broker that did not announce one
    (RocketMQ's local-proxy rule, see ``route_data``)."""

    def __init__(
        self,
        addresses: tuple[tuple[str, int], ...],
        default_grpc_port: int,
        *,
        ttl_s: float = ROUTE_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connections = [NamesrvConnection(host, port) for host, port in addresses]
        self._default_grpc_port = default_grpc_port
        self._ttl_s = ttl_s
        self._now = monotonic
        self._cache: dict[str, tuple[float, tuple[BrokerRoute, ...]]] = {}
        self._problems: dict[str, str] = {}  # name server -> last problem, logged on change
        self._skip_until: dict[str, float] = {}  # name server -> when to try it again

    async def lookup(self, topic: str) -> tuple[BrokerRoute, ...] | None:
        """The brokers serving ``topic`` (empty: no broker has it), or ``None`` when no name
        server answered."""
        cached = self._cache.get(topic)
        if cached is not None and self._now() < cached[0]:
            return cached[1]
        for conn in self._connections:
            if self._now() < self._skip_until.get(conn.address, 0.0):
                continue
            routes = await self._ask(conn, topic)
            if routes is not None:
                self._cache[topic] = (self._now() + self._ttl_s, routes)
                if len(self._cache) > 10_000:  # topics asked for once: keep the table small
                    self._cache.pop(next(iter(self._cache)))
                return routes
        return None

    async def _ask(self, conn: NamesrvConnection, topic: str) -> tuple[BrokerRoute, ...] | None:
        request = RemotingCommand(
            code=GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}, language="PYTHON"
        )
        try:
            response = await conn.call(request, LOOKUP_TIMEOUT_S)
            if response.code == TOPIC_NOT_EXIST:
                routes: tuple[BrokerRoute, ...] = ()
            elif response.code != 0:
                raise RouteDataError(f"answered code {response.code}: {response.remark}")
            else:
                routes = parse_route(response.body or b"", self._default_grpc_port)
        except (OSError, TimeoutError, RemotingFrameError, RouteDataError) as err:
            self._note(conn.address, str(err) or type(err).__name__)
            self._skip_until[conn.address] = self._now() + RETRY_AFTER_S
            return None
        self._note(conn.address, None)
        return routes

    def _note(self, address: str, problem: str | None) -> None:
        state = problem or ""
        if self._problems.get(address, "") == state:
            return
        self._problems[address] = state
        if problem:
            log.warning("cluster: name server %s: route look-up failed: %s", address, problem)
        else:
            log.info("cluster: name server %s answers route look-ups", address)

    async def close(self) -> None:
        for conn in self._connections:
            await conn.close()


def cluster_routes(config: BrokerConfig, grpc_port: int) -> ClusterRoutes | None:
    """The cluster view of a broker serving gRPC on ``grpc_port``; ``None`` without name
    servers (QueryRoute then answers with this broker's own queues, as a single broker)."""
    addresses = parse_namesrv_addr(config.namesrv_addr)
    return ClusterRoutes(addresses, grpc_port) if addresses else None
