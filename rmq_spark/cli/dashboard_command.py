"""``rmq-spark dashboard``: a web view of a store (RocketMQ Dashboard's job), read-only but
for re-sending a dead letter through the broker ``--broker`` names.

Parses the arguments, builds the app (``rmq_spark/cli/dashboard/app.py``) and serves it until
Ctrl-C. Binds to loopback unless ``--listen`` says otherwise: the pages have no login, and
message bodies are on them (and, with ``--broker``, a re-send button signed with the
operator's ``--access-key``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.cli.common import local_path
from rmq_spark.cli.dashboard.params import PAGE_SIZE_MAX, REFRESH_MAX_S
from rmq_spark.errors import ConfigError

if TYPE_CHECKING:
    from rmq_spark.cli.dashboard.app import DashboardSettings

__all__ = ["DEFAULT_LISTEN", "parse_listen", "register"]

DEFAULT_LISTEN = "127.0.0.1:8088"
DEFAULT_REFRESH_S = 30
DEFAULT_PAGE_SIZE = 50
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse_listen(text: str, what: str = "--listen") -> tuple[str, int]:
    """``host:port`` (``[::1]:8088`` for IPv6) as (host, port); ``ConfigError`` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(what, f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def register(subparsers: Any) -> None:
    """Add the ``dashboard`` subcommand to the ``rmq-spark`` parser."""
    parser = subparsers.add_parser(
        "dashboard",
        help="a web view: topics, queues, groups and lag, jobs, messages, dead letters",
        description=(
            "Serve a small web app over a store, in the spirit of RocketMQ Dashboard: "
            "topics and queues (offsets, sizes, messages per minute now and over the chart's "
            "window), consumer groups and their lag, the reput and delay jobs' progress, "
            "messages by offset message id, by time range or queue offset (paged) and (with "
            "--tables) by key, dead-letter queues, and a chart of traffic over time. It never "
            "locks or writes the store: it works while a broker runs. With --broker, a dead "
            "letter can be re-sent to its topic through that broker (its ACL decides)."
        ),
        epilog="example: rmq-spark dashboard --store ./store --tables ./tables",
    )
    parser.add_argument("--store", type=local_path, default=None, metavar="DIR")
    from rmq_spark.cli.cluster_args import add_cluster_arguments

    add_cluster_arguments(parser, "show (one row each, each broker's pages under /brokers/NAME/)")
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
    parser.add_argument(
        "--refresh",
        type=int,
        default=DEFAULT_REFRESH_S,
        metavar="SECONDS",
        help=f"reload the overview, topic, groups, jobs and DLQ pages this often (default "
        f"{DEFAULT_REFRESH_S}; 0: never; a page's own refresh=N in the URL wins)",
    )
    parser.add_argument(
        "--page-size",
        type=int,
        default=DEFAULT_PAGE_SIZE,
        metavar="N",
        help=f"messages per page (default {DEFAULT_PAGE_SIZE}, at most {PAGE_SIZE_MAX})",
    )
    parser.add_argument(
        "--broker",
        default=None,
        metavar="HOST:PORT",
        help="a running broker's gRPC address: enables re-sending a dead letter through it "
        "(without it the DLQ pages are read-only)",
    )
    parser.add_argument(
        "--access-key",
        default=None,
        metavar="AK",
        help="sign re-sends as this user (a broker with auth on; the secret key in the "
        "RMQ_SECRET_KEY variable)",
    )
    parser.set_defaults(handler=_run)


def _settings(args: argparse.Namespace, host: str) -> DashboardSettings:
    from rmq_spark.cli.common import operator_credentials
    from rmq_spark.cli.dashboard.app import LOOPBACK_HOSTS, DashboardSettings

    if not 0 <= args.refresh <= REFRESH_MAX_S:
        raise ConfigError("--refresh", f"expected 0..{REFRESH_MAX_S} seconds, got {args.refresh}")
    if not 1 <= args.page_size <= PAGE_SIZE_MAX:
        raise ConfigError("--page-size", f"expected 1..{PAGE_SIZE_MAX}, got {args.page_size}")
    if args.broker is not None:
        parse_listen(args.broker, "--broker")
    elif args.access_key is not None:
        raise ConfigError("--access-key", "signs re-sends: it needs --broker")
    return DashboardSettings(
        store_dir=args.store,
        tables_dir=args.tables,
        page_size=args.page_size,
        refresh_s=args.refresh,
        broker=args.broker,
        credentials=operator_credentials(args.access_key),
        allowed_hosts=LOOPBACK_HOSTS if host in _LOOPBACK else None,
    )


def _run(args: argparse.Namespace) -> int:
    from rmq_spark.cli.cluster_args import cluster_brokers
    from rmq_spark.cli.common import require_store
    from rmq_spark.cli.dashboard.app import create_app, serve

    host, port = parse_listen(args.listen)
    brokers = cluster_brokers(args)
    if brokers:
        from rmq_spark.cli.dashboard.cluster import create_cluster_app

        if args.store is not None or args.broker is not None:
            raise ConfigError("--namesrv", "shows every broker: not with --store or --broker")
        args.store = Path(next(iter(sorted(brokers.items())))[1].path)
        app = create_cluster_app(brokers, _settings(args, host))
        what = f"{len(brokers)} brokers ({', '.join(sorted(brokers))})"
    else:
        if args.store is None:
            raise ConfigError("--store", "give the store directory (or --namesrv)")
        require_store(args.store)
        app = create_app(_settings(args, host))
        what = str(args.store)
    server = serve(app, host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"rmq-spark dashboard: serving {what} on http://{shown}:{server.server_port}/")
    if host not in _LOOPBACK:
        print(
            "rmq-spark dashboard: listening beyond this machine; anyone who reaches it can "
            "read the messages (there is no login)"
            + (f" and re-send dead letters through {args.broker}" if args.broker else ""),
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
