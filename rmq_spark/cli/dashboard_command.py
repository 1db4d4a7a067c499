"""``rmq-spark dashboard``: a read-only web view of a store (RocketMQ Dashboard's job).

Parses the arguments, builds the app (``rmq_spark/cli/dashboard/app.py``) and serves it until
Ctrl-C. Binds to loopback unless ``--listen`` says otherwise: the pages have no login, and
message bodies are on them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rmq_spark.cli.common import local_path
from rmq_spark.errors import ConfigError

__all__ = ["DEFAULT_LISTEN", "parse_listen", "register"]

DEFAULT_LISTEN = "127.0.0.1:8088"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8088`` for IPv6) as (host, port); ``ConfigError`` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError("--listen", f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def register(subparsers: Any) -> None:
    """Add the ``dashboard`` subcommand to the ``rmq-spark`` parser."""
    parser = subparsers.add_parser(
        "dashboard",
        help="a read-only web view: topics, queues, groups and lag, jobs, message lookup",
        description=(
            "Serve a small read-only web app over a store, in the spirit of RocketMQ "
            "Dashboard: topics and queues (offsets, sizes, messages per minute), consumer "
            "groups and their lag, the reput and delay jobs' progress, message lookup by "
            "offset message id, by time range and (with --tables) by key, and a chart of "
            "traffic over time. It never locks or writes the store: it works while a broker "
            "runs."
        ),
        epilog="example: rmq-spark dashboard --store ./store --tables ./tables",
    )
    parser.add_argument("--store", type=local_path, required=True, metavar="DIR")
    parser.add_argument(
        "--tables", type=local_path, default=None, metavar="DIR", help="reput tables (key lookup)"
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: this machine only; the pages "
        "have no login)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.cli.common import require_store
    from rmq_spark.cli.dashboard.app import DashboardSettings, create_app, serve

    host, port = parse_listen(args.listen)
    require_store(args.store)
    app = create_app(DashboardSettings(store_dir=args.store, tables_dir=args.tables))
    server = serve(app, host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"rmq-spark dashboard: serving {args.store} on http://{shown}:{server.server_port}/")
    if host not in _LOOPBACK:
        print(
            "rmq-spark dashboard: listening beyond this machine; anyone who reaches it can "
            "read the messages (there is no login)",
            file=sys.stderr,
        )
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("rmq-spark dashboard: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0
