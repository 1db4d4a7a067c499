"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: orderly consumers' queue locks (``queue_locks.py``).

The body names the client id the locks are for; it must be a client id this connection
registered with a heartbeat (``consumer_links``), so no connection can take or free another
client's locks, and a lock is taken only in a group that client joined. Only this broker's
queues of existing topics are locked; the response lists the queues the client now holds.
"""

from __future__ import annotations

import json
from typing import Any

from rmq_spark.broker.remoting.calls import Call, Deps, Handler, HeaderError
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.consume import RemoteConsumers, json_body, remote_consumers
from rmq_spark.broker.remoting.queue_locks import LOCKS_PER_REQUEST_MAX, QueueKey
from rmq_spark.broker.topics import group_name_problem

__all__ = ["handlers"]


def _body(call: Call) -> dict[str, Any]:
    try:
        raw = json.loads(call.command.body)
    except (ValueError, UnicodeDecodeError) as err:
        raise HeaderError(f"lock request body is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise HeaderError("lock request body is not a JSON object")
    return raw


def _request(
    consumers: RemoteConsumers, call: Call
) -> tuple[str, str, list[dict[str, Any]]] | RemotingCommand:
    """(group, client id, the queues as sent) or the refusal."""
    raw = _body(call)
    group, client_id, queues = raw.get("consumerGroup"), raw.get("clientId"), raw.get("mqSet")
    if not isinstance(group, str) or group_name_problem(group) is not None:
        return call.reply(ResponseCode.SYSTEM_ERROR, f"illegal consumerGroup {str(group)[:80]!r}")
    if not isinstance(client_id, str) or not consumers.owns(call.link, client_id):
        return call.reply(
            ResponseCode.SYSTEM_ERROR,
            f"client id {str(client_id)[:80]!r} is not registered on this connection",
        )
    if not isinstance(queues, list) or len(queues) > LOCKS_PER_REQUEST_MAX:
        return call.reply(
            ResponseCode.SYSTEM_ERROR, f"mqSet is not a list of at most {LOCKS_PER_REQUEST_MAX}"
        )
    return group, client_id, [q for q in queues if isinstance(q, dict)]


def _ours(deps: Deps, queues: list[dict[str, Any]]) -> dict[QueueKey, dict[str, Any]]:
    """The queues of this broker that exist, keyed for the lock table."""
    name = deps.config.broker_name
    found: dict[QueueKey, dict[str, Any]] = {}
    for queue in queues:
        topic, broker, queue_id = queue.get("topic"), queue.get("brokerName"), queue.get("queueId")
        if not isinstance(topic, str) or broker != name or type(queue_id) is not int:
            continue
        count = deps.service.topics.queue_count(topic)
        if count is not None and 0 <= queue_id < count:
            found[(topic, name, queue_id)] = {
                "brokerName": name,
                "queueId": queue_id,
                "topic": topic,
            }
    return found


def _lock_handler(consumers: RemoteConsumers) -> Handler:
    async def lock_batch(call: Call) -> RemotingCommand:
        request = _request(consumers, call)
        if isinstance(request, RemotingCommand):
            return request
        group, client_id, queues = request
        if client_id not in consumers.links.consumers.get(group, {}):
            # Locks only for a group the client joined: what one connection holds stays
            # bounded by its memberships.
            return call.reply(
                ResponseCode.SYSTEM_ERROR, f"client {client_id} is no consumer of {group}"
            )
        ours = _ours(consumers.deps, queues)
        held = consumers.locks.try_lock(group, client_id, ours, consumers.now_ms())
        return call.reply(body=json_body({"lockOKMQSet": [ours[key] for key in held]}))

    return lock_batch


def _unlock_handler(consumers: RemoteConsumers) -> Handler:
    async def unlock_batch(call: Call) -> RemotingCommand:
        request = _request(consumers, call)
        if isinstance(request, RemotingCommand):
            return request
        group, client_id, queues = request
        consumers.locks.unlock(group, client_id, _ours(consumers.deps, queues))
        return call.reply()

    return unlock_batch


def handlers(deps: Deps) -> dict[int, Handler]:
    consumers = remote_consumers(deps)
    return {
        RequestCode.LOCK_BATCH_MQ: _lock_handler(consumers),
        RequestCode.UNLOCK_BATCH_MQ: _unlock_handler(consumers),
    }
