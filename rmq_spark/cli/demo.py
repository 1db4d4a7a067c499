"""``rmq-spark demo``: the end-to-end demo ``make run`` starts."""

from __future__ import annotations

import argparse
import re
import signal
import time
from pathlib import Path
from types import FrameType

from rmq_spark.cli.common import add_config_arguments, config_from_args
from rmq_spark.cli.doctor import run_checks
from rmq_spark.errors import EnvironmentCheckError

__all__ = ["parse_duration_s", "register"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(text: str) -> float:
    """``"60s"``, ``"2m"``, ``"1500ms"`` or plain seconds -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 60s, 2m, 90)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "demo",
        help="run the end-to-end demo: broker, producers, reput, delay job, SQL",
        description="Start a broker on loopback over a fresh store, produce messages with the "
        "official RocketMQ client (normal, tagged, keyed, timer) and delay-level messages, run "
        "the reput job and the delay job as Spark jobs next to them with a live status line, "
        "then run SQL over rmq.* and stop everything cleanly. Ctrl-C stops early, cleanly.",
    )
    parser.add_argument(
        "--duration",
        type=parse_duration_s,
        default=60.0,
        metavar="TIME",
        help="how long producers send, e.g. 60s or 2m (default: 60s)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the store, tables and logs go (default: ./work/demo-<date>-<time>)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=25.0,
        help="messages per second of each of the two official-client producers (default: 25)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: the cluster demo (make cluster): RocketMQ's NameServer, two broker processes, "
        "one SIGKILLed and restarted mid-run, the reput job over both stores (default: 1)",
    )
    add_config_arguments(parser)
    parser.set_defaults(handler=_handle)


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _handle(args: argparse.Namespace) -> int:
    failed = [(name, detail) for name, ok, detail in run_checks() if not ok]
    if failed:
        raise EnvironmentCheckError("; ".join(f"{name}: {detail}" for name, detail in failed))
    config = config_from_args(args)
    workdir = args.workdir or Path("work") / time.strftime("demo-%Y%m%d-%H%M%S")
    print(f"demo: work directory {workdir.absolute()}")
    if args.brokers == 2:
        from rmq_spark.demo.cluster import run_cluster_demo

        return run_cluster_demo(config, workdir, args.duration, args.rate)
    from rmq_spark.demo.run import DemoOptions, DemoRun

    previous = signal.signal(signal.SIGTERM, _terminate)  # stop as cleanly as on Ctrl-C
    run = DemoRun(config, DemoOptions(workdir, args.duration, args.rate))
    try:
        summary = run.run()
    except KeyboardInterrupt:
        print("demo: interrupted; everything was stopped cleanly")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(
        f"""
demo: done in {summary["elapsed_s"]} s. Everything is stopped. What it left behind:
  store   {run.store_dir}
  tables  {run.tables_dir}   (Delta: consume_queue, message_index, messages)
  logs    {run.logs_dir}
  summary {run.workdir / "summary.json"}   acknowledged sends: {run.workdir / "acked.jsonl"}
Try next:
  .venv/bin/rmq-spark dump --store {run.store_dir} --limit 3
  .venv/bin/rmq-spark verify --store {run.store_dir}
  .venv/bin/rmq-spark query --tables {run.tables_dir} --topic Orders --key orders-0-0
  .venv/bin/rmq-spark reput --store {run.store_dir} --tables {run.tables_dir} --available-now
  notebooks/quickstart.ipynb (jupyter) for the same steps in a notebook"""
    )
    bad = summary["acked_missing_from_tables"] or summary["delayed_early"]
    return 1 if bad else 0
