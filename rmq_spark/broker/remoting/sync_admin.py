"""What a slave asks its master besides the HA stream (docs/REPLICATION.md), as RocketMQ's
``AdminBrokerProcessor`` answers it: ``GET_ALL_CONSUMER_OFFSET`` (43) and
``GET_ALL_DELAY_OFFSET`` (45) for ``SlaveSynchronize``, and ``EXCHANGE_BROKER_HA_INFO`` (906),
by which a RocketMQ 5 slave without ``haMasterAddress`` learns the master's HA address.

43: ``consumerOffset.json``'s document (``ConsumerOffsetSerializeWrapper``) of the groups'
committed offsets as they stand in memory (not only what the last save wrote). 45: the
store's ``config/delayOffset.json`` table, re-encoded (the schedule job owns the file; an empty
table when it has never run). The permissions table makes both super-user calls when auth is
on: they reveal every group's progress. 906 is answered only when this broker has an HA port
(``masterHaAddress``, ``masterFlushOffset``, ``masterAddress``); a request that carries a
``masterHaAddress`` (a 5.x master telling its slave) is acknowledged and ignored: our slaves
take their master from ``broker.ha_master``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config import (
    encode_consumer_offsets,
    encode_delay_offsets,
)
from rmq_spark.broker.config_files.rocketmq_config_files import read_delay_offsets
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.errors import StoreMetadataError

__all__ = ["handlers"]


def handlers(deps: Deps) -> dict[int, Handler]:
    """Codes 43 and 45 (43 only with a consume path: the server's always has one)."""
    table: dict[int, Handler] = {
        RequestCode.GET_ALL_DELAY_OFFSET: _DelayOffsets(deps),
        RequestCode.EXCHANGE_BROKER_HA_INFO: _HaInfo(deps),
    }
    if deps.consume is not None:
        table[RequestCode.GET_ALL_CONSUMER_OFFSET] = _ConsumerOffsets(deps)
    return table


class _ConsumerOffsets:
    def __init__(self, deps: Deps) -> None:
        assert deps.consume is not None
        self._groups = deps.consume.groups

    async def __call__(self, call: Call) -> RemotingCommand:
        offsets, _ = self._groups.snapshot()
        return call.reply(body=encode_consumer_offsets(offsets).encode())


class _DelayOffsets:
    def __init__(self, deps: Deps) -> None:
        self._root = Path(deps.store.root_dir)

    async def __call__(self, call: Call) -> RemotingCommand:
        try:
            table = await asyncio.to_thread(read_delay_offsets, self._root)
        except StoreMetadataError as err:
            return call.reply(ResponseCode.SYSTEM_ERROR, f"delayOffset.json: {err}")
        return call.reply(body=encode_delay_offsets(table or {}).encode())


class _HaInfo:
    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def __call__(self, call: Call) -> RemotingCommand:
        replication = getattr(self._deps.service, "replication", None)
        server = getattr(replication, "server", None)
        if call.field("masterHaAddress") is not None or server is None:
            return call.reply()
        fields = {
            "masterHaAddress": server.address,
            "masterFlushOffset": str(self._deps.store.flushed_offset),
            "masterAddress": self._deps.broker_addr,
        }
        return call.reply(ext_fields=fields)
