"""PURE: the ACL resources of the consume codes that a header row cannot name alone.

A group's own retry topic ``%RETRY%<group>`` is the group's: reading it (a pull, its offsets,
its bounds) needs ``Sub`` on the group, not a grant on the topic (RocketMQ 5's authorization
context does the same), so a user granted ``Sub`` on a topic and a group can run a 4.x push
consumer, which reads its retry topic by itself. Any other topic needs ``Sub`` on the topic. A
heartbeat names its groups and subscriptions in the body; a lock request its group and queues.
"""

from __future__ import annotations

import json
from typing import Any

from rmq_spark.broker.remoting.calls import Call
from rmq_spark.broker.security.acl import Action, Need

__all__ = [
    "check_client_needs",
    "group_and_topic_needs",
    "heartbeat_needs",
    "lock_needs",
    "send_back_needs",
    "topic_needs",
]

_SUB = (Action.SUB,)
_RETRY = "%RETRY%"
_BODY_NAMES_MAX = 1024  # resources read out of one body (more: the handler refuses it)


def _topic(topic: str) -> Need:
    if topic.startswith(_RETRY) and len(topic) > len(_RETRY):
        return Need("Group", topic[len(_RETRY) :], _SUB)
    return Need("Topic", topic, _SUB)


def _group_and_topic(group: str, topic: str) -> list[Need]:
    needs = [Need("Group", group, _SUB)]
    if topic != _RETRY + group:
        needs.append(_topic(topic))
    return needs


def topic_needs(call: Call) -> list[Need]:
    """A queue's bounds: ``Sub`` on the topic (its group's, for a retry topic)."""
    return [_topic(call.field("topic") or "")]


def group_and_topic_needs(call: Call) -> list[Need]:
    """A pull or an offset of a group in a topic."""
    return _group_and_topic(call.field("consumerGroup") or "", call.field("topic") or "")


def send_back_needs(call: Call) -> list[Need]:
    """A send-back: the group, and the topic the message was consumed as."""
    return _group_and_topic(call.field("group") or "", call.field("originTopic") or "")


def _json(call: Call) -> dict[str, Any]:
    try:
        raw = json.loads(call.command.body)
    except (ValueError, UnicodeDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def heartbeat_needs(call: Call) -> list[Need]:
    """``Sub`` on every consumer group of the heartbeat and on each topic it subscribes to;
    producer groups name no resource (a producer's rights are checked on each send)."""
    needs: list[Need] = []
    consumers = _json(call).get("consumerDataSet")
    for data in consumers[:_BODY_NAMES_MAX] if isinstance(consumers, list) else ():
        if not isinstance(data, dict):
            continue
        group = str(data.get("groupName", ""))
        needs.append(Need("Group", group, _SUB))
        subs = data.get("subscriptionDataSet")
        for sub in subs[:_BODY_NAMES_MAX] if isinstance(subs, list) else ():
            if isinstance(sub, dict):
                needs += _group_and_topic(group, str(sub.get("topic", "")))[1:]
    return needs


def check_client_needs(call: Call) -> list[Need]:
    """CHECK_CLIENT_CONFIG: ``Sub`` on the group in the body."""
    return [Need("Group", str(_json(call).get("group", "")), _SUB)]


def lock_needs(call: Call) -> list[Need]:
    """A queue lock or unlock: ``Sub`` on the group and on every topic named."""
    raw = _json(call)
    group = str(raw.get("consumerGroup", ""))
    needs = [Need("Group", group, _SUB)]
    queues = raw.get("mqSet")
    topics = set()
    for queue in queues[:_BODY_NAMES_MAX] if isinstance(queues, list) else ():
        if isinstance(queue, dict):
            topics.add(str(queue.get("topic", "")))
    for topic in sorted(topics):
        needs += _group_and_topic(group, topic)[1:]
    return needs
