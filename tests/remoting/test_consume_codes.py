"""The consume codes against a real broker process, frame by frame (issue 26): heartbeat and
membership, PULL_MESSAGE (status table, filters, long polling, the commit flag), offsets,
send-back, queue locks; and what an attacker can make each do."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from broker.broker_harness import BrokerProcess, wait_for
from consume_frames import call, heartbeat, offset_of, pull, records, request, wait_dispatched
from remoting_harness import FrameClient, start_remoting_broker

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.pull_rules import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND

pytestmark = pytest.mark.slow

TOPICS = "broker.topics=Orders:1,Locks:2,Secret:1,Sql:1"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int, Producer]]:
    root = tmp_path_factory.mktemp("consume")
    broker, port = start_remoting_broker(root / "store", root / "work", TOPICS)
    producer = Producer(broker.address)
    for i, tag in enumerate(("A", "B", "A")):
        producer.send("Orders", f"order-{i}".encode(), tag=tag)
    producer.send("Secret", b"top secret")
    for i in range(3):
        producer.send("Sql", f"sql-{i}".encode(), properties={"n": str(i)})
    conn = FrameClient(port)
    try:
        for topic, count in (("Orders", 3), ("Secret", 1), ("Sql", 3)):
            wait_dispatched(lambda code, fields: call(conn, request(code, fields)), topic, count)
    finally:
        conn.close()
    yield broker, port, producer
    assert broker.stop() == 0


@pytest.fixture
def client(served) -> Iterator[FrameClient]:
    conn = FrameClient(served[1])
    yield conn
    conn.close()


# --- heartbeat and membership -------------------------------------------------------------------


def test_heartbeat_registers_the_client_in_its_group(served, client) -> None:
    assert heartbeat(client, "c1@1", "gList", "Orders").code == ResponseCode.SUCCESS
    answer = call(
        client, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gList"})
    )
    assert json.loads(answer.body) == {"consumerIdList": ["c1@1"]}
    answer = call(
        client, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "gList"})
    )
    body = json.loads(answer.body)
    assert [c["clientId"] for c in body["connectionSet"]] == ["c1@1"]
    assert body["subscriptionTable"]["Orders"]["subString"] == "*"
    nobody = call(
        client, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gNone"})
    )
    assert nobody.code == ResponseCode.SYSTEM_ERROR
    offline = call(
        client, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "gNone"})
    )
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE


def test_a_new_member_notifies_the_group_and_a_closed_connection_leaves(served) -> None:
    first, second = FrameClient(served[1]), FrameClient(served[1])
    try:
        heartbeat(first, "n1@1", "gNotify", "Orders")
        heartbeat(second, "n2@1", "gNotify", "Orders")
        notice = first.read()  # the broker's own request, before anything else
        assert notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and notice.is_oneway
        assert notice.ext_fields == {"consumerGroup": "gNotify"}
        second.close()
        notice = first.read()
        assert notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        answer = call(
            first, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gNotify"})
        )
        assert json.loads(answer.body) == {"consumerIdList": ["n1@1"]}
    finally:
        first.close()


def test_heartbeat_refuses_bad_bodies_and_system_groups(client) -> None:
    garbage = call(client, request(RequestCode.HEART_BEAT, body=b"{not json"))
    assert garbage.code == ResponseCode.SYSTEM_ERROR
    system = heartbeat(client, "x@1", "%RETRY%victim", "Orders")
    assert system.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


def test_another_connection_cannot_take_or_drop_a_client_id(served, client) -> None:
    heartbeat(client, "owner@1", "gOwn", "Orders")
    thief = FrameClient(served[1])
    try:
        stolen = heartbeat(thief, "owner@1", "gOwn", "Orders")
        assert stolen.code == ResponseCode.SYSTEM_ERROR
        call(
            thief,
            request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": "owner@1", "consumerGroup": "gOwn"}
            ),
        )
    finally:
        thief.close()
    answer = call(
        client, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gOwn"})
    )
    assert json.loads(answer.body) == {"consumerIdList": ["owner@1"]}


# --- PULL_MESSAGE --------------------------------------------------------------------------------


def test_a_push_consumer_pull_gets_its_tagged_records_as_stored(client) -> None:
    assert pull(client, "gTag", "Orders", 0, 0).code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    heartbeat(client, "t@1", "gTag", "Orders", "A")
    answer = pull(client, "gTag", "Orders", 0, 0)
    assert answer.code == ResponseCode.SUCCESS and answer.remark == "FOUND"
    got = records(answer.body)
    assert [r.body for r in got] == [b"order-0", b"order-2"]
    assert [r.queue_offset for r in got] == [0, 2]
    assert answer.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "3",
        "minOffset": "0",
        "maxOffset": "3",
    }


def test_a_lite_pull_carries_its_sql92_subscription(client) -> None:
    flags = FLAG_SUBSCRIPTION
    answer = pull(
        client, "gSql", "Sql", 0, 0, flags=flags, subscription="n >= 1", expressionType="SQL92"
    )
    assert [r.body for r in records(answer.body)] == [b"sql-1", b"sql-2"]
    bad = pull(
        client, "gSql", "Sql", 0, 0, flags=flags, subscription="n >>", expressionType="SQL92"
    )
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


@pytest.mark.parametrize(
    ("offset", "code", "next_offset"),
    [
        (3, ResponseCode.PULL_NOT_FOUND, 3),
        (-5, ResponseCode.PULL_OFFSET_MOVED, 0),
        (2**62, ResponseCode.PULL_OFFSET_MOVED, 0),
    ],
)
def test_offsets_outside_the_queue(client, offset: int, code: int, next_offset: int) -> None:
    heartbeat(client, "o@1", "gOff", "Orders")
    answer = pull(client, "gOff", "Orders", 0, offset)
    assert answer.code == code and offset_of(answer, "nextBeginOffset") == next_offset
    assert answer.body == b""


def test_bad_queues_topics_and_batch_sizes(served, client) -> None:
    heartbeat(client, "q@1", "gQ", "Orders")
    for queue_id in (1, -1, 2**31):
        assert pull(client, "gQ", "Orders", queue_id, 0).code == ResponseCode.INVALID_PARAMETER
    unknown = pull(client, "gQ", "NoSuchTopic", 0, 0)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    route = call(
        client, request(RequestCode.GET_MAX_OFFSET, {"topic": "NoSuchTopic", "queueId": 0})
    )
    assert route.code == ResponseCode.TOPIC_NOT_EXIST  # a pull created no topic
    huge = pull(client, "gQ", "Orders", 0, 0, max_msgs=2**31 - 1)
    assert len(records(huge.body)) == 3
    garbage = pull(client, "gQ", "Orders", 0, "zero")
    assert garbage.code == ResponseCode.SYSTEM_ERROR and "queueOffset" in (garbage.remark or "")


def test_a_held_pull_is_woken_by_a_new_message(served, client) -> None:
    _broker, _port, producer = served
    heartbeat(client, "h@1", "gHold", "Secret")
    answers = []
    waiting = threading.Thread(
        target=lambda: answers.append(
            pull(client, "gHold", "Secret", 0, 1, flags=FLAG_SUSPEND, suspend_ms=15_000)
        )
    )
    waiting.start()
    time.sleep(0.5)  # let the pull park (a message before it would be read at once anyway)
    producer.send("Secret", b"woken")
    waiting.join(30)
    (answer,) = answers
    assert answer.code == ResponseCode.SUCCESS
    assert [r.body for r in records(answer.body)] == [b"woken"]


def test_a_held_pull_with_nothing_new_answers_not_found(client) -> None:
    heartbeat(client, "h2@1", "gHold2", "Orders")
    answer = pull(client, "gHold2", "Orders", 0, 3, flags=FLAG_SUSPEND, suspend_ms=300)
    assert answer.code == ResponseCode.PULL_NOT_FOUND


# --- offsets -------------------------------------------------------------------------------------


def _query(client: FrameClient, group: str, topic: str = "Orders") -> object:
    fields = {"consumerGroup": group, "topic": topic, "queueId": 0}
    return call(client, request(RequestCode.QUERY_CONSUMER_OFFSET, fields))


def _update(client: FrameClient, group: str, offset: int, topic: str = "Orders") -> None:
    fields = {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": offset}
    assert call(client, request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)).code == 0


def test_offsets_commit_clamp_and_land_in_consumer_offset_json(served, client) -> None:
    broker = served[0]
    assert offset_of(_query(client, "gCommit")) == 0  # new group, queue starts at 0
    _update(client, "gCommit", 2)
    assert offset_of(_query(client, "gCommit")) == 2
    _update(client, "gCommit", -9)
    assert offset_of(_query(client, "gCommit")) == 0
    _update(client, "gCommit", 2**62)
    assert offset_of(_query(client, "gCommit")) == 3
    heartbeat(client, "p@1", "gCommit", "Orders")
    pull(client, "gCommit", "Orders", 0, 3, flags=FLAG_COMMIT_OFFSET, commit=1)
    assert offset_of(_query(client, "gCommit")) == 1
    wait_for(
        lambda: read_consumer_offsets(broker.store_dir).get(("Orders", "gCommit")) == {0: 1},
        10,
        "consumerOffset.json to hold the remoting commit",
    )


def test_queue_bounds_and_time_search(client) -> None:
    fields = {"topic": "Orders", "queueId": 0}
    assert offset_of(call(client, request(RequestCode.GET_MIN_OFFSET, fields))) == 0
    assert offset_of(call(client, request(RequestCode.GET_MAX_OFFSET, fields))) == 3
    first = offset_of(
        call(client, request(RequestCode.GET_EARLIEST_MSG_STORETIME, fields)), "timestamp"
    )
    assert 0 < first <= int(time.time() * 1000)
    search = request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**fields, "timestamp": 0})
    assert offset_of(call(client, search)) == 0
    later = request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**fields, "timestamp": 2**62})
    assert offset_of(call(client, later)) == 3
    bad = call(client, request(RequestCode.GET_MAX_OFFSET, {"topic": "Orders", "queueId": 9}))
    assert bad.code == ResponseCode.INVALID_PARAMETER


# --- send-back -----------------------------------------------------------------------------------


def _send_back(client: FrameClient, group: str, offset: int, topic: str, level: int) -> object:
    fields = {
        "offset": offset,
        "group": group,
        "delayLevel": level,
        "originTopic": topic,
        "maxReconsumeTimes": 16,
    }
    return call(client, request(RequestCode.CONSUMER_SEND_MSG_BACK, fields))


def _everything(client: FrameClient, group: str, topic: str) -> list:
    answer = pull(client, group, topic, 0, 0, flags=FLAG_SUBSCRIPTION, subscription="*")
    return records(answer.body) if answer.code == ResponseCode.SUCCESS else []


def test_send_back_retries_through_the_retry_topic_and_dead_letters(client) -> None:
    heartbeat(client, "s@1", "gBack", "Orders")
    first = records(pull(client, "gBack", "Orders", 0, 0).body)[0]
    assert _send_back(client, "gBack", first.physical_offset, "Orders", 1).code == 0
    retried = wait_for(lambda: _everything(client, "gBack", "%RETRY%gBack"), 20, "the retry copy")
    assert [r.body for r in retried] == [b"order-0"] and retried[0].reconsume_times == 1
    assert _send_back(client, "gBack", retried[0].physical_offset, "Orders", -1).code == 0
    (dead,) = wait_for(lambda: _everything(client, "gBack", "%DLQ%gBack"), 20, "the dead letter")
    assert dead.body == b"order-0"


def test_send_back_cannot_copy_another_topics_record(client) -> None:
    secret = _everything(client, "gPeek", "Secret")[0]  # the attacker learnt its offset somehow
    refused = _send_back(client, "gThief", secret.physical_offset, "Orders", -1)
    assert refused.code == ResponseCode.SYSTEM_ERROR and refused.remark == "send-back refused"
    assert _everything(client, "gThief", "%DLQ%gThief") == []
    nowhere = _send_back(client, "gThief", 2**50, "Orders", 0)
    assert nowhere.code == ResponseCode.SYSTEM_ERROR


# --- queue locks ---------------------------------------------------------------------------------


def _lock(client: FrameClient, code: int, client_id: str, queues: list[int]) -> object:
    body = {
        "consumerGroup": "gLock",
        "clientId": client_id,
        "onlyThisBroker": False,
        "mqSet": [{"topic": "Locks", "brokerName": "broker-a", "queueId": q} for q in queues],
    }
    return call(client, request(code, body=json.dumps(body).encode()))


def _held(answer: object) -> list[int]:
    return sorted(q["queueId"] for q in json.loads(answer.body)["lockOKMQSet"])


def test_locks_are_exclusive_and_owned_by_the_connection(served) -> None:
    one, two = FrameClient(served[1]), FrameClient(served[1])
    try:
        heartbeat(one, "l1@1", "gLock", "Locks")
        heartbeat(two, "l2@1", "gLock", "Locks")
        assert _held(_lock(one, RequestCode.LOCK_BATCH_MQ, "l1@1", [0, 1, 7])) == [0, 1]
        assert _held(_lock(two, RequestCode.LOCK_BATCH_MQ, "l2@1", [0, 1])) == []
        forged = _lock(two, RequestCode.LOCK_BATCH_MQ, "l1@1", [0])
        assert forged.code == ResponseCode.SYSTEM_ERROR
        assert (
            _lock(two, RequestCode.UNLOCK_BATCH_MQ, "l1@1", [0]).code == ResponseCode.SYSTEM_ERROR
        )
        assert _lock(one, RequestCode.UNLOCK_BATCH_MQ, "l1@1", [1]).code == ResponseCode.SUCCESS
        heartbeat(one, "l3@1", "gOther", "Locks")  # a client id of another group
        assert _lock(one, RequestCode.LOCK_BATCH_MQ, "l3@1", [1]).code == ResponseCode.SYSTEM_ERROR
        assert _held(_lock(two, RequestCode.LOCK_BATCH_MQ, "l2@1", [0, 1])) == [1]
        one.close()
        wait_for(
            lambda: _held(_lock(two, RequestCode.LOCK_BATCH_MQ, "l2@1", [0, 1])) == [0, 1],
            10,
            "the closed connection's locks to go",
        )
    finally:
        one.close()
        two.close()


def test_consume_stats_show_committed_against_max(client) -> None:
    _update(client, "gStats", 2)
    answer = call(client, request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "gStats"}))
    assert answer.code == ResponseCode.SUCCESS
    assert (
        b'{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:{"brokerOffset":3,"consumerOffset":2'
        in answer.body
    )


def test_the_broker_is_still_up(served) -> None:
    assert served[0].proc.poll() is None


def test_a_heartbeat_flood_of_groups_creates_retry_topics_within_the_creation_budget(
    client,
) -> None:
    groups = [
        {"groupName": f"gFlood{i}", "consumeType": "CONSUME_PASSIVELY",
         "messageModel": "CLUSTERING", "subscriptionDataSet": []}
        for i in range(200)
    ]  # fmt: skip
    body = json.dumps({"clientID": "flood@1", "consumerDataSet": groups}).encode()
    assert call(client, request(RequestCode.HEART_BEAT, body=body)).code == ResponseCode.SUCCESS

    def exists(group: str) -> bool:
        fields = {"topic": f"%RETRY%{group}", "queueId": 0}
        return call(client, request(RequestCode.GET_MAX_OFFSET, fields)).code == 0

    assert exists("gFlood0")
    assert not exists("gFlood199")  # over auto_create_topics_burst (100) from one address


def test_check_client_config_compiles_the_subscription(client) -> None:
    def check(kind: str, expression: str) -> int:
        sub = {"topic": "Sql", "subString": expression, "expressionType": kind}
        body = json.dumps({"clientId": "k@1", "group": "gK", "subscriptionData": sub}).encode()
        return call(client, request(RequestCode.CHECK_CLIENT_CONFIG, body=body)).code

    assert check("SQL92", "n > 1 AND a IS NULL") == ResponseCode.SUCCESS
    assert check("SQL92", "n >>") == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert check("TAG", "A || B") == ResponseCode.SUCCESS
