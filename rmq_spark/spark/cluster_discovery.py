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
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.fastjson import parse_fastjson  # FastjsonError is a ValueError
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.namesrv_client import NamesrvConnection
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
_MASTER_ID = "0"
_NAME = re.compile(r"[%|a-zA-Z0-9_.-]{1,255}")


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
    brokers = _brokers(options.namesrv, options.cluster)
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


def _call(addr: str, request: RemotingCommand) -> RemotingCommand:
    host, _, port = addr.rpartition(":")

    async def call() -> RemotingCommand:
        connection = NamesrvConnection(host, int(port))
        try:
            return await connection.call(request, CALL_TIMEOUT_S)
        finally:
            await connection.close()

    return asyncio.run(call())


def _reason(err: BaseException) -> str:
    return "no answer in time" if isinstance(err, TimeoutError) else str(err) or type(err).__name__


def _brokers(namesrv: str, cluster: str) -> dict[str, str]:
    """Broker name -> master address, from the first name server that answers."""
    failures: list[str] = []
    request = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, language="PYTHON")
    for addr in namesrv.split(";"):
        try:
            response = _call(addr, request)
            if response.code != 0:
                raise SourceError(f"answered code {response.code}: {response.remark}")
            table = parse_fastjson(response.body.decode("utf-8"))
        except (OSError, TimeoutError, RemotingFrameError, SourceError, ValueError) as err:
            failures.append(f"{addr}: {_reason(err)}")
            continue
        return _masters(table, cluster, addr)
    raise SourceError(f"option namesrv: no name server answered ({'; '.join(failures)})")


def _masters(table: object, cluster: str, addr: str) -> dict[str, str]:
    if not isinstance(table, dict) or not isinstance(table.get("brokerAddrTable"), dict):
        raise SourceError(f"name server {addr} answered no broker table: {str(table)[:200]!r}")
    clusters = table.get("clusterAddrTable") or {}
    names = set(table["brokerAddrTable"])
    if cluster:
        if cluster not in clusters:
            known = ", ".join(sorted(map(str, clusters))) or "none"
            raise SourceError(f"option cluster={cluster!r}: name server {addr} lists {known}")
        names &= set(clusters[cluster] or ())
    masters: dict[str, str] = {}
    for name in sorted(map(str, names)):
        data = table["brokerAddrTable"][name]
        addrs = {str(k): str(v) for k, v in (data or {}).get("brokerAddrs", {}).items()}
        if not _NAME.fullmatch(name) or not addrs:
            raise SourceError(f"name server {addr} lists broker {name!r} without an address")
        masters[name] = addrs.get(_MASTER_ID) or addrs[min(addrs, key=_as_int)]
    if not masters:
        where = f" in cluster {cluster}" if cluster else ""
        raise SourceError(f"option namesrv: name server {addr} lists no broker{where}")
    return masters


def _as_int(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 62


def _grpc_endpoint(config: dict[str, str]) -> str:
    """An rmq-spark broker's gRPC endpoint from its ``listen`` and ``advertised_host``."""
    host, _, port = config.get("listen", "").rpartition(":")
    if not host or not port.isdigit() or port == "0":
        return ""
    return f"{config.get('advertised_host') or host}:{port}"


def _broker_config(name: str, addr: str) -> dict[str, str]:
    request = RemotingCommand(code=RequestCode.GET_BROKER_CONFIG, language="PYTHON")
    try:
        response = _call(addr, request)
    except (OSError, TimeoutError, RemotingFrameError, ValueError) as err:
        raise SourceError(f"broker {name} ({addr}): no configuration: {_reason(err)}") from None
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
