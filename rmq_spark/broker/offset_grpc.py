"""The offset RPCs of ``apache.rocketmq.v2.MessagingService``: UpdateOffset, GetOffset, QueryOffset.

As the 5.x proxy's ``OffsetActivity`` and ``ConsumerProcessor``: UpdateOffset commits a group's
offset in one queue (``ConsumerOffsetManager.commitOffset``: it may move back; the broker
clamps it to the queue's bounds), GetOffset answers the committed one (OFFSET_NOT_FOUND when
the group never committed there), QueryOffset answers the queue's min (BEGINNING), max (END)
or the first offset stored at or after a time (TIMESTAMP). An update is saved to
consumerOffset.json before the reply (``rmq-spark groups`` sees it at once). ``MessagingServicer``
delegates to ``OffsetRpcs``; the rules are ``consumer/service.py``'s.

Also the send-back request (RocketMQ's ``CONSUMER_SEND_MSG_BACK`` on the v2 wire): a
SendMessage ``Message`` whose topic is ``%RETRY%<group>`` and whose receipt handle (which
producers never set) is ``rmq-spark-send-back:<physical offset>``; the broker reads that
message from its store and stores its retry or DLQ copy (``consumer/copies.py``). Nothing the
request brings is stored: an ordinary send to a ``%RETRY%`` topic stays ILLEGAL_TOPIC.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rmq_spark.broker.consume_grpc import client_id_of
from rmq_spark.broker.consumer.copies import SEND_BACK_HANDLE_PREFIX
from rmq_spark.broker.consumer.groups import RETRY_PREFIX
from rmq_spark.broker.consumer.service import (
    ConsumeService,
    Rejected,
    full_group_name,
)
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.service import SendCode
from rmq_spark.broker.topics import group_name_problem

__all__ = ["OffsetRpcs", "is_send_back_message", "send_back_entry", "send_back_message"]


def _status(code: int, message: str = "") -> Any:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


class OffsetRpcs:
    """The three offset RPC handlers over one ``ConsumeService``."""

    def __init__(self, service: ConsumeService) -> None:
        self.service = service

    def _queue(self, queue: Any) -> tuple[str, int] | Any:
        """(stored topic, queue id) of a request's message queue, or the refusal status."""
        route = self.service.route(queue.topic.name, queue.topic.resource_namespace)
        if route.code is not SendCode.OK:
            missing = route.code is SendCode.TOPIC_NOT_FOUND
            return _status(pb.TOPIC_NOT_FOUND if missing else pb.ILLEGAL_TOPIC, route.reason)
        if not 0 <= queue.id < route.queue_count:
            return _status(
                pb.BAD_REQUEST,
                f"queue {queue.id} of topic {route.topic!r} does not exist "
                f"(it has {route.queue_count})",
            )
        return route.topic, int(queue.id)

    def _group(self, group: Any, *, committing: bool) -> str | Any:
        """The group's full name (the one the ACL checked), or the refusal status; a system
        group's offsets may be read, not committed."""
        problem = group_name_problem(group.name, group.resource_namespace, system_ok=not committing)
        if problem is not None:
            return _status(pb.ILLEGAL_CONSUMER_GROUP, problem)
        return full_group_name(group.name, group.resource_namespace)

    async def update_offset(self, request: Any, context: Any) -> Any:
        group = self._group(request.group, committing=True)
        queue = self._queue(request.message_queue)
        for refused in (group, queue):
            if isinstance(refused, pb.Status):
                return spb.UpdateOffsetResponse(status=refused)
        if request.offset < 0:
            return spb.UpdateOffsetResponse(
                status=_status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            )
        topic, queue_id = queue
        current = self.service.groups.committed_offset(group, topic, queue_id)
        others = self.service.consumers_of(group, besides=client_id_of(context))
        if current is not None and request.offset < current and others:
            # A group moved back under its running consumers would have their in-flight
            # messages forgotten mid-delivery (mqadmin resetOffsetByTime's rule: stop them).
            return spb.UpdateOffsetResponse(
                status=_status(
                    pb.FORBIDDEN,
                    f"group {group!r} has {len(others)} consumer(s) connected; stop them "
                    f"before moving its offset back ({current} -> {request.offset})",
                )
            )
        self.service.update_offset(group, topic, queue_id, request.offset)
        await asyncio.get_running_loop().run_in_executor(None, self.service.save_offsets_now)
        return spb.UpdateOffsetResponse(status=_status(pb.OK))

    async def get_offset(self, request: Any, context: Any) -> Any:
        group = self._group(request.group, committing=False)
        queue = self._queue(request.message_queue)
        for refused in (group, queue):
            if isinstance(refused, pb.Status):
                return spb.GetOffsetResponse(status=refused)
        topic, queue_id = queue
        offset = self.service.groups.committed_offset(group, topic, queue_id)
        if offset is None:
            return spb.GetOffsetResponse(
                status=_status(
                    pb.OFFSET_NOT_FOUND,
                    f"group {group!r} has no offset in queue {queue_id} of {topic!r}",
                )
            )
        return spb.GetOffsetResponse(status=_status(pb.OK), offset=offset)

    async def query_offset(self, request: Any, context: Any) -> Any:
        queue = self._queue(request.message_queue)
        if isinstance(queue, pb.Status):
            return spb.QueryOffsetResponse(status=queue)
        topic, queue_id = queue
        low, high = self.service.queue_bounds(topic, queue_id)
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            return spb.QueryOffsetResponse(status=_status(pb.OK), offset=low)
        if policy == pb.END:
            return spb.QueryOffsetResponse(status=_status(pb.OK), offset=high)
        if not request.HasField("timestamp"):
            return spb.QueryOffsetResponse(
                status=_status(
                    pb.BAD_REQUEST, "timestamp is required for TIMESTAMP query offset policy"
                )
            )
        offset = await asyncio.get_running_loop().run_in_executor(
            None, self.service.offset_for_time, topic, queue_id, request.timestamp.ToMilliseconds()
        )
        return spb.QueryOffsetResponse(status=_status(pb.OK), offset=offset)


