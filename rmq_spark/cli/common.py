"""Helpers every subcommand shares: config flags, logging set-up, JSON lines output."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import IO, Any

from rmq_spark.config import RmqConfig, default_config_path, load_config, parse_override
from rmq_spark.errors import ConfigError, StoreError, TableError

__all__ = [
    "HELP_WIDTH",
    "add_config_arguments",
    "check_store_path",
    "config_from_args",
    "local_path",
    "operator_credentials",
    "print_json_line",
    "require_store",
    "require_tables",
    "setup_logging",
]

HELP_WIDTH = 88  # pre-wrapped --help text (RawDescriptionHelpFormatter keeps it as it is)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` and repeatable ``--set section.key=value``."""
    group = parser.add_argument_group("configuration")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file (default: conf/rmq.toml of the checkout, else built-in defaults)",
    )
    group.add_argument(
        "--set",
        dest="overrides",
        metavar="SECTION.KEY=VALUE",
        action="append",
        default=[],
        help="override one config key, e.g. --set store.flush_policy=SYNC (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> RmqConfig:
    path = getattr(args, "config", None) or default_config_path()
    overrides = dict(parse_override(item) for item in getattr(args, "overrides", []) or [])
    return load_config(path, overrides)


def setup_logging(level: str = "INFO") -> None:
    """rmq-spark's own loggers at ``level``; every other library (py4j, grpc) at WARNING."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("rmq_spark").setLevel(getattr(logging, level.upper(), logging.INFO))
    root = logging.getLogger()
    if level.upper() != "DEBUG" and not any(isinstance(f, _Py4JTracebacks) for f in root.filters):
        root.addFilter(_Py4JTracebacks())


class _Py4JTracebacks(logging.Filter):
    """py4j logs each broken call to the root logger, with its traceback (``logging.exception``
    in its gateway): that is what a driver JVM ending under a job looks like, and the job says
    so itself in one line (``spark/session.jvm_gone``). Shown with ``--log-level DEBUG``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)


def print_json_line(obj: Any, out: IO[str] | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")) + "\n")


def local_path(text: str) -> Path:
    """An argparse ``type`` for store and table directories: a local path or a ``file://``
    URI (what Spark users write); other schemes are refused in one line (a store is a local
    directory: its segments are memory-mapped)."""
    from rmq_spark.store.paths import local_fs_path

    try:
        return local_fs_path(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def require_store(root: Path, hint: str = "") -> None:
    """Raise ``StoreError`` (one line, ending with ``hint`` if given) unless ``root`` is a
    store (has ``commitlog/``): for commands that read a store and must not create one (dump,
    verify, reput, schedule), and for ``send`` without ``--create``."""
    from rmq_spark.store.layout import COMMITLOG_DIR

    if not (root / COMMITLOG_DIR).is_dir():
        what = "does not exist" if not root.exists() else f"has no {COMMITLOG_DIR}/ directory"
        raise StoreError(f"{root} is not a store: it {what}" + (f"; {hint}" if hint else ""))


def operator_credentials(access_key: str | None) -> tuple[str, str] | None:
    """``--access-key`` with its secret from ``RMQ_SECRET_KEY`` (never on the command line,
    where ``ps`` shows it): the operator's identity for commands that talk to a broker."""
    if access_key is None:
        return None
    secret = os.environ.get("RMQ_SECRET_KEY")
    if not secret:
        raise ConfigError("--access-key", "set the secret key in the RMQ_SECRET_KEY variable")
    return access_key, secret


def require_tables(tables_dir: Path) -> None:
    """Raise ``TableError`` (one line) unless ``tables_dir`` holds at least one reput table:
    for commands that read the tables and must not create a catalog beside a typo (sql)."""
    from rmq_spark.spark.tables import TABLE_NAMES, table_path

    if not any((table_path(tables_dir, name) / "_delta_log").is_dir() for name in TABLE_NAMES):
        what = "does not exist" if not tables_dir.exists() else "holds none of the reput tables"
        raise TableError(
            f"{tables_dir} is not a reput tables directory: it {what} "
            f"({', '.join(TABLE_NAMES)}); run `rmq-spark reput` first"
        )


def check_store_path(path: Path) -> None:
    """Raise ``StoreError`` (one line) if ``path`` exists and is not a directory."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"--store {path} is not a directory (a store is a directory)")
