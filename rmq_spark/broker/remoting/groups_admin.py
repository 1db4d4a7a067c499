"""mqadmin's subscription-group calls (``updateSubGroup``, ``consumerProgress``' group look-up,
the Dashboard's group list): ``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``,
``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` and ``GET_SUBSCRIPTIONGROUP_CONFIG`` (REMOTING_PROTOCOL.md
6), over the consume path's one ``config/subscriptionGroup.json`` (``SubscriptionGroups``), so
a group updated here is the group the gRPC and remoting consumers see.

The permissions table makes all three super-user calls when auth is on. A body's fields the
broker does not model (``brokerId``, ``consumeBroadcastEnable``, ...) are not kept.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rmq_spark.broker.consumer.ports import GroupSettingsSource
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.topics import group_name_problem

__all__ = ["handlers"]

_BODY_MAX_BYTES = 64 * 1024  # a SubscriptionGroupConfig is a few hundred bytes
_RETRY_MAX = 1000  # as the remoting send-back caps maxReconsumeTimes


def handlers(deps: Deps) -> dict[int, Handler]:
    """The three group codes, when the broker has a consume path (the server's always has)."""
    if deps.consume is None:
        return {}
    groups = _Groups(deps.consume.group_settings)
    return {
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: groups.update,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: groups.all_configs,
        RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: groups.one_config,
    }


class _Groups:
    def __init__(self, settings: GroupSettingsSource) -> None:
        self._settings = settings

    async def update(self, call: Call) -> RemotingCommand:
        config, problem = _parse_config(call.command.body or b"")
        if problem is not None:
            return call.reply(ResponseCode.INVALID_PARAMETER, problem)
        name = config["groupName"]
        # The file is written and fsynced: off the loop, as every other file write.
        await asyncio.to_thread(
            self._settings.update,
            name,
            retry_max_times=config.get("retryMaxTimes"),
            fifo=config.get("consumeMessageOrderly"),
            consume_enable=config.get("consumeEnable"),
        )
        return call.reply()

    async def all_configs(self, call: Call) -> RemotingCommand:
        return call.reply(body=self._settings.document().encode())

    async def one_config(self, call: Call) -> RemotingCommand:
        group = call.required("group")
        table = json.loads(self._settings.document())["subscriptionGroupTable"]
        if group not in table:
            return call.reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist"
            )
        return call.reply(body=json.dumps(table[group], separators=(",", ":")).encode())


def _parse_config(body: bytes) -> tuple[dict[str, Any], str | None]:
    """The body's ``SubscriptionGroupConfig`` and ``None``, or why it is refused."""
    if len(body) > _BODY_MAX_BYTES:
        return {}, f"a subscription group config of {len(body)} bytes is too large"
    try:
        config = json.loads(body)
    except (UnicodeDecodeError, ValueError) as err:
        return {}, f"the body is not a subscription group config (JSON): {err}"
    if not isinstance(config, dict) or not isinstance(config.get("groupName"), str):
        return {}, "the body names no groupName"
    problem = group_name_problem(config["groupName"])
    if problem is not None:
        return {}, problem
    for key in ("consumeMessageOrderly", "consumeEnable"):
        if key in config and not isinstance(config[key], bool):
            return {}, f"{key} must be true or false"
    retries = config.get("retryMaxTimes")
    if retries is not None and (type(retries) is not int or not 0 <= retries <= _RETRY_MAX):
        return {}, f"retryMaxTimes must be an integer in [0, {_RETRY_MAX}]"
    return config, None
