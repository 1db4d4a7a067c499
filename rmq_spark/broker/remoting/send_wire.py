"""PURE: a 4.x producer's send out of its wire form: header fields, properties, batch body.

``commands_of`` turns one SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request into the
``SendCommand``s of the one send path (REMOTING_PROTOCOL.md 4.1, 4.2): V1 names or V2's short
keys; the message properties RocketMQ keeps in the properties string (``UNIQ_KEY``, ``TAGS``,
``KEYS``, ``DELAY``, ``TIMER_*``) become the command's typed fields, ``WAIT`` is dropped (every
send is acknowledged once stored under the store's flush policy), the rest stay user
properties (a reserved one is then refused by the shared validation); a zlib-compressed body
(sysFlag bit 0, bodies over 4 KiB from 4.x clients) is stored uncompressed, bounded by the
broker's body limit; a transaction's half message (``TRAN_MSG`` or sysFlag 0x4) is a
``TRANSACTION`` command of its ``PGROUP`` (the header's producerGroup when absent).
``WireError`` says what is malformed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from rmq_spark.broker.remoting.calls import Call, HeaderError
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.send_model import MessageKind, SendCommand
from rmq_spark.store.message import HostAddress
from rmq_spark.store.properties import (
    KEYS,
    TAGS,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    parse_properties,
)

__all__ = ["WireError", "commands_of"]

_COMPRESSED = 0x1
_TRANSACTION_PREPARED = 0x4
_COMPRESSION_TYPE_MASK = 0x700  # 5.x: bits 8-10; 0 is zlib (what 4.x clients write)
_BLOCK_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN
_DROPPED = frozenset({"WAIT"})


class WireError(HeaderError):
    """A send whose header, properties or body is malformed: MESSAGE_ILLEGAL and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ResponseCode.MESSAGE_ILLEGAL)


def commands_of(
    call: Call, now_ms: int, body_max: int, new_id: Callable[[], str]
) -> tuple[str, int | None, list[SendCommand]]:
    """(topic, queue id or ``None``, commands) of a send request; ``new_id`` names a message
    that has no ``UNIQ_KEY`` (a 5.x broker adds one too)."""
    topic = call.required("topic", "b")
    queue_id = call.int_field("queueId", "e", default=-1)
    sys_flag = call.int_field("sysFlag", "f", default=0)
    born_ms = call.int_field("bornTimestamp", "g", default=0)
    header_properties = parse_properties(call.field("properties", "i") or "")
    link = call.link
    try:
        born_host: HostAddress | None = HostAddress(link.peer_host, link.peer_port)
    except ValueError:
        born_host = None
    base = _Base(topic, None if queue_id < 0 else queue_id, born_ms, born_host, now_ms, new_id)
    base.group = call.field("producerGroup", "a")
    if call.code == RequestCode.SEND_BATCH_MESSAGE:
        if sys_flag & _COMPRESSED:
            raise WireError("a batch body cannot be compressed")
        messages = [
            base.command(body, properties, sys_flag)
            for body, properties in _batch_blocks(call.command.body)
        ]
        if not messages:
            raise WireError("the batch holds no message")
        return topic, base.queue_id, messages
    body = call.command.body
    if sys_flag & _COMPRESSED:
        body = _inflate(body, sys_flag, body_max)
    return topic, base.queue_id, [base.command(body, header_properties, sys_flag)]


