"""gRPC QueryRoute across brokers: a real name server (RocketMQ 5.3.3's), two rmq-spark broker
processes, a topic created on both by ``mqadmin updateTopic -c``. Any broker answers with the
queues of every live broker, each at that broker's own gRPC endpoint; a broker that stops (or
is killed) leaves the route, and comes back when it restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker.broker_harness import start_broker
from cluster_harness import ClusterBroker, create_topic, route_brokers, wait_route
from namesrv_harness import Namesrv, free_port

pytestmark = pytest.mark.slow


def test_any_broker_routes_to_every_broker_of_the_topic(
    namesrv: Namesrv, brokers: list[ClusterBroker]
) -> None:
    a, b = brokers
    create_topic(namesrv, "Spread", queues=4)
    for access in (a, b):
        wait_route(access.address, "Spread", {"broker-a", "broker-b"})
        assert route_brokers(access.address, "Spread") == {
            "broker-a": (a.address, 4),
            "broker-b": (b.address, 4),
        }


def test_a_broker_that_stops_or_dies_leaves_the_route_and_returns(
    namesrv: Namesrv, brokers: list[ClusterBroker]
) -> None:
    a, b = brokers
    create_topic(namesrv, "Leaving")
    wait_route(a.address, "Leaving", {"broker-a", "broker-b"})
    assert b.proc is not None
    assert b.proc.stop() == 0  # SIGTERM: unregisters
    wait_route(a.address, "Leaving", {"broker-a"})
    b.start(namesrv)
    wait_route(a.address, "Leaving", {"broker-a", "broker-b"})
    b.kill()  # SIGKILL: the name server drops it when its connection closes
    wait_route(a.address, "Leaving", {"broker-a"})


def test_no_name_server_answering_routes_to_this_broker_with_a_warning(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    broker = start_broker(tmp_path / "store", tmp_path / "work", f"broker.namesrv_addr={dead}",
                          "broker.topics=Alone:4")  # fmt: skip
    try:
        assert route_brokers(broker.address, "Alone") == {"broker-a": (broker.address, 4)}
        assert f"cluster: name server {dead}: route look-up failed" in broker.log_text()
        assert "cluster: no name server answered; routing Alone here only" in broker.log_text()
    finally:
        broker.kill()
