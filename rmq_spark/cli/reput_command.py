"""``rmq-spark reput``: run the reput stream (log -> Delta tables); the same options as
``spark-submit jobs/reput.py``.

Owns the arguments (``add_reput_arguments``), turning them into configs (``reput_config``)
and running the job (``run``). The job's logic is ``rmq_spark/spark/reput.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

from rmq_spark.cli.common import local_path
from rmq_spark.errors import ConfigError

__all__ = [
    "add_metrics_arguments",
    "add_reput_arguments",
    "parse_trigger_ms",
    "register",
    "reput_config",
    "reput_metrics",
    "run",
    "store_dirs",
    "unregister",
]

_TRIGGER = re.compile(r"(\d+)\s*(ms|s|m|h)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_trigger_ms(text: str) -> int:
    """``"1s"`` -> 1000, ``"500ms"`` -> 500, ``"2m"`` -> 120000; a bare number is seconds.

    Raises
    ------
    ConfigError
        Not ``<number>[ms|s|m|h]`` or not positive.
    """
    match = _TRIGGER.fullmatch(text.strip())
    if match is None or int(match.group(1)) <= 0:
        raise ConfigError("--trigger", f"{text!r} is not a positive interval like 1s or 500ms")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]


def add_reput_arguments(parser: argparse.ArgumentParser) -> None:
    """The reput options shared by ``rmq-spark reput`` and ``jobs/reput.py``."""
    from rmq_spark.cli.cluster_args import add_cluster_arguments
    from rmq_spark.cli.common import add_config_arguments

    parser.add_argument(
        "--store",
        action="append",
        default=None,
        help=(
            "store directory to read; repeat it or list stores with commas to read several "
            "(one per broker: the tables get a store column). Default: reput.stores"
        ),
    )
    parser.add_argument(
        "--tables",
        type=local_path,
        default=None,
        help="Delta tables directory (default: reput.tables_dir)",
    )
    parser.add_argument(
        "--checkpoint",
        type=local_path,
        default=None,
        help="stream checkpoint directory (default: <tables>/_checkpoints/reput)",
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--trigger",
        default=None,
        help="micro-batch interval, e.g. 1s or 250ms (default: reput.trigger_interval_ms, 500ms)",
    )
    when.add_argument(
        "--available-now",
        action="store_true",
        help="process what the log holds now, in micro-batches, then stop",
    )
    parser.add_argument(
        "--max-bytes-per-trigger",
        type=int,
        default=None,
        help="log bytes per micro-batch at most (0: unlimited)",
    )
    parser.add_argument(
        "--unregister",
        action="store_true",
        help=(
            "remove this job's progress (reader reput:<tables>) from the store and exit, so "
            "that retention stops keeping the log for tables no job builds any more"
        ),
    )
    add_cluster_arguments(parser, "read")
    add_metrics_arguments(parser, "reput")
    add_config_arguments(parser)


def add_metrics_arguments(parser: argparse.ArgumentParser, section: str) -> None:
    """``--metrics-listen`` / ``--metrics-push`` of a job (``<section>.metrics_*`` keys)."""
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default=None,
        help=(
            "serve the job's Prometheus /metrics on HOST:PORT, e.g. 127.0.0.1:9106 (no auth: "
            f"keep it on loopback; default: {section}.metrics_listen, off)"
        ),
    )
    parser.add_argument(
        "--metrics-push",
        metavar="URL",
        default=None,
        help=(
            "push the job's metrics to this Prometheus Pushgateway after each batch and at the "
            f"end (default: {section}.metrics_push_url, off)"
        ),
    )


def register(subparsers: Any) -> None:
    """Add the ``reput`` subcommand to the ``rmq-spark`` parser."""
    parser = subparsers.add_parser(
        "reput",
        help="build the consume_queue, message_index and messages Delta tables from the log",
        description=(
            "Spark's ReputMessageService: a streaming job reads the store's CommitLog and, per "
            "micro-batch, appends to the Delta tables consume_queue, message_index and messages "
            "(registered as rmq.*), idempotently. Runs until Ctrl-C, or with --available-now "
            "until the log is caught up."
        ),
        epilog=(
            "example: rmq-spark reput --store ./store --tables ./tables --available-now; "
            "several stores (one per broker): --store ./a --store ./b (or --store ./a,./b)"
        ),
    )
    add_reput_arguments(parser)
    parser.set_defaults(handler=run)


def reput_config(args: argparse.Namespace, config: Any) -> Any:
    """The ``[reput]`` section of ``config`` with the command-line options applied."""
    from rmq_spark.spark.reput_config import ReputConfig

    base = getattr(config, "reput", None) or ReputConfig()
    changes: dict[str, Any] = {}
    if args.tables is not None:
        changes["tables_dir"] = args.tables
    if args.checkpoint is not None:
        changes["checkpoint_dir"] = args.checkpoint
    if args.trigger is not None:
        changes["trigger_interval_ms"] = parse_trigger_ms(args.trigger)
        changes["available_now"] = False
    if args.available_now:
        changes["available_now"] = True
    if args.max_bytes_per_trigger is not None:
        changes["max_bytes_per_trigger"] = args.max_bytes_per_trigger
    if getattr(args, "metrics_listen", None) is not None:
        changes["metrics_listen"] = args.metrics_listen
    if getattr(args, "metrics_push", None) is not None:
        changes["metrics_push_url"] = args.metrics_push
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as err:
        raise ConfigError(f"reput.{str(err).partition(':')[0]}", str(err)) from err


def store_dirs(args: argparse.Namespace, reput: Any) -> list[Path]:
    """The stores to read: every ``--store`` (each one path or a comma-separated list), or
    every broker's store found through ``--namesrv``, else ``reput.stores``.

    Raises
    ------
    ConfigError
        No store given, a path that is not local, or a store named twice.
    """
    from rmq_spark.cli.cluster_args import cluster_brokers

    brokers = cluster_brokers(args)
    if brokers:
        if args.store:
            raise ConfigError("--namesrv", "names the stores: give it or --store, not both")
        for name, broker in sorted(brokers.items()):
            print(f"reput: broker {name} ({broker.addr}): store {broker.path}")
        return [Path(broker.path) for _, broker in sorted(brokers.items())]
    named = [part for value in args.store or () for part in value.split(",")]
    if not named:
        named = [str(path) for path in reput.stores]
    if not named:
        raise ConfigError("--store", "no store given (or set reput.stores in the config)")
    try:
        stores = [local_path(part.strip()) for part in named]
    except argparse.ArgumentTypeError as err:
        raise ConfigError("--store", str(err)) from None
    if len({store.absolute() for store in stores}) != len(stores):
        raise ConfigError("--store", f"a store is named twice: {', '.join(named)}")
    return stores


def run(args: argparse.Namespace) -> int:
    """Load the config, build the session, run the reput stream until it ends."""
    from rmq_spark.cli.cluster_args import brokers_by_store
    from rmq_spark.cli.common import config_from_args, require_store
    from rmq_spark.spark.reput import run_reput
    from rmq_spark.spark.session import build_session, stop_session
    from rmq_spark.store.delay_levels import parse_message_delay_level

    config = config_from_args(args)
    reput = reput_config(args, config)
    stores = store_dirs(args, reput)
    if args.unregister:
        for store in stores:
            unregister(store, reput.reader_name)
        return 0
    for store in stores:
        require_store(store)  # before Spark starts or any table is created
    levels = parse_message_delay_level(config.store.message_delay_level)
    # binds before Spark starts: a busy port fails fast
    metrics = reput_metrics(reput, stores, brokers_by_store(args))
    try:
        # Naming the tables puts rmq.* in the metastore beside them (docs/TABLES.md, Catalog).
        spark = build_session(
            job_spark_config(config.spark, reput),
            tables_dir=reput.tables_dir,
            database=reput.database,
            tables_layout=_layout(stores),
        )
        try:
            run_reput(spark, stores, reput, levels, on_batch=metrics and metrics.on_batch)
        finally:
            stop_session(spark)
    finally:
        if metrics is not None:
            metrics.stop()
    return 0


def job_spark_config(spark: Any, reput: Any) -> Any:
    """The job's own session's ``[spark]`` settings: its driver JIT is ``reput.driver_jit``."""
    return dataclasses.replace(spark, driver_jit=reput.driver_jit)


def _layout(stores: list[Path]) -> Any:
    """The tables' layout for ``stores`` (several: with the ``store`` column)."""
    from rmq_spark.spark.tables import ONE_STORE, StoreOfSeveral

    return StoreOfSeveral(str(stores[0].absolute())) if len(stores) > 1 else ONE_STORE


