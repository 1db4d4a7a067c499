"""The 4.x clients' bookkeeping: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
NOTIFY_CONSUMER_IDS_CHANGED (broker -> client), GET_CONSUMER_CONNECTION_LIST,
CHECK_CLIENT_CONFIG.

``RemoteConsumers`` (one per broker, in ``Deps.extras``) holds the clients heard from
(``consumer_links.ConsumerLinks``) and the orderly consumers' queue locks
(``queue_locks.QueueLocks``, served by ``locks.py``), and tells a group's clients when its
members or subscriptions change (oneway NOTIFY_CONSUMER_IDS_CHANGED, so a 4.x push consumer
rebalances at once instead of within 20 s). A heartbeat creates the group's
``%RETRY%<group>`` topic (one queue), as RocketMQ's ``ClientManageProcessor`` does, so the
next name-server registration carries it and the client finds its route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from rmq_spark.broker.consumer.groups import retry_topic
from rmq_spark.broker.filters.expression import compile_filter
from rmq_spark.broker.remoting.calls import Call, ClientLink, Deps, Handler
from rmq_spark.broker.remoting.codec import FLAG_ONEWAY, RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.consumer_links import (
    ConsumerEntry,
    ConsumerLinks,
    HeartbeatError,
    parse_heartbeat,
)
from rmq_spark.broker.remoting.queue_locks import QueueLocks
from rmq_spark.broker.topics import group_name_problem
from rmq_spark.errors import FilterExpressionError

__all__ = ["RemoteConsumers", "handlers", "json_body", "remote_consumers"]

log = logging.getLogger("rmq_spark.broker")

NOTIFY_TIMEOUT_MS = 3_000


def json_body(value: Any) -> bytes:
    """A response body as fastjson reads it (compact JSON)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class RemoteConsumers:
    """The remoting clients of one broker and their queue locks (module doc)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.clock = deps.service.clock
        self.links = ConsumerLinks()
        self.locks = QueueLocks()
        self._open: dict[int, ClientLink] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def watch(self, link: ClientLink) -> None:
        """Forget the connection's clients (and their locks) when it closes."""
        if link.link_id in self._open:
            return
        self._open[link.link_id] = link
        link.on_close(lambda: self._closed(link.link_id))

    def _closed(self, link_id: int) -> None:
        self._open.pop(link_id, None)
        for client_id in [c for c, owner in self.links.owners.items() if owner == link_id]:
            self.locks.drop_client(client_id)
        self.notify(self.links.link_closed(link_id))

    def producer_links(self, group: str) -> list[ClientLink]:
        """The open connections of producer group ``group``'s clients (by their heartbeats)."""
        found = (self._open.get(p.link) for p in self.links.producers.get(group, {}).values())  # type: ignore[call-overload]
        return [link for link in found if link is not None and not link.closed]

    def owns(self, link: ClientLink, client_id: str) -> bool:
        return self.links.owner(client_id) == link.link_id

    def notify(self, groups: list[str]) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED to every live client of each group (oneway; a
        failure is the client's loss: it rebalances within 20 s anyway)."""
        now = self.now_ms()
        for group in groups:
            for entry in self.links.members(group, now):
                link = self._open.get(entry.link)  # type: ignore[call-overload]
                if link is not None and not link.closed:
                    task = asyncio.get_running_loop().create_task(self._notify(link, group))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _notify(link: ClientLink, group: str) -> None:
        command = RemotingCommand(
            code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            flag=FLAG_ONEWAY,
            ext_fields={"consumerGroup": group},
        )
        try:
            await link.send_request(command, NOTIFY_TIMEOUT_MS)
        except (ConnectionError, TimeoutError, OSError) as err:
            log.debug("notify %s of group %s failed: %s", link.peer_host, group, err)


def remote_consumers(deps: Deps) -> RemoteConsumers:
    """The broker's one ``RemoteConsumers`` (made on first use)."""
    found = deps.extras.get("remote_consumers")
    if found is None:
        found = deps.extras["remote_consumers"] = RemoteConsumers(deps)
    assert isinstance(found, RemoteConsumers)
    return found


def _heartbeat_handler(consumers: RemoteConsumers) -> Handler:
    async def heartbeat(call: Call) -> RemotingCommand:
        try:
            beat = parse_heartbeat(call.command.body)
        except HeartbeatError as err:
            return call.reply(ResponseCode.SYSTEM_ERROR, f"heartbeat refused: {err}")
        for data in beat.consumers:
            problem = group_name_problem(data.group)
            if problem is not None:
                return call.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, problem)
        refusal = consumers.links.claim(call.link.link_id, beat.client_id)
        refusal = refusal or consumers.links.room(call.link.link_id, beat)
        if refusal is not None:
            return call.reply(ResponseCode.SYSTEM_ERROR, f"heartbeat refused: {refusal}")
        consumers.watch(call.link)
        link = call.link
        about = {
            "language": link.language,
            "version": link.version,
            "address": f"{link.peer_host}:{link.peer_port}",
        }
        changed = consumers.links.register(link.link_id, beat, consumers.now_ms(), **about)
        topics = consumers.deps.service.topics
        for data in beat.consumers:
            # A heartbeat from anywhere may name any group: its retry topic is a creation
            # like a producer's (the same per-address budget); the first send-back of the
            # group creates it otherwise.
            topics.add_internal(retry_topic(data.group), 1, client=link.peer_host)
        consumers.notify(changed)
        return call.reply(ResponseCode.SUCCESS)

    return heartbeat


