"""A consumer group's offsets on a running broker, over gRPC: GetOffset, UpdateOffset and
QueryOffset (RocketMQ 5's PullConsumer RPCs; served by ``offset_grpc.py``).

Used by the ``consumerGroup`` option of the Spark source (its commits) and by ``rmq-spark
groups reset --broker`` (an operator's reset). Calls carry the client id header and, with
``credentials``, the signature the broker's authentication checks (``auth.py``). A refusal
is a ``ConsumeRejectedError`` with the broker's status code; a broker that cannot be reached
is a ``BrokerError``.
"""

from __future__ import annotations

import uuid
from typing import Any

from rmq_spark.broker.grpc.grpc_client import client_metadata, messaging_channel
from rmq_spark.broker.security.auth import RequestSigner
from rmq_spark.clock import SystemClock
from rmq_spark.errors import BrokerError, ConsumeRejectedError

__all__ = ["OffsetClient"]

_RPC_TIMEOUT_S = 10.0


class OffsetClient:
    """GetOffset / UpdateOffset / QueryOffset over one gRPC channel (a context manager)."""

    def __init__(self, address: str, *, credentials: tuple[str, str] | None = None) -> None:
        self.address = address
        self._channel, self._stub = messaging_channel(address)
        self._metadata = client_metadata(f"rmq-spark-offsets@{uuid.uuid4().hex[:12]}")
        self._sign = RequestSigner(credentials, SystemClock())

    def __enter__(self) -> OffsetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    @staticmethod
    def _queue(topic: str, queue_id: int) -> Any:
        from rmq_spark.broker.proto import definition_pb2 as pb

        return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)

    def _call(self, method: str, request: Any) -> Any:
        import grpc

        try:
            return getattr(self._stub, method)(
                request, timeout=_RPC_TIMEOUT_S, metadata=self._sign(self._metadata)
            )
        except grpc.RpcError as err:
            raise BrokerError(f"{self.address}: {method} failed: {err.code()}") from err

    @staticmethod
    def _refused(method: str, reply: Any) -> ConsumeRejectedError:
        from rmq_spark.broker.proto import definition_pb2 as pb

        code = reply.status.code
        return ConsumeRejectedError(code, pb.Code.Name(code), f"{method}: {reply.status.message}")

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in the queue; ``None`` when it never committed there
        or the broker does not serve the queue."""
        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.proto import service_pb2 as spb

        request = spb.GetOffsetRequest(
            group=pb.Resource(name=group), message_queue=self._queue(topic, queue_id)
        )
        reply = self._call("GetOffset", request)
        if reply.status.code in (pb.OFFSET_NOT_FOUND, pb.TOPIC_NOT_FOUND, pb.BAD_REQUEST):
            return None
        if reply.status.code != pb.OK:
            raise self._refused("GetOffset", reply)
        return int(reply.offset)

    def update(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Commit ``offset`` (the broker clamps it to the queue); ``False`` for a topic or
        queue the broker does not serve. Raises ``ConsumeRejectedError`` for a refusal."""
        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.proto import service_pb2 as spb

        request = spb.UpdateOffsetRequest(
            group=pb.Resource(name=group), message_queue=self._queue(topic, queue_id), offset=offset
        )
        reply = self._call("UpdateOffset", request)
        if reply.status.code in (pb.TOPIC_NOT_FOUND, pb.BAD_REQUEST):  # no such topic/queue
            return False
        if reply.status.code != pb.OK:
            raise self._refused("UpdateOffset", reply)
        return True

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (QueryOffset TIMESTAMP)."""
        from google.protobuf.timestamp_pb2 import Timestamp

        from rmq_spark.broker.proto import definition_pb2 as pb
        from rmq_spark.broker.proto import service_pb2 as spb

        stamp = Timestamp()
        stamp.FromMilliseconds(timestamp_ms)
        request = spb.QueryOffsetRequest(
            message_queue=self._queue(topic, queue_id),
            query_offset_policy=pb.TIMESTAMP,
            timestamp=stamp,
        )
        reply = self._call("QueryOffset", request)
        if reply.status.code != pb.OK:
            raise self._refused("QueryOffset", reply)
        return int(reply.offset)
