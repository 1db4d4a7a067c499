"""`rmq-spark demo` end to end, as `make run` starts it: a real broker, the official client,
the reput and delay jobs on a real SparkSession, then SQL. Checked from outside the demo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
RUN_DEADLINE_S = 600


def _demo(workdir: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.cli.main", "demo", "--workdir", str(workdir), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own session: every process it starts can be found
    )


def _session_members(session_id: int) -> list[str]:
    """Processes still alive in the demo's session (the JVM, Python workers, ...)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == session_id:
            alive.append(f"{entry.name}: {cmdline[:120]}")
    return alive


def _wait_for_no_members(session_id: int, deadline_s: float = 30) -> list[str]:
    end = time.monotonic() + deadline_s
    while (alive := _session_members(session_id)) and time.monotonic() < end:
        time.sleep(0.2)
    return alive


def test_demo_stores_every_acknowledged_message_and_redelivers_each_delayed_one_once(
    tmp_path: Path,
    spark,  # type: ignore[no-untyped-def]
) -> None:
    workdir = tmp_path / "demo"
    proc = _demo(workdir, "--duration", "12s", "--rate", "10")
    output, _ = proc.communicate(timeout=RUN_DEADLINE_S)
    assert proc.returncode == 0, output[-5000:]
    assert _wait_for_no_members(proc.pid) == []
    assert "demo: done" in output and "== delayed messages" in output
    assert not (workdir / "store" / "abort").exists()

    acked = [json.loads(line) for line in (workdir / "acked.jsonl").read_text().splitlines()]
    kinds = {a["kind"] for a in acked}
    assert kinds == {"NORMAL", "TIMER", "DELAY_LEVEL"}, kinds

    messages = spark.read.format("delta").load(str(workdir / "tables" / "messages"))
    cq = spark.read.format("delta").load(str(workdir / "tables" / "consume_queue"))
    rows = messages.select("topic", "uniq_key", "physical_offset", "store_timestamp").collect()
    by_key: dict[tuple[str, str], list] = {}
    for row in rows:
        by_key.setdefault((row.topic, row.uniq_key), []).append(row)
    due_ms = {
        r.physical_offset: r.tags_code
        for r in cq.where("topic IN ('SCHEDULE_TOPIC_XXXX', 'rmq_sys_wheel_timer')").collect()
    }
    for ack in acked:
        delivered = by_key.get((ack["topic"], ack["message_id"]), [])
        assert len(delivered) == 1, (ack, delivered)  # in its real topic exactly once
        if ack["kind"] == "NORMAL":
            continue
        [held] = by_key[(ack["stored_topic"], ack["message_id"])]
        due = due_ms[held.physical_offset]
        stored_ms = int(delivered[0].store_timestamp.timestamp() * 1000)
        assert stored_ms >= due, (ack, due, stored_ms)  # never early

    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["acked_missing_from_tables"] == 0
    assert summary["delayed_early"] == 0
    assert (
        summary["delayed_delivered"]
        == summary["delayed_deliveries"]
        == len([a for a in acked if a["kind"] != "NORMAL"])
    )


def test_ctrl_c_stops_everything_cleanly(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    proc = _demo(workdir, "--duration", "300s")
    lines: list[str] = []
    assert proc.stdout is not None
    end = time.monotonic() + RUN_DEADLINE_S
    for line in proc.stdout:
        lines.append(line)
        if "produced" in line and "acked" in line:  # the first status line: all parts run
            break
        assert time.monotonic() < end, "".join(lines)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends to the group
    rest, _ = proc.communicate(timeout=180)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-5000:]
    assert "stopped cleanly" in output
    assert _wait_for_no_members(proc.pid) == []
    assert (workdir / "store" / "commitlog").is_dir()
    assert not (workdir / "store" / "abort").exists()
    verify = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.main", "verify", "--store", str(workdir / "store")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
