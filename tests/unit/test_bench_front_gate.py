"""bench/bench_front_gate.py replays frames the gate and the watch take as a real drain's:
every byte passes on unchanged and every booking comes back (else its figure would time a
path the broker does not take)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_front_gate.py"


def test_the_front_gate_bench_replays_a_drain_the_gate_passes_whole() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "320", "--repeat", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["gate", "pass-through"], lines
    assert all("us CPU per received message (320 messages" in line for line in lines)
