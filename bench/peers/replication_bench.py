"""Replication (issue 31): a SYNC_MASTER's sends against a lone broker, and a slave's catch-up
against the disk, in one run.

* **sends**: ``rocketmq-python-client`` producers (``bench/bench_grpc.py``'s case: 1 and 8
  threads, ``--body-bytes`` bodies, ``--messages`` per case) against (a) a lone broker,
  ``store.flush_policy=SYNC``, no replication, and (b) a ``SYNC_MASTER`` (SYNC flush) whose
  ``SLAVE`` runs beside it, once with SYNC flush (it fsyncs before it reports) and once with
  ASYNC flush (it reports what it wrote, as a RocketMQ slave does): each acknowledgement waits
  for the master's fsync and for the slave's report past the record. msgs/s and p50/p99 of
  each, and (b)/(a); the CPU per message of the brokers (master and slave, all threads, from
  ``/proc``) and of the client (this process's threads), which share the machine's cores.
* **catch-up**: ``--gib`` GiB of 4 KiB messages written into a master's store in-process, then
  a master (``ASYNC_MASTER``, HA port) over it and an empty slave (``ASYNC`` flush, fsyncing
  as it goes, as the master's store did): the time from the slave's start (process start
  included), and from its connection to the master (its metrics' peer gauge), until its
  metrics say it confirmed the master's end; MB/s against the disk's write rate measured in
  the same run and directory (``--gib`` GiB in 1 MiB writes, one fsync at the end).
* **against RocketMQ** (``--peer``): the same master's log copied by a slave of ours and by a
  real RocketMQ 5.3.3 master -> slave pair, each slave seeded with the first segment (a
  RocketMQ master starts an empty slave at its last file), timed the same way from the
  slave's files with its CPU per GiB (``catchup_peer.py``).

Run alone, under the bench lock::

    flock /tmp/bench.lock python bench/peers/replication_bench.py [--messages 2000] [--gib 1]
        [--rounds N] [--skip-sends] [--skip-catchup] [--peer] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench"), str(HERE)]

from bench_grpc import grpc_case, start_broker  # noqa: E402
from catchup_peer import CopyWatch, rocketmq_catch_up, seed_first_segment  # noqa: E402
from peer_common import job_cpu_s  # noqa: E402

from rmq_spark.store.config import FlushPolicy, StoreConfig  # noqa: E402
from rmq_spark.store.message_store import MessageStore  # noqa: E402

SEGMENT = 128 << 20
_MIB = 1 << 20


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sends(
    rocketmq: object, work: Path, messages: int, body: int, settings: tuple[str, ...] = ()
) -> list[dict]:
    rows = []
    lone, address = start_broker(work / "lone", "SYNC", work / "w-lone", *settings)
    try:
        for threads in (1, 8):
            rows.append(measured_case({"broker": lone}, rocketmq, address, threads, body,
                                      messages, label="lone SYNC"))  # fmt: skip
    finally:
        stop(lone)
    for slave_flush in ("SYNC", "ASYNC"):
        rows += sync_master(rocketmq, work / slave_flush, slave_flush, messages, body, settings)
    return rows


def sync_master(
    rocketmq: object,
    work: Path,
    slave_flush: str,
    messages: int,
    body: int,
    settings: tuple[str, ...] = (),
) -> list:
    ha = free_port()
    master, address = start_broker(
        work / "master",
        "SYNC",
        work / "w-master",
        "broker.role=SYNC_MASTER",
        f"broker.ha_listen=127.0.0.1:{ha}",
        *settings,
    )
    slave, _ = start_broker(
        work / "slave",
        slave_flush,
        work / "w-slave",
        "broker.role=SLAVE",
        f"broker.ha_master=127.0.0.1:{ha}",
        *settings,
    )
    rows = []
    try:
        deadline = time.monotonic() + 30
        while "slave 127.0.0.1" not in (work / "w-master" / "broker.log").read_text():
            if time.monotonic() > deadline:
                raise SystemExit("the slave did not connect")
            time.sleep(0.1)
        label = f"SYNC_MASTER, slave {slave_flush} flush"
        brokers = {"broker": master, "slave": slave}
        for threads in (1, 8):
            rows.append(measured_case(brokers, rocketmq, address, threads, body, messages,
                                      label=label))  # fmt: skip
    finally:
        stop(slave)
        stop(master)
    return rows


def measured_case(
    brokers: dict[str, subprocess.Popen], rocketmq: object, address: str, *case: int, label: str
) -> dict:
    """``grpc_case`` with the CPU per message of each of ``brokers`` (``<name>_us``) and of
    this process (``client_us``), whose threads are the client's."""
    before = {name: job_cpu_s(proc.pid) for name, proc in brokers.items()}
    client_before = _own_cpu_s()
    row = grpc_case(rocketmq, address, *case, label=label)
    sent = max(row["messages"], 1)
    for name, proc in brokers.items():
        row[f"{name}_us"] = (job_cpu_s(proc.pid) - before[name]) / sent * 1e6
    row["client_us"] = (_own_cpu_s() - client_before) / sent * 1e6
    return row


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def fill(store_dir: Path, gib: float) -> int:
    """Write ``gib`` GiB of 4 KiB messages; the log's end."""
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=SEGMENT,
                         flush_policy=FlushPolicy.ASYNC)  # fmt: skip
    store = MessageStore.open(config)
    body = os.urandom(4096)
    try:
        while store.max_offset < gib * (1 << 30):
            store.put_columns("catchup", [body] * 256, list(range(8)) * 32)
        return store.max_offset
    finally:
        store.close()


