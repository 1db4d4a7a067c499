"""REGISTER_BROKER / UNREGISTER_BROKER as built for the name server (REMOTING_PROTOCOL.md 3.2,
3.3), the broker's name-server settings, and the registration client against peers that break
the protocol (a real socket server sending garbage, a port nobody listens on)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_spark.broker.config import BrokerConfig, parse_namesrv_addr
from rmq_spark.broker.config_files.rocketmq_config import DataVersion
from rmq_spark.broker.remoting.codec import decode_one, encode_frame
from rmq_spark.broker.remoting.namesrv_api import (
    BrokerIdentity,
    register_broker,
    registered_topics,
    unregister_broker,
)
from rmq_spark.broker.remoting.namesrv_client import NamesrvRegistration

IDENTITY = BrokerIdentity("SparkCluster", "rmq-b1", "10.0.0.5:8081", "10.0.0.5:8082")


def test_register_broker_header_and_body_are_a_5_3_3_brokers() -> None:
    topics = registered_topics({"Orders": 4, "%RETRY%g": 1}, IDENTITY)
    version = DataVersion(3, 0, 1_700_000_000_000)
    command = decode_one(encode_frame(register_broker(IDENTITY, topics, version)))
    assert command.code == 103 and command.ext_fields is not None
    assert command.ext_fields == {
        "brokerAddr": "10.0.0.5:8081",
        "brokerId": "0",
        "brokerName": "rmq-b1",
        "clusterName": "SparkCluster",
        "haServerAddr": "10.0.0.5:8082",
        "compressed": "false",
        "enableActingMaster": "false",
        "bodyCrc32": str(zlib.crc32(command.body) & 0x7FFFFFFF),
    }
    body = json.loads(command.body)
    assert body["filterServerList"] == []
    wrapper = body["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"] == {
        "counter": 3,
        "stateVersion": 0,
        "timestamp": 1_700_000_000_000,
    }
    table = wrapper["topicConfigTable"]
    assert set(table) == {"Orders", "%RETRY%g", "SparkCluster", "rmq-b1"}
    assert table["Orders"] == {
        "attributes": {},
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "Orders",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert table["rmq-b1"]["perm"] == 7 and table["rmq-b1"]["readQueueNums"] == 16


def test_unregister_broker_names_the_broker() -> None:
    command = unregister_broker(IDENTITY)
    assert command.code == 104 and command.body == b""
    assert command.ext_fields == {
        "brokerAddr": "10.0.0.5:8081",
        "brokerId": "0",
        "brokerName": "rmq-b1",
        "clusterName": "SparkCluster",
    }


def test_namesrv_addr_is_rocketmqs_semicolon_list() -> None:
    assert parse_namesrv_addr("") == ()
    assert parse_namesrv_addr("h1:9876; h2:9877;") == (("h1", 9876), ("h2", 9877))
    for bad, reason in (("h1", "expected host:port"), ("h1:0", "in \\[1, 65535\\]")):
        with pytest.raises(ValueError, match=reason):
            parse_namesrv_addr(bad)


def test_broker_config_checks_the_namesrv_keys() -> None:
    assert BrokerConfig().namesrv_addr == "" and BrokerConfig().register_interval_ms == 30_000
    with pytest.raises(ValueError, match="namesrv_addr: expected host:port"):
        BrokerConfig(namesrv_addr="localhost")
    with pytest.raises(ValueError, match="register_interval_ms: must be in"):
        BrokerConfig(register_interval_ms=500)


def test_broker_with_a_bad_namesrv_option_stops_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "broker", "--store", str(tmp_path / "s"),
         "--namesrv", "nameserver-without-port"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "broker.namesrv_addr" in done.stderr and "expected host:port" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def garbage_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server that reads a request and answers with a frame whose header length is past
    its end; yields its port and what it received."""
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                received.append(conn.recv(65536))
                conn.sendall(b"\x00\x00\x00\x08\x00\x00\x00\x40" + b"xxxx")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_bad_frames_and_an_unreachable_name_server_are_one_log_line_each(
    garbage_server: tuple[int, list[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    garbage_port, received = garbage_server
    dead_port = _free_port()
    caplog.set_level(logging.INFO, logger="rmq_spark.broker.remoting")
    registration = NamesrvRegistration(
        (("127.0.0.1", garbage_port), ("127.0.0.1", dead_port)),
        IDENTITY,
        lambda: {"Orders": 4},
        interval_s=10.0,
    ).start()
    deadline = time.monotonic() + 30
    while len(caplog.records) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    registration.stop()
    assert received and decode_one(received[0]).code == 103
    lines = [record.getMessage() for record in caplog.records]
    register_lines = [
        line for line in lines if "register broker" in line and "unregister" not in line
    ]
    assert len(register_lines) == 2, lines
    assert any(
        f"namesrv 127.0.0.1:{garbage_port}: register broker rmq-b1" in line
        and "header length 64 is past the frame" in line
        for line in register_lines
    ), lines
    dead = [line for line in register_lines if f"namesrv 127.0.0.1:{dead_port}:" in line]
    assert len(dead) == 1 and "connect call failed" in dead[0].lower(), lines
    assert all(record.exc_info is None for record in caplog.records)
    assert all("\n" not in line for line in lines)


def test_stop_does_not_wait_for_a_name_server_that_never_answers() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never reads or answers
    registration = NamesrvRegistration(
        (("127.0.0.1", silent.getsockname()[1]),),
        IDENTITY,
        lambda: {"Orders": 4},
        interval_s=10.0,
        timeout_s=3600.0,  # without the stop cancelling it, the registration would wait this long
    ).start()
    try:
        stopper = threading.Thread(target=registration.stop)
        stopper.start()
        stopper.join(timeout=60)
        assert not stopper.is_alive(), "stop() waited for the registration's answer"
    finally:
        silent.close()