def reput_metrics(reput: Any, stores: list[Path], brokers: dict[str, str] | None = None) -> Any:
    """The job's started ``ReputMetrics`` (``spark/job_metrics.py``); ``None`` when neither
    ``metrics_listen`` nor ``metrics_push_url`` is set. ``brokers``: store path -> broker name
    of a job over a cluster (``rmq_reput_store_info``)."""
    if not (reput.metrics_listen or reput.metrics_push_url):
        return None
    from rmq_spark.spark.job_metrics import JobMetrics, ReputMetrics, publish_store_brokers
    from rmq_spark.spark.reput_start import store_list

    job = JobMetrics(
        "rmq-reput",
        listen=reput.metrics_listen,
        push_url=reput.metrics_push_url,
        grouping={"tables": str(Path(reput.tables_dir).absolute())},
    )
    metrics = ReputMetrics(job, store_list(stores), reput)
    publish_store_brokers(job.registry, "rmq_reput_store_info", brokers or {})
    job.start()
    return metrics


def unregister(store_dir: Path, reader_name: str) -> int:
    """Forget reader ``reader_name`` in ``store_dir``: retention no longer waits for it."""
    from rmq_spark.store.reader_progress import remove_reader_progress

    if remove_reader_progress(store_dir, reader_name):
        print(f"removed reader {reader_name} from {store_dir}: retention no longer waits for it")
    else:
        print(f"reader {reader_name} was not registered in {store_dir}")
    return 0
