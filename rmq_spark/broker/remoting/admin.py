"""mqadmin's broker calls: runtime info, config, the topic table, topic stats, look-ups by key
and by offset message id, topic creation (REMOTING_PROTOCOL.md 6, 5.7, 7).

Every answer is read from what the broker holds: the store (``BrokerStore``: offsets, records,
its ``index/`` files), the topic table (``TopicTable``) and the send counters
(``TrafficStats``). JSON bodies are fastjson's form (compact, keys sorted; ``MessageQueue``
keys as raw objects, 1.9). The permissions table makes all of them but QUERY_MESSAGE and
GET_TOPIC_STATS_INFO (``Sub`` on the topic) super-user calls when auth is on.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

from rmq_spark.broker.config_files.rocketmq_config import DataVersion, encode_topics
from rmq_spark.broker.remoting.calls import Call, Deps, Handler, HeaderError
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.namesrv_api import BrokerIdentity, registered_topics
from rmq_spark.broker.topics import topic_name_problem
from rmq_spark.errors import RmqError
from rmq_spark.store.index_files import IndexFiles
from rmq_spark.store.properties import KEYS, UNIQ_KEY, parse_properties
from rmq_spark.store.record_encode import encode_record

__all__ = ["handlers"]

_VERSION_DESC, _VERSION = "V5_3_3", "479"
_QUERY_MAX = 64  # RocketMQ's maxMsgsNumBatch


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def handlers(deps: Deps) -> dict[int, Handler]:
    """mqadmin's broker codes over ``deps``."""
    admin = _Admin(deps)
    return {
        RequestCode.GET_BROKER_RUNTIME_INFO: admin.runtime_info,
        RequestCode.GET_BROKER_CONFIG: admin.broker_config,
        RequestCode.GET_ALL_TOPIC_CONFIG: admin.all_topic_config,
        RequestCode.GET_TOPIC_CONFIG: admin.topic_config,
        RequestCode.UPDATE_AND_CREATE_TOPIC: admin.create_topic,
        RequestCode.GET_TOPIC_STATS_INFO: admin.topic_stats,
        RequestCode.QUERY_MESSAGE: admin.query_message,
        RequestCode.VIEW_MESSAGE_BY_ID: admin.view_message,
    }


