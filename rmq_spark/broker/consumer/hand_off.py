"""Storing what a pop hands off: a message's retry copy or dead letter, outside every lock.

Owns ``CopyStore``, the performer of ``delivery.HandOff`` effects (``groups.Copy``): the put of
a copy bound for ``%RETRY%<group>`` (``copies.retry_properties``: through
SCHEDULE_TOPIC_XXXX, brought back by ``RetryReviver`` when due) or ``%DLQ%<group>``
(``copies.dlq_properties``), the topic joining the topic table (readable by consumers and a
RocketMQ broker, never by producers), and settling each copy with the groups once its put
returned. A message is done only once its copy is stored (under SYNC flush: durable), so the
committed offset never passes a message whose copy a crash could lose; a copy not stored
leaves its message deliverable, and the next pop tries again.
"""

from __future__ import annotations

from collections.abc import Callable

from rmq_spark.broker.consumer.copies import dlq_properties, group_copy_request, retry_properties
from rmq_spark.broker.consumer.groups import ConsumerGroups, Copy, CopyKind, retry_topic
from rmq_spark.broker.consumer.ports import ConsumerStore, GroupSettingsSource
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.put import PutRequest, PutResult, PutStatus

__all__ = ["CopyStore", "dlq_topic"]

_DLQ_PREFIX = "%DLQ%"
_OK = PutStatus.PUT_OK


def dlq_topic(group: str) -> str:
    return f"{_DLQ_PREFIX}{group}"


class CopyStore:
    """Puts group copies into ``store``; ``add_topic`` registers a copy's topic before its put,
    ``settings`` give each group's retry limit (a copy's MAX_RECONSUME_TIMES)."""

    def __init__(
        self,
        store: ConsumerStore,
        groups: ConsumerGroups,
        add_topic: Callable[[str], None],
        settings: GroupSettingsSource,
    ) -> None:
        self._store = store
        self._groups = groups
        self._add_topic = add_topic
        self._settings = settings

    def _max_reconsume(self, group: str) -> int:
        return self._settings.get(group).retry_max_times

    def store_all(self, copies: list[Copy]) -> None:
        """Store the copies a pop asked for, in one batch (one fsync under SYNC), and settle
        each; when the batch is refused as a whole (one copy illegal: all or nothing), one
        by one. If the store raises, every copy settles as not stored before the error goes
        on."""
        if not copies:
            return
        try:
            requests = [self._request(copy) for copy in copies]
            for topic in {r.topic for r in requests}:  # routable before a copy is readable
                self._add_topic(topic)
            results = self._store.put_batch(requests) if len(requests) > 1 else []
            if not any(result.status is _OK for result in results):
                results = [self._store.put(request) for request in requests]
        except BaseException:
            for copy in copies:
                self._groups.settle(copy, False)
            raise
        stored = [result.status is _OK for result in results]
        for copy, ok in zip(copies, stored, strict=True):
            self._groups.settle(copy, ok)

    def _request(self, copy: Copy) -> PutRequest:
        make = self._dlq_request if copy.hand_off.kind is CopyKind.DLQ else self._retry_request
        return make(copy.group, copy.record, copy.properties, copy.hand_off.tried)

    def to_dlq(
        self, group: str, record: DecodedRecord, properties: dict[str, str], attempts: int
    ) -> bool:
        """Store a copy in ``%DLQ%<group>`` queue 0 (a client's forward to the DLQ)."""
        request = self._dlq_request(group, record, properties, attempts)
        return self.put(request).status is PutStatus.PUT_OK

    def _dlq_request(
        self, group: str, record: DecodedRecord, properties: dict[str, str], attempts: int
    ) -> PutRequest:
        """A copy for ``%DLQ%<group>`` queue 0, as RocketMQ's send-back makes it (spec 11)."""
        copy = dlq_properties(record, properties, attempts, self._max_reconsume(group))
        return group_copy_request(dlq_topic(group), record, copy, attempts, idempotent=True)

    def _retry_request(
        self, group: str, record: DecodedRecord, properties: dict[str, str], reconsume: int
    ) -> PutRequest:
        """A copy bound for ``%RETRY%<group>`` queue 0 (``copies.retry_properties``): the put
        path turns DELAY into a SCHEDULE_TOPIC_XXXX record (REAL_TOPIC = the retry topic)
        that ``RetryReviver`` puts back when due."""
        copy = retry_properties(record, properties, reconsume, self._max_reconsume(group))
        # Not idempotent: every retry of a message keeps its UNIQ_KEY.
        return group_copy_request(retry_topic(group), record, copy, reconsume, idempotent=False)

    def put(self, request: PutRequest) -> PutResult:
        """Put a group copy (or a send-back's). Its topic joins the topic table first, as
        RocketMQ creates a retry or DLQ topic before its send-back's put: a consumer that sees
        the copy (a dump, a pull) can route its topic at once."""
        self._add_topic(request.topic)
        return self._store.put(request)
