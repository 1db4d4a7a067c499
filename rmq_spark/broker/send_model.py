"""A producer's send as the broker sees it: the command, its outcome and their vocabulary.

Owns ``SendCommand`` (one message out of its wire form), ``SendOutcome`` / ``RouteOutcome``,
the ``SendCode`` each outcome carries (``grpc_api`` maps it to the RocketMQ status code of the
same name), ``MessageKind``, the property keys a user may not set and the delivery-time range.
Does not own the rules (``send_rules.py``) or the putting (``service.py``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rmq_spark.store.message import HostAddress
from rmq_spark.store.properties import (
    BORN_TIMESTAMP,
    CLUSTER,
    KEYS,
    REAL_QID,
    REAL_TOPIC,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
)

__all__ = [
    "BORN_HOST",
    "DELIVERY_MS_MAX",
    "MessageKind",
    "RESERVED_PROPERTY_KEYS",
    "RouteOutcome",
    "SendCode",
    "SendCommand",
    "SendOutcome",
    "TRACE_CONTEXT",
    "has_control_chars",
    "reject",
]

# Properties the broker writes that properties.py has no constant for (FORMAT.md 2.2).
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"

# MessageConst.STRING_HASH_SET: keys a user property may not use (RocketMQ 5 plus TIMER_*).
RESERVED_PROPERTY_KEYS = frozenset(
    {
        "TRACE_ON", "MSG_REGION", KEYS, TAGS, "WAIT", "DELAY", "RETRY_TOPIC", REAL_TOPIC,
        REAL_QID, "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        UNIQ_KEY, "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", CLUSTER, "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
        "INNER_MULTI_DISPATCH", "INNER_NUM", "INNER_BASE", "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS", "__transactionId__", "TIMER_DELAY_SEC",
        TIMER_DELIVER_MS, "TIMER_DELAY_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", TIMER_OUT_MS, "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        SHARDING_KEY, BORN_HOST, TRACE_CONTEXT, BORN_TIMESTAMP, "__CRC32#",
        "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "REDIRECT", "PROPERTY_FORWARD_QUEUE_ID",
    }
)  # fmt: skip
# google.protobuf.Timestamp's range ends at 9999-12-31T23:59:59.999Z; a Java reader parses
# TIMER_DELIVER_MS as a long, so anything wider must never be stored.
DELIVERY_MS_MAX = 253_402_300_799_999


class MessageKind(enum.Enum):
    """The message type a producer declared (``apache.rocketmq.v2.MessageType``)."""

    UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


class SendCode(enum.Enum):
    """Outcome of a send; ``grpc_api`` maps each to the RocketMQ status code of the same name."""

    OK = "OK"
    BAD_REQUEST = "BAD_REQUEST"
    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"
    ILLEGAL_MESSAGE_TAG = "ILLEGAL_MESSAGE_TAG"
    ILLEGAL_MESSAGE_KEY = "ILLEGAL_MESSAGE_KEY"
    ILLEGAL_MESSAGE_GROUP = "ILLEGAL_MESSAGE_GROUP"
    ILLEGAL_MESSAGE_PROPERTY_KEY = "ILLEGAL_MESSAGE_PROPERTY_KEY"
    ILLEGAL_MESSAGE_ID = "ILLEGAL_MESSAGE_ID"
    ILLEGAL_DELIVERY_TIME = "ILLEGAL_DELIVERY_TIME"
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    MESSAGE_BODY_EMPTY = "MESSAGE_BODY_EMPTY"
    MESSAGE_BODY_TOO_LARGE = "MESSAGE_BODY_TOO_LARGE"
    MESSAGE_PROPERTIES_TOO_LARGE = "MESSAGE_PROPERTIES_TOO_LARGE"
    UNSUPPORTED = "UNSUPPORTED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FLUSH_TIMEOUT = "FLUSH_TIMEOUT"
    STORE_ERROR = "STORE_ERROR"
    # Replication (broker/replication/): stored on the master, but not (yet) on a slave
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    NOT_MASTER = "NOT_MASTER"  # a SLAVE refuses sends


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, three
# times a plain one's cost, and a send builds one per message. Nothing changes one once built.
@dataclass(slots=True)
class SendCommand:
    """One message a producer asks us to store, already out of its wire form.

    ``delivery_timestamp_ms`` is absolute epoch milliseconds (the wire layer normalises the
    client's seconds/milliseconds quirk). ``born_host`` is the peer address when known;
    ``born_host_text`` is what the client said its host was.
    """

    topic: str
    body: bytes
    message_id: str
    namespace: str = ""
    kind: MessageKind = MessageKind.UNSPECIFIED
    tag: str | None = None
    keys: tuple[str, ...] = ()
    user_properties: Mapping[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    born_timestamp_ms: int = 0
    born_host: HostAddress | None = None
    born_host_text: str = ""
    trace_context: str = ""
    delay_level: int | None = None  # RocketMQ 4 style delay level (embedded, remoting sends)
    queue_id: int | None = None  # the queue a 4.x producer chose; None: the broker picks
    producer_group: str | None = None  # a TRANSACTION's PGROUP; None: the topic (gRPC proxy)


@dataclass(slots=True)  # not frozen: as SendCommand
class SendOutcome:
    """What happened to a send. On ``OK``: where the message is (its stored topic/queue)."""

    code: SendCode
    reason: str = ""
    message_id: str = ""
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    physical_offset: int = -1
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        return self.code is SendCode.OK


@dataclass(frozen=True, slots=True)
class RouteOutcome:
    """A route answer: ``code`` is OK, ILLEGAL_TOPIC or TOPIC_NOT_FOUND."""

    code: SendCode
    topic: str
    queue_count: int = 0
    reason: str = ""


def reject(code: SendCode, reason: str, message_id: str = "") -> SendOutcome:
    """A refused send: ``code`` and why."""
    return SendOutcome(code, reason, message_id)


_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def has_control_chars(text: str) -> bool:
    """Whether ``text`` holds an ASCII control character (refused in ids, keys and tags)."""
    return _CONTROL_CHARS.search(text) is not None
