"""The cluster paths with auth on (both brokers share the users file): QueryAssignment spans
both brokers only for a caller with Sub on the topic and the group (the ACL runs before the
cluster look-up; a wildcard topic grant reaches every topic's brokers, as QueryRoute does, but
not a group it lacks), and ``groups --namesrv --access-key`` signs its call to every broker:
a user without Sub on the group is refused by each broker, named on stderr."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker.broker_harness import wait_for
from cluster_harness import ClusterBroker, cluster_brokers
from namesrv_harness import Namesrv

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.broker.security.auth import signature_metadata
from rmq_spark.cli.main import main

pytestmark = pytest.mark.slow

USERS = """
[users.alice]
secret_key = "alice-secret-1"
policies = [
  { resource = "Topic:orders", actions = ["Sub"] },
  { resource = "Group:billing", actions = ["Sub"] },
]

[users.wild]
secret_key = "wild-secret-1"
policies = [
  { resource = "Topic:*", actions = ["Sub"] },
  { resource = "Group:billing", actions = ["Sub"] },
]
"""
ALICE = ("alice", "alice-secret-1")
WILD = ("wild", "wild-secret-1")


@pytest.fixture
def auth_brokers(tmp_path: Path, namesrv: Namesrv) -> Iterator[list[ClusterBroker]]:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    yield from cluster_brokers(
        tmp_path, namesrv, "broker.auth_enabled=true", f"broker.auth_users_file={users}",
        "broker.topics=orders:2,payments:2",
    )  # fmt: skip


def assignment(address: str, topic: str, group: str, user: tuple[str, str]) -> Any:
    metadata = (("x-mq-client-id", "auth-test"),) + signature_metadata(
        *user, int(time.time() * 1000)
    )
    with grpc.insecure_channel(address) as channel:
        request = spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic), group=pb.Resource(name=group)
        )
        stub = spb_grpc.MessagingServiceStub(channel)
        return stub.QueryAssignment(request, timeout=10, metadata=metadata)


def _brokers(response: Any) -> set[str]:
    return {a.message_queue.broker.name for a in response.assignments}


def test_query_assignment_and_groups_across_brokers_follow_the_acl(
    auth_brokers: list[ClusterBroker], namesrv: Namesrv, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    a, b = auth_brokers
    both = {"broker-a", "broker-b"}
    wait_for(lambda: _brokers(assignment(a.address, "orders", "billing", ALICE)) == both,
             60, "alice's assignment to list both brokers")  # fmt: skip
    for topic, group, user in (("payments", "billing", ALICE), ("orders", "auditors", ALICE),
                               ("payments", "auditors", WILD)):  # fmt: skip
        refused = assignment(a.address, topic, group, user)
        assert refused.status.code == pb.UNAUTHORIZED, (topic, group, refused.status)
        assert not refused.assignments
    assert _brokers(assignment(b.address, "payments", "billing", WILD)) == both

    monkeypatch.setenv("RMQ_SECRET_KEY", ALICE[1])
    assert main(["groups", "--namesrv", namesrv.addr, "billing", "--access-key", "alice"]) == 0
    assert main(["groups", "--namesrv", namesrv.addr, "auditors", "--access-key", "alice"]) == 1
    err = capsys.readouterr().err
    for broker in (a, b):
        assert f"broker {broker.name} (127.0.0.1:{broker.remoting_port}): refused:" in err
    assert main(["groups", "--namesrv", namesrv.addr, "billing"]) == 1  # unsigned: refused
