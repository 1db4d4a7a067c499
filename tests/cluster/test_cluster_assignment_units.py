"""PURE: ``cluster_assignments`` from a cluster's routes: one POP assignment per readable broker
(queue id -1), one per queue of every readable broker for a FIFO group, each at its broker's
endpoint; ``None`` (answer as a single broker) without routes or name servers."""

from __future__ import annotations

import asyncio

from rmq_spark.broker.cluster.assignment import cluster_assignments
from rmq_spark.broker.cluster.route_data import BrokerRoute
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.security.resources import Name

TOPIC = Name("Orders", "", "Orders")
ROUTES = (
    BrokerRoute("broker-a", "10.0.0.1:8080", "10.0.0.1", 8081, 2, 6),
    BrokerRoute("broker-b", "10.0.0.2:8080", "10.0.0.2", 9081, 3, 4),  # read-only
    BrokerRoute("broker-c", "10.0.0.3:8080", "10.0.0.3", 7081, 2, 2),  # write-only
)


class Routes:
    """What ``ClusterRoutes.lookup`` answers, without name servers."""

    def __init__(self, answer: tuple[BrokerRoute, ...] | None) -> None:
        self.answer = answer

    async def lookup(self, topic: str) -> tuple[BrokerRoute, ...] | None:
        assert topic == TOPIC.full
        return self.answer


def _shape(routes: Routes | None, fifo: bool) -> list[tuple[str, str, int, int]] | None:
    found = asyncio.run(cluster_assignments(routes, TOPIC, fifo=fifo))  # type: ignore[arg-type]
    if found is None:
        return None
    shape = []
    for assignment in found:
        queue = assignment.message_queue
        first = queue.broker.endpoints.addresses[0]
        shape.append((queue.broker.name, f"{first.host}:{first.port}", queue.id, queue.permission))
    return shape


def test_a_pop_group_gets_one_assignment_per_readable_broker() -> None:
    assert _shape(Routes(ROUTES), fifo=False) == [
        ("broker-a", "10.0.0.1:8081", -1, pb.READ_WRITE),
        ("broker-b", "10.0.0.2:9081", -1, pb.READ),
    ]


def test_a_fifo_group_gets_every_queue_of_every_readable_broker() -> None:
    shape = _shape(Routes(ROUTES), fifo=True)
    assert shape is not None
    assert [(name, qid) for name, _, qid, _ in shape] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1), ("broker-b", 2),
    ]  # fmt: skip


def test_without_routes_the_broker_answers_alone() -> None:
    assert _shape(None, fifo=False) is None
    assert _shape(Routes(None), fifo=False) is None  # no name server answered
    assert _shape(Routes(()), fifo=False) is None  # no broker known to serve it
