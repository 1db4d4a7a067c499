"""Spark read of a two-broker cluster vs one broker holding the same total (issue 27).

Writes N messages into one store and N/2 into each of two stores (the engine's
``MessageStore``, 100-byte bodies), starts ``rmq-spark namesrv`` and three rmq-spark brokers
on those stores (cluster ``One``: the one store; cluster ``Two``: the two), then, per round,
reads each cluster through the name server (``option("namesrv")``, ``option("cluster")``)
with a batch ``noop`` write in a local[2] session: messages/s, and CPU seconds per million
messages of this driver, the Spark JVM and its Python workers (/proc times before and after;
the brokers are idle meanwhile: the source reads their files). On 2
cores both reads use the same 2 task slots: the two-broker read has twice the partitions, not
twice the CPU. Run under the bench lock::

    flock /tmp/bench.lock python bench/peers/spark_cluster_read.py [--messages 1000000 --rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO, REPO / "tests", REPO / "tests" / "remoting"):
    sys.path.insert(0, str(extra))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from broker.broker_harness import start_broker  # noqa: E402
from namesrv_harness import start_namesrv  # noqa: E402

from rmq_spark.store.config import StoreConfig  # noqa: E402
from rmq_spark.store.message_store import MessageStore  # noqa: E402
from rmq_spark.store.put import PutRequest  # noqa: E402

BODY = b"x" * 100
TICKS = os.sysconf("SC_CLK_TCK")


def fill(store: Path, count: int) -> None:
    with MessageStore.open(StoreConfig(root_dir=store)) as opened:
        for start in range(0, count, 1000):
            size = min(1000, count - start)
            opened.put_batch([PutRequest("Bench", BODY, keys=(f"k{start + i}",))
                              for i in range(size)])  # fmt: skip


def tree_cpu_s(root: int, skip: set[int]) -> float:
    """utime+stime of ``root`` and its descendants but ``skip`` and theirs (seconds)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in skip:
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
        except OSError:
            pass
        todo += children.get(pid, [])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark-cluster-read-"))
    processes = []
    try:
        fill(work / "one", args.messages)
        fill(work / "a", args.messages // 2)
        fill(work / "b", args.messages - args.messages // 2)
        namesrv = start_namesrv(work / "namesrv")
        processes.append(namesrv)
        for name, cluster in (("one", "One"), ("a", "Two"), ("b", "Two")):
            processes.append(start_broker(
                work / name, work / f"{name}-work", f"broker.namesrv_addr={namesrv.addr}",
                f"broker.broker_name={name}", f"broker.cluster_name={cluster}",
            ))  # fmt: skip
        time.sleep(2)  # registrations
        from rmq_spark.spark.config import SparkConfig
        from rmq_spark.spark.session import build_session

        spark = build_session(SparkConfig(master="local[2]", ui_enabled=False, log_level="ERROR"))
        jvm = os.getpid()  # this driver, the Spark JVM it started and its Python workers
        servers = {process.proc.pid for process in processes}  # not the brokers, name server
        results: dict[str, list[tuple[float, float]]] = {"One": [], "Two": []}
        for _round in range(args.rounds + 1):  # the first round warms up
            for cluster in ("One", "Two"):
                reader = spark.read.format("rocketmq").option("namesrv", namesrv.addr)
                cpu, started = tree_cpu_s(jvm, servers), time.monotonic()
                reader.option("cluster", cluster).load().write.format("noop").mode(
                    "overwrite"
                ).save()
                took, used = time.monotonic() - started, tree_cpu_s(jvm, servers) - cpu
                if _round:
                    results[cluster].append((took, used))
        spark.stop()
        load = os.getloadavg()
        for cluster, runs in results.items():
            best = min(runs)
            rate = args.messages / best[0]
            cpu_per_m = best[1] / args.messages * 1e6
            print(f"{cluster}: {len(runs)} rounds, best {best[0]:.2f} s = {rate / 1000:.0f}k "
                  f"msgs/s, CPU {cpu_per_m:.1f} s per million messages "
                  f"(all rounds: {', '.join(f'{t:.2f}' for t, _ in runs)} s)")  # fmt: skip
        print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
