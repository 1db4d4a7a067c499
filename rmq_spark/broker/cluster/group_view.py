"""A consumer group across a cluster (``rmq-spark groups --namesrv``): every broker's queues,
committed offsets and lag, asked over the network.

The brokers come from the first name server that answers ``GET_BROKER_CLUSTER_INFO`` (each
broker's master); each broker is asked ``GET_CONSUME_STATS`` for the group (``mqadmin
consumerProgress``'s call, which rmq-spark and Apache RocketMQ brokers both answer: each
reports its own queues, whose offsets it owns). The brokers are asked at once, each with its
own timeout: a broker that is down, hung or refuses is reported by name and address in
``GroupAcross.problems``, and the others' rows are kept.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from rmq_spark.broker.cluster.broker_table import (
    MASTER_ID,
    ask,
    broker_table,
    no_answer_reason,
)
from rmq_spark.broker.config import parse_namesrv_addr
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.remoting.gate import signed_command
from rmq_spark.errors import BrokerError, ConfigError, RemotingFrameError

__all__ = [
    "BrokerProblem",
    "CALL_TIMEOUT_S",
    "ClusterViewError",
    "GroupAcross",
    "GroupQueue",
    "cluster_masters",
    "group_across",
    "parse_consume_stats",
]

CALL_TIMEOUT_S = 3.0  # RocketMQ's admin tools' timeout per call


class ClusterViewError(BrokerError):
    """No name server answered, or an answer was not what the call returns."""


@dataclass(frozen=True, slots=True)
class GroupQueue:
    """One queue of the group on one broker (``offset``: committed, 0 when none)."""

    broker: str
    topic: str
    queue_id: int
    offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.offset)


@dataclass(frozen=True, slots=True)
class BrokerProblem:
    broker: str
    addr: str
    reason: str


@dataclass(frozen=True, slots=True)
class GroupAcross:
    """The rows of every broker that answered, and one problem per broker that did not."""

    masters: dict[str, str]
    rows: list[GroupQueue] = field(default_factory=list)
    problems: list[BrokerProblem] = field(default_factory=list)


def group_across(
    namesrv: str,
    group: str,
    *,
    topic: str = "",
    timeout_s: float = CALL_TIMEOUT_S,
    credentials: tuple[str, str] | None = None,
) -> GroupAcross:
    """``group`` on every broker listed by the name servers ``namesrv`` (``h:p;h:p``)."""
    masters = cluster_masters(namesrv, timeout_s)
    fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
    request = signed_command(RequestCode.GET_CONSUME_STATS, fields, credentials)

    async def ask_all() -> list[list[GroupQueue] | BrokerProblem]:
        asks = [_stats(name, addr, request, timeout_s) for name, addr in sorted(masters.items())]
        return await asyncio.gather(*asks)

    result = GroupAcross(masters)
    for answer in asyncio.run(ask_all()):
        if isinstance(answer, BrokerProblem):
            result.problems.append(answer)
        else:
            result.rows.extend(answer)
    result.rows.sort(key=lambda row: (row.topic, row.broker, row.queue_id))
    return result


def cluster_masters(namesrv: str, timeout_s: float = CALL_TIMEOUT_S) -> dict[str, str]:
    """Broker name -> master address, from the first of ``namesrv`` that answers."""
    try:
        addresses = parse_namesrv_addr(namesrv)
    except ValueError as err:
        raise ConfigError("--namesrv", str(err)) from None
    if not addresses:
        raise ConfigError("--namesrv", "no name server address given")
    table = broker_table([f"{host}:{port}" for host, port in addresses], "", timeout_s)
    return {name: ids[MASTER_ID] for name, ids in table.items() if MASTER_ID in ids}


async def _stats(
    name: str, addr: str, request: RemotingCommand, timeout_s: float
) -> list[GroupQueue] | BrokerProblem:
    try:
        response = await ask(addr, request, timeout_s)
    except (OSError, TimeoutError, RemotingFrameError, ValueError) as err:
        return BrokerProblem(name, addr, f"unreachable: {no_answer_reason(err, timeout_s)}")
    if response.code != 0:
        return BrokerProblem(name, addr, f"refused: code {response.code}: {response.remark}")
    try:
        stats = parse_consume_stats(response.body or b"")
    except ClusterViewError as err:
        return BrokerProblem(name, addr, str(err))
    return [GroupQueue(name, *row) for row in stats]


def parse_consume_stats(body: bytes) -> list[tuple[str, int, int, int]]:
    """``ConsumeStats`` as fastjson writes it (its ``offsetTable`` keyed by ``MessageQueue``
    objects, which JSON parsers refuse): (topic, queue id, committed, max offset) per queue."""
    text = body.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    start = text.find('"offsetTable"')
    position = text.find("{", start) + 1 if start >= 0 else -1
    if position <= 0:
        raise ClusterViewError("consume stats without an offsetTable")
    rows = []
    try:
        while _skip(text, position) < len(text) and text[_skip(text, position)] == "{":
            key, position = decoder.raw_decode(text, _skip(text, position))
            position = _expect(text, position, ":")
            value, position = decoder.raw_decode(text, _skip(text, position))
            offset = max(0, int(value.get("consumerOffset", 0)))
            rows.append(
                (str(key["topic"]), int(key["queueId"]), offset, int(value["brokerOffset"]))
            )
            if text[_skip(text, position)] == ",":
                position = _skip(text, position) + 1
    except (ValueError, LookupError, TypeError, AttributeError) as err:
        problem = f"consume stats not understood: {type(err).__name__}: {err}"
        raise ClusterViewError(problem) from None
    return rows


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _expect(text: str, position: int, char: str) -> int:
    position = _skip(text, position)
    if position >= len(text) or text[position] != char:
        raise ValueError(f"expected {char!r} at character {position}")
    return position + 1
