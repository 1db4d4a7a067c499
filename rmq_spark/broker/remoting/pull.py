"""PULL_MESSAGE (and 5.x LITE_PULL_MESSAGE): a 4.x consumer reads a queue from an offset.

As RocketMQ's ``PullMessageProcessor``: the group and topic are checked, the subscription is
the request's (SUBSCRIPTION flag: lite pull) or the one the group's heartbeat registered
(push consumers), the ConsumeQueue is read from ``queueOffset`` (``pull_rules``: the status
table, the tags code, then the full TAG/SQL92 filter on the record) and the body is the
selected records as stored. With the SUSPEND flag a pull that finds nothing new waits (at
most ``suspendTimeoutMillis``, capped at ``HOLD_MS_MAX``) on the consume path's ``Waiters``,
woken by the ConsumeQueue dispatch; a waiting pull is a coroutine, not a thread. The
COMMIT_OFFSET flag commits ``commitOffset`` for the group through the consume service (the
same offsets the gRPC groups use), except on a SLAVE (as RocketMQ: a slave's offsets are its
master's, docs/REPLICATION.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.filters.expression import MessageFilter, compile_filter
from rmq_spark.broker.remoting import pull_rules as rules
from rmq_spark.broker.remoting.calls import Call, Deps, Handler
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.consume import RemoteConsumers, remote_consumers
from rmq_spark.broker.remoting.offsets_remote import commit
from rmq_spark.broker.replication.slave_read import in_memory_bytes, suggest_broker_id
from rmq_spark.broker.topics import group_name_problem
from rmq_spark.errors import FilterExpressionError, RmqError
from rmq_spark.store.codec import DecodedRecord, decode_record
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.properties import TAGS, parse_properties

__all__ = ["HOLD_MS_MAX", "handlers"]

HOLD_MS_MAX = 20_000  # a held pull answers well within the client's 30 s call timeout

Read = rules.Verdict | rules.Selected


class _Pull:
    """One validated pull."""

    def __init__(self, call: Call, group: str, topic: str, queue_id: int) -> None:
        self.call = call
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.offset = call.int_field("queueOffset")
        self.max_msgs = call.int_field("maxMsgNums")
        self.flags = call.int_field("sysFlag")
        suspend_ms = call.int_field("suspendTimeoutMillis", default=0)
        self.suspend_ms = max(0, min(suspend_ms, HOLD_MS_MAX))


class PullHandler:
    """PULL_MESSAGE over the consume service."""

    def __init__(self, deps: Deps, consume: ConsumeService, consumers: RemoteConsumers) -> None:
        self.deps = deps
        self.consume = consume
        self.consumers = consumers
        self._memory = in_memory_bytes()

    async def __call__(self, call: Call) -> RemotingCommand:
        group = call.required("consumerGroup")
        topic = call.required("topic")
        queue_id = call.int_field("queueId")
        problem = group_name_problem(group)
        if problem is not None:
            return call.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, problem)
        count = self.deps.service.topics.queue_count(topic)
        if count is None:
            return call.reply(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic[:300]}] not exist, apply first please!"
            )
        if not 0 <= queue_id < count:
            return call.reply(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{count}] consumer:[{call.link.peer_host}]",
            )
        pull = _Pull(call, group, topic, queue_id)
        message_filter = self._filter(pull)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        if pull.flags & rules.FLAG_COMMIT_OFFSET and self.deps.config.role != "SLAVE":
            self._commit(pull, call.int_field("commitOffset", default=-1))
        found = await self._read_held(pull, message_filter)
        return self._response(pull, found)

    def _filter(self, pull: _Pull) -> MessageFilter | RemotingCommand:
        call = pull.call
        if pull.flags & rules.FLAG_SUBSCRIPTION:
            kind = call.field("expressionType") or "TAG"
            expression = call.field("subscription") or "*"
        else:
            sub = self.consumers.links.subscription(pull.group, pull.topic, self.consumers.now_ms())
            if sub is None:
                return call.reply(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {pull.group}",
                )
            if sub.sub_version < call.int_field("subVersion", default=0):
                return call.reply(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            kind, expression = sub.expression_type, sub.expression
        try:
            return compile_filter(kind, expression)
        except FilterExpressionError as err:
            return call.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(err)[:500])

    def _commit(self, pull: _Pull, offset: int) -> None:
        """The consumer's progress rides on its pull."""
        if offset >= 0:
            commit(self.consume, pull.group, pull.topic, pull.queue_id, offset)

    async def _read_held(self, pull: _Pull, message_filter: MessageFilter) -> Read:
        """Read; with SUSPEND, wait for the queue to grow while there is nothing new."""
        loop = asyncio.get_running_loop()
        hold = pull.flags & rules.FLAG_SUSPEND and pull.suspend_ms > 0
        end = loop.time() + pull.suspend_ms / 1000
        while True:
            with self.consume.waiters.watch_async(pull.topic) as woken:
                found = await asyncio.to_thread(self._read, pull, message_filter)
                remaining = end - loop.time()
                if (
                    not hold
                    or found.code != rules.PULL_NOT_FOUND
                    or remaining <= 0
                    or self.deps.service.shutting_down
                ):
                    return found
                try:
                    await asyncio.wait_for(woken.wait(), remaining)
                except TimeoutError:
                    pass

    def _read(self, pull: _Pull, message_filter: MessageFilter) -> Read:
        low, high = self.consume.queue_bounds(pull.topic, pull.queue_id)
        verdict = rules.offset_verdict(pull.offset, low, high)
        if verdict is not None:
            return verdict
        count = min(rules.scan_limit(pull.max_msgs), high - pull.offset)
        try:
            units = self.consume.source.view(pull.topic, pull.queue_id).cq_units(pull.offset, count)
        except OSError:
            units = []
        if not units:  # unreadable slice: RocketMQ's OFFSET_FOUND_NULL
            return rules.Verdict(rules.PULL_NOT_FOUND, pull.offset, "OFFSET_FOUND_NULL")
        return rules.select(
            pull.offset,
            units,
            pull.max_msgs,
            message_filter.matches_tags_code,
            self._loader(message_filter),
        )

    def _loader(self, message_filter: MessageFilter) -> Callable[[CqUnit], bytes | None]:
        commitlog = self.deps.store.commitlog

        def load(unit: CqUnit) -> bytes | None:
            try:
                raw = commitlog.read(unit.physical_offset, unit.size)
                decoded = decode_record(raw, 0, check_crc=False, with_body=False)
            except (RmqError, OSError, ValueError):
                return None  # deleted by retention meanwhile: RocketMQ's MESSAGE_WAS_REMOVING
            if not isinstance(decoded, DecodedRecord) or decoded.total_size != len(raw):
                return None
            properties = parse_properties(decoded.record.properties)
            return raw if message_filter.matches(properties.get(TAGS), properties) else None

        return load

    def _suggest(self, found: Read) -> int:
        """RocketMQ's slaveReadEnable: a puller far behind the log's end reads the slave."""
        records = found.records if isinstance(found, rules.Selected) else []
        end = self.deps.store.flushed_offset
        return suggest_broker_id(self.deps.config.slave_read_enable, records, end, self._memory)

    def _response(self, pull: _Pull, found: Read) -> RemotingCommand:
        low, high = self.consume.queue_bounds(pull.topic, pull.queue_id)
        header = {
            "suggestWhichBrokerId": str(self._suggest(found)),
            "nextBeginOffset": str(found.next_offset),
            "minOffset": str(low),
            "maxOffset": str(high),
        }
        body = b""
        if isinstance(found, rules.Selected) and found.records:
            body = found.body
            self.deps.service.traffic.received(pull.group, len(found.records))
        return pull.call.reply(found.code, found.status, header, body)


def handlers(deps: Deps) -> dict[int, Handler]:
    if deps.consume is None:
        return {}
    handler = PullHandler(deps, deps.consume, remote_consumers(deps))
    return {RequestCode.PULL_MESSAGE: handler, RequestCode.LITE_PULL_MESSAGE: handler}
