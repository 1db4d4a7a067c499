"""``--namesrv`` / ``--cluster`` / ``--store-roots`` of the commands that read stores: every
broker of a cluster, found through its name servers (``spark/cluster_discovery.py``: the
Spark source's discovery and checks, the same rules)."""

from __future__ import annotations

import argparse

from rmq_spark.errors import ConfigError, SourceError

__all__ = ["add_cluster_arguments", "brokers_by_store", "cluster_brokers"]


def add_cluster_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--namesrv",
        metavar="H:P[;H:P]",
        default=None,
        help=(
            f"{what} every broker registered with these name servers, on the store each "
            "reports (its storePathRootDir); the stores must be readable here"
        ),
    )
    parser.add_argument(
        "--cluster", default=None, help="with --namesrv: only this cluster's brokers"
    )
    parser.add_argument(
        "--store-roots",
        metavar="DIR[,DIR]",
        default=None,
        help="with --namesrv: refuse a reported store that is not under one of these",
    )


def cluster_brokers(args: argparse.Namespace) -> dict:
    """Broker name -> ``BrokerStore`` for ``--namesrv`` (empty without it).

    Raises
    ------
    ConfigError
        ``--cluster``/``--store-roots`` without ``--namesrv``, no name server answering, a
        reported store that is not readable here (one line naming the broker).
    """
    namesrv = getattr(args, "namesrv", None)
    if not namesrv:
        for flag in ("cluster", "store_roots"):
            if getattr(args, flag, None):
                raise ConfigError(f"--{flag.replace('_', '-')}", "goes with --namesrv")
        return {}
    from rmq_spark.spark.cluster_discovery import discover_brokers

    try:
        return discover_brokers(namesrv, args.cluster or "", args.store_roots or "")
    except SourceError as err:
        raise ConfigError("--namesrv", str(err)) from None


def brokers_by_store(args: argparse.Namespace) -> dict[str, str]:
    """Absolute store path -> broker name for ``--namesrv`` (empty without it); the jobs label
    their metrics with it (discovery is cached, so this asks the name server no second time)."""
    return {broker.path: name for name, broker in cluster_brokers(args).items()}
