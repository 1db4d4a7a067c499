"""The rmq-spark side of bench/peers' produce workload: ``rmq-spark broker`` as a subprocess.

``RmqSparkBroker`` runs the project's own CLI (``python -m rmq_spark.cli.main broker``, what
``rmq-spark broker`` runs) over a fresh store in a temporary directory, on 127.0.0.1 with a port
the OS picks (reported through ``--ready-file``), with ``store.flush_policy=SYNC`` (a send is
answered once an fsync covers it); every other setting is the checkout's ``conf/rmq.toml``,
i.e. the defaults. ``checkout``: another source tree of the project (e.g. an older commit,
``limits.py``'s baseline) whose broker runs instead of this one's. ``entry`` replaces ``-m
rmq_spark.cli.main`` (``grpc_ceiling.py`` runs a broker whose sends skip the store).

It runs in its own session, as the RocketMQ peer's JVMs do: with the kernel's autogroup
scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) each session gets an equal share of
the CPU, so a broker in the harness's session would split one share with the client and the
CPU-bound processes while the peer had one to itself (``own_session=False`` does that, to
show the difference). ``stop()`` sends SIGTERM (the broker's
clean shutdown), kills it after 60 s and removes the directory (``keep_log``: copy the broker's
log there first); it also runs on leaving the ``with`` block, however it is left.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from peer_common import PeerError, checkout_env, last_line

__all__ = ["RmqSparkBroker"]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class RmqSparkBroker:
    """``rmq-spark broker`` on loopback over a temporary store; ``settings``: ``--set`` values."""

    def __init__(
        self,
        *,
        settings: Sequence[str] = ("store.flush_policy=SYNC",),
        keep_log: Path | None = None,
        own_session: bool = True,
        entry: Sequence[str] = ("-m", "rmq_spark.cli.main"),
        checkout: Path = REPO,
        cpus: str = "",
    ) -> None:
        self.own_session = own_session
        self.checkout = checkout
        self.entry = tuple(entry)
        self.settings = tuple(settings)
        self.cpus = cpus  # taskset's CPU list for the broker and its children; "": any
        self.keep_log = keep_log
        self.endpoint = ""
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    def __enter__(self) -> RmqSparkBroker:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def start(self) -> None:
        work = self.workdir = Path(tempfile.mkdtemp(prefix="peers-rmq-spark-"))
        ready = work / "ready"
        self._log_path = work / "broker.log"
        command = [sys.executable, *self.entry, "broker",
                   "--store", str(work / "store"), "--listen", "127.0.0.1:0",
                   "--ready-file", str(ready)]  # fmt: skip
        for setting in self.settings:
            command += ["--set", setting]
        if self.cpus:
            command = ["taskset", "-c", self.cpus, *command]
        with self._log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.checkout,
                env=self._environment(),
                start_new_session=self.own_session,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (ready.exists() and ready.read_text().endswith("\n")):
            if self.process.poll() is not None:
                raise PeerError(
                    f"rmq-spark broker: exited with {self.process.returncode} while starting "
                    f"(log {self._log_path}: {last_line(self._log_path)})"
                )
            if time.monotonic() > deadline:
                raise PeerError(f"rmq-spark broker: not ready after {START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        self.endpoint = ready.read_text().strip()

    def _environment(self) -> dict[str, str]:
        """This process's environment with the checkout first on the path, so its
        ``rmq_spark`` runs (the venv's editable install may point at another one)."""
        return checkout_env(self.checkout)

    @property
    def pid(self) -> int:
        assert self.process is not None, "broker not started"
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM (clean shutdown), SIGKILL after 60 s; remove the work dir. Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        try:
            if self.keep_log is not None and self._log_path is not None:
                shutil.copyfile(self._log_path, self.keep_log)
        except OSError as err:
            print(f"peers: rmq-spark broker: log not kept: {err}", file=sys.stderr)
        finally:
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None
