"""The broker benchmarks of issue 27 (a cluster of brokers), in one command:

    flock /tmp/bench.lock .venv/bin/python bench/peers/cluster_bench.py

* **throughput**: aggregate produce throughput of our ``Producer`` (``--threads`` threads in
  this process, 512-byte bodies, unpaced) against a cluster of 1 and of 2 rmq-spark brokers
  registered with RocketMQ's NameServer (``rmq-spark namesrv``), with each broker's CPU per
  message (utime + stime of the broker process, all its threads, from /proc) and the client's.
* **failover**: ``--kills`` times, broker-b is SIGKILLed while producers send (4 threads, one
  send every 20 ms each) and restarted once it was out; for each producer thread, the time
  from the SIGKILL to its first successful send acknowledged by broker-a; p50/p99 over every
  (kill, thread), for our ``Producer`` (route refresh 2 s, fault table off, 2 retries) and
  RocketMQ 4.9.8's Java ``DefaultMQProducer`` (``tests/cluster/java/ClusterProducer4.java``,
  name-server poll 2 s, 2 retries). Kill times are wall clock (the Java program prints its
  acknowledgements with epoch milliseconds).

Prints a markdown table and the load average before and after. Starts JVMs: run it under the
bench lock. Brokers use the checkout's defaults (``store.flush_policy=SYNC``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rmq_spark.broker.producer import Producer  # noqa: E402
from rmq_spark.demo.cluster_parts import BrokerProc, NamesrvProc  # noqa: E402
from rmq_spark.jvm import java_command  # noqa: E402

TOPIC = "Bench"
BODY = b"x" * 512
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
PAUSE_S = 0.02  # failover: each producer thread sends every 20 ms


def cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` (every thread), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def say(text: str) -> None:
    print(f"cluster_bench: {text}", file=sys.stderr, flush=True)


class Cluster:
    """A name server and ``count`` brokers (``broker-a``, ``broker-b``) with ``TOPIC`` on each."""

    def __init__(self, work: Path, count: int) -> None:
        self.namesrv = NamesrvProc(work / "namesrv")
        self.brokers: list[BrokerProc] = []
        try:
            for name in ("broker-a", "broker-b")[:count]:
                broker = BrokerProc(
                    name, work / name, work, self.namesrv.addr, "Bench", f"{TOPIC}:8"
                )
                self.brokers.append(broker.start())
            self.wait_route(count)
        except BaseException:
            self.stop()
            raise

    def wait_route(self, count: int, deadline_s: float = 60) -> None:
        end = time.monotonic() + deadline_s
        with Producer(self.brokers[0].address, route_refresh_s=0.5) as producer:
            while len({producer.send(TOPIC, b"probe").broker for _ in range(16)}) < count:
                if time.monotonic() > end:
                    raise RuntimeError(f"the route never listed {count} brokers")
                time.sleep(0.5)

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        self.namesrv.stop()


def throughput(work: Path, count: int, threads: int, seconds: float) -> dict[str, float]:
    cluster = Cluster(work, count)
    try:
        with Producer(cluster.brokers[0].address, request_timeout_s=10) as producer:
            stop = threading.Event()
            sent = [0] * threads

            def worker(index: int) -> None:
                while not stop.is_set():
                    producer.send(TOPIC, BODY)
                    sent[index] += 1

            workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
            for thread in workers:
                thread.start()
            time.sleep(3)  # warm-up: channels, routes, page cache
            before = [cpu_s(b.proc.pid) for b in cluster.brokers], cpu_s(os.getpid()), sum(sent)
            started = time.monotonic()
            time.sleep(seconds)
            after = [cpu_s(b.proc.pid) for b in cluster.brokers], cpu_s(os.getpid()), sum(sent)
            elapsed = time.monotonic() - started
            stop.set()
            for thread in workers:
                thread.join()
    finally:
        cluster.stop()
    messages = after[2] - before[2]
    broker_cpu = sum(after[0]) - sum(before[0])
    return {
        "msgs_per_s": messages / elapsed,
        "broker_cpu_us_per_msg": broker_cpu / messages * 1e6,
        "client_cpu_us_per_msg": (after[1] - before[1]) / messages * 1e6,
        "broker_cpu_cores": broker_cpu / elapsed,
    }


def pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Acks:
    """(wall-clock ms, thread, broker) of every acknowledged send, from any client."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[float, int, str]] = []

    def add(self, at_ms: float, thread: int, broker: str) -> None:
        with self.lock:
            self.rows.append((at_ms, thread, broker))

    def after(self, since_ms: float) -> list[tuple[float, int, str]]:
        with self.lock:
            return [row for row in self.rows if row[0] >= since_ms]


