"""The consume path's vocabulary: what a pop asks (``PopRequest``) and returns (``Popped``:
``Delivery`` values and the ``Copy`` effects to store), receipt outcomes (``HandleCode``) and a
group's retry topic. Plain values; ``groups.py`` re-exports them for its callers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rmq_spark.broker.consumer.delivery import HandOff
from rmq_spark.broker.consumer.ports import GroupSettingsLike, MessageFilter
from rmq_spark.broker.consumer.receipt import ReceiptHandle
from rmq_spark.store.codec import DecodedRecord

__all__ = [
    "Copy",
    "Delivery",
    "HandleCode",
    "PopRequest",
    "Popped",
    "RETRY_PREFIX",
    "retry_topic",
]


class HandleCode(enum.Enum):
    OK = "OK"
    INVALID = "INVALID_RECEIPT_HANDLE"


@dataclass(frozen=True, slots=True)
class PopRequest:
    group: str
    topic: str
    filter: MessageFilter
    batch_size: int
    invisible_ms: int
    settings: GroupSettingsLike
    client_id: str = ""
    auto_renew: bool = False


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer: the stored record and this delivery's handle."""

    topic: str  # the topic the client sees: a retry copy's original topic (RETRY_TOPIC)
    handle: ReceiptHandle
    record: DecodedRecord
    properties: dict[str, str]
    prior: int = 0  # the group's earlier attempts (``copies.prior_reconsumes``)

    @property
    def attempt(self) -> int:
        """Attempts so far: the group's earlier ones (its own %RETRY% copy's RECONSUMETIMES)
        plus this copy's deliveries (the handle counts those)."""
        return self.prior + self.handle.attempt


@dataclass(frozen=True, slots=True)
class Copy:
    """A pop's request to store a copy of a message elsewhere (``hand_off.kind``): its retry
    copy in ``%RETRY%<group>`` or its dead letter in ``%DLQ%<group>``, with ``hand_off.tried``
    as the copy's reconsume times. Report the put's result with ``ConsumerGroups.settle``."""

    group: str
    topic: str  # the stored topic the message was popped from
    queue_id: int
    hand_off: HandOff
    record: DecodedRecord
    properties: dict[str, str]


@dataclass(slots=True)
class Popped:
    """What one pop hands out, and the copies to store before answering."""

    deliveries: list[Delivery] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)


RETRY_PREFIX = "%RETRY%"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"
