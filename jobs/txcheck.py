"""spark-submit entry point of the transaction check-back job (Spark as the check service).

    spark-submit jobs/txcheck.py --store DIR --broker HOST:PORT [--once | --interval 30s]
                                 [--finder spark|files]

(also ``python jobs/txcheck.py ...``; ``rmq-spark txcheck`` is the same job, reading the half
queue from the files by default). Here the halves are found with Spark by default: the
``rocketmq`` source with ``isolation=read_uncommitted`` over the store's half topic; the plan,
the broker's requests and the progress are ``rmq_spark.txcheck.job.run_txcheck``'s. No logic
lives here (docs/TRANSACTIONS.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    import rmq_spark  # noqa: F401
except ImportError:  # started from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: Sequence[str] | None = None) -> int:
    from rmq_spark.cli.common import add_config_arguments, config_from_args, setup_logging
    from rmq_spark.cli.txcheck_command import add_txcheck_arguments, run_from_args
    from rmq_spark.errors import RmqError

    parser = argparse.ArgumentParser(prog="jobs/txcheck.py", description=__doc__.split("\n")[0])
    add_txcheck_arguments(parser, finder="spark")
    add_config_arguments(parser)
    parser.add_argument("--log-level", default="INFO", help="log level (default: INFO)")
    args = parser.parse_args(argv)
    # Spark's Python workers run the interpreter running this job.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    setup_logging(args.log_level)
    try:
        return run_from_args(args, config_from_args(args))
    except RmqError as err:
        print(f"txcheck: error: {err}", file=sys.stderr)
        logging.getLogger("rmq_spark").debug("details", exc_info=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
