"""The broker process: clean stop on SIGTERM/SIGINT, clear exits when the port or store is taken."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from broker_harness import REPO_ROOT, BrokerProcess, broker_command, by_uniq_key, read_records

from rmq_spark.broker.producer import Producer
from rmq_spark.cli import broker_command as cli_broker


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_broker_cleanly_with_one_line_per_start_and_stop(
    broker_factory: Callable[..., BrokerProcess], sig: int
) -> None:
    broker = broker_factory()
    with Producer(broker.address) as producer:
        receipts = [producer.send("t", f"m{i}".encode()) for i in range(5)]
    assert (broker.store_dir / "abort").exists()  # RocketMQ's "not shut down cleanly" marker
    assert broker.stop(sig) == 0
    log = broker.log_text()
    assert log.count("broker started") == 1
    assert log.count("broker stopped") == 1
    assert "Traceback" not in log
    assert not (broker.store_dir / "abort").exists()
    stored = by_uniq_key(read_records(broker.store_dir))
    assert all(len(stored[r.message_id]) == 1 for r in receipts)


def test_a_restarted_broker_keeps_the_data_and_appends_after_it(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    first = broker_factory()
    with Producer(first.address) as producer:
        before = producer.send("t", b"before")
    assert first.stop() == 0
    second = broker_factory(store_dir=first.store_dir)
    with Producer(second.address) as producer:
        after = producer.send("t", b"after")
    assert second.stop() == 0
    stored = by_uniq_key(read_records(first.store_dir))
    assert stored[before.message_id][0].body == b"before"
    assert stored[after.message_id][0].body == b"after"


def _run_expecting_failure(args: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    return done


def test_a_taken_port_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = _run_expecting_failure(broker_command(tmp_path / "store", f"127.0.0.1:{port}"))
    assert f"127.0.0.1:{port}" in done.stderr
    assert "already in use" in done.stderr
    assert not (tmp_path / "store" / "abort").exists()


def test_a_store_used_by_another_broker_exits_non_zero_with_a_clear_message(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    running = broker_factory()
    done = _run_expecting_failure(broker_command(running.store_dir, "127.0.0.1:0"))
    assert str(running.store_dir) in done.stderr
    assert "in use by another process" in done.stderr
    with Producer(running.address) as producer:  # the first broker is unharmed
        producer.send("t", b"still mine")
    assert running.stop() == 0


def test_a_bad_config_value_exits_with_the_key_path(tmp_path: Path) -> None:
    done = _run_expecting_failure(
        broker_command(tmp_path / "store", "127.0.0.1:0", "--set", "broker.default_queue_count=0")
    )
    assert "broker.default_queue_count" in done.stderr


def test_the_cli_subcommand_registers_broker_with_store_listen_and_config() -> None:
    parser = argparse.ArgumentParser(prog="rmq-spark")
    subparsers = parser.add_subparsers(dest="command")
    cli_broker.register(subparsers)
    args: Any = parser.parse_args(
        ["broker", "--store", "/tmp/s", "--listen", "127.0.0.1:8081", "--config", "c.toml"]
    )
    assert (args.store, args.listen, args.config) == ("/tmp/s", "127.0.0.1:8081", "c.toml")
    assert callable(args.handler)


def test_a_broker_with_official_clients_still_connected_stops_cleanly_on_sigterm(
    broker_factory: Callable[..., BrokerProcess],
    official_producer: Callable[..., Any],
    rocketmq: Any,
) -> None:
    broker = broker_factory()
    producer = official_producer(broker.address, ("live",))  # its Telemetry stream stays open
    message = rocketmq.Message()
    message.topic = "live"
    message.body = b"before the stop"
    message_id = producer.send(message).message_id
    assert broker.stop() == 0  # ends the open streams instead of waiting for the clients
    assert "Traceback" not in broker.log_text()
    assert not (broker.store_dir / "abort").exists()
    assert by_uniq_key(read_records(broker.store_dir))[message_id]
