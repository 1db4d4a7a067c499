"""Consumers across brokers: a group's gRPC ``QueryAssignment`` answered for the whole cluster.

The brokers come from the same routes as ``QueryRoute`` (``ClusterRoutes.lookup``: every live
master serving the topic, each at its own gRPC endpoint). As RocketMQ 5's proxy
(``RouteActivity.queryAssignment``): a POP group gets one assignment per readable broker, queue
id -1 ("any queue of that broker"); a FIFO group one per readable queue of every broker. The
official clients then send ReceiveMessage to each assignment's endpoints and AckMessage /
ChangeInvisibleDuration to the endpoints a message came from, so every queue is read, acked and
has its offsets on the broker that owns it. ``None``: answer as a single broker (no name
servers configured or answering, or no broker known to serve the topic).
"""

from __future__ import annotations

import logging

from rmq_spark.broker.cluster.route_data import BrokerRoute
from rmq_spark.broker.cluster.routes import ClusterRoutes
from rmq_spark.broker.grpc.grpc_wire import endpoints_of
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.security.resources import Name

__all__ = ["ANY_QUEUE", "cluster_assignments"]

log = logging.getLogger("rmq_spark.broker.cluster")
ANY_QUEUE = -1  # a POP assignment: the broker pops from any of its queues


async def cluster_assignments(
    cluster: ClusterRoutes | None, topic: Name, *, fifo: bool
) -> list[pb.Assignment] | None:
    """The assignments of ``topic`` across every readable broker of the cluster, or ``None``
    when this broker should answer with its own queues."""
    if cluster is None:
        return None
    routes = await cluster.lookup(topic.full)
    if routes is None:
        log.warning("cluster: no name server answered; assigning %s here only", topic.name)
        return None
    if not routes:
        return None
    readable = [route for route in routes if route.readable and route.queue_count > 0]
    return [
        _assignment(topic, route, queue_id)
        for route in readable
        for queue_id in (range(route.queue_count) if fifo else (ANY_QUEUE,))
    ]


def _assignment(topic: Name, route: BrokerRoute, queue_id: int) -> pb.Assignment:
    broker = pb.Broker(name=route.broker_name, id=0)
    broker.endpoints.CopyFrom(endpoints_of(route.grpc_host, route.grpc_port))
    permission = pb.READ_WRITE if route.writable else pb.READ
    queue = pb.MessageQueue(
        topic=pb.Resource(name=topic.name, resource_namespace=topic.namespace),
        id=queue_id,
        permission=permission,
        broker=broker,
    )
    return pb.Assignment(message_queue=queue)
