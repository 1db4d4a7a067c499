"""Producers over two rmq-spark brokers and a real name server: our ``Producer`` (round-robin
over both brokers, retry on the other one, the latency fault table against a SIGSTOPped
broker) and the official 5.x Python client, each across a SIGKILL and restart of a broker:
sends go on, no acknowledged message is lost, the restarted broker takes sends again."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
from broker.broker_harness import wait_for
from cluster_harness import ClusterBroker, create_topic, route_brokers, wait_route
from failover import (
    PER_PHASE,
    assert_the_survivor_took_the_sends,
    check_no_acknowledged_loss,
    run_across_a_kill,
)
from namesrv_harness import Namesrv

from rmq_spark.broker.producer import Producer
from rmq_spark.clock import ManualClock

pytestmark = pytest.mark.slow

WINDOW_MS = 60_000  # the fault table's window for a failure (its last entry), on a manual clock


@contextmanager
def stopped(broker: ClusterBroker) -> Iterator[None]:
    """``broker`` SIGSTOPped (it keeps its connections: it stays in the routes), then SIGCONT."""
    assert broker.proc is not None
    pid = broker.proc.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _state(pid) == "T", 10, f"{broker.name} (pid {pid}) to stop")
        yield
    finally:
        os.kill(broker.proc.proc.pid, signal.SIGCONT)


def _state(pid: int) -> str:
    """The process state letter of ``/proc/PID/stat`` ("T": stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def _topic(namesrv: Namesrv, brokers: list[ClusterBroker], topic: str) -> None:
    """``topic`` on both brokers, each routed at its own endpoint (a send named for one broker
    reaches that broker)."""
    create_topic(namesrv, topic)
    for broker in brokers:
        wait_route(broker.address, topic, {"broker-a", "broker-b"})
    endpoints = {broker.name: broker.address for broker in brokers}
    for broker in brokers:
        routed = {name: at for name, (at, _count) in route_brokers(broker.address, topic).items()}
        assert routed == endpoints, f"{broker.name}'s route of {topic}"


def test_fault_table_avoids_a_stopped_broker_for_its_window_then_uses_it_again(
    namesrv: Namesrv, brokers: list[ClusterBroker], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = brokers
    _topic(namesrv, brokers, "Faults")
    clock = ManualClock(int(time.time() * 1000))  # the fault table's time, moved by the test
    windows = (0, 0, 0, 0, 0, 0, WINDOW_MS)
    with (
        caplog.at_level(logging.DEBUG, logger="rmq_spark.broker.cluster"),
        Producer(a.address, send_latency_fault_enable=True, not_available_ms=windows,
                 request_timeout_s=1, clock=clock) as producer,
    ):  # fmt: skip
        send = lambda: producer.send("Faults", b"x").broker  # noqa: E731
        assert {send() for _ in range(16)} == {"broker-a", "broker-b"}
        with stopped(b):
            assert {send() for _ in range(16)} == {"broker-a"}  # one attempt timed out on b
        assert "fault table: broker broker-b failed" in caplog.text
        assert f"avoided for {WINDOW_MS} ms" in caplog.text
        assert {send() for _ in range(16)} == {"broker-a"}  # b is back, but in its window
        clock.advance(WINDOW_MS)
        assert {send() for _ in range(16)} == {"broker-a", "broker-b"}


def test_without_the_table_a_failed_send_is_retried_on_the_other_broker(
    namesrv: Namesrv, brokers: list[ClusterBroker]
) -> None:
    a, b = brokers
    _topic(namesrv, brokers, "Retries")
    with Producer(a.address, request_timeout_s=1) as producer:
        send = lambda: producer.send("Retries", b"x").broker  # noqa: E731
        assert {send() for _ in range(16)} == {"broker-a", "broker-b"}
        with stopped(b):
            assert {send() for _ in range(4)} == {"broker-a"}
    with Producer(a.address, request_timeout_s=1, retry_times_when_send_failed=0) as once:
        with stopped(b), pytest.raises(Exception, match="DEADLINE_EXCEEDED from broker-b"):
            for _ in range(16):  # round-robin reaches b within a route's length (8 queues)
                once.send("Retries", b"x")


def test_our_producer_keeps_sending_across_a_broker_kill_and_loses_nothing(
    namesrv: Namesrv, brokers: list[ClusterBroker]
) -> None:
    a, _ = brokers
    _topic(namesrv, brokers, "KillOurs")
    windows = (0, 0, 500, 1000, 2000, 3000, 5000)
    with Producer(a.address, send_latency_fault_enable=True, not_available_ms=windows,
                  route_refresh_s=2, request_timeout_s=3) as producer:  # fmt: skip

        def send(i: int) -> tuple[str, str]:
            receipt = producer.send("KillOurs", f"m{i}".encode())
            return receipt.message_id, receipt.broker

        run = run_across_a_kill(send, namesrv, brokers)
    per_broker = check_no_acknowledged_loss(run, brokers)
    print(f"ours: acked per broker {per_broker}, failed {run.failed}, longest {run.longest_s}")
    assert run.failed == {"both": 0, "killed": 0, "restarted": 0}
    assert_the_survivor_took_the_sends(run)


def test_official_python_client_keeps_sending_across_a_broker_kill_and_loses_nothing(
    namesrv: Namesrv, brokers: list[ClusterBroker], rocketmq: ModuleType
) -> None:
    a, b = brokers
    _topic(namesrv, brokers, "KillOfficial")
    config = rocketmq.ClientConfiguration(a.address, rocketmq.Credentials(), request_timeout=3)
    producer = rocketmq.Producer(config, ("KillOfficial",))
    producer.startup()
    try:

        def send(i: int) -> tuple[str, str]:
            message = rocketmq.Message()
            message.topic = "KillOfficial"
            message.body = f"m{i}".encode()
            receipt = producer.send(message)
            # the queue's endpoints name the broker that took it (its own gRPC port)
            endpoint = str(receipt.message_queue.endpoints)
            return receipt.message_id, "broker-b" if b.address in endpoint else "broker-a"

        # the client asks for routes every 30 s: the restarted broker is back within two
        run = run_across_a_kill(send, namesrv, brokers, return_deadline_s=150)
    finally:
        producer.shutdown()
    per_broker = check_no_acknowledged_loss(run, brokers)
    print(f"official: acked per broker {per_broker}, failed {run.failed}, longest {run.longest_s}")
    assert run.count("killed") >= PER_PHASE
