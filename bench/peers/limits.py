"""What the broker's request limits cost: this checkout's broker against an older commit's, side
by side in one run, with the official Python client.

The baseline is the project's own broker at ``--baseline`` (a git revision; by default the
last commit before issue 25 added the connection, request-memory, filter and name limits),
exported with ``git archive`` into a temporary directory and run from there (``PYTHONPATH``
first, so its ``rmq_spark`` is the one imported). Both run ``rmq-spark broker`` on loopback over
a fresh store with SYNC flush and every other setting at its default, so the limits are on as a
user gets them. For each broker, alternating ``--rounds`` times (baseline first):

* **send**: 2 producers x 32 sends in flight (``send_async``), 100 B bodies with a tag, for
  ``--seconds``: msgs/s, p50 / p99, and the broker's CPU per message (user + system over all
  its threads, from ``/proc/<pid>/stat``);
* **receive**: a backlog of ``--backlog`` such messages, then 2 SimpleConsumer threads of one
  group receive (32 at a time) and ack until all came, once with the filter ``*`` and once
  with the SQL92 filter ``TAGS = 'bench' AND (a IS NULL OR a > 3)`` (every message matches):
  msgs/s from the first receive to the last ack and the broker's CPU per message.

Each line prints as it is measured; the table at the end gives the medians and this checkout /
baseline as a ratio (msgs/s: above 1 is faster; CPU: below 1 is cheaper).

**The A/A control** (on unless ``--no-control``): each round also runs the baseline a second
time (``base'``, its own process and store), and the three run in an order that rotates from
round to round (base this base', this base' base, base' base this, ...), so the machine's drift
hits all three alike. A second table gives, per case and figure, this / base and base' / base as
a ratio of medians with a 90 % bootstrap interval (rounds resampled together, the three brokers
of a round kept paired) and the range of the per-round ratios, then a verdict (rule
``verdict``): a difference is *nothing measurable* when this / base's interval holds 1.0 and
lies within the control's per-round range (taken both ways, since base and base' are alike).
``--send-rounds`` runs the send case in fewer rounds than the receive cases.

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/peers/limits.py [--baseline REV]
        [--rounds 2] [--send-rounds N] [--no-control] [--seconds 10] [--backlog 20000]
        [--cases send,receive,sql] [--set KEY=VALUE ...]
    .venv/bin/python bench/peers/limits.py --from-log RUN.log [RUN2.log ...]  # pooled report
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peer_common import progress  # noqa: E402
from produce import TOPIC, import_client, make_producers  # noqa: E402
from produce_cases import broker_cpu_s, closed_loop  # noqa: E402
from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402
from rocketmq.v5.model.filter_expression import FilterType  # noqa: E402

BASELINE_REVISION = "52416d9"
"""The last commit before issue 25's limits (the default baseline)."""
GROUP = "bench-limits"
SQL_FILTER = "TAGS = 'bench' AND (a IS NULL OR a > 3)"
INVISIBLE_S = 30
BODY = b"x" * 100


@contextmanager
def exported(revision: str) -> Iterator[Path]:
    """The tree of ``revision`` in a temporary directory (removed on leaving)."""
    target = Path(tempfile.mkdtemp(prefix="bench-limits-baseline-"))
    try:
        paths = ["conf", "rmq_spark"]
        has_front = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{revision}:native/front"], check=False
        )
        if has_front.returncode == 0:  # its own native front, built on first use
            paths.append("native")
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", revision, *paths],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def send_case(rocketmq: ModuleType, broker: RmqSparkBroker, seconds: float) -> dict[str, float]:
    producers = make_producers(rocketmq, broker.endpoint, 2)
    try:
        closed_loop(rocketmq, producers, TOPIC, BODY, 32, 0, [], count=2000)  # warm-up
        result = closed_loop(rocketmq, producers, TOPIC, BODY, 32, seconds, [broker.pid])
    finally:
        for producer in producers:
            producer.shutdown()
    if result.failed:
        raise SystemExit(f"limits: {result.failed} sends failed: {result.first_error}")
    return {
        "msgs_per_s": result.rate,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "cpu_us_per_msg": result.broker_cpu_us_per_msg,
    }


def _consumer(rocketmq: ModuleType, endpoint: str, topic: str, expression: Any) -> Any:
    config = rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=40)
    consumer = rocketmq.SimpleConsumer(config, GROUP, {topic: expression}, await_duration=5)
    consumer.startup()
    return consumer


