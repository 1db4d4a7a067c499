"""SIGKILL the spark-submit reput job in the middle of a micro-batch, restart it: every table
holds exactly one row per message (and per key). Then a new Python process sees them by SQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reput_rows import expected_consume_queue, expected_index, plain_rows, row_from_record

from rmq_spark.spark.tables import CONSUME_QUEUE, MESSAGE_INDEX, MESSAGES, table_path
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutStatus

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SEGMENT_BYTES = 16 * 1024
MESSAGE_COUNT = 300
WAIT_S = 900  # an upper bound for a loaded 2-core machine, not a timing assertion


def _fill_store(store_dir: Path) -> list[dict]:
    config = StoreConfig(root_dir=store_dir, segment_size_bytes=SEGMENT_BYTES)
    with MessageStore.open(config) as store:
        results = [
            store.put(
                PutRequest(
                    f"topic-{i % 3}",
                    b"m" * 100,
                    tags=f"tag{i % 5}",
                    keys=(f"order-{i}", f"user-{i % 7}"),
                    sys_flag=0xC if i % 50 == 49 else 0,
                )
            )
            for i in range(MESSAGE_COUNT)
        ]
        assert all(r.status is PutStatus.PUT_OK for r in results)
        decoded = [store.read_decoded(r.physical_offset) for r in results]
    return [row_from_record(d.record, d.total_size) for d in decoded]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _commits(tables: Path, name: str) -> int:
    return len(list((table_path(tables, name) / "_delta_log").glob("*.json")))


def _history(tables: Path) -> str:
    """Each table's commits (operation, txn version, rows added): shown when a check fails."""
    lines = []
    for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE):
        for commit in sorted((table_path(tables, name) / "_delta_log").glob("*.json")):
            actions = [json.loads(line) for line in commit.read_text().splitlines()]
            txn = [a["txn"]["version"] for a in actions if "txn" in a]
            added = sum(json.loads(a["add"]["stats"])["numRecords"] for a in actions if "add" in a)
            operation = [a["commitInfo"]["operation"] for a in actions if "commitInfo" in a]
            lines.append(f"{name} {commit.stem[-3:]} {operation} txn={txn} rows+={added}")
    return "\n".join(lines) + "\n"


def _kill_mid_batch(process: subprocess.Popen, tables: Path) -> list[int]:
    """Wait until one table has committed a batch that another has not, then SIGKILL."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"reput job exited early with {process.returncode}")
        try:
            counts = [_commits(tables, name) for name in (MESSAGES, MESSAGE_INDEX, CONSUME_QUEUE)]
        except FileNotFoundError:
            counts = [0]
        # Some table has committed a batch another has not (the three append in parallel),
        # after at least one whole batch.
        if min(counts) >= 2 and len(set(counts)) > 1:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return counts
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError("the reput job never reached the middle of a batch")


def test_sigkill_mid_batch_then_restart_leaves_exactly_one_row_per_message(
    spark, tmp_path: Path
) -> None:
    store_dir, tables = tmp_path / "store", tmp_path / "tables"
    rows = _fill_store(store_dir)
    job = [str(REPO / "jobs" / "reput.py"), "--store", str(store_dir), "--tables", str(tables)]
    log = (tmp_path / "submit.log").open("w")
    submitted = subprocess.Popen(
        [
            str(VENV_BIN / "spark-submit"),
            "--master",
            "local[1]",
            *job,
            "--trigger",
            "1s",
            "--max-bytes-per-trigger",
            "6000",
        ],
        env=_env(),
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    counts = _kill_mid_batch(submitted, tables)
    assert len(set(counts)) > 1, f"killed between two batches, not inside one: {counts}"

    restarted = subprocess.run(
        [sys.executable, *job, "--available-now"],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    def table(name: str) -> list[tuple]:
        return plain_rows(spark.read.format("delta").load(str(table_path(tables, name))).collect())

    history = _history(tables) + restarted.stderr[-4000:]
    assert table(CONSUME_QUEUE) == plain_rows(expected_consume_queue(rows)), history
    assert table(MESSAGE_INDEX) == plain_rows(expected_index(rows)), history
    offsets = sorted(row[3] for row in table(MESSAGES))
    assert offsets == sorted(row["physical_offset"] for row in rows), history

    # A new Python process (a fresh SparkSession and catalog) sees the tables through SQL.
    script = (
        "import json\n"
        "from rmq_spark.spark.config import SparkConfig\n"
        "from rmq_spark.spark.session import build_session\n"
        "from rmq_spark.spark.tables import register_tables\n"
        "spark = build_session(SparkConfig(master='local[1]', log_level='ERROR'))\n"
        f"register_tables(spark, {str(tables)!r})\n"
        "print(json.dumps({t: spark.sql(f'SELECT count(*) FROM rmq.{t}').first()[0]"
        " for t in ('messages', 'message_index', 'consume_queue')}), flush=True)\n"
        "import argparse\n"
        "from rmq_spark.cli import query_command\n"
        "parser = argparse.ArgumentParser()\n"
        "query_command.register(parser.add_subparsers())\n"
        f"args = parser.parse_args(['query', '--tables', {str(tables)!r}, '--topic', 'topic-1',"
        " '--key', 'order-7'])\n"
        "query_command.run(args)\n"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    counts_line, *found = fresh.stdout.strip().splitlines()[-2:]
    counts = json.loads(counts_line)
    assert counts == {
        "messages": len(rows),
        "message_index": len(expected_index(rows)),
        "consume_queue": len(expected_consume_queue(rows)),
    }
    # ... and `rmq-spark query --tables --topic --key` prints the message as a JSON line.
    (hit,) = [json.loads(line) for line in found]
    assert hit["physical_offset"] == rows[7]["physical_offset"]
    assert hit["properties"]["KEYS"] == "order-7 user-0"
