"""Benchmark: sends through the gRPC broker with the official client vs embedded puts.

Starts ``python -m rmq_spark.broker.server`` on 127.0.0.1 (OS-chosen port) over a temp store
and drives it with ``rocketmq-python-client`` 5.1.2 Producers: 1 and 8 threads, 100 B and
1 KiB bodies; reports messages/s and p50/p99 send latency. The baseline, measured in the same
run over the same store settings, is the embedded broker (``rmq_spark.broker.embedded.Broker``)
sending the same messages in-process with the same thread count; the table shows
gRPC/embedded msgs/s as a ratio. ``--auth both`` runs the gRPC cases twice in one run, against
a broker with auth off and one with auth on (clients sign every request; a normal user whose
ACL allows Pub on the topic), the case names ending in ``auth``.

With ``--tls-compare``: instead, send rate and p50/p99 of 1 KiB sends with TLS on vs off in
the same run: one broker with the default ``tls_mode=permissive`` (its front serves TLS and
plaintext on one port, self-signed certificate) driven over TLS and over plaintext, and one
broker with ``tls_mode=disabled`` (grpc on the port itself, no front): the front's cost and
TLS's cost, each a ratio to the front-less plaintext case.

Usage: python bench/bench_grpc.py [--messages N] [--flush SYNC|ASYNC] [--auth off|on|both] [--json]
       [--tls-compare]
Default: 2000 messages per case (a few minutes in all on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rmq_spark.broker.embedded import Broker  # noqa: E402
from rmq_spark.store.config import FlushPolicy, StoreConfig  # noqa: E402

BODY_SIZES = (100, 1024)
THREAD_COUNTS = (1, 8)
START_DEADLINE_S = 60.0


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


BENCH_USERS = """
[users.bench]
secret_key = "bench-secret-key"
policies = [{ resource = "Topic:bench", actions = ["Pub"] }]
"""
BENCH_CREDENTIALS = ("bench", "bench-secret-key")


def start_broker(
    store_dir: Path, flush: str, work_dir: Path, *settings: str
) -> tuple[subprocess.Popen, str]:
    work_dir.mkdir(parents=True, exist_ok=True)
    ready = work_dir / f"ready-{store_dir.name}"
    log = (work_dir / "broker.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmq_spark.broker.server",
            "--store",
            str(store_dir),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
            "--set",
            f"store.flush_policy={flush}",
            *(arg for item in settings for arg in ("--set", item)),
        ],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + START_DEADLINE_S
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"broker did not start; see {work_dir / 'broker.log'}")
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def grpc_case(
    rocketmq: Any,
    address: str,
    threads: int,
    body_size: int,
    total: int,
    credentials: tuple[str, str] | None = None,
    *,
    tls: bool = False,
    label: str = "grpc",
) -> dict:
    signed = rocketmq.Credentials(*credentials) if credentials else rocketmq.Credentials()
    config = rocketmq.ClientConfiguration(address, signed, request_timeout=10)
    producers = [rocketmq.Producer(config, ("bench",), tls_enable=tls) for _ in range(threads)]
    for producer in producers:
        producer.startup()
    body = os.urandom(body_size)
    per_thread = total // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def work(index: int) -> None:
        producer, mine = producers[index], latencies[index]
        for _ in range(per_thread):
            message = rocketmq.Message()
            message.topic = "bench"
            message.body = body
            started = time.perf_counter()
            producer.send(message)
            mine.append(time.perf_counter() - started)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    for producer in producers:
        producer.shutdown()
    flat = sorted(x for per in latencies for x in per)
    plural = "s" if threads > 1 else ""
    return {
        "case": f"{label} {threads} thread{plural}{' auth' if credentials else ''}",
        "auth": bool(credentials),
        "threads": threads,
        "body_bytes": body_size,
        "messages": len(flat),
        "msgs_per_s": len(flat) / elapsed,
        "p50_ms": statistics.median(flat) * 1000,
        "p99_ms": _percentile(flat, 0.99) * 1000,
    }


def embedded_case(store_dir: Path, flush: str, threads: int, body_size: int, total: int) -> dict:
    body = os.urandom(body_size)
    per_thread = total // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    store_config = StoreConfig(flush_policy=FlushPolicy[flush])
    with Broker(store_dir, store_config=store_config) as broker:

        def work(index: int) -> None:
            mine = latencies[index]
            for _ in range(per_thread):
                t0 = time.perf_counter()
                outcome = broker.send("bench", body)
                mine.append(time.perf_counter() - t0)
                if not outcome.ok:
                    raise SystemExit(f"embedded put failed: {outcome}")

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
    flat = sorted(x for per in latencies for x in per)
    return {
        "case": f"embedded {threads} thread{'s' if threads > 1 else ''}",
        "threads": threads,
        "body_bytes": body_size,
        "messages": len(flat),
        "msgs_per_s": len(flat) / elapsed,
        "p50_ms": statistics.median(flat) * 1000,
        "p99_ms": _percentile(flat, 0.99) * 1000,
    }


def tls_compare(rocketmq: Any, tmp_dir: Path, flush: str, total: int) -> list[dict]:
    """1 KiB sends: no front (tls_mode=disabled), plaintext and TLS through the front."""
    front_store, direct_store = tmp_dir / "front-store", tmp_dir / "direct-store"
    front, front_address = start_broker(front_store, flush, tmp_dir)
    direct, direct_address = start_broker(direct_store, flush, tmp_dir, "broker.tls_mode=disabled")
    # The client trusts grpc's default roots only; this is read when its first TLS channel opens.
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(front_store / "config/tls/cert.pem")
    rows = []
    try:
        for threads in THREAD_COUNTS:
            for address, tls, label in (
                (direct_address, False, "plain no front"),
                (front_address, False, "plain via front"),
                (front_address, True, "TLS via front"),
            ):
                rows.append(
                    grpc_case(rocketmq, address, threads, 1024, total, tls=tls, label=label)
                )
    finally:
        for proc in (front, direct):
            proc.terminate()
            proc.wait(timeout=60)
    return rows


def print_tls_compare(rows: list[dict], args: argparse.Namespace) -> None:
    baseline = {r["threads"]: r for r in rows if r["case"].startswith("plain no front")}
    print(f"flush={args.flush}, {args.messages} messages of 1 KiB per case; baseline = no front")
    print(f"{'case':<26} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs no front':>12}")
    for row in rows:
        ratio = row["msgs_per_s"] / baseline[row["threads"]]["msgs_per_s"]
        print(
            f"{row['case']:<26} {row['msgs_per_s']:>9.0f} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {ratio:>11.2f}x"
        )
        if args.json:
            print(json.dumps({**row, "flush": args.flush, "ratio_vs_no_front": ratio}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per case")
    parser.add_argument("--flush", choices=["SYNC", "ASYNC"], default="SYNC")
    parser.add_argument(
        "--auth", choices=["off", "on", "both"], default="off", help="broker auth for gRPC cases"
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line per case")
    parser.add_argument("--tls-compare", action="store_true", help="TLS on vs off (see above)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp:
        tmp_dir = Path(tmp)
        os.environ["HOME"] = str(tmp_dir)  # the client logs under ~/logs on import
        import rocketmq

        if args.tls_compare:
            print_tls_compare(tls_compare(rocketmq, tmp_dir, args.flush, args.messages), args)
            return 0

        rows = []
        for threads in THREAD_COUNTS:
            for body_size in BODY_SIZES:
                store_dir = tmp_dir / f"embedded-{threads}-{body_size}"
                rows.append(embedded_case(store_dir, args.flush, threads, body_size, args.messages))
        users = tmp_dir / "users.toml"
        users.write_text(BENCH_USERS, encoding="utf-8")
        users.chmod(0o600)  # the broker refuses a users file others may read
        for auth in {"off": (False,), "on": (True,), "both": (False, True)}[args.auth]:
            settings = ("broker.auth_enabled=true", f"broker.auth_users_file={users}")
            name = "auth" if auth else "open"
            proc, address = start_broker(
                tmp_dir / f"grpc-store-{name}", args.flush, tmp_dir / name, *(settings * auth)
            )
            credentials = BENCH_CREDENTIALS if auth else None
            try:
                for threads in THREAD_COUNTS:
                    for body_size in BODY_SIZES:
                        rows.append(
                            grpc_case(
                                rocketmq, address, threads, body_size, args.messages, credentials
                            )
                        )
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    baseline = {
        (r["threads"], r["body_bytes"]): r["msgs_per_s"]
        for r in rows
        if r["case"].startswith("embedded")
    }
    print(
        f"flush={args.flush}, {args.messages} messages per case; "
        "baseline = embedded sends, same threads and body size"
    )
    print(f"{'case':<25} {'body':>6} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs embedded':>12}")
    for row in rows:
        ratio = row["msgs_per_s"] / baseline[(row["threads"], row["body_bytes"])]
        print(
            f"{row['case']:<25} {row['body_bytes']:>6} {row['msgs_per_s']:>9.0f} "
            f"{row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {ratio:>11.2f}x"
        )
        if args.json:
            print(json.dumps({**row, "flush": args.flush, "ratio_vs_embedded": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