def receive_case(
    rocketmq: ModuleType, broker: RmqSparkBroker, backlog: int, sql: bool
) -> dict[str, float]:
    topic = f"{TOPIC}Drain{'Sql' if sql else 'All'}"
    producers = make_producers(rocketmq, broker.endpoint, 2)
    try:
        sent = closed_loop(rocketmq, producers, topic, BODY, 32, 0, [], count=backlog).sent
    finally:
        for producer in producers:
            producer.shutdown()
    expression = (
        rocketmq.FilterExpression(SQL_FILTER, FilterType.SQL)
        if sql
        else rocketmq.FilterExpression("*")
    )
    consumers = [_consumer(rocketmq, broker.endpoint, topic, expression) for _ in range(2)]
    done = [0, 0]
    cpu0 = broker_cpu_s([broker.pid])
    started = time.perf_counter()
    finished = [started, started]

    def work(index: int) -> None:
        idle_since = time.monotonic()
        while sum(done) < sent and time.monotonic() - idle_since < 15:
            try:
                messages = list(consumers[index].receive(32, INVISIBLE_S))
            except Exception:  # noqa: BLE001 (a first receive may fail; retried as apps do)
                time.sleep(0.2)
                continue
            if messages:
                idle_since = time.monotonic()
                finished[index] = time.perf_counter()
            for message in messages:
                consumers[index].ack(message)
                done[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_s = broker_cpu_s([broker.pid]) - cpu0
    for consumer in consumers:
        consumer.shutdown()
    if sum(done) < sent:
        raise SystemExit(f"limits: received {sum(done)} of {sent} ({topic})")
    seconds = max(finished) - started
    return {"msgs_per_s": sent / seconds, "cpu_us_per_msg": cpu_s / sent * 1e6}


CASES = ("send", "receive", "sql")
"""``--cases``: the send case, the receive case with ``*``, the one with SQL92."""


def measure(
    rocketmq: ModuleType, checkout: Path, args: argparse.Namespace, cases: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    row: dict[str, dict[str, float]] = {}
    settings = ("store.flush_policy=SYNC", *args.set)
    with RmqSparkBroker(checkout=checkout, settings=settings) as broker:
        if "send" in cases:
            row["send"] = send_case(rocketmq, broker, args.seconds)
        if "receive" in cases:
            row["receive *"] = receive_case(rocketmq, broker, args.backlog, sql=False)
        if "sql" in cases:
            row["receive SQL92"] = receive_case(rocketmq, broker, args.backlog, sql=True)
    return row


def _cases(text: str) -> tuple[str, ...]:
    cases = tuple(case.strip() for case in text.split(",") if case.strip())
    unknown = [case for case in cases if case not in CASES]
    if unknown or not cases:
        raise argparse.ArgumentTypeError(
            f"cases: one or more of {', '.join(CASES)}, comma-separated; got {text!r}"
        )
    return cases


Rows = list[dict[str, dict[str, float]]]
"""One broker's rounds: per round, per case, per figure."""
BOOTSTRAP_RESAMPLES = 4000
MIN_VERDICT_ROUNDS = 3
"""Fewer rounds give no interval worth the name (two rounds: two values to resample)."""


def _series(rows: Rows, case: str, figure: str) -> list[float]:
    return [row[case][figure] for row in rows if case in row]


def _figures(rows: Rows, case: str) -> list[str]:
    return list(next(row[case] for row in rows if case in row))


def _median(rows: Rows, case: str, figure: str) -> float:
    return statistics.median(_series(rows, case, figure))


def ratio_interval(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """median(num) / median(den) with its 90 % bootstrap interval; rounds are resampled as
    pairs (``num[i]`` was measured beside ``den[i]``), so drift between rounds cancels."""
    ratio = statistics.median(num) / statistics.median(den)
    rng = random.Random(25)  # the same figures give the same interval
    n = len(num)
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        draws.append(
            statistics.median(num[i] for i in picks) / statistics.median(den[i] for i in picks)
        )
    draws.sort()
    return ratio, draws[int(0.05 * len(draws))], draws[int(0.95 * len(draws)) - 1]


def control_band(control: list[float], base: list[float]) -> tuple[float, float]:
    """The range of the control's per-round ratios, taken both ways (base and base' are the
    same broker, so r and 1/r are equally likely): what the same code shows against itself."""
    ratios = [c / b for c, b in zip(control, base, strict=True)]
    return min(min(ratios), 1 / max(ratios)), max(max(ratios), 1 / min(ratios))


def verdict(
    interval: tuple[float, float],
    control: tuple[float, float],
    band: tuple[float, float],
    rounds: int,
) -> str:
    """``nothing measurable``: this / base's 90 % interval holds 1.0 and lies within the A/A
    control's band; ``measurably higher/lower``: it excludes 1.0 and lies wholly past the band;
    otherwise this run cannot tell (the reason given: when the control's own interval
    excludes 1.0, the baseline's rounds themselves were off by as much)."""
    if rounds < MIN_VERDICT_ROUNDS:
        return f"cannot tell: fewer than {MIN_VERDICT_ROUNDS} rounds"
    lo, hi = interval
    holds_one = lo <= 1.0 <= hi
    if holds_one and band[0] <= lo and hi <= band[1]:
        return "nothing measurable"
    if not control[0] <= 1.0 <= control[1]:
        return "cannot tell: the A/A control's own interval excludes 1.0"
    if lo > 1.0 and lo > band[1]:
        return "measurably higher"
    if hi < 1.0 and hi < band[0]:
        return "measurably lower"
    if holds_one:
        return "cannot tell: the interval holds 1.0 but reaches past the A/A band"
    return "cannot tell: the interval excludes 1.0 but overlaps the A/A band"


def report(results: dict[str, Rows]) -> None:
    cases = list(dict.fromkeys(case for row in results["baseline"] for case in row))
    print(f"\n{'case':<15} {'figure':<15} {'baseline':>10} {'this':>10} {'this/base':>10}")
    for case in cases:
        for figure in _figures(results["baseline"], case):
            base = _median(results["baseline"], case, figure)
            this = _median(results["this"], case, figure)
            print(f"{case:<15} {figure:<15} {base:>10.2f} {this:>10.2f} {this / base:>9.2f}x")
    if "control" not in results:
        return
    print(
        f"\n{'case':<15} {'figure':<15} {'this/base [90 %]':>24} {'rounds':>13} "
        f"{'base2/base [90 %]':>24} {'A/A band':>13}  verdict"
    )
    for case in cases:
        for figure in _figures(results["baseline"], case):
            base = _series(results["baseline"], case, figure)
            this = _series(results["this"], case, figure)
            control = _series(results["control"], case, figure)
            ab, aa = ratio_interval(this, base), ratio_interval(control, base)
            band = control_band(control, base)
            rounds = [t / b for t, b in zip(this, base, strict=True)]
            print(
                f"{case:<15} {figure:<15} {_interval(ab):>24} "
                f"{min(rounds):>6.3f}-{max(rounds):<6.3f} {_interval(aa):>24} "
                f"{band[0]:>6.3f}-{band[1]:<6.3f}  {verdict(ab[1:], aa[1:], band, len(base))}"
            )
    for name, rows in results.items():
        for case in cases:
            cpu = ", ".join(f"{v:.0f}" for v in _series(rows, case, "cpu_us_per_msg"))
            print(f"rounds {name:<8} {case:<15} cpu us/msg: {cpu}")


def _interval(ratio: tuple[float, float, float]) -> str:
    return f"{ratio[0]:.3f} [{ratio[1]:.3f}-{ratio[2]:.3f}]"


def rounds_from_logs(paths: list[Path]) -> dict[str, Rows]:
    """The rounds that earlier runs printed (``limits: round N NAME: {...}``), pooled."""
    results: dict[str, Rows] = {"baseline": [], "this": [], "control": []}
    for path in paths:
        for line in path.read_text().splitlines():
            head, sep, row = line.partition(": {")
            if sep and " limits: round " in f" {head}":
                results[head.split()[-1]].append(ast.literal_eval("{" + row))
    if not results["control"]:
        del results["control"]
    if not results["baseline"] or len(results["baseline"]) != len(results["this"]):
        raise SystemExit(f"limits: no paired rounds in {', '.join(map(str, paths))}")
    return results


def round_order(round_no: int, control: bool) -> list[str]:
    """The brokers of round ``round_no`` (from 1) in the order they run: rotated per round,
    so each runs first, second and last equally often over three rounds."""
    names = ["baseline", "this", "control"] if control else ["baseline", "this"]
    shift = (round_no - 1) % len(names)
    return names[shift:] + names[:shift]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE_REVISION, help="git revision to compare")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each broker")
    parser.add_argument(
        "--send-rounds",
        type=int,
        default=None,
        help="rounds that run the send case (default: all; the first N rounds)",
    )
    parser.add_argument(
        "--no-control",
        dest="control",
        action="store_false",
        help="skip the A/A control (the baseline's second broker in each round)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the send case")
    parser.add_argument("--backlog", type=int, default=20000, help="messages per receive case")
    parser.add_argument(
        "--cases",
        type=_cases,
        default=CASES,
        help=f"comma-separated cases to run (default: {','.join(CASES)})",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for both brokers (e.g. broker.tls_mode=disabled: no front)",
    )
    parser.add_argument(
        "--from-log",
        nargs="+",
        type=Path,
        metavar="LOG",
        help="measure nothing: the report over the rounds in these earlier runs' output",
    )
    args = parser.parse_args(argv)
    if args.from_log:
        report(rounds_from_logs(args.from_log))
        return 0
    if args.rounds < 1 or (args.send_rounds is not None and args.send_rounds < 1):
        parser.error("--rounds and --send-rounds: at least 1")
    rocketmq = import_client()
    results: dict[str, Rows] = {"baseline": [], "this": []}
    if args.control:
        results["control"] = []
    progress(
        f"limits: baseline {args.baseline}, {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} "
        f"UTC, load average {os.getloadavg()[0]:.2f}"
    )
    with exported(args.baseline) as baseline:
        checkouts = {"baseline": baseline, "control": baseline, "this": REPO}
        for round_no in range(1, args.rounds + 1):
            cases = args.cases
            if args.send_rounds is not None and round_no > args.send_rounds:
                cases = tuple(case for case in cases if case != "send")
            if not cases:
                break
            for name in round_order(round_no, args.control):
                row = measure(rocketmq, checkouts[name], args, cases)
                results[name].append(row)
                progress(f"limits: round {round_no} {name}: {row}")
    report(results)
    progress(
        f"limits: {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
