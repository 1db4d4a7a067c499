"""The brokers a name server knows: ``GET_BROKER_CLUSTER_INFO`` asked of the first name server
that answers, read into broker name -> {broker id: address}.

One owner for that call and its answer: ``rmq-spark groups --namesrv`` (each broker's master)
and Spark's discovery (each broker's master, or its lowest id when no master is left) pick
from the same table. The answer comes from an unauthenticated name server, so every name is
checked with the broker-name rule and every address must be ``host:port``.
"""

from __future__ import annotations

import asyncio
import re

from rmq_spark.broker.fastjson import parse_fastjson  # FastjsonError is a ValueError
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.namesrv_client import NamesrvConnection
from rmq_spark.errors import BrokerError, RemotingFrameError

__all__ = [
    "BrokerTableError",
    "MASTER_ID",
    "UnknownClusterError",
    "ask",
    "broker_table",
    "brokers_of",
    "master_or_lowest",
    "no_answer_reason",
]

MASTER_ID = 0
_NAME = re.compile(r"[%|a-zA-Z0-9_.-]{1,255}")
_ADDRESS = re.compile(r"\[?[0-9A-Za-z.:%_-]+\]?:[0-9]{1,5}")

BrokerAddresses = dict[str, dict[int, str]]


class BrokerTableError(BrokerError):
    """No name server answered, or its answer names no usable broker."""


class UnknownClusterError(BrokerTableError):
    """The name server lists no cluster of the asked name."""


def broker_table(addresses: list[str], cluster: str, timeout_s: float) -> BrokerAddresses:
    """Broker name -> {id: address} of ``cluster`` (every cluster when empty), from the first
    of ``addresses`` (``host:port``) that answers with a broker table."""
    request = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, language="PYTHON")
    failures: list[str] = []
    for addr in addresses:
        try:
            response = asyncio.run(ask(addr, request, timeout_s))
            if response.code != 0:
                raise BrokerTableError(f"answered code {response.code}: {response.remark}")
            table = parse_fastjson((response.body or b"").decode("utf-8"))
        except (OSError, TimeoutError, RemotingFrameError, BrokerTableError, ValueError) as err:
            failures.append(f"{addr}: {no_answer_reason(err, timeout_s)}")
            continue
        return brokers_of(table, cluster, addr)
    raise BrokerTableError(f"no name server answered ({'; '.join(failures)})")


def master_or_lowest(ids: dict[int, str]) -> str:
    """The master's address, or the lowest id's (a slave's) when no master is registered."""
    return ids.get(MASTER_ID) or ids[min(ids)]


async def ask(addr: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
    """One remoting call to ``addr`` (``host:port`` or ``[v6]:port``) on its own connection."""
    host, _, port = addr.rpartition(":")
    connection = NamesrvConnection(host.strip("[]"), int(port))
    try:
        return await connection.call(request, timeout_s)
    finally:
        await connection.close()


def no_answer_reason(err: BaseException, timeout_s: float) -> str:
    if isinstance(err, TimeoutError):
        return f"no answer in {timeout_s:g} s"
    return str(err) or type(err).__name__


def brokers_of(table: object, cluster: str, addr: str) -> BrokerAddresses:
    """Broker name -> {id: address} of ``cluster`` (all when empty) in the name server ``addr``'s
    ``GET_BROKER_CLUSTER_INFO`` answer ``table``, every name and address checked."""
    if not isinstance(table, dict) or not isinstance(table.get("brokerAddrTable"), dict):
        raise BrokerTableError(f"name server {addr} answered no broker table: {str(table)[:200]!r}")
    names = {str(name) for name in table["brokerAddrTable"]}
    if cluster:
        clusters = table.get("clusterAddrTable") or {}
        if not isinstance(clusters, dict) or cluster not in clusters:
            known = ", ".join(sorted(map(str, clusters or ()))) or "none"
            raise UnknownClusterError(f"cluster={cluster!r}: name server {addr} lists {known}")
        names &= {str(name) for name in clusters[cluster] or ()}
    brokers: BrokerAddresses = {}
    for name in sorted(names):
        data = table["brokerAddrTable"].get(name)
        addrs = data.get("brokerAddrs") if isinstance(data, dict) else None
        if not _NAME.fullmatch(name) or not isinstance(addrs, dict) or not addrs:
            raise BrokerTableError(f"name server {addr} lists broker {name!r} without an address")
        brokers[name] = {_broker_id(name, key, addr): _address(name, value, addr)
                         for key, value in addrs.items()}  # fmt: skip
    return brokers


def _broker_id(name: str, key: object, addr: str) -> int:
    if not str(key).isdigit():
        raise BrokerTableError(f"name server {addr} lists broker {name!r} with id {key!r}")
    return int(str(key))


def _address(name: str, value: object, addr: str) -> str:
    if not _ADDRESS.fullmatch(str(value)):
        raise BrokerTableError(f"name server {addr} lists broker {name!r} at {str(value)[:80]!r}")
    return str(value)
