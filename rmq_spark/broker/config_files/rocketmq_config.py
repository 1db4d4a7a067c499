"""PURE: the text of RocketMQ's broker config files under ``<store>/config/`` (5.3.3).

Owns encoding and decoding, in the fastjson dialect a 5.x broker writes
(``ConfigManager.persist`` -> ``encode(true)``: tabs, bean fields sorted by name, integer map
keys unquoted and on one line), of:

* ``topics.json``: ``TopicConfigSerializeWrapper`` (``topicConfigTable`` + ``dataVersion``);
* ``subscriptionGroup.json``: ``SubscriptionGroupManager`` (``subscriptionGroupTable``,
  ``forbiddenTable``, ``dataVersion``);
* ``consumerOffset.json``: ``ConsumerOffsetManager`` (``offsetTable`` ``"topic@group"`` ->
  queue -> offset, the derived ``groupTopicMap``, ``dataVersion``);
* ``delayOffset.json``: ``DelayOffsetSerializeWrapper`` (level -> offset; the schedule job's
  mirror of its journal, ``rmq_spark.delay.progress``).

Fields a broker wrote that we do not model (a group's ``consumeTimeoutMinute``, a topic's
``attributes``) are kept in ``extra`` and written back unchanged. The samples in
``tests/unit/rocketmq_reference/config/`` were written by the broker's own classes. Decoding
raises ``StoreMetadataError`` naming the file. Does not own files (``rocketmq_config_files.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rmq_spark.broker.fastjson import FastjsonError, parse_fastjson
from rmq_spark.errors import StoreMetadataError

__all__ = [
    "DataVersion",
    "GroupSettings",
    "PERM_READ",
    "PERM_WRITE",
    "TopicConfig",
    "decode_consumer_offsets",
    "decode_delay_offsets",
    "decode_subscription_groups",
    "decode_topics",
    "encode_consumer_offsets",
    "encode_delay_offsets",
    "encode_subscription_groups",
    "encode_topics",
]

PERM_READ, PERM_WRITE = 4, 2  # PermName
_EMPTY: Mapping[str, Any] = MappingProxyType({})
# SubscriptionGroupConfig's fields and defaults, as a 5.3.3 broker writes a new group.
_GROUP_DEFAULTS: dict[str, Any] = {
    "attributes": {},
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeMessageOrderly": False,
    "consumeTimeoutMinute": 15,
    "groupRetryPolicy": {"type": "CUSTOMIZED"},
    "groupSysFlag": 0,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's ``DataVersion``: a counter bumped on every change, with its time."""

    counter: int = 0
    state_version: int = 0
    timestamp_ms: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(self.counter + 1, self.state_version, now_ms)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One ``topicConfigTable`` entry (``TopicConfig``); perm 6 is read and write."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)  # attributes, ...


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """What the broker needs of a ``SubscriptionGroupConfig``: ``retryMaxTimes``,
    ``consumeMessageOrderly`` (a FIFO group) and ``consumeEnable``."""

    retry_max_times: int = 16
    fifo: bool = False
    consume_enable: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)  # other fields, kept


# --- the fastjson dialect ---------------------------------------------------------------------


def _fastjson(value: Any, depth: int = 0) -> str:
    """``JSON.toJSONString(value, true)`` for dicts, lists, strings, numbers and booleans."""
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner, outer = "\t" * (depth + 1), "\t" * depth
        if all(isinstance(key, int) for key in value):
            # fastjson writes no line break before a non-string key
            pairs = ",".join(f"{key}:{_fastjson(item)}" for key, item in value.items())
            return f"{{{pairs}\n{outer}}}"
        pairs = ",\n".join(
            f"{inner}{json.dumps(str(key), ensure_ascii=False)}:{_fastjson(item, depth + 1)}"
            for key, item in value.items()
        )
        return f"{{\n{pairs}\n{outer}}}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_fastjson(item, depth) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        document = parse_fastjson(text)
    except FastjsonError as err:
        raise StoreMetadataError(source, f"not JSON: {err}") from None
    if not isinstance(document, dict):
        raise StoreMetadataError(source, "expected a JSON object")
    return document


