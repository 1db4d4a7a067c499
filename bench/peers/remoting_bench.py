"""Remoting produce and consume: the rmq-spark broker against Apache RocketMQ 5.3.3, in one run.

The same client (RocketMQ **4.9.8**'s Java ``DefaultMQProducer`` / ``DefaultMQPushConsumer``,
``java/RemotingBench.java``, one JVM per system), the same messages (``--body-bytes`` random
bytes, 100 by default; topics ``BenchTopic`` and ``E2ETopic``, 8 queues each) go to each
system in turn, each reached through its own name server, both flushing synchronously
(rmq-spark ``store.flush_policy=SYNC``, RocketMQ ``SYNC_FLUSH``):

* **rmq-spark**: ``rmq-spark namesrv`` (RocketMQ's NameServer) and ``rmq-spark broker`` with
  its remoting port, registered there.
* **RocketMQ**: its NameServer and its broker alone (``BrokerStartup``, no proxy): a 4.x
  client talks to the broker's remoting port directly, so no proxy is in the path.

Cases (``--cases``, all by default), each ``--seconds`` (10) after an untimed warm-up:

* ``sync``: 1 thread, ``send(msg)``, one in flight;
* ``async``: ``send(msg, callback)`` with ``--inflight`` (256) in flight;
* ``batch``: ``send(batch, callback)`` of ``--batch`` (32) messages, ``--batch-inflight`` (8)
  batches in flight;
* ``e2e``: a push consumer (fresh group) and async sends paced at ``--rate`` (1,000) msgs/s
  for ``--e2e-seconds`` (20): put -> consume latency p50/p99 (send call to the listener, one
  JVM's clock).

Broker CPU is ``/proc/<pid>/stat`` utime + stime of the broker process (all its threads; the
name servers are not counted for either), read when the JVM says a timed part starts and
ends. Progress goes to stderr, the table to stdout, with the load average at start and end.
Run it alone on the machine, under ``flock /tmp/bench.lock``.

Usage::

    flock /tmp/bench.lock python bench/peers/remoting_bench.py            # ~3 min
    python bench/peers/remoting_bench.py --systems rmq-spark --seconds 2 --cases sync,batch
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from java_client import compile_program  # noqa: E402
from peer_common import (  # noqa: E402
    PeerError,
    free_port,
    interrupt_on_sigterm,
    java_command,
    last_line,
    progress,
)
from produce_cases import CaseResult, broker_cpu_s  # noqa: E402
from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402
from rocketmq_peer import ROCKETMQ_VERSION, RocketMQBroker  # noqa: E402

__all__ = ["CASES", "SYSTEMS", "RemotingOptions", "main", "parse_args", "remoting_table", "run"]

TOPIC = "BenchTopic"
E2E_TOPIC = "E2ETopic"
QUEUES = 8
SYSTEMS = ("rmq-spark", "rocketmq")
CASES = ("sync", "async", "batch", "e2e")
SOURCE = HERE / "java" / "RemotingBench.java"
JARS_DIR = Path(os.environ.get("RMQ_SPARK_ROCKETMQ4_JARS", REPO / "jars" / "rocketmq4"))
NAMESRV_START_S = 90.0
JVM_TIMEOUT_S = 600.0


class UsageError(Exception):
    """A bad command-line value; the message names the option."""


class RemotingOptions:
    def __init__(self, args: argparse.Namespace) -> None:
        self.cases: tuple[str, ...] = tuple(args.cases.split(","))
        self.systems: tuple[str, ...] = tuple(args.systems.split(","))
        self.seconds: float = args.seconds
        self.warm_up_seconds: float = args.warm_up_seconds
        self.inflight: int = args.inflight
        self.batch: int = args.batch
        self.batch_inflight: int = args.batch_inflight
        self.rate: int = args.rate
        self.e2e_seconds: float = args.e2e_seconds
        self.body_bytes: int = args.body_bytes
        self.logs: Path | None = args.logs

    def label(self, case: str) -> str:
        return {
            "sync": "sync send, 1 thread",
            "async": f"async send, {self.inflight} in flight",
            "batch": f"batch of {self.batch} x {self.body_bytes} B, {self.batch_inflight} "
            f"async in flight",
            "e2e": f"push consumer, put -> consume at {self.rate:,} msgs/s",
        }[case]


def rocketmq4_jars() -> list[Path]:
    """RocketMQ 4.9.8's client jars (``make setup``'s ``scripts/fetch_rocketmq4_jars.sh``)."""
    manifest = JARS_DIR / "manifest.txt"
    if not manifest.is_file():
        done = subprocess.run(
            [str(REPO / "scripts" / "fetch_rocketmq4_jars.sh")],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise PeerError(f"rocketmq4 jars: fetch failed: {(done.stdout + done.stderr)[-300:]}")
    return [JARS_DIR / line for line in manifest.read_text().split()]


@contextmanager
def rmq_spark_namesrv(work: Path) -> Iterator[str]:
    """``rmq-spark namesrv`` on a free loopback port in its own session; yields its address."""
    port = free_port()
    log = work / "namesrv.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.cli.main", "namesrv",
             "--listen", f"127.0.0.1:{port}", "--workdir", str(work / "namesrv")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + NAMESRV_START_S
        while "namesrv started" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise PeerError(f"rmq-spark namesrv: did not start ({last_line(log)})")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def system(name: str, logs: Path | None) -> Iterator[tuple[str, int]]:
    """One system up: yields (its name server's address, the broker's pid)."""
    if name == "rocketmq":
        with RocketMQBroker(topics=(TOPIC, E2E_TOPIC), proxy=False) as peer:
            yield peer.namesrv_addr, peer.broker_pid
        return
    with tempfile.TemporaryDirectory(prefix="peers-remoting-") as tmp:
        with rmq_spark_namesrv(Path(tmp)) as namesrv:
            settings = (
                "store.flush_policy=SYNC",
                f"broker.remoting_listen=127.0.0.1:{free_port()}",
                f"broker.namesrv_addr={namesrv}",
                f"broker.topics={TOPIC}:{QUEUES},{E2E_TOPIC}:{QUEUES}",
            )
            keep = logs / "rmq-spark-broker.log" if logs else None
            with RmqSparkBroker(settings=settings, keep_log=keep) as broker:
                yield namesrv, broker.pid


def _result(options: RemotingOptions, case: str, line: str, cpu: float) -> CaseResult:
    fields = dict(item.split("=", 1) for item in line.split(" ", 7)[2:])
    return CaseResult(
        label=options.label(case),
        paced=case == "e2e",
        sent=int(fields["sent"]),
        failed=int(fields["failed"]),
        seconds=float(fields["seconds"]),
        latencies_s=(),
        broker_cpu_s=cpu,
        client_cpu_s=float("nan"),
        first_error=fields.get("first_error", ""),
        quantiles_ms=(float(fields["p50_ms"]), float(fields["p99_ms"])),
    )


def run_client(namesrv: str, pid: int, options: RemotingOptions) -> dict[str, CaseResult]:
    """``RemotingBench`` against one system; its results by case."""
    classpath = compile_program(SOURCE, rocketmq4_jars())
    results: dict[str, CaseResult] = {}
    with tempfile.TemporaryDirectory(prefix="peers-remoting-client-") as home:
        command = [
            *java_command("512m", classpath, f"-Duser.home={home}",
                          "-Drocketmq.client.rebalance.waitInterval=1000"),
            "RemotingBench", namesrv, TOPIC, E2E_TOPIC, ",".join(options.cases),
            str(options.seconds), str(options.warm_up_seconds), str(options.body_bytes),
            str(options.inflight), str(options.batch), str(options.batch_inflight),
            str(options.rate), str(options.e2e_seconds),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=home,
            env={**os.environ, "HOME": home},
        )  # fmt: skip
        try:
            assert process.stdout is not None
            cpu0 = 0.0
            for line in process.stdout:
                words = line.split()
                if words[:1] == ["timing"]:
                    cpu0 = broker_cpu_s([pid])
                elif words[:1] == ["result"]:
                    case = words[1]
                    results[case] = _result(options, case, line.strip(), broker_cpu_s([pid]) - cpu0)
                    progress(f"{case}: {results[case].summary()}")
            _, err = process.communicate(timeout=JVM_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    missing = [case for case in options.cases if case not in results]
    if process.returncode != 0 or missing:
        raise PeerError(
            f"RemotingBench: exit {process.returncode}, no result for {missing}: "
            f"{err.strip()[-400:]}"
        )
    return results


def run(options: RemotingOptions) -> dict[str, dict[str, CaseResult]]:
    """Every case on every system, in order; results by system and case."""
    results: dict[str, dict[str, CaseResult]] = {}
    for name in options.systems:
        started = time.perf_counter()
        with system(name, options.logs) as (namesrv, pid):
            progress(f"{name}: up (namesrv {namesrv}) in {time.perf_counter() - started:.1f} s")
            results[name] = run_client(namesrv, pid, options)
    return results


def remoting_table(
    results: dict[str, dict[str, CaseResult]], options: RemotingOptions
) -> list[str]:
    """Markdown rows, one per case, with rmq-spark / RocketMQ ratios."""
    ours, peer = results.get("rmq-spark"), results.get("rocketmq")
    lines = [
        f"| RocketMQ 4.9.8 Java client over remoting, SYNC flush | rmq-spark | RocketMQ "
        f"{ROCKETMQ_VERSION} broker (no proxy) | rmq-spark / RocketMQ |",
        "|---|---|---|---|",
    ]
    for case in options.cases:
        a = ours[case] if ours else None
        b = peer[case] if peer else None
        ratio = "-"
        if a and b and a.paced:
            ratio = f"p50 {a.p50_ms / b.p50_ms:.2f}x, p99 {a.p99_ms / b.p99_ms:.2f}x"
        elif a and b:
            ratio = (
                f"msgs/s {a.rate / b.rate:.2f}x, CPU/msg "
                f"{a.broker_cpu_us_per_msg / b.broker_cpu_us_per_msg:.2f}x"
            )
        mine = a.cell() if a else "-"
        theirs = b.cell() if b else "-"
        lines.append(f"| {options.label(case)} | {mine} | {theirs} | {ratio} |")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="RocketMQ 4.9.8 Java client over remoting, rmq-spark broker vs Apache "
        f"RocketMQ {ROCKETMQ_VERSION}'s broker (SYNC flush both, each through its own name "
        "server), side by side in one run.",
        epilog="Run alone on the machine: "
        "flock /tmp/bench.lock python bench/peers/remoting_bench.py",
    )
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated (all)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated (both)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per produce case (10)")
    parser.add_argument("--warm-up-seconds", type=float, default=5.0, help="untimed (5)")
    parser.add_argument("--inflight", type=int, default=256, help="async sends in flight (256)")
    parser.add_argument("--batch", type=int, default=32, help="messages per batch (32)")
    parser.add_argument("--batch-inflight", type=int, default=8, help="batches in flight (8)")
    parser.add_argument("--rate", type=int, default=1000, help="e2e msgs/s (1000)")
    parser.add_argument("--e2e-seconds", type=float, default=20.0, help="e2e timed part (20)")
    parser.add_argument("--body-bytes", type=int, default=100, help="body size, >= 16 (100)")
    parser.add_argument("--logs", type=Path, help="keep the rmq-spark broker's log in this dir")
    args = parser.parse_args(argv)
    for option, known in (("cases", CASES), ("systems", SYSTEMS)):
        unknown = set(getattr(args, option).split(",")) - set(known)
        if unknown:
            raise UsageError(f"--{option}: unknown {sorted(unknown)}; known {list(known)}")
    for name in ("inflight", "batch", "batch_inflight", "rate"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.body_bytes < 16:
        raise UsageError(f"--body-bytes: must be >= 16 (the e2e timestamp), got {args.body_bytes}")
    if args.seconds <= 0 or args.e2e_seconds <= 0 or args.warm_up_seconds < 0:
        raise UsageError("--seconds and --e2e-seconds must be > 0, --warm-up-seconds >= 0")
    return args


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    options = RemotingOptions(args)
    load_start = _load()
    progress(f"load average at start {load_start}")
    try:
        results = run(options)
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("interrupted; everything started was stopped")
        return 130
    for line in remoting_table(results, options):
        print(line)
    print(f"load average (/proc/loadavg): start {load_start}, end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
