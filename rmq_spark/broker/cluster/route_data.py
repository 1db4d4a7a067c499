"""PURE: a name server's ``TopicRouteData`` (GET_ROUTEINFO_BY_TOPIC's body) -> brokers and queues.

RocketMQ's 5.x gRPC proxy in "local" mode answers a route with every broker's host and the
proxy's own ``grpcServerPort`` (``ProxyTopicRouteData(topicRouteData, grpcPort)``): it assumes
the same gRPC port on every broker. rmq-spark brokers may share a machine, so each announces its
gRPC endpoint in its registration, as one ``grpc://HOST:PORT`` entry of ``filterServerList``
(RocketMQ keeps that list per broker address and returns it as the route's
``filterServerTable``; RocketMQ 5 clients do not use it). A broker without that entry (a
RocketMQ broker) is mapped RocketMQ's way: its host and ``default_grpc_port``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq_spark.broker.fastjson import FastjsonError, parse_fastjson

__all__ = ["BrokerRoute", "GRPC_PREFIX", "RouteDataError", "grpc_announcement", "parse_route"]

GRPC_PREFIX = "grpc://"
MASTER_ID = "0"  # MixAll.MASTER_ID: only masters take sends
PERM_WRITE = 2
PERM_READ = 4


class RouteDataError(ValueError):
    """A route body that is not a ``TopicRouteData``."""


@dataclass(frozen=True, slots=True)
class BrokerRoute:
    """One broker serving a topic: where its gRPC port is and how many queues it has."""

    broker_name: str
    addr: str  # the registered (remoting) address
    grpc_host: str
    grpc_port: int
    queue_count: int
    perm: int

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def grpc_announcement(host: str, port: int) -> str:
    """The ``filterServerList`` entry by which a broker announces its gRPC endpoint."""
    return f"{GRPC_PREFIX}{host}:{port}"


def parse_route(body: bytes, default_grpc_port: int) -> tuple[BrokerRoute, ...]:
    """Every master broker of the route with queues, ordered by broker name.

    Raises
    ------
    RouteDataError
        The body is not fastjson JSON of the expected shape.
    """
    try:
        data = parse_fastjson(body.decode("utf-8"))
        masters = {
            str(broker["brokerName"]): str(broker["brokerAddrs"][MASTER_ID])
            for broker in data.get("brokerDatas") or ()
            if MASTER_ID in {str(key) for key in broker.get("brokerAddrs") or {}}
        }
        filters = data.get("filterServerTable") or {}
        found = []
        for queue in data.get("queueDatas") or ():
            name = str(queue["brokerName"])
            addr = masters.get(name)
            count = max(int(queue["writeQueueNums"]), int(queue["readQueueNums"]))
            if addr is None or count <= 0:
                continue  # no live master: nothing to send to
            host, port = _grpc_endpoint(addr, filters.get(addr) or (), default_grpc_port)
            found.append(BrokerRoute(name, addr, host, port, count, int(queue["perm"])))
    except (FastjsonError, UnicodeDecodeError, LookupError, TypeError, ValueError) as err:
        raise RouteDataError(f"not a TopicRouteData: {type(err).__name__}: {err}") from None
    except AttributeError as err:  # a list or a number where an object belongs
        raise RouteDataError(f"not a TopicRouteData: {err}") from None
    return tuple(sorted(found, key=lambda route: route.broker_name))


def _grpc_endpoint(addr: str, filters: Any, default_port: int) -> tuple[str, int]:
    for entry in filters:
        if isinstance(entry, str) and entry.startswith(GRPC_PREFIX):
            host, _, port = entry[len(GRPC_PREFIX) :].rpartition(":")
            return host, int(port)
    return addr.rpartition(":")[0], default_port
