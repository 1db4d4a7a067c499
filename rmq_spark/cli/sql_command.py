"""``rmq-spark sql``: Spark's ``spark-sql`` shell on the reput tables' catalog.

Starts ``$SPARK_HOME/bin/spark-sql`` with the settings ``build_session(tables_dir=...)`` uses
(Delta, the Hive metastore beside the tables), so ``rmq.*`` are there without registering
anything. While another JVM holds that embedded metastore (a running reput job), it starts with
the in-memory catalog and registers the tables in an init file (``-i``), with one warning line.
``--print`` prints the command instead (its ``--conf`` flags work for ``pyspark`` too).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rmq_spark.cli.common import HELP_WIDTH, local_path

__all__ = ["register", "run", "spark_sql_command"]

_log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the ``sql`` subcommand to the ``rmq-spark`` parser."""
    from rmq_spark.cli.common import add_config_arguments

    parser = subparsers.add_parser(
        "sql",
        help="open spark-sql on the reput tables (rmq.*) without registering anything",
        description=textwrap.fill(  # pre-wrapped: the formatter keeps lines as they are
            "Start Spark's spark-sql with the settings of build_session(tables_dir=...): Delta "
            "and the Hive metastore beside the tables, where the reput job registered rmq.*. "
            "While another JVM holds that embedded metastore (a running reput job), spark-sql "
            "uses the in-memory catalog with the tables registered, and one warning says so.",
            HELP_WIDTH,
        ),
        epilog=(
            "examples: rmq-spark sql --tables ./tables -e 'SELECT count(*) FROM rmq.messages'\n"
            "          rmq-spark sql --tables ./tables --print   (the command, for spark-sql or "
            "pyspark)\n          rmq-spark sql --tables ./tables -- --hiveconf k=v  "
            "(more spark-sql options)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tables",
        type=local_path,
        default=None,
        help="Delta tables directory (default: reput.tables_dir); its _catalog/ holds rmq.*",
    )
    parser.add_argument("-e", dest="sql", metavar="SQL", help="run these statements and exit")
    parser.add_argument("-f", dest="file", metavar="FILE", help="run a SQL file and exit")
    parser.add_argument(
        "--print", action="store_true", help="print the spark-sql command instead of running it"
    )
    parser.add_argument("rest", nargs="*", metavar="-- SPARK_SQL_ARGS", help=argparse.SUPPRESS)
    add_config_arguments(parser)
    parser.set_defaults(handler=run)


def spark_sql_command(
    spark_home: Path, conf: Mapping[str, str], args: Sequence[str] = ()
) -> list[str]:
    """``spark-sql`` with ``conf`` (``spark.master`` as ``--master``) and ``args`` after it."""
    command = [str(spark_home / "bin" / "spark-sql")]
    if "spark.master" in conf:
        command += ["--master", conf["spark.master"]]
    for key, value in conf.items():
        if key != "spark.master":
            command += ["--conf", f"{key}={value}"]
    return command + list(args)


def sql_conf(config: Any, tables_dir: Path) -> tuple[dict[str, str], list[str]]:
    """The settings for ``spark-sql`` on ``tables_dir``, and the statements to run first: the
    tables' registration, idempotent (``IF NOT EXISTS``), so ``rmq.*`` is there also when the
    catalog falls back to memory, or when the tables were built with ``catalog = "in-memory"``
    (the demo, an older job) and the persistent catalog has no entries yet."""
    from rmq_spark.spark.catalog import (
        IMPLEMENTATION,
        derby_log_option,
        metastore_in_use,
        register_statements,
    )
    from rmq_spark.spark.session import session_conf

    conf = {"spark.master": config.spark.master, "spark.app.name": "rmq-spark-sql"}
    conf.update(session_conf(config.spark, tables_dir=tables_dir))
    in_use = metastore_in_use(conf)
    if in_use is not None:
        conf[IMPLEMENTATION] = "in-memory"
        _log.warning(
            "%s (embedded Derby admits one JVM at a time): spark-sql uses the in-memory catalog, "
            "rmq.* registered from %s; for concurrent jobs on one catalog configure an external "
            "metastore (docs/TABLES.md, Catalog)",
            in_use.describe(),
            tables_dir,
        )
        return conf, register_statements(tables_dir, config.reput.database)
    option = derby_log_option(conf)
    if option is not None:
        name, path = option
        java = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{java} -D{name}={path}".strip()
    return conf, register_statements(tables_dir, config.reput.database)


def run(args: argparse.Namespace) -> int:
    """Run (or print) spark-sql on the tables' catalog; its exit code is ours."""
    from rmq_spark.cli.common import config_from_args, require_tables
    from rmq_spark.spark.catalog import derby_log_option
    from rmq_spark.spark.driver_jvm import spark_home

    config = config_from_args(args)
    tables = Path(args.tables or config.reput.tables_dir).absolute()
    require_tables(tables)  # a typo must not get an empty catalog of its own
    conf, statements = sql_conf(config, tables)
    extra = [*(["-e", args.sql] if args.sql else []), *(["-f", args.file] if args.file else [])]
    home = spark_home()
    if args.print:
        print(shlex.join(spark_sql_command(home, conf, [*extra, *args.rest])))
        return 0
    option = derby_log_option(conf)
    if option is not None:
        option[1].parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable)
    with tempfile.TemporaryDirectory(prefix="rmq-spark-sql-") as scratch:
        init: list[str] = []
        if statements:
            init_file = Path(scratch) / "register.sql"
            init_file.write_text(";\n".join(statements) + ";\n", encoding="utf-8")
            init = ["-i", str(init_file)]
        process = subprocess.Popen(
            spark_sql_command(home, conf, [*init, *extra, *args.rest]), env=env
        )
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:  # spark-sql got it too (one process group): it decides
                continue
