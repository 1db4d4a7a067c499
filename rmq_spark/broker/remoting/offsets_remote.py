"""A 4.x consumer's offsets: QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET, GET_MIN_OFFSET,
GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME.

A group's committed offsets are the consume service's (``ConsumerGroups``, saved in
``config/consumerOffset.json``): one set for both fronts, so a group that consumed over gRPC
resumes over remoting and the reverse. As RocketMQ's ``ConsumerManageProcessor``: a group
that never committed in a queue whose oldest message is still offset 0 starts at 0 (RocketMQ
answers 0 while that message is in memory), otherwise QUERY_NOT_FOUND (the client then starts
where its ``consumeFromWhere`` says). An update is clamped to the queue's bounds.
"""

from __future__ import annotations

import asyncio

from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.topics import group_name_problem
from rmq_spark.errors import RmqError

__all__ = ["commit", "committed_or_start", "handlers"]


def _offset(call: Call, value: int, field: str = "offset") -> RemotingCommand:
    return call.reply(ext_fields={field: str(value)})


def _queue(deps: Deps, call: Call) -> tuple[str, int] | RemotingCommand:
    """(topic, queue id) of a request naming a queue of an existing topic, or the refusal."""
    topic = call.required("topic")
    queue_id = call.int_field("queueId")
    count = deps.service.topics.queue_count(topic)
    if count is None:
        return call.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic[:300]}] not exist")
    if not 0 <= queue_id < count:
        return call.reply(
            ResponseCode.INVALID_PARAMETER, f"queueId {queue_id} of topic {topic} is illegal"
        )
    return topic, queue_id


def _group(call: Call) -> str | RemotingCommand:
    group = call.required("consumerGroup")
    problem = group_name_problem(group)
    if problem is not None:
        return call.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, problem)
    return group


def commit(consume: ConsumeService, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit ``offset`` (clamped to the queue's bounds) unless it is the committed one: 4.x
    clients repeat their offsets every 5 s per queue and on every pull, and each change
    rewrites consumerOffset.json."""
    low, high = consume.queue_bounds(topic, queue_id)
    if consume.groups.committed_offset(group, topic, queue_id) != max(low, min(offset, high)):
        consume.update_offset(group, topic, queue_id, offset)


def committed_or_start(consume: ConsumeService, group: str, topic: str, queue_id: int) -> int:
    """The group's committed offset, 0 for a group new to a queue that still holds its first
    message, -1 otherwise (module doc)."""
    committed = consume.groups.committed_offset(group, topic, queue_id)
    if committed is not None:
        return committed
    low, _high = consume.queue_bounds(topic, queue_id)
    return 0 if low == 0 else -1


def _query_handler(deps: Deps, consume: ConsumeService) -> Handler:
    async def query_offset(call: Call) -> RemotingCommand:
        group = _group(call)
        if isinstance(group, RemotingCommand):
            return group
        queue = _queue(deps, call)
        if isinstance(queue, RemotingCommand):
            return queue
        offset = committed_or_start(consume, group, *queue)
        committed = consume.groups.committed_offset(group, *queue)
        zero_ok = (call.field("setZeroIfNotFound") or "true").strip().lower() != "false"
        if offset < 0 or (committed is None and not zero_ok):
            return call.reply(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe")
        return _offset(call, offset)

    return query_offset


def _update_handler(deps: Deps, consume: ConsumeService) -> Handler:
    async def update_offset(call: Call) -> RemotingCommand:
        group = _group(call)
        if isinstance(group, RemotingCommand):
            return group
        queue = _queue(deps, call)
        if isinstance(queue, RemotingCommand):
            return queue
        commit(consume, group, *queue, call.int_field("commitOffset"))
        return call.reply()

    return update_offset


def _bounds_handler(deps: Deps, consume: ConsumeService, which: int) -> Handler:
    async def bound(call: Call) -> RemotingCommand:
        queue = _queue(deps, call)
        if isinstance(queue, RemotingCommand):
            return queue
        return _offset(call, consume.queue_bounds(*queue)[which])

    return bound


def _search_handler(deps: Deps, consume: ConsumeService) -> Handler:
    async def search(call: Call) -> RemotingCommand:
        queue = _queue(deps, call)
        if isinstance(queue, RemotingCommand):
            return queue
        stamp = call.int_field("timestamp")
        try:
            offset = await asyncio.to_thread(consume.offset_for_time, *queue, stamp)
        except (RmqError, OSError) as err:
            return call.reply(ResponseCode.SYSTEM_ERROR, f"search by time failed: {err}")
        return _offset(call, offset)

    return search


def _earliest_handler(deps: Deps, consume: ConsumeService) -> Handler:
    async def earliest(call: Call) -> RemotingCommand:
        queue = _queue(deps, call)
        if isinstance(queue, RemotingCommand):
            return queue
        low, _high = consume.queue_bounds(*queue)
        stamp = -1
        try:
            physical = consume.source.view(*queue).physical_at(low)
            if physical is not None:
                stamp = consume.read_record(physical).record.store_timestamp_ms
        except (RmqError, OSError):
            stamp = -1
        return _offset(call, stamp, "timestamp")

    return earliest


def handlers(deps: Deps) -> dict[int, Handler]:
    consume = deps.consume
    if consume is None:
        return {}
    return {
        RequestCode.QUERY_CONSUMER_OFFSET: _query_handler(deps, consume),
        RequestCode.UPDATE_CONSUMER_OFFSET: _update_handler(deps, consume),
        RequestCode.GET_MIN_OFFSET: _bounds_handler(deps, consume, 0),
        RequestCode.GET_MAX_OFFSET: _bounds_handler(deps, consume, 1),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _search_handler(deps, consume),
        RequestCode.GET_EARLIEST_MSG_STORETIME: _earliest_handler(deps, consume),
    }
