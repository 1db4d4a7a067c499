"""A real Spark standalone cluster for the tests that need one: a master and two workers on
localhost (each its own JVM and Python workers), stopped after the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SPARK_HOME = Path(__import__("pyspark").__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
STARTUP_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, what: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:  # noqa: ANN001
    # Polls a cluster we do not control the start-up of; bounded, and the failure says what.
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster(tmp_path) -> Iterator[str]:
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master_port, master_ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{master_port}"
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            processes.append(
                subprocess.Popen(
                    [str(SPARK_CLASS), *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui),
        )  # fmt: skip
        wait_for(lambda: port_open(master_port), "the Spark master")
        for index in range(2):
            work = tmp_path / f"worker{index}"
            work.mkdir()
            start(
                f"worker{index}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(work),
            )  # fmt: skip

        def workers_registered() -> bool:
            text = (logs / "master.log").read_text(errors="replace")
            return text.count("Registering worker") >= 2

        wait_for(workers_registered, "two workers to register with the master")
        yield url
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
