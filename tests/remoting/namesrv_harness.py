"""Helpers for the remoting tests: a real ``rmq-spark namesrv`` (Apache RocketMQ 5.3.3's
NameServer) and ``rmq-spark mqadmin`` against it, started as the product starts them."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_S = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Namesrv:
    """A running ``rmq-spark namesrv``: its address, work directory and stderr."""

    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    stderr_path: Path

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


def start_namesrv(workdir: Path) -> Namesrv:
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    stderr_path = workdir.parent / f"{workdir.name}.stderr"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.cli.main", "namesrv",
             "--listen", f"127.0.0.1:{port}", "--workdir", str(workdir)],
            stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
        )  # fmt: skip
    namesrv = Namesrv(proc, port, workdir, stderr_path)
    deadline = time.monotonic() + START_DEADLINE_S
    while "namesrv started" not in namesrv.stderr():
        if proc.poll() is not None or time.monotonic() > deadline:
            namesrv.stop()
            raise AssertionError(f"rmq-spark namesrv did not start:\n{namesrv.stderr()}")
        time.sleep(0.1)
    return namesrv


def mqadmin(namesrv: Namesrv, *args: str) -> str:
    """``rmq-spark mqadmin ARGS -n <namesrv>``: its stdout (stderr on a failure)."""
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "mqadmin", "--workdir",
         str(namesrv.workdir.parent / "mqadmin"), *args, "-n", namesrv.addr],
        capture_output=True, text=True, timeout=180, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
