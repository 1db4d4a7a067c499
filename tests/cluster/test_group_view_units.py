"""PURE: ``parse_consume_stats`` reads ``ConsumeStats`` as fastjson writes it (object keys),
what our brokers answer and Apache RocketMQ's; garbage is one typed error."""

from __future__ import annotations

import pytest

from rmq_spark.broker.cluster.group_view import ClusterViewError, GroupQueue, parse_consume_stats
from rmq_spark.broker.remoting.consume_stats import format_consume_stats

ROCKETMQ = (
    b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"rmq-a","queueId":1,"topic":"T"}:'
    b'{"brokerOffset":9,"consumerOffset":-1,"lastTimestamp":0,"pullOffset":0},\n'
    b' {"brokerName":"rmq-a","queueId":0,"topic":"T"}:{"brokerOffset":4,"consumerOffset":4,'
    b'"lastTimestamp":1700000000000,"pullOffset":4}}}'
)


def test_our_brokers_and_rocketmqs_stats_parse() -> None:
    ours = format_consume_stats("a", [("T", 0, 5, 3, 0), ("U", 2, 7, 0, 0)])
    assert parse_consume_stats(ours) == [("T", 0, 3, 5), ("U", 2, 0, 7)]
    assert parse_consume_stats(ROCKETMQ) == [("T", 1, 0, 9), ("T", 0, 4, 4)]
    assert parse_consume_stats(b'{"consumeTps":0.0,"offsetTable":{}}') == []
    assert GroupQueue("a", "T", 1, 0, 9).lag == 9


@pytest.mark.parametrize(
    "body", [b"", b"[]", b'{"offsetTable":{{"x":1}:{}}}', b'{"offsetTable":{{"topic":"T"', b"\xff"]
)
def test_garbage_is_one_typed_error(body: bytes) -> None:
    with pytest.raises(ClusterViewError):
        parse_consume_stats(body)
