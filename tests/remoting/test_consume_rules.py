"""The pure rules of the remoting consume codes (issue 26): the PULL_MESSAGE status table and
batch, the 4.x client registry, queue locks, the consume-stats body, the ACL rows."""

from __future__ import annotations

import json

import pytest

from rmq_spark.broker.remoting import pull_rules as rules
from rmq_spark.broker.remoting.calls import Call
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.consume_stats import format_consume_stats
from rmq_spark.broker.remoting.consumer_links import (
    CLIENT_EXPIRY_MS,
    CLIENT_IDS_PER_LINK_MAX,
    GROUPS_PER_LINK_MAX,
    ConsumerLinks,
    HeartbeatError,
    parse_heartbeat,
)
from rmq_spark.broker.remoting.permissions import needs_of_call
from rmq_spark.broker.remoting.queue_locks import LOCK_EXPIRY_MS, QueueLocks
from rmq_spark.store.consume_queue import PRE_BLANK_UNIT, CqUnit

# --- the status table (REMOTING_PROTOCOL.md 5.1) ----------------------------------------------


@pytest.mark.parametrize(
    ("offset", "low", "high", "expected"),
    [
        (0, 0, 0, (rules.PULL_NOT_FOUND, 0, "NO_MESSAGE_IN_QUEUE")),
        (5, 0, 0, (rules.PULL_OFFSET_MOVED, 0, "NO_MESSAGE_IN_QUEUE")),
        (-1, 0, 0, (rules.PULL_OFFSET_MOVED, 0, "NO_MESSAGE_IN_QUEUE")),
        (2, 4, 10, (rules.PULL_OFFSET_MOVED, 4, "OFFSET_TOO_SMALL")),
        (-7, 4, 10, (rules.PULL_OFFSET_MOVED, 4, "OFFSET_TOO_SMALL")),
        (10, 4, 10, (rules.PULL_NOT_FOUND, 10, "OFFSET_OVERFLOW_ONE")),
        (11, 4, 10, (rules.PULL_OFFSET_MOVED, 10, "OFFSET_OVERFLOW_BADLY")),
        (2**62, 0, 10, (rules.PULL_OFFSET_MOVED, 0, "OFFSET_OVERFLOW_BADLY")),
    ],
)
def test_offset_verdicts(offset: int, low: int, high: int, expected: tuple[int, int, str]) -> None:
    verdict = rules.offset_verdict(offset, low, high)
    assert verdict is not None
    assert (verdict.code, verdict.next_offset, verdict.status) == expected


def test_an_offset_inside_the_queue_is_read() -> None:
    assert rules.offset_verdict(4, 4, 10) is None
    assert rules.offset_verdict(9, 4, 10) is None


def _units(n: int, size: int = 100, tags: int = 7) -> list[CqUnit]:
    return [CqUnit(1000 + i * size, size, tags) for i in range(n)]


def _raw(unit: CqUnit) -> bytes:
    return unit.physical_offset.to_bytes(8, "big") + b"x" * (unit.size - 8)


def test_a_batch_is_the_records_as_loaded_and_next_follows_the_last() -> None:
    units = _units(5)
    found = rules.select(10, units, 3, lambda _code: True, _raw)
    assert found.code == 0 and found.status == "FOUND"
    assert found.records == [_raw(u) for u in units[:3]]
    assert found.body == b"".join(found.records)
    assert found.next_offset == 13


def test_max_msg_nums_is_capped_and_at_least_one() -> None:
    units = _units(100)
    assert len(rules.select(0, units, 10**9, lambda _c: True, _raw).records) == rules.PULL_BATCH_MAX
    assert len(rules.select(0, units, 0, lambda _c: True, _raw).records) == 1
    assert len(rules.select(0, units, -5, lambda _c: True, _raw).records) == 1


def test_the_byte_limit_stops_a_batch_but_one_big_record_still_goes() -> None:
    big = _units(3, size=rules.PULL_BYTES_MAX)
    found = rules.select(0, big, 32, lambda _c: True, _raw)
    assert len(found.records) == 1 and found.next_offset == 1


def test_filtered_units_are_skipped_and_all_filtered_retries_immediately() -> None:
    units = [CqUnit(0, 50, 1), CqUnit(50, 50, 2), CqUnit(100, 50, 1), PRE_BLANK_UNIT]
    found = rules.select(3, units, 32, lambda code: code == 1, _raw)
    assert [r[:8] for r in found.records] == [(0).to_bytes(8, "big"), (100).to_bytes(8, "big")]
    assert found.next_offset == 7
    nothing = rules.select(3, units, 32, lambda code: code == 9, _raw)
    assert nothing.code == rules.PULL_RETRY_IMMEDIATELY and nothing.status == "NO_MATCHED_MESSAGE"
    assert nothing.next_offset == 7 and nothing.body == b""


def test_the_full_filter_and_removed_records_skip_a_unit() -> None:
    units = _units(3)
    found = rules.select(
        0, units, 32, lambda _c: True, lambda u: None if u is units[1] else _raw(u)
    )
    assert len(found.records) == 2 and found.next_offset == 3