def _unregister_handler(consumers: RemoteConsumers) -> Handler:
    async def unregister(call: Call) -> RemotingCommand:
        client_id = call.required("clientID")
        if not consumers.owns(call.link, client_id):
            # Another connection's client (or none): RocketMQ would drop it from its groups.
            return call.reply(ResponseCode.SUCCESS)
        group = call.field("consumerGroup") or ""
        changed = consumers.links.unregister(client_id, group, call.field("producerGroup") or "")
        consumers.notify(changed)
        return call.reply(ResponseCode.SUCCESS)

    return unregister


def _members(consumers: RemoteConsumers, call: Call) -> tuple[str, list[ConsumerEntry]]:
    group = call.required("consumerGroup")
    return group, consumers.links.members(group, consumers.now_ms())


def _consumer_list_handler(consumers: RemoteConsumers) -> Handler:
    async def consumer_list(call: Call) -> RemotingCommand:
        group, members = _members(consumers, call)
        if not members:
            return call.reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        ids = [entry.client_id for entry in members]
        return call.reply(body=json_body({"consumerIdList": ids}))

    return consumer_list


def _subscription_json(entry: ConsumerEntry) -> dict[str, Any]:
    return {
        sub.topic: {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": sub.expression_type,
            "subString": sub.expression,
            "subVersion": sub.sub_version,
            "tagsSet": [],
            "topic": sub.topic,
        }
        for sub in entry.data.subscriptions
    }


def _connection_list_handler(consumers: RemoteConsumers) -> Handler:
    async def connection_list(call: Call) -> RemotingCommand:
        group, members = _members(consumers, call)
        if not members:
            return call.reply(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        table: dict[str, Any] = {}
        for entry in members:
            table.update(_subscription_json(entry))
        first = members[-1].data
        body = {
            "connectionSet": [
                {
                    "clientAddr": e.address,
                    "clientId": e.client_id,
                    "language": e.language,
                    "version": e.version,
                }
                for e in members
            ],
            "consumeFromWhere": first.consume_from or "CONSUME_FROM_LAST_OFFSET",
            "consumeType": first.consume_type,
            "messageModel": first.message_model,
            "subscriptionTable": table,
        }
        return call.reply(body=json_body(body))

    return connection_list


async def check_client_config(call: Call) -> RemotingCommand:
    """CHECK_CLIENT_CONFIG: a push consumer with an SQL92 subscription asks before it starts
    whether the broker can filter with it (the broker's filters compile it)."""
    try:
        raw = json.loads(call.command.body)
        sub = raw.get("subscriptionData") if isinstance(raw, dict) else None
    except (ValueError, UnicodeDecodeError):
        return call.reply(ResponseCode.SYSTEM_ERROR, "check client body is not JSON")
    if not isinstance(sub, dict):
        return call.reply()
    kind, expression = sub.get("expressionType") or "TAG", sub.get("subString") or "*"
    if not isinstance(kind, str) or not isinstance(expression, str):
        return call.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "bad subscription data")
    try:
        compile_filter(kind, expression)
    except FilterExpressionError as err:
        return call.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(err)[:500])
    return call.reply()


def handlers(deps: Deps) -> dict[int, Handler]:
    """The client bookkeeping codes' handlers."""
    consumers = remote_consumers(deps)
    return {
        RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
        RequestCode.HEART_BEAT: _heartbeat_handler(consumers),
        RequestCode.UNREGISTER_CLIENT: _unregister_handler(consumers),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list_handler(consumers),
        RequestCode.GET_CONSUMER_CONNECTION_LIST: _connection_list_handler(consumers),
    }
