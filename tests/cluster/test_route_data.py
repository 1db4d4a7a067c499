"""A name server's TopicRouteData -> brokers with their gRPC endpoints (pure)."""

from __future__ import annotations

import pytest

from rmq_spark.broker.cluster.route_data import (
    BrokerRoute,
    RouteDataError,
    grpc_announcement,
    parse_route,
)
from rmq_spark.broker.config_files.rocketmq_config import DataVersion
from rmq_spark.broker.remoting.namesrv_api import BrokerIdentity, register_broker

# As a 5.3.3 name server writes it (fastjson: the brokerAddrs keys are bare numbers).
BODY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:20910"},"brokerName":"broker-b",'
    b'"cluster":"C","enableActingMaster":false},{"brokerAddrs":{0:"127.0.0.1:10910",'
    b'1:"127.0.0.1:10920"},"brokerName":"broker-a","cluster":"C","enableActingMaster":false},'
    b'{"brokerAddrs":{1:"127.0.0.1:30910"},"brokerName":"broker-c","cluster":"C"}],'
    b'"filterServerTable":{"127.0.0.1:10910":["grpc://127.0.0.1:10911"]},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,"topicSysFlag":0,'
    b'"writeQueueNums":8},{"brokerName":"broker-b","perm":4,"readQueueNums":4,'
    b'"topicSysFlag":0,"writeQueueNums":4},{"brokerName":"broker-c","perm":6,'
    b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)


def test_route_lists_masters_with_announced_or_rocketmq_endpoints() -> None:
    assert parse_route(BODY, default_grpc_port=8081) == (
        BrokerRoute("broker-a", "127.0.0.1:10910", "127.0.0.1", 10911, 8, 6),
        # no announcement (a RocketMQ broker): its host and the proxy's gRPC port, as
        # RocketMQ's local proxy; broker-c has no master: left out
        BrokerRoute("broker-b", "127.0.0.1:20910", "127.0.0.1", 8081, 4, 4),
    )
    b = parse_route(BODY, 8081)[1]
    assert b.readable and not b.writable


def test_registration_announces_the_grpc_endpoint() -> None:
    identity = BrokerIdentity("C", "broker-a", "127.0.0.1:10910", "127.0.0.1:10911",
                              grpc_addr="127.0.0.1:10911")  # fmt: skip
    body = register_broker(identity, {}, DataVersion()).body
    assert b'"filterServerList":["grpc://127.0.0.1:10911"]' in body
    assert grpc_announcement("127.0.0.1", 10911) == "grpc://127.0.0.1:10911"
    plain = BrokerIdentity("C", "broker-a", "127.0.0.1:10910", "127.0.0.1:10911")
    assert b'"filterServerList":[]' in register_broker(plain, {}, DataVersion()).body


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[]", b'{"queueDatas":[{"brokerName":"a"}],"brokerDatas":[{"brokerName":'
     b'"a","brokerAddrs":{0:"h:1"}}]}', b'{"brokerDatas":5}', b"\xff\xfe"],
)  # fmt: skip
def test_garbage_is_a_typed_error(body: bytes) -> None:
    with pytest.raises(RouteDataError, match="not a TopicRouteData"):
        parse_route(body, 8081)


def test_empty_route() -> None:
    assert parse_route(b'{"brokerDatas":[],"queueDatas":[]}', 8081) == ()
