"""Retry copies coming back: due ``SCHEDULE_TOPIC_XXXX`` records bound for ``%RETRY%<group>``.

A message a consumer did not acknowledge goes back through ``%RETRY%<group>`` with a delay
level (spec 11): its copy is stored in ``SCHEDULE_TOPIC_XXXX`` (REAL_TOPIC =
``%RETRY%<group>``). Owns ``RetryReviver``: in the broker's process, it puts each such record
back into its retry topic once due (RocketMQ's ``ScheduleMessageService.messageTimeup``:
``schedule_records.restore_delayed`` and ``redelivery.redelivery_put_request``, the bytes the
schedule job writes), so that retries come back in a broker-only deployment. Records of
other real topics are left to the schedule job (``rmq_spark/delay``), which in turn leaves
these to the broker. Its position per level queue is an internal group's
(``REVIVE_GROUP``), saved with the consumer offsets; a record is passed only once its
copy is stored (a kill between the put and the next save may put it back twice).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from rmq_spark.broker.consumer.groups import RETRY_PREFIX, ConsumerGroups
from rmq_spark.broker.consumer.ports import ConsumerStore, QueueSource
from rmq_spark.broker.redelivery import redelivery_put_request
from rmq_spark.broker.schedule_records import Discard, property_value, restore_delayed
from rmq_spark.clock import Clock
from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError, RmqError
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC
from rmq_spark.store.properties import REAL_TOPIC
from rmq_spark.store.put import PutStatus

__all__ = ["REVIVE_GROUP", "RetryReviver", "is_retry_schedule_record"]

REVIVE_GROUP = "rmq-spark-retry-reviver"
"""The internal group whose position in SCHEDULE_TOPIC_XXXX is the reviver's."""

_log = logging.getLogger(__name__)
_PERIOD_S = 0.1  # how often the thread looks for due retry records


def is_retry_schedule_record(properties_text: str) -> bool:
    """Whether a schedule record's REAL_TOPIC is a retry topic (the broker revives it)."""
    return (property_value(properties_text, REAL_TOPIC) or "").startswith(RETRY_PREFIX)


class RetryReviver:
    """Puts due retry records back; ``revive_due()`` once, or ``start()`` a thread."""

    def __init__(
        self,
        groups: ConsumerGroups,
        source: QueueSource,
        store: ConsumerStore,
        clock: Clock,
        levels_ms: Sequence[int],
    ) -> None:
        self._groups = groups
        self._source = source
        self._store = store
        self._clock = clock
        self._levels_ms = tuple(levels_ms)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.revived = 0

    def revive_due(self) -> int:
        """Put back every retry record due by now; returns how many."""
        before = self.revived
        now = self._clock.now_ms()
        for queue_id in range(len(self._levels_ms)):
            if self._source.view(RMQ_SYS_SCHEDULE_TOPIC, queue_id).max_offset > 0:
                self._groups.walk(
                    REVIVE_GROUP,
                    RMQ_SYS_SCHEDULE_TOPIC,
                    queue_id,
                    lambda unit, q=queue_id: self._visit(unit, q, now),
                )
        return self.revived - before

    def _visit(self, unit: CqUnit, queue_id: int, now: int) -> bool:
        """True when done with the unit; False stops the queue (not due, or the put failed).
        A level's records fall due in queue order, so the first one not due ends the walk."""
        if not unit.names_record:
            return True
        try:
            record = self._store.read_decoded(unit.physical_offset).record
        except (OffsetOutOfRangeError, CorruptRecordError):
            return True  # deleted by retention: nothing to bring back
        if record.store_timestamp_ms + self._levels_ms[queue_id] > now:
            return False
        if not is_retry_schedule_record(record.properties):
            return True  # the schedule job's
        restored = restore_delayed(record)
        if isinstance(restored, Discard):
            return True
        if self._store.put(redelivery_put_request(restored)).status is not PutStatus.PUT_OK:
            return False
        self.revived += 1
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="retry-reviver", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_PERIOD_S):
            try:
                self.revive_due()
            except RmqError as err:  # e.g. the store closing under it; the next tick retries
                _log.warning("retry reviver: %s", err)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
