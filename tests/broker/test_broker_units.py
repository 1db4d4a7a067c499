"""Fast checks of the broker's pure pieces: config, topic table, ids, wire helpers."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from rmq_spark.broker.config import BrokerConfig, parse_listen, parse_topic_spec
from rmq_spark.broker.grpc.grpc_api import delivery_timestamp_ms, endpoints_of, peer_address
from rmq_spark.broker.message_id import MessageIdGenerator
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.topics import TopicStatus, TopicTable, group_queue_id, topic_name_problem
from rmq_spark.clock import ManualClock
from rmq_spark.store.message import HostAddress


def test_config_defaults_are_valid_and_route_host_follows_listen() -> None:
    config = BrokerConfig(listen="127.0.0.2:9000")
    assert config.route_host == "127.0.0.2"
    assert BrokerConfig(advertised_host="broker.local").route_host == "broker.local"


@pytest.mark.parametrize(
    ("changes", "field_name"),
    [
        ({"listen": "nohost"}, "listen"),
        ({"listen": "127.0.0.1:70000"}, "listen"),
        ({"default_queue_count": 0}, "default_queue_count"),
        ({"topics": ("bad topic",)}, "topics"),
        ({"topics": ("t:0",)}, "topics"),
        ({"grpc_receive_limit_bytes": 1024}, "grpc_receive_limit_bytes"),
        ({"delay_ms_max": 0}, "delay_ms_max"),
        ({"broker_name": ""}, "broker_name"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(changes: dict, field_name: str) -> None:
    with pytest.raises(ValueError, match=f"^{field_name}: "):
        BrokerConfig(**changes)


def test_listen_and_topic_specs_parse() -> None:
    assert parse_listen("[::1]:8081") == ("::1", 8081)
    assert parse_topic_spec("orders:3", 8) == ("orders", 3)
    assert parse_topic_spec("orders", 8) == ("orders", 8)


@pytest.mark.parametrize(
    "name", ["", "a b", "x" * 128, "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX", "%RETRY%g"]
)
def test_topic_names_that_producers_cannot_use_are_explained(name: str) -> None:
    assert topic_name_problem(name)


def test_topic_table_auto_creates_or_reports_missing() -> None:
    auto = TopicTable(auto_create=True, default_queue_count=3)
    found = auto.lookup("t1")
    assert (found.status, found.topic, found.queue_count) == (TopicStatus.OK, "t1", 3)
    assert auto.lookup("t1", "ns").topic == "ns%t1"
    fixed = TopicTable(auto_create=False, default_queue_count=3, initial=[("known", 2)])
    assert fixed.lookup("known").queue_count == 2
    assert fixed.lookup("unknown").status is TopicStatus.NOT_FOUND
    assert fixed.lookup("bad topic").status is TopicStatus.ILLEGAL


def test_round_robin_visits_every_queue_and_groups_stay_put() -> None:
    table = TopicTable(auto_create=True, default_queue_count=4)
    assert sorted(table.next_queue_id("t", 4) for _ in range(8)) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert {group_queue_id("order-17", 4) for _ in range(5)} == {group_queue_id("order-17", 4)}
    assert {group_queue_id(f"g{i}", 4) for i in range(64)} == {0, 1, 2, 3}


def test_message_ids_follow_the_client_layout_and_never_repeat() -> None:
    clock = ManualClock(1_609_459_200_000 + 185_885_205_000)
    ids = MessageIdGenerator(clock, mac=0x02FC00000001, pid=8411)
    other = MessageIdGenerator(clock, mac=0x02FC00000001, pid=8411)
    first, second, third = ids.next_id(), other.next_id(), ids.next_id()
    assert first[:26] == "0102FC0000000120DB0B146215" and len(first) == 34
    assert len({first, second, third}) == 3
    sequences = [int(x[26:], 16) for x in (first, second, third)]
    assert sequences[1] == sequences[0] + 1 and sequences[2] == sequences[0] + 2


def test_our_message_ids_never_repeat_the_official_clients_in_the_same_process(
    rocketmq: object,
) -> None:
    from rocketmq.v5.util.message_id_codec import MessageIdCodec

    client = MessageIdCodec()
    ours = MessageIdGenerator()
    client_ids = {client.next_message_id() for _ in range(200)}
    our_ids = {ours.next_id() for _ in range(200)}
    assert len(client_ids) == len(our_ids) == 200
    assert client_ids.isdisjoint(our_ids)
    assert {i[:14] for i in client_ids}.isdisjoint({i[:14] for i in our_ids})  # node fields


def test_delivery_timestamps_in_seconds_or_milliseconds_both_become_ms() -> None:
    assert delivery_timestamp_ms(Timestamp(seconds=1_700_000_010)) == 1_700_000_010_000
    assert delivery_timestamp_ms(Timestamp(seconds=1_700_000_010, nanos=5_000_000)) == (
        1_700_000_010_005
    )
    assert delivery_timestamp_ms(Timestamp(seconds=1_700_000_010_123)) == 1_700_000_010_123


def test_peer_addresses_and_endpoint_schemes() -> None:
    assert peer_address("ipv4:127.0.0.1:5000") == HostAddress("127.0.0.1", 5000)
    assert peer_address("ipv6:[::1]:5000") == HostAddress("::1", 5000)
    assert peer_address("unix:/tmp/x") is None
    assert endpoints_of("127.0.0.1", 1).scheme == pb.IPv4
    assert endpoints_of("::1", 1).scheme == pb.IPv6
    assert endpoints_of("localhost", 1).scheme == pb.DOMAIN_NAME
