"""bench/peers/limits.py's A/A report, on made-up rounds (no broker): the rotation of the three
brokers, the paired bootstrap interval, the A/A band and the verdict rule BENCHMARKS.md states,
and ``--from-log`` pooling earlier runs' printed rounds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "peers" / "limits.py"
sys.path.insert(0, str(SCRIPT.parent))

limits = pytest.importorskip("limits")


def test_each_broker_runs_first_second_and_last_once_in_three_rounds() -> None:
    orders = [limits.round_order(n, control=True) for n in (1, 2, 3)]
    for position in range(3):
        assert sorted(order[position] for order in orders) == ["baseline", "control", "this"]
    assert limits.round_order(4, control=True) == orders[0]
    assert limits.round_order(2, control=False) == ["this", "baseline"]


def test_the_interval_holds_the_ratio_of_medians_and_pairs_the_rounds() -> None:
    base = [100.0, 200.0, 300.0, 400.0, 500.0]
    # Each round of "this" is its baseline's round plus 1 %: drift cancels in pairs.
    ratio, lo, hi = limits.ratio_interval([b * 1.01 for b in base], base)
    assert ratio == pytest.approx(1.01) and lo == pytest.approx(1.01) and hi == pytest.approx(1.01)
    assert limits.ratio_interval([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == (
        limits.ratio_interval([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])  # seeded: the same each time
    )
    assert limits.control_band([110.0, 95.0], [100.0, 100.0]) == pytest.approx((1 / 1.1, 1.1))


@pytest.mark.parametrize(
    ("interval", "control", "band", "rounds", "expected"),
    [
        ((0.97, 1.04), (0.95, 1.05), (0.90, 1.10), 7, "nothing measurable"),
        ((0.97, 1.14), (0.95, 1.05), (0.90, 1.10), 7, "cannot tell: the interval holds 1.0"),
        ((1.12, 1.20), (0.95, 1.05), (0.90, 1.10), 7, "measurably higher"),
        ((0.80, 0.85), (0.95, 1.05), (0.90, 1.10), 7, "measurably lower"),
        ((1.05, 1.08), (0.95, 1.05), (0.90, 1.10), 7, "cannot tell: the interval excludes"),
        ((1.12, 1.20), (1.02, 1.10), (0.90, 1.15), 7, "cannot tell: the A/A control's own"),
        ((0.97, 1.04), (0.95, 1.05), (0.90, 1.10), 2, "cannot tell: fewer than 3 rounds"),
    ],
)
def test_verdict_rule(interval, control, band, rounds, expected) -> None:  # noqa: ANN001
    assert limits.verdict(interval, control, band, rounds).startswith(expected)


def test_from_log_pools_the_rounds_of_earlier_runs(tmp_path: Path) -> None:
    logs = []
    for run in range(2):
        lines = []
        for n in range(1, 4):
            for name, cpu in (("baseline", 400), ("this", 404), ("control", 398)):
                row = {"receive *": {"msgs_per_s": 1000.0, "cpu_us_per_msg": cpu + n + run}}
                lines.append(f"peers: limits: round {n} {name}: {row!r}")
        logs.append(tmp_path / f"run{run}.log")
        logs[-1].write_text("\n".join(["peers: limits: baseline 52416d9", *lines]) + "\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--from-log", *map(str, logs)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cpu = [line for line in done.stdout.splitlines() if "cpu_us_per_msg" in line]
    assert cpu[0].split()[-1] == "1.01x"  # the first table: medians over the 6 rounds
    assert "1.010 [1.010-1.010]" in cpu[1] and "0.995 [0.995-0.995]" in cpu[1]
    assert cpu[1].endswith("cannot tell: the A/A control's own interval excludes 1.0")
    rounds = "this     receive *       cpu us/msg: 405, 406, 407, 406, 407, 408"
    assert rounds in done.stdout  # the rounds of both runs, in order
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--from-log", str(empty)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.strip() == f"limits: no paired rounds in {empty}"