def test_scan_limit_is_rocketmqs_filter_window() -> None:
    assert rules.scan_limit(32) == 800
    assert rules.scan_limit(10**9) == 800
    assert rules.scan_limit(-1) == 800


# --- HEART_BEAT bodies and the client registry ---------------------------------------------------


def _beat(
    client: str, group: str = "g", topics: tuple[str, ...] = ("T",), version: int = 1
) -> bytes:
    subs = [
        {
            "topic": t,
            "subString": "*",
            "expressionType": "TAG",
            "subVersion": version,
            "codeSet": [],
        }
        for t in topics
    ]
    return json.dumps(
        {
            "clientID": client,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
            ],
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        }
    ).encode()


def test_a_java_heartbeat_parses() -> None:
    beat = parse_heartbeat(_beat("10.0.0.1@1#2", topics=("T", "%RETRY%g")))
    assert beat.client_id == "10.0.0.1@1#2"
    assert beat.producer_groups == ("CLIENT_INNER_PRODUCER",)
    (consumer,) = beat.consumers
    assert consumer.group == "g" and consumer.message_model == "CLUSTERING"
    assert [s.topic for s in consumer.subscriptions] == ["T", "%RETRY%g"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"consumerDataSet":[]}',
        b'{"clientID":"c","consumerDataSet":{}}',
        b'{"clientID":"c","consumerDataSet":[{"groupName":5}]}',
        b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T","subVersion":"x"}]}]}',
        json.dumps({"clientID": "c" * 300}).encode(),
        json.dumps({"clientID": "c", "producerDataSet": [{"groupName": "p"}] * 300}).encode(),
    ],
)
def test_bad_heartbeats_are_typed_errors(body: bytes) -> None:
    with pytest.raises(HeartbeatError):
        parse_heartbeat(body)


def test_members_change_on_join_resubscribe_leave_and_close() -> None:
    links = ConsumerLinks()
    assert links.claim(1, "a") is None and links.claim(2, "b") is None
    assert links.register(1, parse_heartbeat(_beat("a")), 0) == ["g"]
    assert links.register(1, parse_heartbeat(_beat("a")), 10) == []  # nothing new
    assert links.register(2, parse_heartbeat(_beat("b")), 10) == ["g"]
    assert [e.client_id for e in links.members("g", 20)] == ["a", "b"]
    assert links.register(1, parse_heartbeat(_beat("a", topics=("T", "U"))), 30) == ["g"]
    assert links.subscription("g", "U", 40) is not None
    assert links.unregister("a", "g", "") == ["g"]
    assert links.link_closed(2) == ["g"]
    assert links.members("g", 50) == [] and links.owner("b") is None


def test_a_silent_client_expires() -> None:
    links = ConsumerLinks()
    links.claim(1, "a")
    links.register(1, parse_heartbeat(_beat("a")), 0)
    assert links.members("g", CLIENT_EXPIRY_MS - 1)
    assert links.members("g", CLIENT_EXPIRY_MS) == []
    assert links.subscription("g", "T", CLIENT_EXPIRY_MS) is None


def test_a_client_id_belongs_to_the_connection_that_claimed_it() -> None:
    links = ConsumerLinks()
    assert links.claim(1, "victim") is None
    assert links.claim(2, "victim") is not None  # an attacker's connection
    for i in range(CLIENT_IDS_PER_LINK_MAX - 1):
        assert links.claim(1, f"more-{i}") is None
    assert links.claim(1, "one-too-many") is not None


def test_the_newest_subscription_version_wins() -> None:
    links = ConsumerLinks()
    links.claim(1, "a")
    links.claim(2, "b")
    links.register(1, parse_heartbeat(_beat("a", version=5)), 0)
    links.register(2, parse_heartbeat(_beat("b", version=9)), 0)
    sub = links.subscription("g", "T", 1)
    assert sub is not None and sub.sub_version == 9


# --- queue locks (RebalanceLockManager) --------------------------------------------------------

Q0, Q1 = ("T", "b", 0), ("T", "b", 1)


def test_locks_are_exclusive_renewable_and_expire() -> None:
    locks = QueueLocks()
    assert locks.try_lock("g", "a", [Q0, Q1], 0) == [Q0, Q1]
    assert locks.try_lock("g", "b", [Q0, Q1], 1_000) == []
    assert locks.try_lock("g", "a", [Q0], 30_000) == [Q0]  # renewed
    assert locks.try_lock("g", "b", [Q0, Q1], LOCK_EXPIRY_MS + 1) == [Q1]  # Q1 expired
    assert locks.holder("g", Q0, LOCK_EXPIRY_MS + 1) == "a"
    assert locks.try_lock("other", "b", [Q0], 1) == [Q0]  # another group's table


