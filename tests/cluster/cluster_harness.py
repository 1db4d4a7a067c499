"""Helpers for the cluster tests: a real name server (``rmq-spark namesrv``, RocketMQ 5.3.3's)
and rmq-spark broker processes registered with it, on fixed ports so a broker restarts where
it was. The name server and mqadmin are JVMs: run these tests under the machine-wide bench lock
(``flock /tmp/bench.lock pytest tests/cluster``), as the remoting tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from broker.broker_harness import BrokerProcess, start_broker, wait_for
from namesrv_harness import REPO_ROOT, Namesrv, free_port

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc

CLUSTER = "RmqSparkCluster"


@dataclass
class ClusterBroker:
    """One broker of the cluster: its name, ports and store; ``proc`` while it runs."""

    name: str
    store: Path
    work: Path
    grpc_port: int = field(default_factory=free_port)
    remoting_port: int = field(default_factory=free_port)
    proc: BrokerProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, namesrv: Namesrv, *settings: str) -> ClusterBroker:
        self.proc = start_broker(
            self.store, self.work,
            f"broker.namesrv_addr={namesrv.addr}", f"broker.broker_name={self.name}",
            f"broker.cluster_name={CLUSTER}",
            f"broker.remoting_listen=127.0.0.1:{self.remoting_port}", *settings,
            listen=self.address,
        )  # fmt: skip
        return self

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()


def cluster_brokers(
    tmp_path: Path, namesrv: Namesrv, *settings: str
) -> Iterator[list[ClusterBroker]]:
    """Two started brokers, ``broker-a`` and ``broker-b``; killed at the end."""
    brokers = [ClusterBroker(name, tmp_path / name, tmp_path / f"{name}-work")
               for name in ("broker-a", "broker-b")]  # fmt: skip
    try:
        for broker in brokers:
            broker.start(namesrv, *settings)
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def mqadmin(namesrv: Namesrv, *args: str) -> str:
    """``rmq-spark mqadmin ARGS -n <namesrv>``: its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "mqadmin",
         "--workdir", str(namesrv.workdir.parent / "mqadmin"), *args, "-n", namesrv.addr],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def create_topic(namesrv: Namesrv, topic: str, queues: int = 4) -> None:
    """``mqadmin updateTopic -c CLUSTER``: the topic on every broker of the cluster."""
    out = mqadmin(namesrv, "updateTopic", "-c", CLUSTER, "-t", topic,
                  "-r", str(queues), "-w", str(queues))  # fmt: skip
    assert "success" in out.lower(), out


def query_route(address: str, topic: str) -> Any:
    """gRPC QueryRoute to the broker at ``address``."""
    with grpc.insecure_channel(address) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        request = spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        return stub.QueryRoute(request, timeout=10)


def route_brokers(address: str, topic: str) -> dict[str, tuple[str, int]]:
    """Broker name -> (gRPC endpoint, queue count) in ``address``'s route of ``topic``."""
    found: dict[str, tuple[str, int]] = {}
    for queue in query_route(address, topic).message_queues:
        first = queue.broker.endpoints.addresses[0]
        endpoint, count = f"{first.host}:{first.port}", found.get(queue.broker.name, ("", 0))[1]
        found[queue.broker.name] = (endpoint, count + 1)
    return found


def wait_route(address: str, topic: str, expected: set[str], deadline_s: float = 60) -> None:
    wait_for(lambda: set(route_brokers(address, topic)) == expected, deadline_s,
             f"{address}'s route of {topic} to list {sorted(expected)}")  # fmt: skip