class _Base:
    """What every message of one request shares."""

    def __init__(
        self,
        topic: str,
        queue_id: int | None,
        born_ms: int,
        born_host: HostAddress | None,
        now_ms: int,
        new_id: Callable[[], str],
    ) -> None:
        self.topic, self.queue_id, self.born_ms = topic, queue_id, born_ms
        self.born_host, self.now_ms, self.new_id = born_host, now_ms, new_id
        self.group: str | None = None  # the header's producerGroup

    def command(self, body: bytes, properties: dict[str, str], sys_flag: int) -> SendCommand:
        props = dict(properties)
        for key in _DROPPED:
            props.pop(key, None)
        tag = props.pop(TAGS, None)
        keys = tuple(props.pop(KEYS, "").split())
        message_id = props.pop(UNIQ_KEY, None) or self.new_id()
        delay_level = _int_property(props.pop("DELAY", None), "DELAY")
        delivery = self._delivery_ms(props)
        transaction = props.pop("TRAN_MSG", "").lower() == "true"
        kind, group = MessageKind.UNSPECIFIED, None
        if transaction or sys_flag & _TRANSACTION_PREPARED:
            kind, group = MessageKind.TRANSACTION, props.pop("PGROUP", None) or self.group
        return SendCommand(
            topic=self.topic,
            body=body,
            message_id=message_id,
            kind=kind,
            tag=tag,
            keys=keys,
            user_properties=props,
            delivery_timestamp_ms=delivery,
            born_timestamp_ms=self.born_ms,
            born_host=self.born_host,
            delay_level=delay_level if delay_level else None,  # "0": no delay
            queue_id=self.queue_id,
            producer_group=group,
        )

    def _delivery_ms(self, props: dict[str, str]) -> int | None:
        """TIMER_DELIVER_MS, or TIMER_DELAY_SEC / TIMER_DELAY_MS from now (RocketMQ 5's keys)."""
        deliver = _int_property(props.pop(TIMER_DELIVER_MS, None), TIMER_DELIVER_MS)
        delay_s = _int_property(props.pop("TIMER_DELAY_SEC", None), "TIMER_DELAY_SEC")
        delay_ms = _int_property(props.pop("TIMER_DELAY_MS", None), "TIMER_DELAY_MS")
        if deliver is not None:
            return deliver
        if delay_s is not None:
            return self.now_ms + delay_s * 1000
        if delay_ms is not None:
            return self.now_ms + delay_ms
        return None


def _int_property(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip(), 10)
    except ValueError:
        raise WireError(f"property {name} is not an integer: {value[:40]!r}") from None
    if not -(2**63) <= number < 2**63:
        raise WireError(f"property {name} is out of range: {value[:40]!r}")
    return number


def _inflate(body: bytes, sys_flag: int, body_max: int) -> bytes:
    if sys_flag & _COMPRESSION_TYPE_MASK:
        kind = (sys_flag & _COMPRESSION_TYPE_MASK) >> 8
        raise WireError(f"compression type {kind} is not supported (zlib only)")
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, body_max + 1)
    except zlib.error as err:
        raise WireError(f"the compressed body does not inflate: {err}") from None
    if len(plain) > body_max or inflater.unconsumed_tail:
        raise WireError(f"the body inflates past the limit of {body_max} bytes")
    if not inflater.eof:
        raise WireError("the compressed body is truncated")
    return plain


def _batch_blocks(body: bytes) -> list[tuple[bytes, dict[str, str]]]:
    """The (body, properties) of each block of a batch body (``MessageDecoder#encodeMessage``)."""
    blocks: list[tuple[bytes, dict[str, str]]] = []
    view, position = memoryview(body), 0
    while position < len(view):
        if position + _BLOCK_HEAD.size > len(view):
            raise WireError(f"batch block at byte {position} is cut short")
        total, _magic, _crc, _flag, body_length = _BLOCK_HEAD.unpack_from(view, position)
        end = position + total
        start = position + _BLOCK_HEAD.size
        if total < _BLOCK_HEAD.size + 2 or end > len(view) or body_length < 0:
            raise WireError(f"batch block at byte {position} has a bad size {total}")
        if start + body_length + 2 > end:
            raise WireError(f"batch block at byte {position}: its body runs past the block")
        message_body = bytes(view[start : start + body_length])
        (props_length,) = struct.unpack_from(">h", view, start + body_length)
        props_start = start + body_length + 2
        if props_length < 0 or props_start + props_length != end:
            raise WireError(f"batch block at byte {position}: bad properties length")
        try:
            text = bytes(view[props_start:end]).decode()
        except UnicodeDecodeError:
            raise WireError(f"batch block at byte {position}: properties not UTF-8") from None
        blocks.append((message_body, parse_properties(text)))
        position = end
    return blocks