def test_unlock_frees_only_the_callers_locks() -> None:
    locks = QueueLocks()
    locks.try_lock("g", "a", [Q0], 0)
    assert locks.unlock("g", "b", [Q0]) == 0
    assert locks.holder("g", Q0, 1) == "a"
    assert locks.unlock("g", "a", [Q0]) == 1
    assert locks.try_lock("g", "b", [Q0], 2) == [Q0]
    locks.drop_client("b")
    assert locks.holder("g", Q0, 3) is None


# --- GET_CONSUME_STATS body ---------------------------------------------------------------------


def test_consume_stats_body_is_fastjsons_object_keyed_map() -> None:
    body = format_consume_stats("broker-a", [("T", 0, 10, 4, 123), ("T", 1, 0, 0, 0)])
    assert body == (
        b'{"consumeTps":0.0,"offsetTable":{'
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":123,"pullOffset":4},'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":0,"consumerOffset":0,"lastTimestamp":0,"pullOffset":0}}}'
    )


# --- the ACL rows of the consume codes ---------------------------------------------------------


class _Link:
    link_id = 1


def _call(code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> Call:
    return Call(RemotingCommand(code=code, ext_fields=fields, body=body), _Link())  # type: ignore[arg-type]


def _names(code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> set[str]:
    needs = needs_of_call(_call(code, fields, body))
    assert isinstance(needs, list)
    return {f"{n.resource_type}:{n.name}:{'|'.join(a.value for a in n.actions)}" for n in needs}


def test_a_pull_needs_sub_on_group_and_topic_and_its_retry_topic_is_the_groups() -> None:
    fields = {"consumerGroup": "g", "topic": "T", "queueId": "0"}
    assert _names(RequestCode.PULL_MESSAGE, fields) == {"Group:g:Sub", "Topic:T:Sub"}
    retry = {**fields, "topic": "%RETRY%g"}
    assert _names(RequestCode.PULL_MESSAGE, retry) == {"Group:g:Sub"}
    other = {**fields, "topic": "%RETRY%victim"}  # another group's retries: that group's Sub
    assert _names(RequestCode.PULL_MESSAGE, other) == {"Group:g:Sub", "Group:victim:Sub"}
    for code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
        assert _names(code, fields) == {"Group:g:Sub", "Topic:T:Sub"}
    assert _names(RequestCode.GET_MAX_OFFSET, {"topic": "T"}) == {"Topic:T:Sub"}
    back = {"group": "g", "originTopic": "T", "offset": "1"}
    assert _names(RequestCode.CONSUMER_SEND_MSG_BACK, back) == {"Group:g:Sub", "Topic:T:Sub"}


def test_heartbeat_and_lock_bodies_name_their_groups_and_topics() -> None:
    beat = _beat("c", group="g", topics=("T", "%RETRY%g"))
    assert _names(RequestCode.HEART_BEAT, body=beat) == {"Group:g:Sub", "Topic:T:Sub"}
    lock = json.dumps(
        {"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": "T", "queueId": 0}]}
    ).encode()
    assert _names(RequestCode.LOCK_BATCH_MQ, body=lock) == {"Group:g:Sub", "Topic:T:Sub"}
    assert _names(RequestCode.UNLOCK_BATCH_MQ, body=b"junk") == {"Group::Sub"}
    check = json.dumps({"clientId": "c", "group": "g", "subscriptionData": {}}).encode()
    assert _names(RequestCode.CHECK_CLIENT_CONFIG, body=check) == {"Group:g:Sub"}


def test_one_connection_holds_a_bounded_number_of_group_memberships() -> None:
    links = ConsumerLinks()
    links.claim(1, "c")
    for start in range(0, GROUPS_PER_LINK_MAX, 256):
        beat = parse_heartbeat(_many_groups("c", range(start, start + 256)))
        assert links.room(1, beat) is None
        links.register(1, beat, 0)
    again = parse_heartbeat(_many_groups("c", range(0, 256)))  # the same groups: no new ones
    assert links.room(1, again) is None
    producer = parse_heartbeat(b'{"clientID":"c","producerDataSet":[{"groupName":"p"}]}')
    assert links.room(1, producer) is not None  # producer groups count too
    one_more = parse_heartbeat(
        _many_groups("c", range(GROUPS_PER_LINK_MAX, GROUPS_PER_LINK_MAX + 1))
    )
    assert links.room(1, one_more) is not None
    links.link_closed(1)
    assert links.consumers == {} and links.producers == {}


def _many_groups(client: str, numbers: range) -> bytes:
    groups = [{"groupName": f"g{i}", "subscriptionDataSet": []} for i in numbers]
    return json.dumps({"clientID": client, "consumerDataSet": groups}).encode()


def test_consume_stats_of_a_named_topic_need_sub_on_it() -> None:
    fields = {"consumerGroup": "g", "topic": "Payroll"}
    assert _names(RequestCode.GET_CONSUME_STATS, fields) == {"Group:g:Sub", "Topic:Payroll:Sub"}
    assert _names(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g"}) == {"Group:g:Sub"}