def catch_up(work: Path, end: int) -> dict:
    """Our master over ``work/cmaster`` (``end`` bytes) and an empty slave: the times from the
    slave's start and from its connection until it confirms ``end``."""
    ha, metrics = free_port(), free_port()
    seg = f"store.segment_size_bytes={SEGMENT}"
    master, _ = start_broker(work / "cmaster", "ASYNC", work / "w-cmaster", seg,
                             f"broker.ha_listen=127.0.0.1:{ha}")  # fmt: skip
    try:
        started = time.perf_counter()
        slave, _ = start_broker(work / "cslave", "ASYNC", work / "w-cslave", seg,
                                "broker.role=SLAVE", f"broker.ha_master=127.0.0.1:{ha}",
                                f"broker.metrics_listen=127.0.0.1:{metrics}")  # fmt: skip
        try:
            connected = None
            while gauge(metrics, "confirmed_offset_bytes") < end:
                if connected is None and gauge(metrics, "peers") >= 1:
                    connected = time.perf_counter()
                time.sleep(0.05)
            done = time.perf_counter()
        finally:
            stop(slave)
    finally:
        stop(master)
        shutil.rmtree(work / "cslave", ignore_errors=True)
    streamed = done - (connected or started)
    return {"bytes": end, "seconds": done - started, "mb_s": end / (done - started) / 1e6,
            "streamed_s": streamed, "streamed_mb_s": end / streamed / 1e6}  # fmt: skip


def seeded_catch_up(work: Path, end: int) -> dict:
    """Our master over ``work/cmaster`` and a slave holding its first segment: the copy of the
    rest timed from the slave's files (``catchup_peer.CopyWatch``), as RocketMQ's pair is."""
    slave_store = work / "sslave"
    seed_first_segment(work / "cmaster" / "commitlog", slave_store)
    ha, seg = free_port(), f"store.segment_size_bytes={SEGMENT}"
    master, _ = start_broker(work / "cmaster", "ASYNC", work / "w-smaster", seg,
                             f"broker.ha_listen=127.0.0.1:{ha}")  # fmt: skip
    try:
        watch = CopyWatch(work / "cmaster" / "commitlog", slave_store / "commitlog", (SEGMENT, end),
                          SEGMENT, lambda: pid_running(str(slave_store)))  # fmt: skip
        watch.start()
        slave, _ = start_broker(slave_store, "ASYNC", work / "w-sslave", seg, "broker.role=SLAVE",
                                f"broker.ha_master=127.0.0.1:{ha}")  # fmt: skip
        try:
            return watch.wait(600)
        finally:
            stop(slave)
    finally:
        stop(master)
        shutil.rmtree(slave_store, ignore_errors=True)


