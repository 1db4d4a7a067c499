"""PURE: receipt handles, one per delivery of a message to a consumer group.

The handle is RocketMQ's own string (``common/consumer/ReceiptHandle.java``: nine fields
joined by a space: startOffset, retrieveTime, invisibleTime, reviveQueueId, topic type,
brokerName, queueId, offset, commitLogOffset), followed by two fields of ours that RocketMQ's
parser ignores (it reads the first nine): the delivery attempt and the broker run's nonce. A
handle names one delivery: the same message delivered again (attempt + 1) or by another broker
run (another nonce) has a different handle, and the old one is stale. Knows nothing of groups,
gRPC or time sources.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReceiptHandle", "decode_receipt_handle"]

_SEPARATOR = " "
_FIELDS = 11
_RETRY_PREFIX = "%RETRY%"


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One delivery: where the message is, when it was taken and until when it is invisible."""

    broker_name: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    retrieve_ms: int
    invisible_ms: int
    attempt: int
    nonce: str
    topic_type: str = "0"  # RocketMQ: "0" a normal topic, "1" a %RETRY% topic

    @property
    def deadline_ms(self) -> int:
        """When the message becomes visible again unless acknowledged (nextVisibleTime)."""
        return self.retrieve_ms + self.invisible_ms

    def encode(self) -> str:
        return _SEPARATOR.join(
            str(value)
            for value in (
                self.queue_offset,  # startOffset: our deliveries are one message each
                self.retrieve_ms,
                self.invisible_ms,
                0,  # reviveQueueId: we keep no revive topic
                self.topic_type,
                self.broker_name,
                self.queue_id,
                self.queue_offset,
                self.physical_offset,
                self.attempt,
                self.nonce,
            )
        )

    @staticmethod
    def topic_type_of(topic: str) -> str:
        return "1" if topic.startswith(_RETRY_PREFIX) else "0"


def decode_receipt_handle(text: str) -> ReceiptHandle | str:
    """The handle in ``text``, or why it is not one of ours (a str)."""
    fields = text.split(_SEPARATOR)
    if len(fields) != _FIELDS:
        return f"receipt handle has {len(fields)} fields, expected {_FIELDS}"
    try:
        handle = ReceiptHandle(
            broker_name=fields[5],
            queue_id=int(fields[6]),
            queue_offset=int(fields[7]),
            physical_offset=int(fields[8]),
            retrieve_ms=int(fields[1]),
            invisible_ms=int(fields[2]),
            attempt=int(fields[9]),
            nonce=fields[10],
            topic_type=fields[4],
        )
    except ValueError:
        return f"receipt handle {text[:120]!r} has a non-numeric field"
    if handle.queue_offset < 0 or handle.queue_id < 0 or handle.attempt < 1:
        return f"receipt handle {text[:120]!r} has a negative offset, queue or attempt"
    return handle
