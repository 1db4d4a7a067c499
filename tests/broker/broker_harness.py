"""Helpers for the broker tests: start a broker subprocess, wait with a deadline, read the store.

The official ``rocketmq-python-client`` is the real peer: it is imported once per session with
HOME pointed at a temp dir (it writes ``~/logs/rocketmq_python`` on import). The broker runs as
``python -m rmq_spark.broker.server`` on 127.0.0.1 with an OS-chosen port, reported through
``--ready-file``. Waits poll with a deadline; nothing sleeps for timing.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.store.codec import DecodedRecord, decode_record
from rmq_spark.store.layout import COMMITLOG_DIR, is_segment_name
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import parse_properties

REPO_ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0


def wait_for(predicate: Callable[[], Any], deadline_s: float, what: str) -> Any:
    """Poll ``predicate`` every 20 ms until it returns something truthy, or fail at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)


BENCH_LOCK = "/tmp/bench.lock"


@contextmanager
def bench_lock() -> Iterator[None]:
    """The machine-wide lock every JVM, Spark or benchmark run holds (``flock`` on the same
    file); a JVM started inside it is started without ``flock``."""
    with open(BENCH_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class BrokerProcess:
    """A broker subprocess: its address, store directory and stderr log."""

    proc: subprocess.Popen[bytes]
    store_dir: Path
    log_path: Path
    address: str = ""
    args: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=STOP_DEADLINE_S)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=STOP_DEADLINE_S)


def closed_by_peer(sock: socket.socket, poll_s: float = 0.01) -> bool:
    """Whether the broker closed (or reset) ``sock``: reads what is there, waiting ``poll_s``."""
    sock.settimeout(poll_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True  # reset
    return True


SERVER = ("-m", "rmq_spark.broker.server")
FRONT_ENV = "RMQ_SPARK_TEST_GRPC_FRONT"


def broker_command(
    store_dir: Path, listen: str, *extra: str, entry: tuple[str, ...] = SERVER
) -> list[str]:
    return [
        sys.executable,
        *entry,
        "--store",
        str(store_dir),
        "--listen",
        listen,
        *extra,
    ]


def start_broker(
    store_dir: Path,
    work_dir: Path,
    *settings: str,
    listen: str = "127.0.0.1:0",
    entry: tuple[str, ...] = SERVER,
) -> BrokerProcess:
    """Start a broker subprocess and wait until it serves; ``settings`` are ``section.key=v``;
    ``entry``: what ``python`` runs (a test's wrapper around the server's ``main``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    ready = work_dir / f"ready-{time.monotonic_ns()}"
    log_path = work_dir / f"broker-{time.monotonic_ns()}.log"
    extra = ["--ready-file", str(ready)]
    front = os.environ.get(FRONT_ENV)  # run a module's brokers on the other gRPC front
    if front and not any(item.startswith("broker.grpc_front=") for item in settings):
        settings = (*settings, f"broker.grpc_front={front}")
    for item in settings:
        extra += ["--set", item]
    args = broker_command(store_dir, listen, *extra, entry=entry)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,  # as a service: no terminal (see take_own_cpu_share)
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
    broker = BrokerProcess(proc, store_dir, log_path, args=args)

    def ready_or_dead() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode}:\n{broker.log_text()}")
        return ready.exists() and ready.read_text().endswith("\n")

    wait_for(ready_or_dead, START_DEADLINE_S, "the broker to serve")
    broker.address = ready.read_text().strip()
    return broker


def read_records(store_dir: Path) -> list[MessageRecord]:
    """Every message record in the store's CommitLog, in order, decoded with CRC checks."""
    records: list[MessageRecord] = []
    segment_dir = store_dir / COMMITLOG_DIR
    for path in sorted(p for p in segment_dir.iterdir() if is_segment_name(p.name)):
        # mmap: segments are preallocated (1 GiB by default); only the written head is read.
        with (
            path.open("rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            position = 0
            while position < len(data):
                outcome = decode_record(data, position, path=path.name)
                if isinstance(outcome, DecodedRecord):
                    records.append(outcome.record)
                    position = outcome.next_position
                else:
                    break  # BlankPadding: next segment; Unwritten / NeedMoreData: end of the log
    return records


def props(record: MessageRecord) -> dict[str, str]:
    return parse_properties(record.properties)


def by_uniq_key(records: list[MessageRecord]) -> dict[str, list[MessageRecord]]:
    found: dict[str, list[MessageRecord]] = {}
    for record in records:
        found.setdefault(props(record).get("UNIQ_KEY", ""), []).append(record)
    return found
