"""``rmq-spark schedule``: run the delay-level and timer redelivery job.

Owns the subcommand's arguments (shared with ``jobs/schedule.py`` through
``add_schedule_arguments`` / ``spec_from_args``) and the signal handling of a continuous run;
the job itself is ``rmq_spark/delay/job.py: run_schedule``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import signal
import textwrap
import threading
from pathlib import Path
from typing import Any

from rmq_spark.cli.common import HELP_WIDTH, local_path

__all__ = [
    "add_schedule_arguments",
    "parse_duration_ms",
    "register",
    "run_from_args",
    "schedule_metrics",
    "spec_from_args",
    "specs_from_args",
]

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def parse_duration_ms(text: str) -> int:
    """``"1s"`` -> 1000, ``"250ms"`` -> 250, ``"2m"`` -> 120000; a bare number is seconds.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``<number>[ms|s|m|h]``, or zero.
    """
    match = _DURATION.match(text)
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive duration like 1s, 500ms or 2m, got {text!r}"
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def add_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's own arguments (config flags are added separately)."""
    parser.add_argument(
        "--store",
        action="append",
        default=None,
        help="the store directory (its commitlog/, config/); repeat it or list stores with "
        "commas to run over several (one per broker): each store's due messages go back into "
        "that store",
    )
    parser.add_argument(
        "--tables",
        type=local_path,
        default=None,
        help="the reput job's tables directory; its consume_queue table says what is due "
        "(without it, or before it exists, SCHEDULE_TOPIC_XXXX is read from the CommitLog)",
    )
    parser.add_argument(
        "--broker",
        metavar="HOST:PORT",
        action="append",
        default=None,
        help="put redelivered messages through this broker over gRPC (needed while a broker "
        "runs on --store); default: open the store in this process. With several stores: "
        "one --broker per --store, in the same order",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--once",
        action="store_true",
        help="redeliver everything due now, then exit (for cron or a Databricks job)",
    )
    mode.add_argument(
        "--trigger",
        type=parse_duration_ms,
        default=None,
        metavar="DURATION",
        help="run continuously, a pass every DURATION (default: delay.trigger_interval_ms, 1s)",
    )
    from rmq_spark.cli.cluster_args import add_cluster_arguments
    from rmq_spark.cli.reput_command import add_metrics_arguments

    add_cluster_arguments(parser, "run over")
    add_metrics_arguments(parser, "delay")


def _stores(args: argparse.Namespace) -> list[Path]:
    from rmq_spark.errors import ConfigError

    try:
        return [local_path(part.strip()) for value in args.store for part in value.split(",")]
    except argparse.ArgumentTypeError as err:
        raise ConfigError("--store", str(err)) from None


def specs_from_args(args: argparse.Namespace) -> list[Any]:
    """One ``ScheduleJobSpec`` per store named by ``--store`` (``delay/stores.py``).

    Raises
    ------
    ConfigError
        A store named twice, a bad path, or not one ``--broker`` per store.
    """
    from rmq_spark.delay.job import ScheduleJobSpec
    from rmq_spark.delay.stores import store_specs

    spec = ScheduleJobSpec(
        store_dir=Path(),
        tables_dir=args.tables,
        once=args.once,
        trigger_interval_ms=args.trigger,
    )
    stores, brokers = _cluster_stores(args)
    if not stores:
        stores, brokers = _stores(args), args.broker or ()
    return store_specs(spec, stores, brokers)


