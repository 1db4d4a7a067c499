"""``rmq-spark demo``: the end-to-end demo ``make run`` starts."""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from rmq_spark.cli.common import add_config_arguments, config_from_args
from rmq_spark.cli.doctor import run_checks
from rmq_spark.errors import EnvironmentCheckError

__all__ = ["register"]

log = logging.getLogger("rmq_spark.demo")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "demo",
        help="run the end-to-end demo on an embedded default set-up",
        description="Check the environment, then run the demo in a work directory: a Spark "
        "session with Delta Lake, a table written, merged and queried with SQL.",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the demo keeps its store, tables and logs (default: a new temp folder)",
    )
    add_config_arguments(parser)
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    failed = [(name, detail) for name, ok, detail in run_checks() if not ok]
    if failed:
        raise EnvironmentCheckError("; ".join(f"{name}: {detail}" for name, detail in failed))
    config = config_from_args(args)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rmq-spark-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"demo: work directory {workdir}")

    from rmq_spark.spark.session import build_session

    spark = build_session(config.spark)
    try:
        table = workdir / "tables" / "hello"
        spark.createDataFrame([(1, "a"), (2, "b")], "id long, value string").write.format(
            "delta"
        ).mode("overwrite").save(str(table))
        spark.sql(
            f"MERGE INTO delta.`{table}` t USING (SELECT 2 AS id, 'B' AS value UNION ALL "
            "SELECT 3, 'c') s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        rows = spark.sql(f"SELECT id, value FROM delta.`{table}` ORDER BY id").collect()
        print("demo: Delta round trip ->", [(row.id, row.value) for row in rows])
    finally:
        spark.stop()
    return 0
