"""Benchmark: auto-creating topics through the gRPC broker, and what it costs other sends.

Starts ``python -m rmq_spark.cli.main broker`` on 127.0.0.1 (OS-chosen port, ASYNC flush)
over a temp store. One ``Producer`` sends one message to each of N new topics in turn (each
send auto-creates its topic, which goes into ``config/topics.json``); meanwhile a second
``Producer`` sends to one existing topic in a loop. Reports topics created per second over
the first ``--window`` topics and over the ``--window`` topics after ``--existing`` topics
exist, the worst and p99 latency of the concurrent sends, and how long the broker took to
stop (topics.json written at close).

Usage: python bench/bench_topic_create.py [--existing 3000] [--window 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rmq_spark.broker.config import BrokerConfig  # noqa: E402
from rmq_spark.broker.producer import Producer  # noqa: E402
from rmq_spark.broker.rocketmq_config_files import read_topics  # noqa: E402


def _start(store: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / "ready"
    settings = ["--set", "store.flush_policy=ASYNC"]
    if "auto_create_topics_per_s" in BrokerConfig.__dataclass_fields__:
        settings += ["--set", "broker.auto_create_topics_per_s=0"]  # one client creates all
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.cli.main", "broker", "--store", str(store),
         "--listen", "127.0.0.1:0", "--ready-file", str(ready), *settings],
        cwd=REPO_ROOT, stdout=(work / "broker.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((work / "broker.log").read_text())
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def _create(producer: Producer, first: int, count: int) -> float:
    started = time.perf_counter()
    for index in range(first, first + count):
        producer.send(f"bench-topic-{index}", b"x")
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=3000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        proc, address = _start(work / "store", work)
        creator, other = Producer(address), Producer(address)
        other.send("bench-existing", b"warm")
        waits: list[float] = []
        stop = threading.Event()

        def concurrent_sends() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                other.send("bench-existing", b"y" * 100)
                waits.append(time.perf_counter() - started)

        thread = threading.Thread(target=concurrent_sends)
        thread.start()
        try:
            at_zero = _create(creator, 0, args.window)
            _create(creator, args.window, args.existing - args.window)
            at_existing = _create(creator, args.existing, args.window)
        finally:
            stop.set()
            thread.join()
            creator.close()
            other.close()
        started = time.perf_counter()
        proc.terminate()
        code = proc.wait(timeout=120)
        stop_s = time.perf_counter() - started
        listed = len(read_topics(work / "store"))
    waits.sort()
    result = {
        "topics_per_s_at_0": round(at_zero, 1),
        f"topics_per_s_at_{args.existing}": round(at_existing, 1),
        "concurrent_send_max_ms": round(waits[-1] * 1000, 1),
        "concurrent_send_p99_ms": round(waits[int(len(waits) * 0.99)] * 1000, 1),
        "concurrent_sends": len(waits),
        "broker_stop_s": round(stop_s, 2),
        "broker_exit_code": code,
        "topics_in_topics_json": listed,
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
