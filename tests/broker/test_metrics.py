"""The broker's Prometheus endpoint (``broker.metrics_listen``), scraped over HTTP.

A real broker process, the official client as producer and consumer: the put counter moves by
exactly the messages sent, a consumer group's lag appears and falls to 0 once it acknowledged
them, and a broker without the setting serves no metrics at all.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil
import pytest
from broker_harness import BrokerProcess
from prometheus_client.parser import text_string_to_metric_families

from rmq_spark.broker.config import BrokerConfig

pytestmark = pytest.mark.slow

_TOPIC = "MetricsOrders"
_GROUP = "metrics-group"
_INVISIBLE_S = 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _rocketmq(
    samples: dict[Any, float], name: str, topic: str | None = _TOPIC, is_retry: str | None = "false"
) -> float | None:
    """A sample of the RocketMQ-named metrics of ``_GROUP`` (``None`` drops a label)."""
    labels = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    labels["consumer_group"] = _GROUP
    if topic is not None:
        labels["topic"] = topic
    if is_retry is not None and topic is not None:
        labels["is_retry"] = is_retry
    return _value(samples, name, **labels)


def _send(rocketmq: ModuleType, producer: Any, count: int) -> None:
    for i in range(count):
        message = rocketmq.Message()
        message.topic = _TOPIC
        message.body = f"order {i}".encode()
        producer.send(message)


def test_the_put_counter_moves_by_the_messages_sent_and_lag_falls_after_consuming(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: ModuleType,
) -> None:
    port = _free_port()
    broker = broker_factory(f"broker.metrics_listen=127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/metrics"
    assert f"metrics {url}" in broker.log_text()
    before = _scrape(url)
    assert _value(before, "rmq_put_messages_total", topic=_TOPIC) is None
    assert _value(before, "rmq_topics") is not None
    assert _value(before, "rmq_commitlog_max_offset_bytes") == 0

    producer = official_producer(broker.address, (_TOPIC,))
    _send(rocketmq, producer, 7)
    after = _scrape(url)
    assert _value(after, "rmq_put_messages_total", topic=_TOPIC) == 7
    assert (_value(after, "rmq_put_bytes_total", topic=_TOPIC) or 0) > 7 * len("order 0")
    assert _value(after, "rmq_put_latency_seconds_count") == 7
    node = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    in_total = _value(
        after, "rocketmq_messages_in_total", topic=_TOPIC, message_type="normal", **node
    )
    assert in_total == 7  # RocketMQ 5's names and labels, beside the rmq_* ones
    assert _value(
        after, "rocketmq_throughput_in_total", topic=_TOPIC, message_type="normal", **node
    ) == _value(after, "rmq_put_bytes_total", topic=_TOPIC)
    rpc = {"protocol_type": "grpc", "is_long_polling": "false", "result": "success", **node}
    sends = _value(
        after, "rocketmq_rpc_latency_count", request_code="SendMessage", response_code="OK", **rpc
    )
    assert sends == 7  # every unary call is timed with its answer's status code
    assert _value(after, "rocketmq_rpc_latency_bucket", le="+Inf", request_code="SendMessage",
                  response_code="OK", **rpc) == 7  # fmt: skip
    assert _value(after, "rmq_put_latency_seconds_bucket", le="+Inf") == 7
    assert (_value(after, "rmq_store_fsync_seconds_count") or 0) >= 1  # SYNC: fsync per ack
    assert _value(after, "rmq_commitlog_max_offset_bytes") == _value(
        after, "rmq_put_bytes_total", topic=_TOPIC
    )
    assert (_value(after, "rmq_store_disk_bytes") or 0) > 0

    config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials(), request_timeout=5)
    subscription = {_TOPIC: rocketmq.FilterExpression("*")}
    consumer = rocketmq.SimpleConsumer(config, _GROUP, subscription)
    consumer.startup()
    try:
        got: list[Any] = []
        end = time.monotonic() + 30
        while len(got) < 7:
            assert time.monotonic() < end, f"received {len(got)} of 7 messages"
            got += consumer.receive(32, _INVISIBLE_S)
        received = _scrape(url)
        assert _value(received, "rmq_consumer_lag_messages", group=_GROUP, topic=_TOPIC) == 7
        assert _rocketmq(received, "rocketmq_consumer_lag_messages") == 7
        assert _rocketmq(received, "rocketmq_consumer_inflight_messages") == 7
        assert _rocketmq(received, "rocketmq_consumer_ready_messages") == 0
        assert (_rocketmq(received, "rocketmq_consumer_lag_latency") or -1) >= 0
        assert _rocketmq(received, "rocketmq_send_to_dlq_messages_total", topic=None) == 0
        assert _value(received, "rmq_consumer_received_messages_total", group=_GROUP) == 7
        assert _value(received, "rmq_consumer_groups") == 1
        for message in got[:3]:
            consumer.ack(message)
        partly = _scrape(url)
        lag = _value(partly, "rmq_consumer_lag_messages", group=_GROUP, topic=_TOPIC)
        assert lag is not None and 4 <= lag < 7  # committed offsets move over acked prefixes
        for message in got[3:]:
            consumer.ack(message)
        done = _scrape(url)
        assert _value(done, "rmq_consumer_lag_messages", group=_GROUP, topic=_TOPIC) == 0
        assert _rocketmq(done, "rocketmq_consumer_lag_messages") == 0
        assert _rocketmq(done, "rocketmq_consumer_lag_latency") == 0
        assert _rocketmq(done, "rocketmq_consumer_inflight_messages") == 0
        out = _rocketmq(done, "rocketmq_messages_out_total", topic=None, is_retry=None)
        assert out == 7
        assert _value(done, "rmq_consumer_acked_messages_total", group=_GROUP) == 7
    finally:
        consumer.shutdown()
    assert broker.stop() == 0


def test_a_broker_without_the_setting_serves_no_metrics(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    assert "metrics off" in broker.log_text()
    listening = {
        conn.laddr.port
        for conn in psutil.Process(broker.proc.pid).net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening  # the gRPC port (and the TLS front's inner port)
    for port in listening:
        with pytest.raises((urllib.error.URLError, OSError, http.client.HTTPException)):
            _scrape(f"http://127.0.0.1:{port}/metrics")


def test_metrics_listen_must_be_host_and_port() -> None:
    assert BrokerConfig().metrics_listen == ""  # off unless configured
    with pytest.raises(ValueError, match="metrics_listen: expected host:port"):
        BrokerConfig(metrics_listen="9105")
