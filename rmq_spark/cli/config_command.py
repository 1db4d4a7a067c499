"""``rmq-spark config``: show the effective configuration, or every key with its default."""

from __future__ import annotations

import argparse
import json

from rmq_spark.cli.common import add_config_arguments, config_from_args

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "config",
        help="show the effective configuration (or all defaults)",
        description="Print the configuration rmq-spark would use with these flags, as JSON; "
        "with --defaults, print every key with its default and comment as TOML (this is how "
        "conf/rmq.toml is made).",
    )
    parser.add_argument(
        "--defaults", action="store_true", help="print all keys with defaults and comments (TOML)"
    )
    add_config_arguments(parser)
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    if args.defaults:
        from rmq_spark.config_doc import render_default_toml

        print(render_default_toml(), end="")
        return 0
    config = config_from_args(args)
    print(json.dumps(config.as_dict(), indent=2, default=str))
    return 0