class _Admin:
    def __init__(self, deps: Deps) -> None:
        self._deps = deps
        self._store = deps.store
        self._service = deps.service
        self._boot_ms = int(time.time() * 1000)

    def _identity(self) -> BrokerIdentity:
        config = self._deps.config
        addr = self._deps.broker_addr
        return BrokerIdentity(config.cluster_name, config.broker_name, addr, addr)

    def _version(self) -> DataVersion:
        return DataVersion(len(self._service.topics.snapshot()), 0, self._boot_ms)

    async def runtime_info(self, call: Call) -> RemotingCommand:
        store = self._store
        puts = self._service.traffic.snapshot()
        put_total = sum(count for count, _ in puts.puts.values())
        got_total = sum(puts.received.values())
        usage = shutil.disk_usage(store.root_dir)
        table = {
            "brokerVersionDesc": _VERSION_DESC,
            "brokerVersion": _VERSION,
            "brokerActive": "true",
            "bootTimestamp": str(self._boot_ms),
            "msgPutTotalTodayNow": str(put_total),
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalYesterdayMorning": "0",
            "msgGetTotalTodayNow": str(got_total),
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalYesterdayMorning": "0",
            "putTps": "0.0 0.0 0.0",
            "getTransferredTps": "0.0 0.0 0.0",
            "earliestMessageTimeStamp": str(self._earliest_ms()),
            "commitLogDiskRatio": f"{usage.used / usage.total:.4f}" if usage.total else "0.0",
            "commitLogMinOffset": str(store.min_offset),
            "commitLogMaxOffset": str(store.flushed_offset),
            "dispatchBehindBytes": "0",
            "pageCacheLockTimeMills": "0",
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
        }
        return call.reply(body=_json({"table": table}))

    def _earliest_ms(self) -> int:
        store = self._store
        if store.flushed_offset <= store.min_offset:
            return 0
        try:
            return store.read(store.min_offset).store_timestamp_ms
        except RmqError:
            return 0

    async def broker_config(self, call: Call) -> RemotingCommand:
        config = self._deps.config
        lines = [
            f"{field.name}={getattr(config, field.name)}"
            for field in dataclasses.fields(config)
            if not isinstance(getattr(config, field.name), (list, tuple, dict))
        ]
        lines += [f"brokerName={config.broker_name}", f"brokerClusterName={config.cluster_name}"]
        # RocketMQ's name for the store root; the Spark source's cluster discovery reads it
        lines.append(f"storePathRootDir={Path(self._store.root_dir).resolve()}")
        version = self._version()
        header = {
            "version": _json(
                {"counter": version.counter, "stateVersion": 0, "timestamp": version.timestamp_ms}
            ).decode()
        }
        return call.reply(ext_fields=header, body="\n".join(sorted(lines)).encode() + b"\n")

    def _topics(self) -> dict[str, Any]:
        return registered_topics(self._service.topics.snapshot(), self._identity())

    async def all_topic_config(self, call: Call) -> RemotingCommand:
        return call.reply(body=encode_topics(self._topics(), self._version()).encode())

    async def topic_config(self, call: Call) -> RemotingCommand:
        topic = call.required("topic")
        config = self._topics().get(topic)
        if config is None:
            return call.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        table = json.loads(encode_topics({topic: config}))["topicConfigTable"][topic]
        return call.reply(body=_json(table))

    async def create_topic(self, call: Call) -> RemotingCommand:
        topic = call.required("topic")
        problem = topic_name_problem(topic)
        if problem is not None:
            return call.reply(ResponseCode.INVALID_PARAMETER, problem)
        reads = call.int_field("readQueueNums", default=8)
        writes = call.int_field("writeQueueNums", default=8)
        count = max(reads, writes)
        if not 1 <= count <= 1024:
            raise HeaderError(f"queue counts must be in [1, 1024], got {reads}/{writes}")
        existing = self._service.topics.snapshot().get(topic)
        if existing is not None and existing != count:
            return call.reply(
                ResponseCode.SYSTEM_ERROR,
                f"topic {topic} has {existing} queues; changing a topic's queues is not supported",
            )
        self._service.topics.add_internal(topic, count)  # topics.json, then registration
        return call.reply()

    async def topic_stats(self, call: Call) -> RemotingCommand:
        topic = call.required("topic")
        count = self._service.topics.snapshot().get(topic)
        if count is None:
            return call.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        queues = self._store.consume_queues
        broker = self._deps.config.broker_name
        entries = []
        for queue_id in range(count):
            low, high = queues.min_offset(topic, queue_id), queues.max_offset(topic, queue_id)
            key = _json({"brokerName": broker, "queueId": queue_id, "topic": topic}).decode()
            value = {"lastUpdateTimestamp": self._last_update(topic, queue_id, high),
                     "maxOffset": high, "minOffset": low}  # fmt: skip
            entries.append(f"{key}:{_json(value).decode()}")
        return call.reply(body=('{"offsetTable":{' + ",".join(entries) + "}}").encode())

    def _last_update(self, topic: str, queue_id: int, high: int) -> int:
        if high <= 0:
            return 0
        units = self._store.consume_queues.units(topic, queue_id, high - 1, 1)
        if not units:
            return 0
        try:
            return self._store.read(units[0].physical_offset).store_timestamp_ms
        except RmqError:
            return 0

    async def query_message(self, call: Call) -> RemotingCommand:
        topic, key = call.required("topic"), call.required("key")
        max_num = min(call.int_field("maxNum", default=_QUERY_MAX), _QUERY_MAX)
        begin = call.int_field("beginTimestamp", default=0)
        end = call.int_field("endTimestamp", default=(1 << 63) - 1)
        unique = call.bool_field("_UNIQUE_KEY_QUERY")
        records = []
        for offset in sorted(set(self._index_query(topic, key, max_num, begin, end))):
            try:
                record = self._store.read(offset)
            except RmqError:
                continue  # deleted by retention, or a hash collision past the end
            props = parse_properties(record.properties)
            wanted = props.get(UNIQ_KEY) == key if unique else key in props.get(KEYS, "").split()
            if record.topic == topic and wanted:
                records.append(encode_record(record))
        if not records:
            return call.reply(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct"
            )
        header = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
        return call.reply(ext_fields=header, body=b"".join(records))

    def _index_query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        config = self._store.config
        index = IndexFiles.load(
            self._store.root_dir, config.index_hash_slots, config.index_entries,
            lambda _stamp: None, lambda: int(time.time() * 1000), read_only=True,
        )  # fmt: skip
        try:
            return index.query(topic, key, max_num, begin, end)
        finally:
            index.close()

    async def view_message(self, call: Call) -> RemotingCommand:
        offset = call.int_field("offset")
        try:
            record = self._store.read(offset)
        except RmqError:
            return call.reply(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return call.reply(body=encode_record(record))
