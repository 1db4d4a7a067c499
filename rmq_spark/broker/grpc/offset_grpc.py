"""The offset RPCs of ``apache.rocketmq.v2.MessagingService``: UpdateOffset, GetOffset, QueryOffset.

As the 5.x proxy's ``OffsetActivity`` and ``ConsumerProcessor``: UpdateOffset commits a group's
offset in one queue (``ConsumerOffsetManager.commitOffset``: it may move back; the broker
clamps it to the queue's bounds), GetOffset answers the committed one (OFFSET_NOT_FOUND when
the group never committed there), QueryOffset answers the queue's min (BEGINNING), max (END)
or the first offset stored at or after a time (TIMESTAMP). An update is saved to
consumerOffset.json before the reply (``rmq-spark groups`` sees it at once). ``MessagingServicer``
delegates to ``OffsetRpcs``; the rules are ``consumer/service.py``'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.grpc.consume_grpc import client_id_of
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.resources import resolved_of
from rmq_spark.broker.service import SendCode

__all__ = ["OffsetRpcs"]


def _status(code: int, message: str = "") -> Any:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


class OffsetRpcs:
    """The three offset RPC handlers over one ``ConsumeService``."""

    def __init__(self, service: ConsumeService) -> None:
        self.service = service

    def _queue(self, queue: Any, context: Any) -> tuple[str, int] | Any:
        """(stored topic, queue id) of a request's message queue (its topic as the edge
        resolved it), or the refusal status."""
        topic = resolved_of(context).topic
        route = self.service.route(topic.name, topic.namespace)
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

    @staticmethod
    def _group(context: Any) -> str:
        """The group's full name, the one the ACL checked (validated at the edge: a system
        group's offsets may be read, not committed)."""
        group = resolved_of(context).group
        assert group is not None
        return group.full

    async def update_offset(self, request: Any, context: Any) -> Any:
        group = self._group(context)
        queue = self._queue(request.message_queue, context)
        if isinstance(queue, pb.Status):
            return spb.UpdateOffsetResponse(status=queue)
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
        group = self._group(context)
        queue = self._queue(request.message_queue, context)
        if isinstance(queue, pb.Status):
            return spb.GetOffsetResponse(status=queue)
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
        queue = self._queue(request.message_queue, context)
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
