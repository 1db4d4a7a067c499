"""The resources a request names, resolved once at the edge for the ACL and the handler alike.

Owns ``resolve``: for every RPC of ``MessagingService`` and ``StoreService`` (one entry per RPC
in ``_RESOLVERS``; an RPC without one is refused), the request's consumer group and topics as
``Name``s (the name and namespace the request gives, and the full name ``namespace%name``,
``topics.full_topic_name``) in a ``Resolved``, or a ``Refused`` when a name is illegal:
``ILLEGAL_CONSUMER_GROUP`` (``topics.group_name_problem``; a system group only where the RPC
reads offsets) or ``ILLEGAL_TOPIC`` (an RPC's one topic that cannot be a stored topic,
``topics.stored_topic_problem``; a batch's topics are answered per message by the service;
the RPCs the broker does not serve keep their UNSUPPORTED / NOT_IMPLEMENTED answer).

``auth_grpc.AuthInterceptor`` resolves each call (each Telemetry command) once, checks the ACL
on exactly those names (``acl.needs_of``) and hands the same ``Resolved`` to the handler as
``context.resolved`` (``resolved_of``); handlers never read names from the protobuf, so the
name checked and the name acted on cannot differ.

PURE: no sockets, no clock. Does not own the name rules (``topics.py``) nor the rights
(``acl.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.topics import full_topic_name, group_name_problem, stored_topic_problem

__all__ = [
    "CONSUMER_CLIENT_TYPES",
    "Name",
    "Refused",
    "Resolved",
    "resolve",
    "resolved_of",
    "resolver_names",
]

# ClientType PUSH/SIMPLE/PULL/LITE_* consumers: a Heartbeat from one names its group.
CONSUMER_CLIENT_TYPES = frozenset({2, 3, 4, 5, 6})


@dataclass(frozen=True, slots=True)
class Name:
    """A topic or group as the request names it; ``full`` is the one name checked and used."""

    name: str
    namespace: str
    full: str


@dataclass(frozen=True, slots=True)
class Resolved:
    """A request's resources. ``rights`` keys ``acl.needs_of``'s table (the RPC's name, or
    ``Telemetry/publishing``); ``topics`` are in request order (one per message or entry of a
    batch)."""

    rights: str
    group: Name | None = None
    topics: tuple[Name, ...] = ()

    @property
    def topic(self) -> Name:
        """The one topic of a single-topic RPC."""
        return self.topics[0]


@dataclass(frozen=True, slots=True)
class Refused:
    """An illegal name: the status (``code``, one-line ``message``) to answer instead."""

    code: int
    message: str


def _name(resource: Any) -> Name:
    key = (resource.name, resource.resource_namespace)
    named = _NAMED.get(key)
    if named is None:
        name, namespace = str(key[0]), str(key[1])
        named = Name(name, namespace, full_topic_name(name, namespace))
        _keep(_NAMED, key, named)
    return named


# Judged names, kept: a client names the same few groups and topics on every call. Bounded:
# emptied when full, so names made up per call cost memory no longer than the next clear.
_JUDGED: dict[tuple[str, str, int], Name | Refused] = {}
_NAMED: dict[tuple[str, str], Name] = {}  # named, not judged (the same bound)
_JUDGED_MAX = 4096
_KEPT_NAME_CHARS = 1024  # no legal topic or group is longer (255 and 120, namespace included)


def _keep(cache: dict[Any, Any], key: tuple[Any, ...], value: Any) -> None:
    """``cache[key] = value``, emptying a full cache first; a key naming anything longer than
    any legal name is not kept (4096 names of a request's megabytes would be gigabytes)."""
    if sum(len(part) for part in key if type(part) is str) > _KEPT_NAME_CHARS:
        return
    if len(cache) >= _JUDGED_MAX:
        cache.clear()
    cache[key] = value


_GROUP, _SYSTEM_GROUP, _TOPIC = 0, 1, 2


def _judged(resource: Any, kind: int) -> Name | Refused:
    key = (resource.name, resource.resource_namespace, kind)
    judged = _JUDGED.get(key)
    if judged is None:
        if kind == _TOPIC:
            judged = _topic_of(resource)
        else:
            judged = _group_of(resource, system_ok=kind == _SYSTEM_GROUP)
        _keep(_JUDGED, key, judged)
    return judged


def _group(resource: Any, *, system_ok: bool = False) -> Name | Refused:
    return _judged(resource, _SYSTEM_GROUP if system_ok else _GROUP)


def _topic(resource: Any) -> Name | Refused:
    return _judged(resource, _TOPIC)


def _group_of(resource: Any, *, system_ok: bool) -> Name | Refused:
    group = _name(resource)
    problem = group_name_problem(group.name, group.namespace, system_ok=system_ok)
    return group if problem is None else Refused(pb.ILLEGAL_CONSUMER_GROUP, problem)


def _topic_of(resource: Any) -> Name | Refused:
    topic = _name(resource)
    problem = stored_topic_problem(topic.name) or stored_topic_problem(topic.full)
    return topic if problem is None else Refused(pb.ILLEGAL_TOPIC, problem)


def _of(rights: str, group: Name | Refused | None, *topics: Name | Refused) -> Resolved | Refused:
    if type(group) is Refused:
        return group
    for topic in topics:
        if type(topic) is Refused:
            return topic
    return Resolved(rights, group, topics)  # type: ignore[arg-type]


_CONSUMER_CALLS: dict[tuple[str, str, str, str, str], Resolved | Refused] = {}
_ONE_MESSAGE_SENDS: dict[tuple[str, str], Resolved | Refused] = {}


def _send(request: Any) -> Resolved | Refused:
    """SendMessage's topics, one per message; a call of one message (what the clients send)
    resolved once per topic (bounded as ``_JUDGED``)."""
    messages = request.messages
    if len(messages) != 1:
        return _of("SendMessage", None, *(_name(m.topic) for m in messages))
    topic = messages[0].topic
    key = (topic.name, topic.resource_namespace)
    resolved = _ONE_MESSAGE_SENDS.get(key)
    if resolved is None:
        resolved = _of("SendMessage", None, _name(topic))
        _keep(_ONE_MESSAGE_SENDS, key, resolved)
    return resolved


def _consumer(rights: str, request: Any, topic: Any, *, system_ok: bool = False) -> Any:
    """A consumer RPC's group and topic, resolved once per combination (bounded as
    ``_JUDGED``): a consumer repeats the same ones on every call."""
    group = request.group
    key = (rights, group.name, group.resource_namespace, topic.name, topic.resource_namespace)
    resolved = _CONSUMER_CALLS.get(key)
    if resolved is None:
        resolved = _of(rights, _group(group, system_ok=system_ok), _topic(topic))
        _keep(_CONSUMER_CALLS, key, resolved)
    return resolved


def _heartbeat(r: Any) -> Resolved | Refused:
    consumer = r.client_type in CONSUMER_CLIENT_TYPES and r.group.name
    return _of("Heartbeat", _group(r.group) if consumer else None)


def _telemetry(command: Any) -> Resolved | Refused:
    """A Telemetry command: a producer's declared topics, a consumer's group and topics;
    other commands name nothing."""
    if command.WhichOneof("command") != "settings":
        return Resolved("Telemetry")
    settings = command.settings
    if settings.HasField("publishing"):
        topics = (_name(t) for t in settings.publishing.topics)
        return _of("Telemetry/publishing", None, *topics)
    if settings.HasField("subscription"):
        subscription = settings.subscription
        topics = (_name(entry.topic) for entry in subscription.subscriptions)
        return _of("Telemetry", _group(subscription.group), *topics)
    return Resolved("Telemetry")


_RESOLVERS: dict[str, Callable[[Any], Resolved | Refused]] = {
    # apache.rocketmq.v2.MessagingService
    "QueryRoute": lambda r: _of("QueryRoute", None, _topic(r.topic)),
    "Heartbeat": _heartbeat,
    "SendMessage": _send,
    # not served (UNSUPPORTED / NOT_IMPLEMENTED): named for the ACL, not judged
    "EndTransaction": lambda r: _of("EndTransaction", None, _name(r.topic)),
    "RecallMessage": lambda r: _of("RecallMessage", None, _name(r.topic)),
    "PullMessage": lambda r: _of("PullMessage", _name(r.group), _name(r.message_queue.topic)),
    "SyncLiteSubscription": lambda r: _of("SyncLiteSubscription", _name(r.group), _name(r.topic)),
    "ReceiveMessage": lambda r: _consumer("ReceiveMessage", r, r.message_queue.topic),
    "AckMessage": lambda r: _consumer("AckMessage", r, r.topic),
    "ChangeInvisibleDuration": lambda r: _consumer("ChangeInvisibleDuration", r, r.topic),
    "ForwardMessageToDeadLetterQueue": lambda r: _consumer(
        "ForwardMessageToDeadLetterQueue", r, r.topic
    ),
    "QueryAssignment": lambda r: _consumer("QueryAssignment", r, r.topic),
    "NotifyClientTermination": lambda r: _of(
        "NotifyClientTermination", _group(r.group) if r.group.name else None
    ),
    "Telemetry": _telemetry,
    "UpdateOffset": lambda r: _consumer("UpdateOffset", r, r.message_queue.topic),
    # a system group's offsets may be read, not committed
    "GetOffset": lambda r: _consumer("GetOffset", r, r.message_queue.topic, system_ok=True),
    "QueryOffset": lambda r: _of("QueryOffset", None, _topic(r.message_queue.topic)),
    # rmq_spark.v1.StoreService: an entry by CommitLog offset names no topic ("")
    "SendBack": lambda r: _of("SendBack", _group(r.group), *(_name(e.topic) for e in r.entries)),
    "Redeliver": lambda r: _of("Redeliver", None, *(_name(m.topic) for m in r.messages)),
    # names halves by offset only: the store identity's alone (store_gate.py)
    "CheckTransaction": lambda r: _of("CheckTransaction", None),
}


def resolver_names() -> frozenset[str]:
    """The RPCs ``resolve`` knows."""
    return frozenset(_RESOLVERS)


def resolve(method: str, request: Any) -> Resolved | Refused:
    """The resources ``request`` of RPC ``method`` names, or why one is illegal (an RPC
    without a resolver is refused: nothing unresolved reaches a handler)."""
    resolver = _RESOLVERS.get(method)
    if resolver is None:
        return Refused(pb.NOT_IMPLEMENTED, f"{method} has no resource resolver")
    return resolver(request)


def resolved_of(context: Any) -> Resolved:
    """The ``Resolved`` the edge attached to a call's ``context`` (for Telemetry: to the
    command last read)."""
    resolved = getattr(context, "resolved", None)
    if not isinstance(resolved, Resolved):
        raise RuntimeError("the call's resources were not resolved at the edge")
    return resolved