def kill_cycles(cluster: Cluster, acks: Acks, threads: int, kills: int) -> list[float]:
    """``kills`` SIGKILLs of broker-b; per (kill, thread): ms to its first ack from broker-a."""
    _a, b = cluster.brokers
    found: list[float] = []
    for number in range(kills):
        wait_until(lambda: {r[2] for r in acks.after(now_ms() - 1000)} == {"broker-a", "broker-b"},
                   60, "sends to both brokers")  # fmt: skip
        killed_ms = now_ms()
        b.kill()
        wait_until(lambda since=killed_ms: _threads_on_a(acks, since) == threads, 60,
                   "every thread to send to broker-a")  # fmt: skip
        for thread in range(threads):
            on_a = [at for at, who, broker in acks.after(killed_ms)
                    if who == thread and broker == "broker-a"]  # fmt: skip
            found.append(min(on_a) - killed_ms)
        time.sleep(1)
        b.start()
        say(f"kill {number + 1}/{kills}: worst thread {max(found[-threads:]):.0f} ms")
    return found


def _threads_on_a(acks: Acks, since_ms: float) -> int:
    return len({thread for _, thread, broker in acks.after(since_ms) if broker == "broker-a"})


def now_ms() -> float:
    return time.time() * 1000


def wait_until(predicate: object, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > end:
            raise RuntimeError(f"waited {deadline_s} s for {what}")
        time.sleep(0.05)


def failover_ours(work: Path, threads: int, kills: int) -> list[float]:
    cluster = Cluster(work, 2)
    acks, stop = Acks(), threading.Event()
    try:
        with Producer(
            cluster.brokers[0].address, route_refresh_s=2, request_timeout_s=3
        ) as producer:

            def worker(index: int) -> None:
                while not stop.is_set():
                    try:
                        receipt = producer.send(TOPIC, BODY)
                        acks.add(now_ms(), index, receipt.broker)
                    except Exception:  # noqa: BLE001 - a failed send: the next one counts
                        pass
                    stop.wait(PAUSE_S)

            workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
            for thread in workers:
                thread.start()
            try:
                return kill_cycles(cluster, acks, threads, kills)
            finally:
                stop.set()
                for thread in workers:
                    thread.join()
    finally:
        cluster.stop()


def java_class_path(work: Path) -> list[Path]:
    jars_dir = REPO / "jars" / "rocketmq4"
    manifest = (jars_dir / "manifest.txt").read_text().splitlines()
    jars = [jars_dir / line.strip() for line in manifest if line.strip()]
    classes = work / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    source = REPO / "tests" / "cluster" / "java" / "ClusterProducer4.java"
    subprocess.run(["javac", "-d", str(classes), "-cp", os.pathsep.join(map(str, jars)),
                    str(source)], check=True, capture_output=True, timeout=300)  # fmt: skip
    return [*jars, classes]


def failover_java(work: Path, threads: int, kills: int) -> list[float]:
    class_path = java_class_path(work)
    cluster = Cluster(work, 2)
    acks = Acks()
    home = work / "java-home"
    home.mkdir()
    command = [*java_command("256m", class_path, f"-Duser.home={home}"), "ClusterProducer4",
               cluster.namesrv.addr, TOPIC, str(threads), str(int(PAUSE_S * 1000))]  # fmt: skip
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=home)  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.split()
            if parts[:1] == ["ACK"] and len(parts) == 5:
                acks.add(float(parts[4]), int(parts[3]), parts[2])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        return kill_cycles(cluster, acks, threads, kills)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8, help="throughput: producer threads")
    parser.add_argument("--seconds", type=float, default=15.0, help="throughput: per case")
    parser.add_argument("--kills", type=int, default=10, help="failover: kills per client")
    parser.add_argument("--skip", choices=("throughput", "failover", "java"), action="append",
                        default=[], help="leave a case out")  # fmt: skip
    args = parser.parse_args(argv)
    print(f"load average before: {loadavg()}")
    work = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    try:
        if "throughput" not in args.skip:
            print("\n| brokers | msgs/s | broker CPU µs/msg | client CPU µs/msg | broker cores |")
            print("|---|---|---|---|---|")
            for count in (1, 2):
                row = throughput(work / f"tp{count}", count, args.threads, args.seconds)
                print(f"| {count} | {row['msgs_per_s']:.0f} | {row['broker_cpu_us_per_msg']:.0f} "
                      f"| {row['client_cpu_us_per_msg']:.0f} | {row['broker_cpu_cores']:.2f} |",
                      flush=True)  # fmt: skip
        if "failover" not in args.skip:
            print("\n| client | kills x threads | p50 ms | p99 ms | max ms |")
            print("|---|---|---|---|---|")
            cases = [("our Producer", failover_ours)]
            if "java" not in args.skip:
                cases.append(("Java 4.9.8 DefaultMQProducer", failover_java))
            for name, case in cases:
                found = case(work / name.split()[0], 4, args.kills)
                print(f"| {name} | {len(found)} | {statistics.median(found):.0f} | "
                      f"{pct(found, 0.99):.0f} | {max(found):.0f} |", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
