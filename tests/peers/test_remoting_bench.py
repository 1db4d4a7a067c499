"""Smoke test of bench/peers/remoting_bench.py: the whole command, both systems, tiny counts.

It runs as a user runs it (a subprocess under the machine-wide bench lock): RocketMQ 4.9.8's
Java client through each system's name server, every case for a second, then the table with
one row per case and a ratio, and nothing left running. The numbers are not checked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.bench_lock,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "peers" / "remoting_bench.py"


@pytest.mark.timeout(1800)  # it may wait for the bench lock first
def test_remoting_bench_runs_every_case_on_both_systems() -> None:
    done = subprocess.run(
        ["flock", "-o", "/tmp/bench.lock", sys.executable, str(SCRIPT), "--seconds", "1",
         "--warm-up-seconds", "1", "--e2e-seconds", "1", "--rate", "100", "--inflight", "16",
         "--batch", "4", "--batch-inflight", "2"],
        capture_output=True, text=True, timeout=1800, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 4, done.stdout  # the header, one row per case
    assert "RocketMQ 5.3.3 broker (no proxy)" in rows[0]
    cases = ("sync send", "async send", "batch of 4", "push consumer")
    for row, case in zip(rows[1:], cases, strict=True):
        assert row.startswith(f"| {case}"), row
        assert "failed" not in row, row
        ratio = row.split("|")[4]
        assert ("p50" if case == "push consumer" else "msgs/s") in ratio, row
    assert "load average" in done.stdout


def test_unknown_case_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "sync,fast"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --cases: unknown ['fast']; known " + str(
        ["sync", "async", "batch", "e2e"]
    )
