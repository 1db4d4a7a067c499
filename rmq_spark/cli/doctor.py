"""``rmq-spark doctor``: check that this machine can run rmq-spark, and say what is missing."""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
from importlib import metadata

from rmq_spark.broker.security.auth import open_listener_warning
from rmq_spark.cli.common import add_config_arguments, config_from_args
from rmq_spark.envcheck import check_java, find_delta_jars, find_rocketmq_jars
from rmq_spark.errors import EnvironmentCheckError, RmqError

__all__ = ["optional_checks", "register", "run_checks", "security_warnings"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "doctor",
        help="check Python, Java, Spark, Delta and the jars",
        description="Check that this machine can run rmq-spark: Python >= 3.11, Java >= 17, "
        "pyspark and delta-spark installed, the Delta Lake jars fetched; reports Maven and "
        "RocketMQ's name server jars (optional: `make setup` fetches the jars with Maven, only "
        "`namesrv` and `mqadmin` need RocketMQ's). Exits 1 and says "
        "what to do if anything is missing. Warns (exit code unchanged) when the configured "
        "broker would listen beyond loopback with auth off.",
    )
    add_config_arguments(parser)
    parser.set_defaults(handler=_handle)


def run_checks() -> list[tuple[str, bool, str]]:
    """(name, ok, detail) for each check."""
    results: list[tuple[str, bool, str]] = []
    ok_python = sys.version_info >= (3, 11)
    results.append(("python", ok_python, f"{platform.python_version()} ({sys.executable})"))
    try:
        java = check_java()
        results.append(("java", True, f"{java.version_text} ({java.executable})"))
    except EnvironmentCheckError as err:
        results.append(("java", False, str(err)))
    for dist in ("pyspark", "delta-spark", "pyarrow", "grpcio"):
        try:
            results.append((dist, True, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            results.append((dist, False, "not installed: run `make setup`"))
    try:
        jars = find_delta_jars()
        results.append(("delta jars", True, f"{len(jars)} jars in {jars[0].parent}"))
    except EnvironmentCheckError as err:
        results.append(("delta jars", False, str(err)))
    return results


def optional_checks() -> list[tuple[str, bool, str]]:
    """(name, ok, detail) for what only some commands need; a miss does not fail ``doctor``."""
    mvn = shutil.which("mvn")
    maven = (
        ("maven", True, f"{mvn} (make setup fetches the jars with it; the Java interop tests)")
        if mvn
        else ("maven", False, "mvn not on PATH: `make setup` needs it to fetch the jars once "
              "(Debian/Ubuntu: apt-get install maven)")
    )  # fmt: skip
    try:
        jars = find_rocketmq_jars()
        detail = f"{len(jars)} jars in {jars[0].parent} (rmq-spark namesrv, mqadmin)"
        return [maven, ("rocketmq jars", True, detail)]
    except EnvironmentCheckError as err:
        rocketmq = f"{err} (needed by rmq-spark namesrv and mqadmin only)"
        return [maven, ("rocketmq jars", False, rocketmq)]


def security_warnings(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(name, detail) for each configuration that is unsafe but runs (the broker's auth)."""
    try:
        config = config_from_args(args)
    except RmqError as err:
        return [("config", f"cannot check the broker's security: {err}")]
    warning = open_listener_warning(config.broker)
    return [] if warning is None else [("broker auth", warning)]


def _handle(args: argparse.Namespace) -> int:
    results = run_checks()
    optional = optional_checks()
    warnings = security_warnings(args)
    width = max(len(name) for name, _, _ in results + optional)
    for name, ok, detail in results:
        print(f"{'ok ' if ok else 'BAD'} {name:<{width}}  {detail}")
    for name, ok, detail in optional:
        print(f"{'ok ' if ok else '-- '} {name:<{width}}  {detail}")
    for name, detail in warnings:
        print(f"WARN {name}  {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1
