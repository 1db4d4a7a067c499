"""A master and a slave broker process (RocketMQ's HA protocol between them), official-client
sends: SYNC_MASTER acknowledges only what the slave holds, the slave's segments are the
master's bytes, a slave refuses sends, a SYNC_MASTER without a slave does not answer OK, and a
diverged slave is refused."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, read_records, wait_for
from replication_harness import free_port

KILLS = int(os.environ.get("RMQ_REPLICATION_KILLS", "5"))  # the issue asks 20; CI runs 5


def pair(brokers: Callable[..., BrokerProcess], *extra: str) -> tuple[BrokerProcess, BrokerProcess]:
    port = free_port()
    master = brokers(
        "master", "broker.role=SYNC_MASTER", f"broker.ha_listen=127.0.0.1:{port}", *extra
    )
    slave = brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port}")
    wait_for(lambda: "slave 127.0.0.1" in master.log_text(), 20, "the slave to connect")
    return master, slave


def send_many(rocketmq: ModuleType, producer: Any, count: int, tag: str = "t") -> list[str]:
    ids = []
    for i in range(count):
        message = rocketmq.Message()
        message.topic = "orders"
        message.body = f"{tag}-{i}-".encode() + random.Random(i).randbytes(1000)
        message.tag = tag
        ids.append(producer.send(message).message_id)
    return ids


def segments(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store / "commitlog").iterdir())}


def test_sync_master_acks_only_what_the_slave_holds_byte_for_byte(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, slave = pair(brokers)
    producer = producer_for(master.address, ("orders",))
    ids = send_many(rocketmq, producer, 150)  # ~150 KiB: three 64 KiB segments
    stored = by_uniq_key(read_records(slave.store_dir))  # before anything stops
    assert set(ids) <= set(stored)
    producer.shutdown()
    assert master.stop() == 0
    assert slave.stop() == 0
    # A clean stop with a slave connected says so without an ERROR or a traceback.
    assert " ERROR " not in master.log_text() and "Traceback" not in master.log_text()
    mine, theirs = segments(master.store_dir), segments(slave.store_dir)
    assert len(mine) >= 3
    assert list(theirs) == list(mine)
    assert theirs == mine  # byte-identical, file by file


def test_send_to_a_slave_is_refused(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    _, slave = pair(brokers)
    producer = producer_for(slave.address, ("orders",))
    with pytest.raises(Exception, match="SLAVE"):
        send_many(rocketmq, producer, 1)
    assert read_records(slave.store_dir) == []


def test_sync_master_without_a_slave_does_not_answer_ok(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master = brokers(
        "master", "broker.role=SYNC_MASTER", f"broker.ha_listen=127.0.0.1:{free_port()}"
    )
    producer = producer_for(master.address, ("orders",))
    with pytest.raises(Exception, match="SLAVE_NOT_AVAILABLE"):
        send_many(rocketmq, producer, 1)


def test_diverged_slave_is_refused(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    port = free_port()
    master = brokers("master", f"broker.ha_listen=127.0.0.1:{port}")
    other = brokers("slave")  # a master of its own first: its log is not the master's
    send_many(rocketmq, producer_for(master.address, ("orders",)), 5, tag="a")
    send_many(rocketmq, producer_for(other.address, ("orders",)), 5, tag="b")
    assert other.stop() == 0
    before = segments(other.store_dir)
    slave = brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port}")
    wait_for(lambda: "refused: diverged" in slave.log_text(), 20, "the divergence error")
    assert segments(slave.store_dir) == before  # nothing merged


def test_master_killed_at_random_points_loses_no_acked_message(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    rng = random.Random(31)
    port = free_port()
    acked: list[str] = []
    slave = brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port}")
    for round_ in range(KILLS):
        master = brokers("master", "broker.role=SYNC_MASTER", f"broker.ha_listen=127.0.0.1:{port}")
        wait_for(lambda m=master: "slave 127.0.0.1" in m.log_text(), 30, "the slave")
        producer = producer_for(master.address, ("orders",))
        stop = threading.Event()
        sender = threading.Thread(
            target=_send_until, args=(rocketmq, producer, acked, stop, round_)
        )
        sender.start()
        time.sleep(rng.uniform(0.2, 1.5))
        master.kill()
        stop.set()
        sender.join(timeout=60)
        if round_ == KILLS // 2:  # the slave restarts mid-stream too
            assert slave.stop() == 0
            slave = brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port}")
        stored = by_uniq_key(read_records(slave.store_dir))
        missing = [i for i in acked if i not in stored]
        assert not missing, f"round {round_}: {len(missing)} acknowledged messages not on the slave"
    assert acked


def _send_until(
    rocketmq: ModuleType, producer: Any, acked: list[str], stop: threading.Event, round_: int
) -> None:
    i = 0
    while not stop.is_set():
        message = rocketmq.Message()
        message.topic = "orders"
        message.body = f"round {round_} message {i}".encode()
        try:
            acked.append(producer.send(message).message_id)
        except Exception:
            return
        i += 1


def test_replication_lag_is_logged_and_exposed_on_both_sides(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    import urllib.request

    ports = [free_port(), free_port()]
    master, slave = pair(
        brokers, f"broker.metrics_listen=127.0.0.1:{ports[0]}", "broker.ha_lag_log_interval_ms=200"
    )
    send_many(rocketmq, producer_for(master.address, ("orders",)), 3)
    text = urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/metrics", timeout=10).read()
    assert b'rmq_replication_lag_bytes{role="SYNC_MASTER"} 0.0' in text
    assert b'rmq_replication_peers{role="SYNC_MASTER"} 1.0' in text
    wait_for(lambda: "1 peer(s) connected" in master.log_text(), 10, "the lag log line")


def test_a_slave_killed_mid_stream_resumes_without_gaps(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    port = free_port()
    master = brokers("master", f"broker.ha_listen=127.0.0.1:{port}")  # ASYNC: sends go on
    slave_args = ("broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{port}")
    slave = brokers("slave", *slave_args)
    producer = producer_for(master.address, ("orders",))
    acked: list[str] = []
    stop = threading.Event()
    sender = threading.Thread(target=_send_until, args=(rocketmq, producer, acked, stop, 0))
    sender.start()
    try:
        for _ in range(3):
            seen = len(acked)
            wait_for(lambda seen=seen: len(acked) > seen + 30, 30, "more sends")
            slave.kill()  # -9, while the master streams
            slave = brokers("slave", *slave_args)
    finally:
        stop.set()
        sender.join(timeout=60)
    wait_for(lambda: set(acked) <= set(by_uniq_key(read_records(slave.store_dir))), 30,
             "every message on the restarted slave")  # fmt: skip
    assert slave.stop() == 0 and master.stop() == 0
    assert segments(slave.store_dir) == segments(master.store_dir)
