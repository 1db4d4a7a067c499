"""PURE: the rights every remoting request code needs, one row per code.

``PERMISSIONS[code]`` says which header fields name the request's topic and group and which
actions (``acl.Action``) it needs on each, whether only a super user may call it (``admin``),
or a function reading further resources out of the body (``body``: e.g. a heartbeat's
groups). ``needs_of_call`` turns a call into ``acl.Need``s on exactly the strings the handler
then reads (the same fields, the same aliases: names are resolved once). A code without a row
is refused when auth is on (deny by default), as ``acl.needs_of`` refuses an unknown RPC.

4.x clients put a namespace into the name itself (``ns%topic``): the name checked is the
whole string, as ``resources.Name.full`` is for gRPC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rmq_spark.broker.remoting import consume_rights as rights
from rmq_spark.broker.remoting.calls import Call
from rmq_spark.broker.remoting.codes import RequestCode
from rmq_spark.broker.security.acl import Action, Need

__all__ = ["PERMISSIONS", "Permission", "needs_of_call"]

_PUB = (Action.PUB,)
_SUB = (Action.SUB,)


@dataclass(frozen=True, slots=True)
class Permission:
    """The rights of one request code (see the module docstring)."""

    topic: tuple[str, ...] = ()  # header fields naming the topic, first present wins
    topic_actions: tuple[Action, ...] = ()
    group: tuple[str, ...] = ()  # header fields naming the group
    group_actions: tuple[Action, ...] = ()
    admin: bool = False  # super users only
    body: Callable[[Call], list[Need]] | None = None  # resources named by the body


_SEND = Permission(topic=("topic", "b"), topic_actions=_PUB)
_ANY_USER = Permission()  # any authenticated user: names no resource
_ADMIN = Permission(admin=True)
_GROUP_TOPIC = Permission(body=rights.group_and_topic_needs)
_TOPIC = Permission(body=rights.topic_needs)
_GROUP = Permission(group=("consumerGroup",), group_actions=_SUB)

PERMISSIONS: dict[int, Permission] = {
    # produce
    RequestCode.SEND_MESSAGE: _SEND,
    RequestCode.SEND_MESSAGE_V2: _SEND,
    RequestCode.SEND_BATCH_MESSAGE: _SEND,
    # the header names no topic: the handler checks Pub on the half's (transactions/)
    RequestCode.END_TRANSACTION: _ANY_USER,
    # client bookkeeping every producer and consumer sends
    RequestCode.HEART_BEAT: Permission(body=rights.heartbeat_needs),
    RequestCode.UNREGISTER_CLIENT: _ANY_USER,  # only the caller's own client ids (consume.py)
    # consume (consume_rights.py: a group's %RETRY% topic is the group's)
    RequestCode.PULL_MESSAGE: _GROUP_TOPIC,
    RequestCode.LITE_PULL_MESSAGE: _GROUP_TOPIC,
    RequestCode.QUERY_CONSUMER_OFFSET: _GROUP_TOPIC,
    RequestCode.UPDATE_CONSUMER_OFFSET: _GROUP_TOPIC,
    RequestCode.GET_MIN_OFFSET: _TOPIC,
    RequestCode.GET_MAX_OFFSET: _TOPIC,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _TOPIC,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _TOPIC,
    RequestCode.CONSUMER_SEND_MSG_BACK: Permission(body=rights.send_back_needs),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _GROUP,
    RequestCode.LOCK_BATCH_MQ: Permission(body=rights.lock_needs),
    RequestCode.UNLOCK_BATCH_MQ: Permission(body=rights.lock_needs),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _GROUP,
    RequestCode.CHECK_CLIENT_CONFIG: Permission(body=rights.check_client_needs),
    RequestCode.GET_CONSUME_STATS: Permission(
        group=("consumerGroup",), group_actions=_SUB, topic=("topic",), topic_actions=_SUB
    ),
    # look-ups for tools: read a topic's data
    RequestCode.QUERY_MESSAGE: Permission(topic=("topic",), topic_actions=_SUB),
    RequestCode.VIEW_MESSAGE_BY_ID: _ADMIN,  # names a CommitLog offset, not a topic
    RequestCode.GET_TOPIC_STATS_INFO: Permission(topic=("topic",), topic_actions=_SUB),
    # broker administration: super users only
    RequestCode.GET_BROKER_RUNTIME_INFO: _ADMIN,
    RequestCode.GET_BROKER_CONFIG: _ADMIN,
    RequestCode.UPDATE_BROKER_CONFIG: _ADMIN,
    RequestCode.GET_ALL_TOPIC_CONFIG: _ADMIN,
    RequestCode.UPDATE_AND_CREATE_TOPIC: _ADMIN,
    RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: _ADMIN,
    RequestCode.DELETE_TOPIC_IN_BROKER: _ADMIN,
    RequestCode.GET_TOPIC_CONFIG: _ADMIN,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _ADMIN,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _ADMIN,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: _ADMIN,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _ADMIN,
    RequestCode.GET_ALL_CONSUMER_OFFSET: _ADMIN,
    RequestCode.GET_ALL_DELAY_OFFSET: _ADMIN,
    RequestCode.EXCHANGE_BROKER_HA_INFO: _ADMIN,  # 5.x: Cluster UPDATE
}


def needs_of_call(call: Call) -> list[Need] | Literal["admin"] | None:
    """The rights ``call`` needs (empty: any authenticated user), ``"admin"`` for a super
    user's code (no policy grants it, not even ``*`` with ``All``), or ``None`` when its code
    has no row (refused)."""
    row = PERMISSIONS.get(call.code)
    if row is None:
        return None
    if row.admin:
        return "admin"
    needs: list[Need] = []
    group = call.field(*row.group) if row.group else None
    if group is not None and row.group_actions:
        needs.append(Need("Group", group, row.group_actions))
    topic = call.field(*row.topic) if row.topic else None
    if topic is not None and row.topic_actions:
        needs.append(Need("Topic", topic, row.topic_actions))
    if row.body is not None:
        needs += row.body(call)
    return needs
