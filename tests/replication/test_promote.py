"""Manual failover: ``rmq-spark broker promote`` over a stopped slave's store. SYNC_MASTER:
nothing acknowledged is lost and the promoted store serves as a master; ASYNC_MASTER: the
bytes lost (exact, from the old master's store) are within the lag the master reported; a
running slave, a store that never was a slave and a diverged pair are refused."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, read_records, wait_for
from replication_harness import free_port
from test_master_slave import pair, send_many

from rmq_spark.store.properties import parse_properties
from rmq_spark.store.record_encode import encode_record

pytestmark = pytest.mark.slow


def promote(store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "broker", "promote", "--store", str(store),
         *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_promoted_sync_slave_holds_every_ack_and_serves_as_master(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, slave = pair(brokers)
    acked = send_many(rocketmq, producer_for(master.address, ("orders",)), 40)
    running = promote(slave.store_dir)
    assert running.returncode != 0 and "stop it first" in running.stderr
    master.kill()
    assert slave.stop() == 0
    done = promote(slave.store_dir, "--old-master-store", str(master.store_dir))
    assert done.returncode == 0, done.stderr
    assert "lost: 0 bytes" in done.stdout
    assert set(acked) <= set(by_uniq_key(read_records(slave.store_dir)))
    ha = f"broker.ha_listen=127.0.0.1:{free_port()}"
    promoted = brokers("slave", "broker.role=SYNC_MASTER", ha)
    brokers("new-slave", "broker.role=SLAVE",
            f"broker.ha_master={_ha_of(promoted)}")  # fmt: skip
    wait_for(lambda: "slave 127.0.0.1" in promoted.log_text(), 30, "a slave of the new master")
    more = send_many(rocketmq, producer_for(promoted.address, ("orders",)), 5, tag="after")
    stored = by_uniq_key(read_records(promoted.store_dir))
    assert set(acked) | set(more) <= set(stored)


def _ha_of(broker: BrokerProcess) -> str:
    setting = next(a for a in broker.args if a.startswith("broker.ha_listen="))
    return setting.split("=", 1)[1]


def test_async_master_loses_at_most_its_reported_lag(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    ha, metrics = free_port(), free_port()
    master = brokers("master", f"broker.ha_listen=127.0.0.1:{ha}",
                     f"broker.metrics_listen=127.0.0.1:{metrics}")  # fmt: skip
    slave = brokers("slave", "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{ha}")
    producer = producer_for(master.address, ("orders",))
    send_many(rocketmq, producer, 20)
    wait_for(lambda: len(read_records(slave.store_dir)) == 20, 30, "the slave's copy")
    assert slave.stop() == 0  # the master goes on alone: ASYNC acknowledges anyway
    send_many(rocketmq, producer, 15, tag="alone")
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
    lag = float(re.search(rb'rmq_replication_lag_bytes\{role="ASYNC_MASTER"\} (\S+)', text)[1])
    master.kill()
    done = promote(slave.store_dir, "--old-master-store", str(master.store_dir))
    assert done.returncode == 0, done.stderr
    lost = int(re.search(r"lost: (\d+) bytes", done.stdout)[1])
    records = read_records(master.store_dir)
    only_master = [r for r in records if parse_properties(r.properties).get("TAGS") == "alone"]
    assert len(records) == 35 and len(only_master) == 15
    assert lost >= sum(len(encode_record(r)) for r in only_master) > 0  # (+ a BLANK, maybe)
    assert lost <= lag
    blind = promote(slave.store_dir)  # without the old master's disk: the bound, in words
    assert blind.returncode == 0 and "rmq_replication_lag_bytes" in blind.stdout


def test_promote_refuses_a_non_slave_store_and_a_diverged_pair(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, slave = pair(brokers)
    send_many(rocketmq, producer_for(master.address, ("orders",)), 3)
    other = brokers("other")
    send_many(rocketmq, producer_for(other.address, ("orders",)), 3, tag="other")
    for broker in (master, slave, other):
        assert broker.stop() == 0
    not_slave = promote(master.store_dir)
    assert not_slave.returncode != 0 and "not a slave's store" in not_slave.stderr
    diverged = promote(slave.store_dir, "--old-master-store", str(other.store_dir))
    assert diverged.returncode != 0 and "diverged" in diverged.stderr
    assert len(diverged.stderr.strip().splitlines()) == 1
