"""PURE: the records of a transaction as RocketMQ writes them (STORE_FORMAT.md section 10).

Owns the half message (``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, REAL_TOPIC/REAL_QID, TRAN_MSG,
PGROUP, ``__transactionId__``, tx bits NOT), the committed copy (REAL_TOPIC/REAL_QID, tx bits
COMMIT, ``prepared_transaction_offset`` = the half's CommitLog offset, the half's properties
string as it is), the op marker (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body = the half's
queue offset), the check re-put and the discard copy, and the transaction id a producer is
given (the half's CommitLog and queue offsets, as the Java proxy's id carries them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rmq_spark.store.layout import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
)
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.properties import (
    PRODUCER_GROUP,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    WAIT,
    encode_properties,
    parse_properties,
)
from rmq_spark.store.put import PutRequest, order_properties, properties_text

__all__ = [
    "DISCARD_TOPIC",
    "HALF_QUEUE_ID",
    "HalfRef",
    "OP_TAG",
    "check_times",
    "commit_request",
    "discard_request",
    "half_properties",
    "op_offsets",
    "op_request",
    "parse_transaction_id",
    "renew_request",
    "transaction_id",
]

DISCARD_TOPIC = TRANS_CHECK_MAX_TIME_TOPIC  # a half checked transactionCheckMax times
HALF_QUEUE_ID = 0
OP_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG
_ID = re.compile(r"([0-9A-F]{16})([0-9A-F]{16})")


@dataclass(frozen=True, slots=True)
class HalfRef:
    """Where a half message is: its CommitLog offset and its queue offset in the half queue."""

    physical_offset: int
    queue_offset: int


def transaction_id(ref: HalfRef) -> str:
    """The id a producer is given for the half at ``ref`` (32 upper-case hex digits)."""
    return f"{ref.physical_offset:016X}{ref.queue_offset:016X}"


def parse_transaction_id(text: str) -> HalfRef | None:
    """The half a transaction id names; ``None`` when it is not one of ours."""
    match = _ID.fullmatch(text)
    if match is None:
        return None
    return HalfRef(int(match.group(1), 16), int(match.group(2), 16))


def half_properties(properties: dict[str, str], topic: str, queue_id: int, group: str) -> None:
    """Turn a send's properties into the half message's, in place (parseHalfMessageInner):
    TRAN_MSG and PGROUP as the client/proxy set them, the real topic and queue, and 5.1+'s
    ``__transactionId__`` = UNIQ_KEY."""
    properties[TRANSACTION_PREPARED] = "true"
    properties[PRODUCER_GROUP] = group
    properties[REAL_TOPIC] = topic
    properties[REAL_QID] = str(queue_id)
    properties[TRANSACTION_ID] = properties[UNIQ_KEY]


def commit_request(half: MessageRecord) -> PutRequest:
    """The committed copy of ``half`` (EndTransactionProcessor.endMessageTransaction): its
    properties string as stored (so TRAN_MSG, REAL_TOPIC, REAL_QID and PGROUP stay), tx bits
    COMMIT, ``prepared_transaction_offset`` = the half's CommitLog offset. Idempotent on
    (real topic, UNIQ_KEY): a commit retried after a crash is stored once."""
    props = parse_properties(half.properties)
    return PutRequest(
        topic=props[REAL_TOPIC],
        queue_id=int(props[REAL_QID]),
        body=half.body,
        flag=half.flag,
        sys_flag=(half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.physical_offset,
        raw_properties=half.properties,
        idempotent=True,
    )


_OP_PROPERTIES = encode_properties(
    {k: {WAIT: "true", TAGS: OP_TAG}[k] for k in order_properties({WAIT: "", TAGS: ""})}
)


def op_request(half_queue_offset: int, broker_host: HostAddress) -> PutRequest:
    """The op ("remove") marker of the half at ``half_queue_offset``: tag ``d``, WAIT=true, no
    UNIQ_KEY; the body is the decimal queue offset (4.x form, which 5.x readers parse too)."""
    return PutRequest(
        topic=RMQ_SYS_TRANS_OP_HALF_TOPIC,
        queue_id=HALF_QUEUE_ID,
        body=str(half_queue_offset).encode("ascii"),
        born_host=broker_host,
        raw_properties=_OP_PROPERTIES,
    )


def op_offsets(body: bytes) -> list[int]:
    """The half queue offsets an op body names: ``"12"`` (4.x) or ``"12,13,"`` (5.1+)."""
    found = []
    for piece in body.decode("ascii", "replace").split(","):
        piece = piece.strip()
        if piece.isdigit():
            found.append(int(piece))
    return found


def check_times(half: MessageRecord) -> int:
    """How often ``half`` was checked (TRANSACTION_CHECK_TIMES; absent or bad: 0)."""
    value = parse_properties(half.properties).get(TRANSACTION_CHECK_TIMES, "")
    return int(value) if value.isdigit() else 0


def _copy(half: MessageRecord, topic: str, properties: str, idempotent: bool) -> PutRequest:
    return PutRequest(
        topic=topic,
        queue_id=HALF_QUEUE_ID,
        body=half.body,
        flag=half.flag,
        sys_flag=half.sys_flag,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        raw_properties=properties,
        idempotent=idempotent,
    )


def renew_request(half: MessageRecord, times: int) -> PutRequest:
    """The check's re-put of ``half`` (renewHalfMessageInner) with TRANSACTION_CHECK_TIMES =
    ``times``, its properties string regenerated."""
    props = parse_properties(half.properties)
    props[TRANSACTION_CHECK_TIMES] = str(times)
    text = properties_text(props)
    return _copy(half, RMQ_SYS_TRANS_HALF_TOPIC, text, idempotent=False)


def discard_request(half: MessageRecord) -> PutRequest:
    """The copy of a half checked too often, kept in ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0;
    idempotent on (discard topic, UNIQ_KEY)."""
    return _copy(half, DISCARD_TOPIC, half.properties, idempotent=True)
