"""The broker's rules for one send: whether it may be stored, and what the stored message
carries.

Owns the validation of a ``SendCommand`` and the refusal it answers (RocketMQ 5 proxy and
broker checks: message id, body size, message type against group and delivery time, tag,
keys, message group, user properties), the properties a record carries (TAGS, KEYS,
UNIQ_KEY, CLUSTER, user properties, ``__SHARDINGKEY``) and the timer transform of delayed
messages (docs/DELAY.md: ``rmq_sys_wheel_timer`` queue 0 with TIMER_OUT_MS). Functions of
their arguments: ``BrokerService`` passes its config, limits and the clock's time in.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.send_model import (
    BORN_HOST,
    DELIVERY_MS_MAX,
    RESERVED_PROPERTY_KEYS,
    TRACE_CONTEXT,
    MessageKind,
    SendCode,
    SendCommand,
    SendOutcome,
    has_control_chars,
    reject,
)
from rmq_spark.store.properties import (
    CLUSTER,
    KEYS,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
)

__all__ = ["message_properties", "timer_transform", "validate_send"]

_MESSAGE_ID_LENGTH_MAX = 128
_KEY_LENGTH_MAX = 128 * 1024


def validate_send(
    command: SendCommand,
    cfg: BrokerConfig,
    max_message_size_bytes: int,
    delay_level_max: int,
) -> SendOutcome | None:
    """``None`` when ``command`` may be sent, else the refusal (``BrokerService.validate``):
    the first broken rule, checked in this order: id and body, type, fields, user properties."""
    return (
        _check_id_and_body(command, max_message_size_bytes)
        or _check_type(command, delay_level_max)
        or _check_fields(command, cfg)
        or _validate_user_properties(command.user_properties, command.message_id, cfg)
    )


def _check_id_and_body(command: SendCommand, max_message_size_bytes: int) -> SendOutcome | None:
    mid = command.message_id
    if not mid or len(mid) > _MESSAGE_ID_LENGTH_MAX or has_control_chars(mid):
        return reject(SendCode.ILLEGAL_MESSAGE_ID, f"bad message id {mid!r}", mid)
    if not command.body:
        return reject(SendCode.MESSAGE_BODY_EMPTY, "message body is empty", mid)
    if len(command.body) > max_message_size_bytes:
        return reject(
            SendCode.MESSAGE_BODY_TOO_LARGE,
            f"message body is {len(command.body)} bytes, the limit is {max_message_size_bytes}",
            mid,
        )
    return None


def _check_type(command: SendCommand, delay_level_max: int) -> SendOutcome | None:
    """The message type against its group, delivery time and delay level."""
    mid, kind = command.message_id, command.kind
    if kind in (MessageKind.LITE, MessageKind.PRIORITY):
        return reject(
            SendCode.UNSUPPORTED, f"{kind.name} messages are not supported by this broker", mid
        )
    has_group = command.message_group is not None
    has_delay = command.delivery_timestamp_ms is not None
    if command.delay_level is not None:
        if not 1 <= command.delay_level <= delay_level_max:
            return reject(
                SendCode.BAD_REQUEST,
                f"delay_level must be in [1, {delay_level_max}], got {command.delay_level}",
                mid,
            )
        if has_group or has_delay:
            return reject(
                SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "delay_level cannot be combined with message_group or delivery_timestamp_ms",
                mid,
            )
    if has_delay and not 0 <= (command.delivery_timestamp_ms or 0) <= DELIVERY_MS_MAX:
        return reject(
            SendCode.ILLEGAL_DELIVERY_TIME,
            f"delivery time {command.delivery_timestamp_ms} ms is outside "
            f"[0, {DELIVERY_MS_MAX}] (1970 to 9999)",
            mid,
        )
    conflict = (
        (kind is MessageKind.NORMAL and (has_group or has_delay))
        or (kind is MessageKind.FIFO and not has_group)
        or (kind is MessageKind.DELAY and not has_delay)
        or (kind is MessageKind.TRANSACTION and (has_group or has_delay))
        or (kind is MessageKind.TRANSACTION and command.delay_level is not None)
        or (has_group and has_delay)
    )
    if conflict:
        return reject(
            SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"message type {kind.name} conflicts with "
            f"message_group={command.message_group!r}, "
            f"delivery_timestamp_ms={command.delivery_timestamp_ms!r}",
            mid,
        )
    return None


def _check_fields(command: SendCommand, cfg: BrokerConfig) -> SendOutcome | None:
    """Tag, keys and message group."""
    mid = command.message_id
    if command.tag is not None and (
        not command.tag.strip() or "|" in command.tag or has_control_chars(command.tag)
    ):
        return reject(SendCode.ILLEGAL_MESSAGE_TAG, f"bad tag {command.tag!r}", mid)
    for key in command.keys:
        if not key.strip() or has_control_chars(key) or len(key) > _KEY_LENGTH_MAX:
            return reject(SendCode.ILLEGAL_MESSAGE_KEY, f"bad message key {key!r}", mid)
    if command.message_group is not None:
        group = command.message_group or ""
        if (
            not group.strip()
            or has_control_chars(group)
            or len(group) > cfg.message_group_length_max
        ):
            return reject(
                SendCode.ILLEGAL_MESSAGE_GROUP,
                f"bad message group {group[:80]!r} (1 to {cfg.message_group_length_max} "
                "characters, no control characters)",
                mid,
            )
    return None


def _validate_user_properties(
    properties: Mapping[str, str], mid: str, cfg: BrokerConfig
) -> SendOutcome | None:
    if len(properties) > cfg.user_property_count_max:
        return reject(
            SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(properties)} user properties, the limit is {cfg.user_property_count_max}",
            mid,
        )
    size_bytes = 0
    for key, value in properties.items():
        if not key or has_control_chars(key) or key in RESERVED_PROPERTY_KEYS:
            return reject(
                SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property key {key!r} is empty, reserved or has control characters",
                mid,
            )
        if has_control_chars(value):
            return reject(
                SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {key!r} has control characters in its value",
                mid,
            )
        size_bytes += len(key.encode("utf-8")) + len(value.encode("utf-8"))
    if size_bytes > cfg.user_properties_size_bytes_max:
        return reject(
            SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties take {size_bytes} bytes, "
            f"the limit is {cfg.user_properties_size_bytes_max}",
            mid,
        )
    return None


def message_properties(command: SendCommand, cluster_name: str) -> dict[str, str]:
    """The properties the stored record of ``command`` carries (before any timer transform)."""
    properties = {key: value for key, value in command.user_properties.items() if value}
    if command.tag is not None:
        properties[TAGS] = command.tag
    if command.keys:
        properties[KEYS] = " ".join(command.keys)
    properties[UNIQ_KEY] = command.message_id
    if command.message_group is not None:
        properties[SHARDING_KEY] = command.message_group
    if command.delivery_timestamp_ms is not None:
        properties[TIMER_DELIVER_MS] = str(command.delivery_timestamp_ms)
    if command.born_host_text and not has_control_chars(command.born_host_text):
        properties[BORN_HOST] = command.born_host_text
    if command.trace_context and not has_control_chars(command.trace_context):
        properties[TRACE_CONTEXT] = command.trace_context
    properties[CLUSTER] = cluster_name
    return properties


def timer_transform(
    deliver_ms: int, properties: dict[str, str], now_ms: int, cfg: BrokerConfig
) -> bool | SendOutcome:
    """HookUtils.transformTimerMessage: True when the message must wait in the timer topic.

    A delivery time already past is stored in the real topic at once (as RocketMQ does).
    """
    if deliver_ms <= now_ms:
        return False
    if deliver_ms - now_ms > cfg.delay_ms_max:
        return reject(
            SendCode.ILLEGAL_DELIVERY_TIME,
            f"delivery time {deliver_ms} is {deliver_ms - now_ms} ms ahead, "
            f"the limit is {cfg.delay_ms_max} ms",
            properties[UNIQ_KEY],
        )
    precision_ms = cfg.timer_precision_ms
    # RocketMQ rounds down to the wheel's precision, and an exact multiple one step down.
    if deliver_ms % precision_ms == 0:
        out_ms = deliver_ms - precision_ms
    else:
        out_ms = deliver_ms // precision_ms * precision_ms
    properties[TIMER_OUT_MS] = str(out_ms)
    return True
