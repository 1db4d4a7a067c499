"""``rmq-spark namesrv`` (Apache RocketMQ 5.3.3's NameServer, a real JVM) and an rmq-spark broker
registering with it, checked with RocketMQ's own ``mqadmin`` and with raw remoting frames."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, broker_command, wait_for
from namesrv_harness import REPO_ROOT, Namesrv, free_port, mqadmin, start_namesrv

from rmq_spark.broker.fastjson import parse_fastjson
from rmq_spark.broker.remoting.codec import (
    NeedMoreData,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)
from rmq_spark.broker.remoting.namesrv_api import BrokerIdentity
from rmq_spark.broker.remoting.namesrv_client import NamesrvConnection, NamesrvRegistration

pytestmark = pytest.mark.slow


def _call(port: int, command: RemotingCommand, kind: SerializeType) -> RemotingCommand:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_frame(command, kind))
        data = b""
        while True:
            outcome = decode_frame(data)
            if not isinstance(outcome, NeedMoreData):
                return outcome[0]
            chunk = sock.recv(65536)
            assert chunk, "the name server closed the connection"
            data += chunk


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the listening sockets on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@pytest.mark.parametrize("kind", list(SerializeType))
def test_namesrv_answers_both_serializations(namesrv: Namesrv, kind: SerializeType) -> None:
    response = _call(namesrv.port, RemotingCommand(code=106, opaque=41, version=409), kind)
    assert response.is_response and response.opaque == 41 and response.code == 0
    assert response.serialize_type == SerializeType.JSON  # Java answers in its own default
    assert set(parse_fastjson(response.body.decode())) == {"brokerAddrTable", "clusterAddrTable"}


def test_namesrv_listens_on_loopback_only(namesrv: Namesrv) -> None:
    # 127.0.0.1, as IPv4 or as IPv4-mapped IPv6; never 0.0.0.0 / ::
    assert _listening_addresses(namesrv.port) <= {"0100007F", "0000000000000000FFFF00000100007F"}
    assert _listening_addresses(namesrv.port)


def test_namesrv_on_a_taken_port_is_one_line(namesrv: Namesrv, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "namesrv", "--listen", namesrv.addr,
         "--workdir", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "already in use" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_namesrv_stops_cleanly_on_sigterm_with_its_logs_in_the_workdir(
    rocketmq_jars: list[Path], tmp_path: Path
) -> None:
    own = start_namesrv(tmp_path / "work")
    assert own.stop(signal.SIGTERM) == 0, own.stderr()
    assert "namesrv stopped" in own.stderr() and "Traceback" not in own.stderr()
    assert not _listening_addresses(own.port)
    log = own.workdir / "logs" / "rocketmqlogs" / "namesrv.log"
    assert log.is_file() and log.stat().st_size > 0
    assert "boot success" in (own.workdir / "namesrv.out").read_text()
    assert (own.workdir / "namesrv.properties").read_text() == (
        f"listenPort={own.port}\nbindAddress=127.0.0.1\n"
    )


async def _route(namesrv: Namesrv, topic: str) -> RemotingCommand:
    connection = NamesrvConnection("127.0.0.1", namesrv.port)
    try:
        request = RemotingCommand(code=105, version=479, ext_fields={"topic": topic})
        return await connection.call(request, 30)
    finally:
        await connection.close()


def test_a_new_topic_reaches_the_name_server_and_unregister_removes_all(namesrv: Namesrv) -> None:
    topics = {"RegA": 2, "RegB": 3}
    identity = BrokerIdentity("InProc", "inproc-b", "127.0.0.1:1", "127.0.0.1:2")
    registration = NamesrvRegistration(
        (("127.0.0.1", namesrv.port),), identity, lambda: dict(topics), interval_s=60
    ).start()
    try:
        route = wait_for(
            lambda: (r := asyncio.run(_route(namesrv, "RegB"))).code == 0 and r, 60, "RegB"
        )
        queues = json.loads(route.body)["queueDatas"]
        assert [(q["brokerName"], q["readQueueNums"]) for q in queues] == [("inproc-b", 3)]
        topics["RegC"] = 5  # as a topic created by a send: registered without waiting 60 s
        wait_for(lambda: asyncio.run(_route(namesrv, "RegC")).code == 0, 60, "RegC routed")
    finally:
        registration.stop()
    assert asyncio.run(_route(namesrv, "RegA")).code == 17  # TOPIC_NOT_EXIST


def _start_broker(tmp_path: Path, *extra: str) -> BrokerProcess:
    ready, log_path = tmp_path / "ready", tmp_path / "broker.log"
    args = broker_command(tmp_path / "store", "127.0.0.1:0", "--ready-file", str(ready), *extra)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )  # fmt: skip
    broker = BrokerProcess(proc, tmp_path / "store", log_path, args=args)
    wait_for(lambda: proc.poll() is not None or ready.exists(), 60, "the broker to serve")
    assert proc.poll() is None, broker.log_text()
    broker.address = ready.read_text().strip()
    return broker


def test_broker_joins_the_name_server_and_leaves_it_on_a_clean_stop(
    namesrv: Namesrv, tmp_path: Path
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    broker = _start_broker(
        tmp_path, "--namesrv", f"{namesrv.addr};{dead}", "--broker-name", "rmq-b1",
        "--cluster", "SparkCluster", "--set", "broker.topics=Orders:4,Audit:2",
    )  # fmt: skip
    try:
        wait_for(lambda: "registered broker rmq-b1" in broker.log_text(), 60, "registration")
        # the address registered is the remoting port's (4.x clients and tools dial it)
        remoting = "127.0.0.1:" + re.findall(r"remoting port (\d+) serves", broker.log_text())[0]
        assert remoting != broker.address
        rows = [line.split() for line in mqadmin(namesrv, "clusterList").splitlines()]
        assert ["SparkCluster", "rmq-b1", "0", remoting] in [row[:4] for row in rows]
        route = parse_fastjson(mqadmin(namesrv, "topicRoute", "-t", "Orders"))
        assert [data["brokerAddrs"] for data in route["brokerDatas"]] == [{"0": remoting}]
        assert [
            (q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
            for q in route["queueDatas"]
        ] == [("rmq-b1", 4, 4, 6)]
    finally:
        code = broker.stop()
    log = broker.log_text()
    assert code == 0, log
    assert f"namesrv {namesrv.addr}: unregistered broker rmq-b1" in log
    assert log.count(f"namesrv {dead}: register broker rmq-b1") == 1  # one line, not per round
    assert "Traceback" not in log
    assert "rmq-b1" not in mqadmin(namesrv, "clusterList")


def test_without_namesrv_the_broker_registers_nowhere(tmp_path: Path) -> None:
    broker = _start_broker(tmp_path)
    assert broker.stop() == 0
    assert "rmq_spark.broker.remoting" not in broker.log_text()


def test_a_killed_namesrv_command_takes_its_jvm_along(
    rocketmq_jars: list[Path], tmp_path: Path
) -> None:
    own = start_namesrv(tmp_path / "work")
    own.proc.kill()  # SIGKILL: no handler of ours runs
    own.proc.wait(timeout=60)
    wait_for(lambda: not _listening_addresses(own.port), 60, "the JVM to exit with its parent")


def _cluster_brokers(namesrv: Namesrv) -> set[str]:
    response = _call(namesrv.port, RemotingCommand(code=106, version=479), SerializeType.JSON)
    return set(parse_fastjson(response.body.decode())["brokerAddrTable"])


def test_a_killed_broker_leaves_the_name_server_with_its_connection(
    namesrv: Namesrv, tmp_path: Path
) -> None:
    broker = _start_broker(tmp_path, "--namesrv", namesrv.addr, "--broker-name", "rmq-k9")
    try:
        wait_for(lambda: "rmq-k9" in _cluster_brokers(namesrv), 60, "registration")
    finally:
        broker.kill()  # SIGKILL: no UNREGISTER_BROKER; the name server sees the connection close
    wait_for(lambda: "rmq-k9" not in _cluster_brokers(namesrv), 60, "the name server to drop it")