def _cluster_stores(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """``--namesrv``: every broker's store, redelivered through that broker's gRPC endpoint
    (a running broker holds its store)."""
    from rmq_spark.cli.cluster_args import cluster_brokers
    from rmq_spark.errors import ConfigError

    found = sorted(cluster_brokers(args).items())
    if found and (args.store or args.broker):
        raise ConfigError("--namesrv", "names the stores and brokers: not with --store/--broker")
    if not found and not args.store:
        raise ConfigError("--store", "give the store directory (or --namesrv)")
    for name, broker in found:
        if not broker.grpc:
            raise ConfigError(
                "--namesrv",
                f"broker {name} ({broker.addr}) reports no gRPC listen address (not an "
                "rmq-spark broker, or listen port 0): run this job with --store and --broker",
            )
    return [Path(b.path) for _, b in found], [b.grpc for _, b in found]


def spec_from_args(args: argparse.Namespace) -> Any:
    """The spec of a run over one store (``specs_from_args`` for several).

    Raises
    ------
    ConfigError
        Several stores named.
    """
    from rmq_spark.errors import ConfigError

    specs = specs_from_args(args)
    if len(specs) != 1:
        raise ConfigError("--store", f"{len(specs)} stores: use specs_from_args")
    return specs[0]


def run_from_args(args: argparse.Namespace, config: Any) -> int:
    """Run the job as the arguments say; SIGTERM/SIGINT stop a continuous run cleanly."""
    from rmq_spark.delay.job import run_schedule
    from rmq_spark.delay.stores import run_schedule_stores
    from rmq_spark.spark.session import build_session

    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    specs = specs_from_args(args)
    metrics = schedule_metrics(args, config, specs)
    on_pass = None if metrics is None else metrics.after_pass
    try:
        if len(specs) > 1:
            return run_schedule_stores(
                specs,
                config,
                spark_factory=lambda: build_session(config.spark),
                stop=stop,
                on_pass=on_pass,
            )
        return run_schedule(
            specs[0],
            config,
            spark_factory=lambda: build_session(config.spark),
            stop=stop,
            on_pass=on_pass,
        )
    finally:
        if metrics is not None:
            metrics.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def schedule_metrics(args: argparse.Namespace, config: Any, specs: list[Any]) -> Any:
    """The job's started ``ScheduleMetrics`` (``delay/metrics.py``), from ``--metrics-listen``
    / ``--metrics-push`` or ``delay.metrics_listen`` / ``metrics_push_url``; ``None``: off."""
    from rmq_spark.delay.config import DelayConfig
    from rmq_spark.errors import ConfigError

    delay = getattr(config, "delay", None) or DelayConfig()
    listen = getattr(args, "metrics_listen", None)
    push_url = getattr(args, "metrics_push", None)
    listen = delay.metrics_listen if listen is None else listen
    push_url = delay.metrics_push_url if push_url is None else push_url
    if not (listen or push_url):
        return None
    try:  # the config's rule, for the command-line values too
        dataclasses.replace(delay, metrics_listen=listen, metrics_push_url=push_url)
    except ValueError as err:
        raise ConfigError(f"--{str(err).partition(':')[0].replace('_', '-')}", str(err)) from None
    from rmq_spark.cli.cluster_args import brokers_by_store
    from rmq_spark.delay.metrics import ScheduleMetrics
    from rmq_spark.spark.job_metrics import JobMetrics, publish_store_brokers

    stores = [str(spec.store_dir.absolute()) for spec in specs]
    job = JobMetrics(
        "rmq-schedule", listen=listen, push_url=push_url, grouping={"store": ",".join(stores)}
    )
    metrics = ScheduleMetrics(job, stores)
    publish_store_brokers(job.registry, "rmq_schedule_store_info", brokers_by_store(args))
    job.start()
    return metrics


def register(subparsers: Any) -> None:
    """Add the ``schedule`` subcommand to the ``rmq-spark`` parser."""
    from rmq_spark.cli.common import add_config_arguments

    parser = subparsers.add_parser(
        "schedule",
        help="redeliver delayed (delay-level) and timer messages when they fall due",
        description=textwrap.fill(  # pre-wrapped: the formatter keeps lines as they are
            "RocketMQ's ScheduleMessageService as a job: find due entries of "
            "SCHEDULE_TOPIC_XXXX and rmq_sys_wheel_timer, restore each message as RocketMQ "
            "does and put it into its real topic exactly once. Progress is kept in "
            "<store>/config/delayOffset.json and scheduleJournal.json.",
            HELP_WIDTH,
        ),
        epilog=(
            "examples: rmq-spark schedule --store ./store --tables ./tables --once\n"
            "          rmq-spark schedule --store ./store --broker 127.0.0.1:8081 --trigger 1s\n"
            "          rmq-spark schedule --store ./a --store ./b --once   (several stores)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_schedule_arguments(parser)
    add_config_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.cli.common import config_from_args

    return run_from_args(args, config_from_args(args))
