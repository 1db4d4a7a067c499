"""The Spark sink through a cluster (``option("namesrv")``): rows spread over both brokers of
the topic's route, a rewrite with the same ``writeId`` stores nothing again (exactly once), a
broker that stops answering mid-write is replaced by the other one for its requests, and a
replay after it came back stores the rows that failed over a second time on it (the documented
at-least-once of the failed-over rows)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker.broker_harness import props, read_records
from cluster_harness import ClusterBroker, cluster_brokers, wait_route
from namesrv_harness import Namesrv

from rmq_spark.errors import SinkError
from rmq_spark.spark.sink_options import parse_sink_options

TOPIC = "SinkOut"
SETTINGS = (f"broker.topics={TOPIC}:4", "broker.auto_create_topics=false")
ROWS = 200


@pytest.fixture
def two(tmp_path: Path, namesrv: Namesrv) -> Iterator[list[ClusterBroker]]:
    yield from cluster_brokers(tmp_path, namesrv, *SETTINGS)


def _write(spark: Any, namesrv: Namesrv, write_id: str, **extra: str) -> None:
    df = spark.range(ROWS).selectExpr(f"'{TOPIC}' AS topic", "CAST(id AS STRING) AS body")
    writer = df.repartition(2).write.format("rocketmq").mode("append")
    options = {"namesrv": namesrv.addr, "writeId": write_id, "batchMessages": "16", **extra}
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def _keys(broker: ClusterBroker) -> list[str]:
    return [props(r)["UNIQ_KEY"] for r in read_records(broker.store) if r.topic == TOPIC]


@pytest.mark.spark
@pytest.mark.slow
def test_sink_spreads_over_the_cluster_once_and_fails_over_a_stopped_broker(
    spark: Any, namesrv: Namesrv, two: list[ClusterBroker]
) -> None:
    a, b = two
    for broker in two:
        wait_route(broker.address, TOPIC, {"broker-a", "broker-b"})
    _write(spark, namesrv, "w1")
    first = {broker.name: _keys(broker) for broker in two}
    assert all(len(keys) > ROWS // 4 for keys in first.values()), {
        name: len(keys) for name, keys in first.items()
    }  # round-robin: both take a share
    assert len(set(first["broker-a"]) | set(first["broker-b"])) == ROWS
    _write(spark, namesrv, "w1")  # a replay: every row goes where it went, and is dropped
    assert {broker.name: _keys(broker) for broker in two} == first

    assert b.proc is not None
    os.kill(b.proc.proc.pid, signal.SIGSTOP)  # b stays in the routes, and times out
    try:
        _write(spark, namesrv, "w2", requestTimeoutMs="1000", maxAttempts="1")
    finally:
        os.kill(b.proc.proc.pid, signal.SIGCONT)
    w2_on_a = [key for key in _keys(a) if key.startswith("w2-")]
    assert len(w2_on_a) == ROWS and len(set(w2_on_a)) == ROWS  # all of w2, on a, once
    # b may have stored the requests it was still reading when stopped: rows it acknowledged
    # to nobody; those and the failed-over rows are on it after a replay (at least once)
    _write(spark, namesrv, "w2")
    w2_on_b = [key for key in _keys(b) if key.startswith("w2-")]
    assert len(set(w2_on_b)) == len(w2_on_b) > 0
    assert [key for key in _keys(a) if key.startswith("w2-")] == w2_on_a


def test_namesrv_options_are_checked_in_one_line() -> None:
    parsed = parse_sink_options({"namesrv": "127.0.0.1:9876; 127.0.0.2:9876"})
    assert parsed.namesrv == "127.0.0.1:9876;127.0.0.2:9876" and not parsed.embedded
    assert parsed.retry_times_when_send_failed == 2 and not parsed.send_latency_fault_enable
    with pytest.raises(SinkError, match="option namesrv: expected host:port"):
        parse_sink_options({"namesrv": "nohost"})
    with pytest.raises(SinkError, match="exactly one destination"):
        parse_sink_options({"namesrv": "h:1", "brokers": "h:2"})
    with pytest.raises(SinkError, match="store.\\* and broker.\\* configure the embedded"):
        parse_sink_options({"namesrv": "h:1", "store.flush_disk_type": "SYNC_FLUSH"})
    with pytest.raises(SinkError, match="option sendLatencyFaultEnable: expected true or"):
        parse_sink_options({"namesrv": "h:1", "sendLatencyFaultEnable": "yes"})
    with pytest.raises(SinkError, match="option retryTimesWhenSendFailed: expected an"):
        parse_sink_options({"namesrv": "h:1", "retryTimesWhenSendFailed": "-1"})