def is_send_back_message(message: Any) -> bool:
    props = message.system_properties
    return (
        message.topic.name.startswith(RETRY_PREFIX)
        and props.HasField("receipt_handle")
        and props.receipt_handle.startswith(SEND_BACK_HANDLE_PREFIX)
    )


def send_back_message(group: str, physical_offset: int, message_id: str = "") -> Any:
    """The ``Message`` of a send-back request (no body: the broker reads the message)."""
    message = pb.Message()
    message.topic.name = f"{RETRY_PREFIX}{group}"
    props = message.system_properties
    props.message_id = message_id or f"send-back-{physical_offset}"
    props.body_encoding = pb.IDENTITY
    props.message_type = pb.NORMAL
    props.receipt_handle = f"{SEND_BACK_HANDLE_PREFIX}{physical_offset}"
    return message


def send_back_entry(service: ConsumeService, message: Any) -> Any:
    """Store the copy a send-back request names; the entry's message id is the copy's
    UNIQ_KEY, its offset the copy's queue offset (of SCHEDULE_TOPIC_XXXX for a retry)."""
    mid = message.system_properties.message_id
    offset_text = message.system_properties.receipt_handle.removeprefix(SEND_BACK_HANDLE_PREFIX)
    if not offset_text.isdigit() or message.body:
        reason = "a send-back request names a physical offset and carries no body"
        return spb.SendResultEntry(status=_status(pb.BAD_REQUEST, reason), message_id=mid)
    group = message.topic.name.removeprefix(RETRY_PREFIX)
    result = service.send_back(group, int(offset_text))
    if isinstance(result, Rejected):
        code = pb.ILLEGAL_CONSUMER_GROUP if "group" in result.reason else pb.MESSAGE_NOT_FOUND
        return spb.SendResultEntry(status=_status(code, result.reason), message_id=mid)
    if not result.ok:
        reason = f"the copy was not stored: {result.status.name}"
        return spb.SendResultEntry(status=_status(pb.INTERNAL_SERVER_ERROR, reason), message_id=mid)
    return spb.SendResultEntry(
        status=_status(pb.OK), message_id=result.uniq_key or mid, offset=result.queue_offset
    )