def _int(value: Any, source: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise StoreMetadataError(source, f"{what}: expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise StoreMetadataError(source, f"{what}: expected an integer, got {value!r}") from None


def _table(document: Mapping[str, Any], key: str, source: str) -> dict[Any, Any]:
    table = document.get(key, {})
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise StoreMetadataError(source, f"{key}: expected an object, got {table!r}")
    return table


def _version_doc(version: DataVersion) -> dict[str, int]:
    return {
        "counter": version.counter,
        "stateVersion": version.state_version,
        "timestamp": version.timestamp_ms,
    }


def _decode_version(document: Mapping[str, Any], source: str) -> DataVersion | None:
    raw = document.get("dataVersion")
    if not isinstance(raw, dict):
        return None
    return DataVersion(
        _int(raw.get("counter", 0), source, "dataVersion.counter"),
        _int(raw.get("stateVersion", 0), source, "dataVersion.stateVersion"),
        _int(raw.get("timestamp", 0), source, "dataVersion.timestamp"),
    )


def _document(version: DataVersion | None, **tables: Any) -> str:
    document: dict[str, Any] = {}
    if version is not None:
        document["dataVersion"] = _version_doc(version)
    document.update(tables)
    return _fastjson(dict(sorted(document.items())))


def _sorted(mapping: Mapping[Any, Any]) -> Iterator[tuple[Any, Any]]:
    return iter(sorted(mapping.items()))


# --- topics.json ------------------------------------------------------------------------------


def encode_topics(topics: Mapping[str, TopicConfig], version: DataVersion | None = None) -> str:
    """``topics.json`` text for ``topics`` (topic name -> config)."""
    table = {}
    for name, config in _sorted(topics):
        entry = dict(config.extra)
        entry.setdefault("attributes", {})
        entry.update(
            order=config.order,
            perm=config.perm,
            readQueueNums=config.read_queue_nums,
            topicFilterType=config.topic_filter_type,
            topicName=config.topic_name,
            topicSysFlag=config.topic_sys_flag,
            writeQueueNums=config.write_queue_nums,
        )
        table[name] = dict(sorted(entry.items()))
    return _document(version, topicConfigTable=table)


def decode_topics(
    text: str, source: str = "topics.json"
) -> tuple[dict[str, TopicConfig], DataVersion | None]:
    """Topic name -> config, and the data version, from ``topics.json`` text."""
    document = _load(text, source)
    topics = {}
    for name, raw in _table(document, "topicConfigTable", source).items():
        if not isinstance(raw, dict):
            raise StoreMetadataError(source, f"topicConfigTable[{name!r}]: expected an object")
        where = f"topicConfigTable[{name!r}]"
        modelled = {"topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType"}
        modelled |= {"topicSysFlag", "order"}
        topics[name] = TopicConfig(
            topic_name=str(raw.get("topicName", name)),
            read_queue_nums=_int(raw.get("readQueueNums", 16), source, f"{where}.readQueueNums"),
            write_queue_nums=_int(raw.get("writeQueueNums", 16), source, f"{where}.writeQueueNums"),
            perm=_int(raw.get("perm", PERM_READ | PERM_WRITE), source, f"{where}.perm"),
            topic_filter_type=str(raw.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=_int(raw.get("topicSysFlag", 0), source, f"{where}.topicSysFlag"),
            order=raw.get("order") is True,
            extra={key: value for key, value in raw.items() if key not in modelled},
        )
    return topics, _decode_version(document, source)


# --- subscriptionGroup.json -------------------------------------------------------------------


def encode_subscription_groups(
    groups: Mapping[str, GroupSettings],
    version: DataVersion | None = None,
    forbidden_table: Mapping[str, Any] = _EMPTY,
) -> str:
    """``subscriptionGroup.json`` text for ``groups`` (group name -> settings)."""
    table = {}
    for name, settings in _sorted(groups):
        entry = {**_GROUP_DEFAULTS, **settings.extra}
        entry.update(
            consumeEnable=settings.consume_enable,
            consumeMessageOrderly=settings.fifo,
            groupName=name,
            retryMaxTimes=settings.retry_max_times,
        )
        table[name] = dict(sorted(entry.items()))
    return _document(version, forbiddenTable=dict(forbidden_table), subscriptionGroupTable=table)


def decode_subscription_groups(
    text: str, source: str = "subscriptionGroup.json"
) -> tuple[dict[str, GroupSettings], DataVersion | None, dict[str, Any]]:
    """Group name -> settings, the data version and the ``forbiddenTable`` (kept as is)."""
    document = _load(text, source)
    groups = {}
    for name, raw in _table(document, "subscriptionGroupTable", source).items():
        if not isinstance(raw, dict):
            raise StoreMetadataError(source, f"subscriptionGroupTable[{name!r}]: not an object")
        where = f"subscriptionGroupTable[{name!r}]"
        modelled = {"groupName", "retryMaxTimes", "consumeMessageOrderly", "consumeEnable"}
        groups[name] = GroupSettings(
            retry_max_times=_int(raw.get("retryMaxTimes", 16), source, f"{where}.retryMaxTimes"),
            fifo=raw.get("consumeMessageOrderly") is True,
            consume_enable=raw.get("consumeEnable", True) is not False,
            extra={key: value for key, value in raw.items() if key not in modelled},
        )
    forbidden = _table(document, "forbiddenTable", source)
    return groups, _decode_version(document, source), forbidden


# --- consumerOffset.json ----------------------------------------------------------------------


def encode_consumer_offsets(
    table: Mapping[tuple[str, str], Mapping[int, int]], version: DataVersion | None = None
) -> str:
    """``consumerOffset.json`` text: ``(topic, group)`` -> queue id -> next offset to consume."""
    offsets: dict[str, dict[int, int]] = {}
    topics_of_group: dict[str, list[str]] = {}
    for (topic, group), queues in _sorted(table):
        if "@" in topic or "@" in group:
            raise ValueError(f"topic {topic!r} or group {group!r} contains '@'")
        offsets[f"{topic}@{group}"] = dict(_sorted(queues))
        topics_of_group.setdefault(group, []).append(topic)
    return _document(version, groupTopicMap=dict(_sorted(topics_of_group)), offsetTable=offsets)


def decode_consumer_offsets(
    text: str, source: str = "consumerOffset.json"
) -> tuple[dict[tuple[str, str], dict[int, int]], DataVersion | None]:
    """``(topic, group)`` -> queue id -> offset, and the data version."""
    document = _load(text, source)
    table: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in _table(document, "offsetTable", source).items():
        topic, separator, group = str(key).partition("@")
        if not separator or not topic or not group:
            raise StoreMetadataError(source, f"offsetTable key {key!r} is not topic@group")
        if not isinstance(queues, dict):
            raise StoreMetadataError(source, f"offsetTable[{key!r}]: expected an object")
        table[(topic, group)] = {
            _int(queue, source, f"offsetTable[{key!r}] key"): _int(
                offset, source, f"offsetTable[{key!r}][{queue}]"
            )
            for queue, offset in queues.items()
        }
    return table, _decode_version(document, source)


# --- delayOffset.json -------------------------------------------------------------------------


def encode_delay_offsets(table: Mapping[int, int], version: DataVersion | None = None) -> str:
    """``delayOffset.json`` text: delay level -> next queue offset of ``SCHEDULE_TOPIC_XXXX``."""
    return _document(version, offsetTable=dict(_sorted(table)))


def decode_delay_offsets(
    text: str, source: str = "delayOffset.json"
) -> tuple[dict[int, int], DataVersion | None]:
    """Delay level -> offset, and the data version."""
    document = _load(text, source)
    table = {
        _int(level, source, "offsetTable key"): _int(offset, source, f"offsetTable[{level}]")
        for level, offset in _table(document, "offsetTable", source).items()
    }
    return table, _decode_version(document, source)
