"""spark-submit entry point of the delay-level and timer redelivery job.

    spark-submit jobs/schedule.py --store ./store --tables ./tables --once
    spark-submit jobs/schedule.py --store ./store --tables ./tables --broker 127.0.0.1:8081

Parses the arguments (the same as ``rmq-spark schedule``), loads the config and calls
``rmq_spark.delay.job.run_schedule``; no logic lives here (docs/DELAY.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rmq_spark.cli.common import add_config_arguments, config_from_args, setup_logging
from rmq_spark.cli.schedule_command import add_schedule_arguments, run_from_args
from rmq_spark.errors import RmqError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jobs/schedule.py",
        description="Redeliver due delay-level and timer messages into their real topics.",
    )
    add_schedule_arguments(parser)
    add_config_arguments(parser)
    parser.add_argument("--log-level", default="INFO", help="log level (default: INFO)")
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    try:
        return run_from_args(args, config_from_args(args))
    except RmqError as err:
        print(f"schedule: error: {err}", file=sys.stderr)
        logging.getLogger("rmq_spark").debug("details", exc_info=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
