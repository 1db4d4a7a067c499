"""The consume codes with auth on (issue 26): an unsigned pull gets NO_PERMISSION, a consumer
granted ``Sub`` on its group and topic consumes (its own ``%RETRY%`` topic included) but cannot
read or move another group's offsets, pull a topic it was not granted, or heartbeat into
another group; refusals change nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker.broker_harness import BrokerProcess
from consume_frames import call, heartbeat_body, offset_of, records, wait_dispatched
from remoting_harness import FrameClient, start_remoting_broker

from rmq_spark.broker.producer import Producer
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.gate import sign_request
from rmq_spark.broker.remoting.pull_rules import FLAG_SUBSCRIPTION

pytestmark = pytest.mark.slow

USERS = """
[users.alice]
secret_key = "alice-secret-0123456789"
policies = [
  { resource = "Topic:Orders", actions = ["Sub"] },
  { resource = "Group:gAlice", actions = ["Sub"] },
]

[users.root]
secret_key = "root-secret-0123456789"
user_type = "Super"
"""
ALICE = ("alice", "alice-secret-0123456789")
ROOT = ("root", "root-secret-0123456789")
_OPAQUE = iter(range(1, 1 << 30))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("consume-auth")
    users = root / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker, port = start_remoting_broker(
        root / "store", root / "work", "broker.auth_enabled=true",
        f"broker.auth_users_file={users}", "broker.topics=Orders:1,Payroll:1",
    )  # fmt: skip
    producer = Producer(broker.address, credentials=ROOT)
    producer.send("Orders", b"order")
    producer.send("Payroll", b"salary")
    conn = FrameClient(port)
    try:
        for topic in ("Orders", "Payroll"):
            wait_dispatched(lambda code, fields: _signed(conn, ROOT, code, fields), topic, 1)
    finally:
        conn.close()
    yield broker, port
    assert broker.stop() == 0


def _signed(
    client: FrameClient, who: tuple[str, str] | None, code: int, fields: dict, body: bytes = b""
) -> RemotingCommand:
    ext = {k: str(v) for k, v in fields.items()}
    if who is not None:
        ext["AccessKey"] = who[0]
        ext["Signature"] = sign_request(ext, body, who[1])
    command = RemotingCommand(code=int(code), opaque=next(_OPAQUE), ext_fields=ext, body=body)
    return call(client, command)


def _pull(client: FrameClient, who, group: str, topic: str) -> RemotingCommand:
    fields = {
        "consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0,
        "maxMsgNums": 32, "sysFlag": FLAG_SUBSCRIPTION, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
    }  # fmt: skip
    return _signed(client, who, RequestCode.PULL_MESSAGE, fields)


@pytest.fixture
def client(served) -> Iterator[FrameClient]:
    conn = FrameClient(served[1])
    yield conn
    conn.close()


def test_an_unsigned_pull_gets_no_permission(client) -> None:
    answer = _pull(client, None, "gAlice", "Orders")
    assert answer.code == ResponseCode.NO_PERMISSION and answer.body == b""


def test_a_granted_consumer_pulls_and_commits(client) -> None:
    answer = _pull(client, ALICE, "gAlice", "Orders")
    assert [r.body for r in records(answer.body)] == [b"order"]
    retry = _pull(client, ALICE, "gAlice", "%RETRY%gAlice")  # the group's own: no topic grant
    assert retry.code != ResponseCode.NO_PERMISSION
    fields = {"consumerGroup": "gAlice", "topic": "Orders", "queueId": 0, "commitOffset": 1}
    assert _signed(client, ALICE, RequestCode.UPDATE_CONSUMER_OFFSET, fields).code == 0
    beat = heartbeat_body(
        "alice@1", "gAlice", {"Orders": ("TAG", "*"), "%RETRY%gAlice": ("TAG", "*")}
    )
    assert _signed(client, ALICE, RequestCode.HEART_BEAT, {}, beat).code == ResponseCode.SUCCESS


def test_no_other_groups_offsets_topics_or_memberships(client) -> None:
    other = {"consumerGroup": "gVictim", "topic": "Orders", "queueId": 0}
    for code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
        answer = _signed(client, ALICE, code, {**other, "commitOffset": 1})
        assert answer.code == ResponseCode.NO_PERMISSION
    assert _pull(client, ALICE, "gVictim", "Orders").code == ResponseCode.NO_PERMISSION
    assert _pull(client, ALICE, "gAlice", "Payroll").code == ResponseCode.NO_PERMISSION
    assert _pull(client, ALICE, "gAlice", "%RETRY%gVictim").code == ResponseCode.NO_PERMISSION
    beat = heartbeat_body("alice@2", "gVictim", {"Orders": ("TAG", "*")})
    assert (
        _signed(client, ALICE, RequestCode.HEART_BEAT, {}, beat).code == ResponseCode.NO_PERMISSION
    )
    back = {"offset": 0, "group": "gAlice", "delayLevel": -1, "originTopic": "Payroll"}
    assert _signed(client, ALICE, RequestCode.CONSUMER_SEND_MSG_BACK, back).code == 16
    victim = _signed(client, ROOT, RequestCode.QUERY_CONSUMER_OFFSET, other)
    assert offset_of(victim) == 0  # never moved by alice
