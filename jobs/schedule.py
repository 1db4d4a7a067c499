"""spark-submit entry point of the delay-level and timer redelivery job.

    spark-submit jobs/schedule.py --store DIR [--store DIR ...] [--tables DIR]
                                  [--broker HOST:PORT ...] [--trigger 1s | --once]

(also ``python jobs/schedule.py ...`` and ``rmq-spark schedule ...``, same options). Parses
the arguments, loads the config and calls ``rmq_spark.delay.job.run_schedule``; no logic
lives here (docs/DELAY.md). Several ``--store`` (or a comma list): the one-store job per
store, each store's due messages back into that store (``rmq_spark/delay/stores.py``);
``--namesrv H:P`` instead: every broker's store, each through that broker. A
SparkSession is built only when a consume_queue table is there to read; without one the
job reads the schedule topics from the CommitLog.
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
    from rmq_spark.cli.schedule_command import add_schedule_arguments, run_from_args
    from rmq_spark.errors import RmqError

    parser = argparse.ArgumentParser(prog="jobs/schedule.py", description=__doc__.split("\n")[0])
    add_schedule_arguments(parser)
    add_config_arguments(parser)
    parser.add_argument("--log-level", default="INFO", help="log level (default: INFO)")
    args = parser.parse_args(argv)
    # Spark's Python workers run the interpreter running this job.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    setup_logging(args.log_level)
    try:
        return run_from_args(args, config_from_args(args))
    except RmqError as err:
        print(f"schedule: error: {err}", file=sys.stderr)
        logging.getLogger("rmq_spark").debug("details", exc_info=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
