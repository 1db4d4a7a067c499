"""``rmq-spark broker``: run the RocketMQ 5 gRPC broker over a store directory.

Owns the subcommand's arguments only; the process lifecycle is ``broker/server.py``, the
promotion of a slave's store ``broker/replication/promote.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
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
    actions = parser.add_subparsers(dest="action", metavar="{promote}", required=False)
    promote = actions.add_parser(
        "promote",
        help="turn a stopped slave's store into a master's (manual failover)",
        description=(
            "Check that the stopped slave's store verifies (and, with --old-master-store, that "
            "its log is a prefix of the old master's), mark it promoted and say how many bytes "
            "the failover loses. Then start `rmq-spark broker` over it with "
            "--set broker.role=SYNC_MASTER. See docs/REPLICATION.md."
        ),
    )
    promote.add_argument("--store", required=True, type=Path, metavar="DIR",
                         help="the slave's store (no broker running over it)")  # fmt: skip
    promote.add_argument("--old-master-store", type=Path, metavar="DIR",
                         help="the old master's store (its disk survived): exact loss")  # fmt: skip
    promote.set_defaults(handler=_promote)


def _promote(args: argparse.Namespace) -> int:
    from rmq_spark.broker.replication.promote import promote

    print(promote(args.store, args.old_master_store).report())
    return 0


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.broker.server import configs_from_args, run_broker
    from rmq_spark.cli.common import check_store_path
    from rmq_spark.config import default_config_path

    store_config, broker_config = configs_from_args(args, default_config_path())
    check_store_path(store_config.root_dir)
    return run_broker(store_config, broker_config, ready_file=args.ready_file)
