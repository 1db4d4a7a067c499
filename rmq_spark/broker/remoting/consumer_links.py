"""PURE: the 4.x clients a broker heard from over remoting (RocketMQ's ``ConsumerManager``).

Owns ``parse_heartbeat`` (the ``HeartbeatData`` JSON body of ``HEART_BEAT``, bounded) and
``ConsumerLinks``: per group, the clients that consume it (client id, the connection it
spoke on, consume type, message model, subscriptions with their ``subVersion``) and per
producer group its clients. A client is a member while its connection is open and it sent a
heartbeat within ``CLIENT_EXPIRY_MS`` (RocketMQ's ``channelExpiredTimeout``). Every change of
a group's members or subscriptions is reported so the caller can send
``NOTIFY_CONSUMER_IDS_CHANGED`` to the group. A client id belongs to the connection that
first registered it: another connection can neither unregister it nor take its locks
(``owner``). Used from the event loop only (no lock). A connection is any hashable object.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLIENT_EXPIRY_MS",
    "CLIENT_IDS_PER_LINK_MAX",
    "ConsumerEntry",
    "ConsumerLinks",
    "GROUPS_PER_HEARTBEAT_MAX",
    "GROUPS_PER_LINK_MAX",
    "Heartbeat",
    "HeartbeatError",
    "SUBSCRIPTIONS_PER_GROUP_MAX",
    "Subscription",
    "parse_heartbeat",
]

CLIENT_EXPIRY_MS = 120_000  # channelExpiredTimeout
GROUPS_PER_HEARTBEAT_MAX = 256  # consumer plus producer groups in one heartbeat
SUBSCRIPTIONS_PER_GROUP_MAX = 256
CLIENT_IDS_PER_LINK_MAX = 8  # a Java client instance uses one id per connection
GROUPS_PER_LINK_MAX = 1024  # (client id, group) memberships one connection may hold
_ID_LENGTH_MAX = 255


class HeartbeatError(ValueError):
    """A heartbeat body that is not a ``HeartbeatData`` this broker accepts."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str  # subString: "*", "a || b" or SQL92
    expression_type: str  # TAG or SQL92
    sub_version: int


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from: str
    subscriptions: tuple[Subscription, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    client_id: str
    consumers: tuple[ConsumerData, ...]
    producer_groups: tuple[str, ...]


def _text(raw: Any, what: str, *, empty_ok: bool = False) -> str:
    if not isinstance(raw, str) or (not raw and not empty_ok) or len(raw) > 16 * 1024:
        raise HeartbeatError(f"{what} is not a string of at most 16 KiB: {str(raw)[:80]!r}")
    return raw


def _subscription(raw: Any) -> Subscription:
    if not isinstance(raw, dict):
        raise HeartbeatError("a subscription is not an object")
    version = raw.get("subVersion", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise HeartbeatError(f"subVersion {version!r} is not an integer")
    return Subscription(
        topic=_text(raw.get("topic"), "subscription topic"),
        expression=_text(raw.get("subString", "*"), "subString", empty_ok=True) or "*",
        expression_type=_text(raw.get("expressionType") or "TAG", "expressionType"),
        sub_version=version,
    )


def _consumer(raw: Any) -> ConsumerData:
    if not isinstance(raw, dict):
        raise HeartbeatError("a consumer data entry is not an object")
    subs = raw.get("subscriptionDataSet")
    subs = [] if subs is None else subs
    if not isinstance(subs, list) or len(subs) > SUBSCRIPTIONS_PER_GROUP_MAX:
        raise HeartbeatError(
            f"subscriptionDataSet is not a list of at most {SUBSCRIPTIONS_PER_GROUP_MAX}"
        )
    return ConsumerData(
        group=_text(raw.get("groupName"), "groupName"),
        consume_type=_text(raw.get("consumeType") or "CONSUME_PASSIVELY", "consumeType"),
        message_model=_text(raw.get("messageModel") or "CLUSTERING", "messageModel"),
        consume_from=_text(raw.get("consumeFromWhere") or "", "consumeFromWhere", empty_ok=True),
        subscriptions=tuple(_subscription(s) for s in subs),
    )


def parse_heartbeat(body: bytes) -> Heartbeat:
    """The ``HeartbeatData`` of a heartbeat body (fastjson's output is standard JSON)."""
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise HeartbeatError(f"heartbeat body is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise HeartbeatError("heartbeat body is not a JSON object")
    client_id = _text(raw.get("clientID"), "clientID")
    if len(client_id) > _ID_LENGTH_MAX:
        raise HeartbeatError(f"clientID is longer than {_ID_LENGTH_MAX} characters")
    consumers = raw.get("consumerDataSet")
    producers = raw.get("producerDataSet")
    consumers = [] if consumers is None else consumers
    producers = [] if producers is None else producers
    if not isinstance(consumers, list) or not isinstance(producers, list):
        raise HeartbeatError("consumerDataSet and producerDataSet must be lists")
    if len(consumers) + len(producers) > GROUPS_PER_HEARTBEAT_MAX:
        raise HeartbeatError(f"more than {GROUPS_PER_HEARTBEAT_MAX} groups in one heartbeat")
    names = []
    for entry in producers:
        if not isinstance(entry, dict):
            raise HeartbeatError("a producer data entry is not an object")
        names.append(_text(entry.get("groupName"), "producer groupName"))
    return Heartbeat(client_id, tuple(_consumer(c) for c in consumers), tuple(names))


@dataclass(slots=True)
class ConsumerEntry:
    """One client consuming a group."""

    client_id: str
    link: Hashable
    data: ConsumerData
    last_seen_ms: int
    language: str = "JAVA"
    version: int = 0
    address: str = ""


@dataclass(slots=True)
class _Producer:
    link: Hashable
    last_seen_ms: int


@dataclass
class ConsumerLinks:
    """The remoting clients of one broker (module doc)."""

    consumers: dict[str, dict[str, ConsumerEntry]] = field(default_factory=dict)
    producers: dict[str, dict[str, _Producer]] = field(default_factory=dict)
    owners: dict[str, Hashable] = field(default_factory=dict)  # client id -> its connection

    def owner(self, client_id: str) -> Hashable | None:
        return self.owners.get(client_id)

    def claim(self, link: Hashable, client_id: str) -> str | None:
        """Bind ``client_id`` to ``link``; the refusal when another open connection has it."""
        held = self.owners.get(client_id)
        if held is not None and held != link:
            return f"client id {client_id!r} belongs to another connection"
        if held is None:
            mine = sum(1 for owner in self.owners.values() if owner == link)
            if mine >= CLIENT_IDS_PER_LINK_MAX:
                return f"more than {CLIENT_IDS_PER_LINK_MAX} client ids on one connection"
            self.owners[client_id] = link
        return None

    def room(self, link: Hashable, heartbeat: Heartbeat) -> str | None:
        """Why the heartbeat would take ``link`` past ``GROUPS_PER_LINK_MAX`` memberships
        (groups are never dropped by a later heartbeat, only by their connection's close)."""
        held = sum(1 for m in self.consumers.values() for e in m.values() if e.link == link)
        held += sum(1 for m in self.producers.values() for p in m.values() if p.link == link)
        client = heartbeat.client_id
        new = sum(1 for d in heartbeat.consumers if client not in self.consumers.get(d.group, {}))
        new += sum(1 for g in heartbeat.producer_groups if client not in self.producers.get(g, {}))
        if held + new > GROUPS_PER_LINK_MAX:
            return f"more than {GROUPS_PER_LINK_MAX} consumer groups on one connection"
        return None

    def register(
        self, link: Hashable, heartbeat: Heartbeat, now_ms: int, **about: Any
    ) -> list[str]:
        """Record a heartbeat (its client id claimed, ``room`` checked); returns the consumer
        groups whose members or subscriptions changed."""
        changed = []
        for data in heartbeat.consumers:
            members = self.consumers.setdefault(data.group, {})
            old = members.get(heartbeat.client_id)
            members[heartbeat.client_id] = ConsumerEntry(
                heartbeat.client_id, link, data, now_ms, **about
            )
            if old is None or old.data.subscriptions != data.subscriptions or old.link != link:
                changed.append(data.group)
        for group in heartbeat.producer_groups:
            self.producers.setdefault(group, {})[heartbeat.client_id] = _Producer(link, now_ms)
        return changed

    def unregister(self, client_id: str, consumer_group: str, producer_group: str) -> list[str]:
        """The client left the groups named; returns the consumer groups changed."""
        producers = self.producers.get(producer_group)
        if producers is not None and producers.pop(client_id, None) and not producers:
            del self.producers[producer_group]
        members = self.consumers.get(consumer_group)
        if members is None or members.pop(client_id, None) is None:
            return []
        if not members:
            del self.consumers[consumer_group]
        return [consumer_group]

    def link_closed(self, link: Hashable) -> list[str]:
        """A connection closed: its clients leave every group; returns the groups changed."""
        for client_id in [c for c, owner in self.owners.items() if owner == link]:
            del self.owners[client_id]
        for group, producers in list(self.producers.items()):
            for client_id in [c for c, p in producers.items() if p.link == link]:
                del producers[client_id]
            if not producers:
                del self.producers[group]
        changed = []
        for group, members in list(self.consumers.items()):
            gone = [c for c, entry in members.items() if entry.link == link]
            for client_id in gone:
                del members[client_id]
            if gone:
                changed.append(group)
            if not members:
                del self.consumers[group]
        return changed

    def members(self, group: str, now_ms: int) -> list[ConsumerEntry]:
        """The group's live consumers (heartbeat within the expiry), by client id."""
        entries = self.consumers.get(group, {}).values()
        live = [e for e in entries if now_ms - e.last_seen_ms < CLIENT_EXPIRY_MS]
        return sorted(live, key=lambda e: e.client_id)

    def subscription(self, group: str, topic: str, now_ms: int) -> Subscription | None:
        """The group's subscription to ``topic`` (the newest ``subVersion`` among its live
        members, as RocketMQ keeps one per group)."""
        found = [
            sub
            for entry in self.members(group, now_ms)
            for sub in entry.data.subscriptions
            if sub.topic == topic
        ]
        return max(found, key=lambda s: s.sub_version, default=None)

    def message_model(self, group: str, now_ms: int) -> str | None:
        members = self.members(group, now_ms)
        return members[0].data.message_model if members else None
