"""The stores of a RocketMQ cluster, found through its name servers (``option("namesrv")``).

``discover`` asks the name servers (in order; the first that answers) for the cluster table
(``GET_BROKER_CLUSTER_INFO``), then every listed broker's master for its configuration
(``GET_BROKER_CONFIG``) and takes its ``storePathRootDir``: what rmq-spark brokers and Apache
RocketMQ brokers both answer. The result is ``{broker name: BrokerStore}``, cached for
``CACHE_S`` so the planning calls of one trigger ask once.

A name server is unauthenticated: whoever can register a broker with it names a path here.
So a discovered path is read only if it looks like a store and is readable on the driver
(``check_store``: absolute, ``commitlog/`` a directory, ``checkpoint`` a readable file), lies
under one of ``storeRoots`` when that option is given, and is no other broker's store; anything
else fails the query with one line naming the broker, its address and the path.
``check_readable_here`` is the executors' check (their host may not see the driver's files).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.cluster.broker_table import (
    BrokerTableError,
    UnknownClusterError,
    ask,
    broker_table,
    master_or_lowest,
    no_answer_reason,
)
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.errors import RemotingFrameError, SourceError
from rmq_spark.spark.options import SourceOptions, parse_options

__all__ = [
    "BROKER_COLUMN",
    "BrokerStore",
    "CACHE_S",
    "CALL_TIMEOUT_S",
    "check_readable_here",
    "check_store",
    "discover",
    "discover_brokers",
]

BROKER_COLUMN = "broker_name"
CALL_TIMEOUT_S = 5.0  # each name-server or broker call
CACHE_S = 5.0  # re-discovery each trigger, at most this often


@dataclass(frozen=True, slots=True)
class BrokerStore:
    """One broker (its master) and the store root it reported."""

    broker_name: str
    addr: str
    path: str
    grpc: str = ""  # an rmq-spark broker's gRPC host:port (listen, advertised_host); "": none


_cache: dict[tuple[str, str, tuple[str, ...]], tuple[float, dict[str, BrokerStore]]] = {}


def discover(options: SourceOptions) -> dict[str, BrokerStore]:
    """Every broker of ``options.namesrv`` (of ``options.cluster`` when set) with its checked
    store, by broker name. Raises ``SourceError`` in one line."""
    key = (options.namesrv, options.cluster, options.store_roots)
    cached = _cache.get(key)
    if cached is not None and cached[0] > time.monotonic():
        return dict(cached[1])
    try:
        table = broker_table(options.namesrv.split(";"), options.cluster, CALL_TIMEOUT_S)
    except UnknownClusterError as err:
        raise SourceError(f"option {err}") from None
    except BrokerTableError as err:
        raise SourceError(f"option namesrv: {err}") from None
    if not table:
        where = f" in cluster {options.cluster}" if options.cluster else ""
        raise SourceError(f"option namesrv: the name server lists no broker{where}")
    brokers = {name: master_or_lowest(ids) for name, ids in table.items()}
    found: dict[str, BrokerStore] = {}
    owners: dict[str, str] = {}
    for name, addr in sorted(brokers.items()):
        config = _broker_config(name, addr)
        if "storePathRootDir" not in config:
            raise SourceError(f"broker {name} ({addr}) reports no storePathRootDir")
        path = check_store(name, addr, config["storePathRootDir"], options.store_roots)
        if path in owners:
            raise SourceError(
                f"brokers {owners[path]} and {name} ({addr}) both report store {path}; "
                "two brokers never share a store: check the name servers' registrations"
            )
        owners[path] = name
        found[name] = BrokerStore(name, addr, path, _grpc_endpoint(config))
    _cache[key] = (time.monotonic() + CACHE_S, found)
    return dict(found)


def discover_brokers(
    namesrv: str, cluster: str = "", store_roots: str = ""
) -> dict[str, BrokerStore]:
    """``discover`` for the jobs and commands (``--namesrv``, ``--cluster``, ``--store-roots``
    as the source's options ``namesrv``, ``cluster``, ``storeRoots``)."""
    raw = {"namesrv": namesrv, "cluster": cluster, "storeRoots": store_roots}
    return discover(parse_options({k: v for k, v in raw.items() if v}, streaming=False))


def _grpc_endpoint(config: dict[str, str]) -> str:
    """An rmq-spark broker's gRPC endpoint from its ``listen`` and ``advertised_host``."""
    host, _, port = config.get("listen", "").rpartition(":")
    if not host or not port.isdigit() or port == "0":
        return ""
    return f"{config.get('advertised_host') or host}:{port}"


def _broker_config(name: str, addr: str) -> dict[str, str]:
    request = RemotingCommand(code=RequestCode.GET_BROKER_CONFIG, language="PYTHON")
    try:
        response = asyncio.run(ask(addr, request, CALL_TIMEOUT_S))
    except (OSError, TimeoutError, RemotingFrameError, ValueError) as err:
        reason = no_answer_reason(err, CALL_TIMEOUT_S)
        raise SourceError(f"broker {name} ({addr}): no configuration: {reason}") from None
    if response.code != 0:
        raise SourceError(
            f"broker {name} ({addr}) refused its configuration (code {response.code}: "
            f"{response.remark}); the source reads storePathRootDir from it"
        )
    config: dict[str, str] = {}
    for line in response.body.decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        config[key.strip()] = value.strip()
    return config


def check_store(name: str, addr: str, path: str, roots: tuple[str, ...]) -> str:
    """``path`` resolved, if it is a local readable store (under ``roots`` when given)."""

    def refuse(why: str) -> SourceError:
        return SourceError(
            f"broker {name} ({addr}) reports store {path!r}, which {why}; the source reads "
            "only stores this host sees (docs/SOURCE.md, 'Over a cluster')"
        )

    if not path.startswith("/"):
        raise refuse("is not an absolute path")
    real = os.path.realpath(path)
    if roots and not any(_under(real, os.path.realpath(root)) for root in roots):
        raise refuse(f"is not under storeRoots {','.join(roots)}")
    root = Path(real)
    if not (root / "commitlog").is_dir() or not os.access(root / "commitlog", os.R_OK | os.X_OK):
        raise refuse("has no readable commitlog/ directory here (not a store?)")
    checkpoint = root / "checkpoint"
    if not checkpoint.is_file() or not os.access(checkpoint, os.R_OK):
        raise refuse("has no readable checkpoint file here (not a store?)")
    return real


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_readable_here(broker: str, path: str) -> None:
    """An executor's check before it reads ``path``: one line naming the path and this host."""
    commitlog = os.path.join(path, "commitlog")
    if not os.path.isdir(commitlog) or not os.access(commitlog, os.R_OK | os.X_OK):
        raise SourceError(
            f"store {path} of broker {broker} is not readable on host {socket.gethostname()}: "
            "executors need the stores at the same path (same machine or a shared file system)"
        )
