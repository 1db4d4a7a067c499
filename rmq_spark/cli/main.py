"""``rmq-spark``: the command line. Each subcommand lives in its own module with a
``register(subparsers)`` function; this module only wires them together and turns our errors
into one readable line and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import textwrap
from collections.abc import Sequence

from rmq_spark.errors import RmqError

__all__ = ["build_parser", "main"]

# Subcommand modules, in the order --help lists them.
_COMMAND_MODULES = (
    "rmq_spark.cli.store_commands",
    "rmq_spark.cli.doctor",
    "rmq_spark.cli.config_command",
    "rmq_spark.cli.demo",
    "rmq_spark.cli.broker_command",
    "rmq_spark.cli.namesrv_command",
    "rmq_spark.cli.reput_command",
    "rmq_spark.cli.query_command",
    "rmq_spark.cli.sql_command",
    "rmq_spark.cli.schedule_command",
    "rmq_spark.cli.groups_command",
    "rmq_spark.cli.transactions_command",
    "rmq_spark.cli.txcheck_command",
    "rmq_spark.cli.dashboard_command",
)

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a killed writer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmq-spark",
        description=(
            "A Spark-native distributed log on Apache RocketMQ's storage format: a broker that "
            "appends RocketMQ-compatible CommitLog segments, a Spark source that tails them, "
            "and Spark jobs that build ConsumeQueue/IndexFile tables in Delta Lake and "
            "redeliver delayed messages."
        ),
        epilog="Run `rmq-spark COMMAND --help` for the options of one command.",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of rmq-spark's own messages on stderr (default: INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for command in (parser, *subparsers.choices.values()):
        command.formatter_class = _whole_words(command.formatter_class)
    return parser


def _whole_words(formatter: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """``formatter`` wrapping at spaces only: argparse's textwrap splits ``rmq-spark`` at its
    hyphen and a long message id or path in two."""

    def wrap(text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)

    class WholeWords(formatter):  # type: ignore[misc, valid-type]
        def _split_lines(self, text: str, width: int) -> list[str]:
            return wrap(text, width)

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            if issubclass(formatter, argparse.RawDescriptionHelpFormatter):
                return super()._fill_text(text, width, indent)
            return "\n".join(indent + line for line in wrap(text, width - len(indent)))

    return WholeWords


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from rmq_spark.cli.common import setup_logging

    setup_logging(args.log_level)
    try:
        result = args.handler(args)
    except RmqError as err:
        print(f"rmq-spark {args.command}: error: {err}", file=sys.stderr)
        logging.getLogger("rmq_spark").debug("details", exc_info=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"rmq-spark {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `rmq-spark dump ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return EXIT_BROKEN_PIPE
    except Exception as err:
        if not _is_spark_error(err):
            raise
        # Spark's own errors (a failed query, a bad table) carry a long JVM trace; the first
        # lines say what happened. --log-level DEBUG logs the whole trace.
        summary = "\n".join(str(err).strip().splitlines()[:6])
        print(f"rmq-spark {args.command}: Spark error: {summary}", file=sys.stderr)
        logging.getLogger("rmq_spark").debug("details", exc_info=True)
        return EXIT_ERROR
    return int(result or 0)


def _is_spark_error(err: Exception) -> bool:
    errors = sys.modules.get("pyspark.errors")
    return errors is not None and isinstance(err, errors.PySparkException)


if __name__ == "__main__":
    sys.exit(main())
