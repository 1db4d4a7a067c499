"""Benchmark: auto-creating topics through the gRPC broker, and what it costs other sends.

Starts ``python -m rmq_spark.cli.main broker`` on 127.0.0.1 (OS-chosen port, ASYNC flush)
over a temp store, twice: an empty store, and a store whose ``config/topics.json`` already
lists ``--existing`` topics (written before the start, as a broker that created them would
have left it). In each, one ``Producer`` sends one message to each of ``--window`` new topics
in turn (each send auto-creates its topic, which goes into ``topics.json``) while a second
``Producer`` sends to one existing topic in a loop. Reports topics created per second in each
case, the worst and p99 latency of the concurrent sends, how long the broker took to stop
(topics.json written at close) and how many topics the file lists after the stop.

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
from rmq_spark.broker.config_files.rocketmq_config import TopicConfig  # noqa: E402
from rmq_spark.broker.config_files.rocketmq_config_files import read_topics, write_topics  # noqa: E402
from rmq_spark.broker.producer import Producer  # noqa: E402


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


def _case(work: Path, existing: int, window: int) -> dict[str, float]:
    store = work / "store"
    if existing:
        configs = {
            f"old-topic-{i}": TopicConfig(f"old-topic-{i}", 8, 8, extra={"attributes": {}})
            for i in range(existing)
        }
        write_topics(store, configs)
    proc, address = _start(store, work)
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
        rate = _create(creator, 0, window)
    finally:
        stop.set()
        thread.join()
        creator.close()
        other.close()
    started = time.perf_counter()
    proc.terminate()
    code = proc.wait(timeout=120)
    stop_s = time.perf_counter() - started
    waits.sort()
    return {
        "topics_per_s": round(rate, 1),
        "concurrent_send_max_ms": round(waits[-1] * 1000, 1),
        "concurrent_send_p99_ms": round(waits[int(len(waits) * 0.99)] * 1000, 1),
        "concurrent_sends": len(waits),
        "broker_stop_s": round(stop_s, 2),
        "broker_exit_code": code,
        "topics_in_topics_json": len(read_topics(store)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=3000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {}
    for existing in (0, args.existing):
        with tempfile.TemporaryDirectory() as tmp:
            result[f"existing_{existing}"] = _case(Path(tmp), existing, args.window)
    if args.json:
        print(json.dumps(result))
        return
    for case, values in result.items():
        print(case + ": " + ", ".join(f"{k} {v}" for k, v in values.items()))


if __name__ == "__main__":
    main()
