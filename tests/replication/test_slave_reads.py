"""Reading a slave: ``rmq-spark dump`` of a slave's store while it replicates (each dump a
prefix of the master's log), and a 4.x consumer's offsets on a slave whose master is gone
(kept on the slave; the master's own table wins again once it is back, as RocketMQ's
``SlaveSynchronize`` does)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from broker.broker_harness import BrokerProcess, read_records, wait_for
from replication_harness import SEGMENT, remoting_call
from test_master_slave import _send_until, pair
from test_slave_sync import _pair

from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.store.properties import UNIQ_KEY, parse_properties

pytestmark = pytest.mark.slow


def _dump_keys(store: Any) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "dump", "--store", str(store), "--no-crc"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [row["properties"][UNIQ_KEY] for row in rows]


def test_dump_reads_a_slave_store_while_it_replicates(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    master, slave = pair(brokers)
    producer = producer_for(master.address, ("orders",))
    acked: list[str] = []
    stop = threading.Event()
    sender = threading.Thread(target=_send_until, args=(rocketmq, producer, acked, stop, 0))
    sender.start()
    dumps = []
    try:
        wait_for(lambda: len(acked) > 20, 30, "sends")
        for _ in range(3):
            dumps.append(_dump_keys(slave.store_dir))  # the slave appends meanwhile
    finally:
        stop.set()
        sender.join(timeout=60)
    wait_for(lambda: set(acked) <= set(_dump_keys(slave.store_dir)), 30, "every ack on the slave")
    logged = [parse_properties(r.properties)[UNIQ_KEY] for r in read_records(master.store_dir)]
    assert any(dumps)
    for keys in dumps:
        assert keys == logged[: len(keys)]


def _offset(port: int, queue: int) -> int | None:
    """The group's offset; ``None`` until the slave knows the topic and the group."""
    fields = {"consumerGroup": "billing", "topic": "orders", "queueId": str(queue)}
    answer = remoting_call(port, RequestCode.QUERY_CONSUMER_OFFSET, fields)
    return int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else None


def _commit(port: int, queue: int, offset: int) -> None:
    fields = {"consumerGroup": "billing", "topic": "orders", "queueId": str(queue),
              "commitOffset": str(offset)}  # fmt: skip
    answer = remoting_call(port, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_offsets_committed_on_a_slave_are_kept_while_the_master_is_gone(
    brokers: Callable[..., BrokerProcess], producer_for: Callable[..., Any], rocketmq: ModuleType
) -> None:
    from test_master_slave import send_many

    master, remoting, slave, slave_port = _pair(brokers)
    send_many(rocketmq, producer_for(master.address, ("orders",)), 24)
    queue = read_records(master.store_dir)[0].queue_id
    _commit(remoting, queue, 1)
    wait_for(lambda: _offset(slave_port, queue) == 1, 30, "the master's offset on the slave")
    assert master.stop() == 0  # saves its offsets: the restarted master holds 1
    _commit(slave_port, queue, 2)  # the 4.x client commits to the slave when the master is gone
    pull = {"consumerGroup": "billing", "topic": "orders", "queueId": str(queue),
            "queueOffset": "0", "maxMsgNums": "1", "sysFlag": str(0x4 | 0x1),
            "commitOffset": "3", "subscription": "*", "expressionType": "TAG"}  # fmt: skip
    assert remoting_call(slave_port, RequestCode.PULL_MESSAGE, pull).code == ResponseCode.SUCCESS
    wait_for(lambda: "config sync from" in slave.log_text() and "failed" in slave.log_text(),
             30, "a failed sync round")  # fmt: skip
    assert _offset(slave_port, queue) == 2  # kept; a pull's commit flag is not (RocketMQ)
    settings = [master.args[i + 1] for i, a in enumerate(master.args) if a == "--set"]
    back = brokers("master", *[s for s in settings if s != SEGMENT])  # the same store, ports
    wait_for(lambda: _offset(slave_port, queue) == 1, 30, "the master's table again")
    assert back.proc.poll() is None
