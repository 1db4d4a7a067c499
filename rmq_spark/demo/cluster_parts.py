"""The cluster demo's processes and clients: RocketMQ's NameServer (``rmq-spark namesrv``, a
JVM), rmq-spark broker processes registered with it (so one can be SIGKILLed and restarted on
the same ports and store), official 5.x Python producers that record every acknowledgement and
the longest pause each saw, and an official PushConsumer that records what it consumed.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from rmq_spark.errors import BrokerError

__all__ = ["BrokerProc", "ClusterProducers", "NamesrvProc", "PushRecorder", "free_port"]

log = logging.getLogger("rmq_spark.demo")
START_DEADLINE_S = 120.0  # the name server is a JVM; a busy machine starts it slowly
TOPICS = ("Orders", "Payments", "Audit")
TAGS = ("created", "paid", "shipped", "refunded")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def _wait(ready: Any, proc: subprocess.Popen[bytes], what: str, output: Path) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = output.read_text(errors="replace")[-2000:]
            raise BrokerError(f"{what} did not start (see {output}): {tail.strip()[-300:]}")
        time.sleep(0.1)


class NamesrvProc:
    """``rmq-spark namesrv`` on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.output = workdir / "namesrv.log"
        workdir.mkdir(parents=True, exist_ok=True)
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                _python("rmq_spark.cli.main", "namesrv", "--listen", self.addr,
                        "--workdir", str(workdir / "work")),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait(lambda: "namesrv started" in self.output.read_text(errors="replace"),
              self.proc, "the name server", self.output)  # fmt: skip

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@dataclass
class BrokerProc:
    """One rmq-spark broker process of the cluster, on fixed ports (a restart keeps them)."""

    name: str
    store: Path
    logs: Path
    namesrv: str
    cluster: str
    topics: str  # broker.topics: the same list on every broker
    grpc_port: int = field(default_factory=free_port)
    remoting_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> BrokerProc:
        ready = self.logs / f"{self.name}.ready"
        ready.unlink(missing_ok=True)
        output = self.logs / f"{self.name}.log"
        settings = {
            "broker.namesrv_addr": self.namesrv, "broker.broker_name": self.name,
            "broker.cluster_name": self.cluster, "broker.topics": self.topics,
            "broker.remoting_listen": f"127.0.0.1:{self.remoting_port}",
        }  # fmt: skip
        args = ["rmq_spark.broker.server", "--store", str(self.store), "--listen", self.address,
                "--ready-file", str(ready)]  # fmt: skip
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        with output.open("ab") as out:
            self.proc = subprocess.Popen(
                _python(*args), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        _wait(lambda: ready.exists() and ready.read_text().endswith("\n"), self.proc,
              f"broker {self.name}", output)  # fmt: skip
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the store recovers at the next start)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


class ClusterProducers:
    """``threads`` official-client producers through ``access``, ``rate_per_s`` each, until
    ``stop()``. ``acked``: message id -> topic; ``longest_pause_s``: the longest time any
    thread went without an acknowledgement (failed sends included)."""

    def __init__(
        self, rocketmq: ModuleType, access: str, ack_path: Path, *, threads: int, rate_per_s: float
    ) -> None:
        self._rocketmq = rocketmq
        self._access = access
        self._rate_per_s = rate_per_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._file: IO[str] = ack_path.open("a", encoding="utf-8")
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"producer-{i}", daemon=True)
            for i in range(threads)
        ]
        self.acked: dict[str, str] = {}
        self.sent = 0
        self.failed = 0
        self.longest_pause_s = 0.0

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def _loop(self, index: int) -> None:
        rocketmq = self._rocketmq
        config = rocketmq.ClientConfiguration(
            self._access, rocketmq.Credentials(), request_timeout=5
        )
        producer = rocketmq.Producer(config, TOPICS)
        producer.startup()
        try:
            started = last_ack = time.monotonic()
            count = 0
            while not self._stop.is_set():
                ok = self._send(producer, index, count)
                now = time.monotonic()
                if ok:  # a pause ends with an acknowledgement
                    with self._lock:
                        self.longest_pause_s = max(self.longest_pause_s, now - last_ack)
                    last_ack = now
                count += 1
                wait_s = started + count / self._rate_per_s - time.monotonic()
                if wait_s > 0:
                    self._stop.wait(wait_s)
        finally:
            producer.shutdown()

    def _send(self, producer: Any, index: int, count: int) -> bool:
        message = self._rocketmq.Message()
        message.topic = TOPICS[count % len(TOPICS)]
        message.tag = TAGS[count % len(TAGS)]
        message.keys = f"p{index}-{count}"
        message.body = json.dumps({"producer": index, "n": count}).encode()
        try:
            message_id = str(producer.send(message).message_id)
        except Exception as err:  # counted: the check is about acknowledged sends
            details = err.details() if callable(getattr(err, "details", None)) else str(err)
            reason = (str(details) or type(err).__name__).splitlines()[0]
            log.warning("send failed (%s); counted as not acknowledged", reason)
            with self._lock:
                self.sent += 1
                self.failed += 1
            return False
        with self._lock:
            self.sent += 1
            self.acked[message_id] = message.topic
            self._file.write(json.dumps({"message_id": message_id, "topic": message.topic}) + "\n")
        return True


class PushRecorder:
    """An official PushConsumer of ``group`` on every demo topic, through ``access``;
    ``consumed``: message id -> times consumed."""

    def __init__(self, rocketmq: ModuleType, access: str, group: str) -> None:
        self.consumed: dict[str, int] = {}
        self._lock = threading.Lock()
        recorder = self

        class Listener(rocketmq.MessageListener):  # type: ignore[misc,name-defined]
            def consume(self, message: Any) -> Any:
                with recorder._lock:
                    key = str(message.message_id)
                    recorder.consumed[key] = recorder.consumed.get(key, 0) + 1
                return rocketmq.ConsumeResult.SUCCESS

        config = rocketmq.ClientConfiguration(access, rocketmq.Credentials(), request_timeout=5)
        subscription = {topic: rocketmq.FilterExpression("*") for topic in TOPICS}
        self._consumer = rocketmq.PushConsumer(config, group, Listener(), subscription)
        self._consumer.startup()

    def seen(self) -> set[str]:
        with self._lock:
            return set(self.consumed)

    def stop(self) -> None:
        if self._consumer.is_running:
            self._consumer.shutdown()
