"""``rmq-spark broker``: run the RocketMQ 5 gRPC broker over a store directory.

Owns the subcommand's arguments only; the process lifecycle is ``broker/server.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``broker`` subcommand to the ``rmq-spark`` parser."""
    from rmq_spark.broker.server import add_broker_arguments
    from rmq_spark.cli.common import add_config_arguments

    parser = subparsers.add_parser(
        "broker",
        help="run the gRPC broker that RocketMQ 5 clients produce to",
        description=(
            "Serve RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService) over a "
            "store directory until SIGTERM or SIGINT, then stop cleanly: refuse new sends, "
            "finish in-flight ones, flush, write a clean checkpoint and remove `abort`. "
            "Point rocketmq-python-client's ClientConfiguration at --listen."
        ),
        epilog="example: rmq-spark broker --store ./store --listen 127.0.0.1:8081",
    )
    add_broker_arguments(parser)
    add_config_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.broker.server import configs_from_args, run_broker
    from rmq_spark.cli.common import check_store_path
    from rmq_spark.config import default_config_path

    store_config, broker_config = configs_from_args(args, default_config_path())
    check_store_path(store_config.root_dir)
    return run_broker(store_config, broker_config, ready_file=args.ready_file)