def pid_running(argument: str) -> int:
    """The process whose command line has ``argument`` (our slave: its ``--store``)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument.encode() in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue  # ended meanwhile
    raise SystemExit(f"no process runs with {argument}")


def gauge(port: int, name: str) -> float:
    """The slave's ``rmq_replication_<name>`` metric (0 while it does not answer)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return 0.0
    found = re.search(rb"rmq_replication_%s\{[^}]*\} (\S+)" % name.encode(), text)
    return float(found[1]) if found else 0.0


def disk_rate(work: Path, gib: float) -> float:
    """MB/s of writing ``gib`` GiB in 1 MiB writes and one fsync."""
    chunk = os.urandom(_MIB)
    path = work / "dd"
    started = time.perf_counter()
    with path.open("wb") as handle:
        for _ in range(int(gib * 1024)):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - started
    size = path.stat().st_size
    path.unlink()
    return size / elapsed / 1e6


def catch_up_round(work: Path, gib: float, peer: bool) -> None:
    disk = disk_rate(work, gib)
    end = fill(work / "cmaster", gib)
    try:
        caught = catch_up(work, end)
        print(f"\ncatch-up: {caught['bytes'] / (1 << 30):.2f} GiB in {caught['seconds']:.1f} s "
              f"from the slave's start = {caught['mb_s']:.0f} MB/s, "
              f"{caught['streamed_s']:.1f} s from its connection = "
              f"{caught['streamed_mb_s']:.0f} MB/s; disk write {disk:.0f} MB/s; ratios "
              f"{caught['mb_s'] / disk:.2f}x, {caught['streamed_mb_s'] / disk:.2f}x",
              flush=True)  # fmt: skip
        if peer:  # ours first: RocketMQ's master leaves its own files in the store
            ours = seeded_catch_up(work, end)
            theirs = rocketmq_catch_up(work, work / "cmaster", end, SEGMENT)
            print("| slave seeded with the first segment, the rest copied | MB/s | "
                  "vs disk | slave CPU s per GiB |\n|---|---|---|---|")  # fmt: skip
            for name, row in (("rmq-spark pair", ours), ("RocketMQ 5.3.3 pair", theirs)):
                print(f"| {name}: {row['bytes'] / (1 << 20):,.0f} MiB in {row['seconds']:.2f} s | "
                      f"{row['mb_s']:.0f} | {row['mb_s'] / disk:.2f}x | "
                      f"{row['cpu_s_per_gib']:.2f} |")  # fmt: skip
            print(
                f"ours / RocketMQ's: {ours['mb_s'] / theirs['mb_s']:.2f}x the rate, "
                f"{ours['cpu_s_per_gib'] / theirs['cpu_s_per_gib']:.2f}x the CPU",
                flush=True,
            )
    finally:
        shutil.rmtree(work / "cmaster", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="sends per case")
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--gib", type=float, default=1.0, help="catch-up size")
    parser.add_argument("--skip-sends", action="store_true")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
        help="a setting of every broker of the sends (repeatable), e.g. "
             "broker.grpc_front=native")  # fmt: skip
    parser.add_argument("--skip-catchup", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="catch-up rounds")
    parser.add_argument(
        "--peer", action="store_true",
        help="also a seeded slave of ours and of a real RocketMQ 5.3.3 pair (Maven Central "
             "jars), timed the same way from the slave's files")  # fmt: skip
    args = parser.parse_args(argv)
    import rocketmq

    work = Path(tempfile.mkdtemp(prefix="repl-bench-"))
    try:
        print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
        rows = (
            []
            if args.skip_sends
            else sends(rocketmq, work, args.messages, args.body_bytes, tuple(args.settings))
        )
        print("| case | msgs/s | p50 ms | p99 ms | vs lone SYNC | CPU per message: broker "
              "(+ slave) / client |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for row in rows:
            base = next(r for r in rows if r["threads"] == row["threads"])
            slave = f" + {row['slave_us']:,.0f}" if "slave_us" in row else ""
            print(
                f"| {row['case']} | {row['msgs_per_s']:,.0f} | {row['p50_ms']:.2f} | "
                f"{row['p99_ms']:.2f} | {row['msgs_per_s'] / base['msgs_per_s']:.2f}x | "
                f"{row['broker_us']:,.0f}{slave} / {row['client_us']:,.0f} us |"
            )
        for _ in range(0 if args.skip_catchup else args.rounds):
            catch_up_round(work, args.gib, args.peer)
        print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
