"""``rmq-spark txcheck``: run the transaction check-back as a job beside a broker.

Owns the subcommand's arguments (shared with ``jobs/txcheck.py`` through
``add_txcheck_arguments``) and the signal handling of a continuous run; the job itself is
``rmq_spark/txcheck/job.py: run_txcheck``.
"""

from __future__ import annotations

import argparse
import signal
import textwrap
import threading
from typing import Any

from rmq_spark.cli.common import HELP_WIDTH, local_path

__all__ = ["add_txcheck_arguments", "register", "run_from_args"]


def add_txcheck_arguments(parser: argparse.ArgumentParser, finder: str = "files") -> None:
    """The job's own arguments (config flags are added separately); ``finder``: the
    default of ``--finder``."""
    from rmq_spark.cli.schedule_command import parse_duration_ms

    parser.add_argument(
        "--store",
        type=local_path,
        required=True,
        help="the broker's store directory (read-only; the job's progress and lock go to its "
        "config/)",
    )
    parser.add_argument(
        "--broker",
        metavar="HOST:PORT",
        required=True,
        help="the gRPC address of the broker serving --store, started with "
        "broker.transaction_check = job: it re-puts and discards the halves and asks the "
        "producers",
    )
    parser.add_argument(
        "--finder",
        choices=("files", "spark"),
        default=finder,
        help="read the half queue from the store files, or with Spark (the rocketmq source, "
        f"read_uncommitted) (default: {finder})",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    mode.add_argument(
        "--interval",
        type=parse_duration_ms,
        default=None,
        metavar="DURATION",
        help="run continuously, a pass every DURATION (default: "
        "broker.transaction_check_interval_ms, 30s)",
    )


def run_from_args(args: argparse.Namespace, config: Any) -> int:
    """Run the job as the arguments say; SIGTERM/SIGINT stop a continuous run cleanly."""
    from rmq_spark.spark.session import build_session
    from rmq_spark.txcheck.job import TxCheckSpec, run_txcheck

    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    spec = TxCheckSpec(
        store_dir=args.store,
        broker=args.broker,
        once=args.once,
        interval_ms=args.interval,
        finder=args.finder,
    )
    try:
        return run_txcheck(
            spec, config, spark_factory=lambda: build_session(config.spark), stop=stop
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def register(subparsers: Any) -> None:
    """Add the ``txcheck`` subcommand to the ``rmq-spark`` parser."""
    from rmq_spark.cli.common import add_config_arguments

    parser = subparsers.add_parser(
        "txcheck",
        help="check pending transactions (half messages) as a job beside the broker",
        description=textwrap.fill(  # pre-wrapped: the formatter keeps lines as they are
            "RocketMQ's transaction check-back as a job: read the half messages of a store "
            "from the job's progress on, find those older than broker.transaction_timeout_ms "
            "without commit or rollback, and have the broker re-put each (its check count + "
            "1) and ask its producers, or discard it after broker.transaction_check_max "
            "checks. Start the broker with broker.transaction_check = job (it refuses the "
            "job otherwise). Each half is checked once per pass, also across a crash of the "
            "job; progress: <store>/config/transactionCheckJob.json. One line per pass: "
            "checked, discarded, passed, asked.",
            HELP_WIDTH,
        ),
        epilog=(
            "examples: rmq-spark txcheck --store ./store --broker 127.0.0.1:8081 --once\n"
            "          rmq-spark txcheck --store ./store --broker 127.0.0.1:8081 --interval 5s\n"
            "          spark-submit jobs/txcheck.py --store ./store --broker 127.0.0.1:8081"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_txcheck_arguments(parser)
    add_config_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.cli.common import config_from_args

    return run_from_args(args, config_from_args(args))
