"""Consumer groups' progress over the store: pop (receive), ack, change invisible time.

Owns ``ConsumerGroups``: one ``QueueProgress`` per (group, topic, queue), the choice of what a
receive gets (expired messages first, then new ones; queues round-robin; a FIFO group's
message group waits while an earlier message of it is invisible), reading the records those
messages are, receipt handles, and the hand-off of a message that used up its attempts
(``on_exhausted``: the DLQ). Thread-safe (one lock). Knows nothing of gRPC or files.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq_spark.broker.consumer.copies import prior_reconsumes
from rmq_spark.broker.consumer.ports import (
    GroupSettingsLike,
    MessageFilter,
    QueueSource,
    RecordReader,
)
from rmq_spark.broker.consumer.progress import InFlight, QueueProgress
from rmq_spark.broker.consumer.receipt import ReceiptHandle
from rmq_spark.clock import Clock
from rmq_spark.errors import OffsetOutOfRangeError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.properties import RETRY_TOPIC, SHARDING_KEY, TAGS, parse_properties

__all__ = ["ConsumerGroups", "Delivery", "HandleCode", "PopRequest", "RETRY_PREFIX", "retry_topic"]

_SCAN_LIMIT = 4096  # queue offsets one pop looks at per queue (filtered-out ones included)
_RENEW_MS = 60_000  # invisible time of an auto-renewed delivery (the proxy's default)
_RELEASE_MS = 1_000  # a terminated client's auto-renewed messages come back after this


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


Exhausted = Callable[[str, DecodedRecord, dict[str, str], int], bool]
"""``on_exhausted(group, record, properties, attempts)``: True once the message is safely
elsewhere (the DLQ); False leaves it deliverable. ``on_retry`` has the same shape: the copy
goes to ``%RETRY%<group>`` with ``attempts`` as its reconsume times."""

RETRY_PREFIX = "%RETRY%"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"


class ConsumerGroups:
    """Every group's progress; committed offsets come from ``committed`` (consumerOffset.json)
    and ``extra`` (the in-flight file) when first used."""

    def __init__(
        self,
        store: RecordReader,
        source: QueueSource,
        clock: Clock,
        *,
        broker_name: str,
        nonce: str,
        committed: dict[tuple[str, str], dict[int, int]] | None = None,
        extra: dict[str, dict[str, dict[str, object]]] | None = None,
        on_exhausted: Exhausted | None = None,
        on_retry: Exhausted | None = None,
        client_alive: Callable[[str], bool] = lambda _client: False,
    ) -> None:
        self._store = store
        self._source = source
        self._clock = clock
        self._broker_name = broker_name
        self.nonce = nonce
        self._committed = committed or {}
        self._extra = extra or {}
        self._on_exhausted = on_exhausted
        self._on_retry = on_retry
        self._client_alive = client_alive
        self._lock = threading.Lock()
        self._progress: dict[tuple[str, str, int], QueueProgress] = {}
        self._round_robin: dict[tuple[str, str], int] = {}
        self.changes = 0  # bumped on every change worth persisting

    # --- receive -----------------------------------------------------------------------------

    def pop(self, request: PopRequest, queue_ids: Sequence[int]) -> list[Delivery]:
        """Up to ``batch_size`` deliverable messages of the topic, queues round-robin."""
        if not queue_ids:
            return []
        out: list[Delivery] = []
        with self._lock:
            key = (request.group, request.topic)
            start = self._round_robin.get(key, 0)
            self._round_robin[key] = start + 1
            for i in range(len(queue_ids)):
                if len(out) >= request.batch_size:
                    break
                queue_id = queue_ids[(start + i) % len(queue_ids)]
                self._pop_queue(request, queue_id, out)
        return out

    def _pop_queue(self, request: PopRequest, queue_id: int, out: list[Delivery]) -> None:
        progress = self._progress_of(request.group, request.topic, queue_id)
        now = self._clock.now_ms()
        self._renew(progress, now)
        blocked = progress.blocked_groups(now) if request.settings.fifo else set()
        for offset in progress.deliverable(now):
            if len(out) >= request.batch_size:
                return
            self._offer(request, queue_id, progress, offset, blocked, now, out)
        end = self._source.max_offset(request.topic, queue_id)
        budget = _SCAN_LIMIT
        while len(out) < request.batch_size and progress.frontier < end and budget > 0:
            count = min(end - progress.frontier, budget, 256)
            units = self._source.units(request.topic, queue_id, progress.frontier, count)
            if not units:
                return
            for unit in units:
                if len(out) >= request.batch_size:
                    return
                offset = progress.frontier
                progress.take_new(offset)
                budget -= 1
                self.changes += 1
                if not unit.names_record or not request.filter.matches_tags_code(unit.tags_code):
                    progress.finish(offset)
                    continue
                progress.deliver(offset, InFlight(0, 0, unit.physical_offset))
                self._offer(request, queue_id, progress, offset, blocked, now, out)

    def _offer(
        self,
        request: PopRequest,
        queue_id: int,
        progress: QueueProgress,
        offset: int,
        blocked: set[str],
        now: int,
        out: list[Delivery],
    ) -> None:
        """Deliver the deliverable message at ``offset`` unless filtered out, FIFO-blocked,
        exhausted (-> ``on_exhausted``) or gone from the store (-> done)."""
        entry = progress.in_flight[offset]
        loaded = self._load(request.topic, queue_id, offset, entry)
        if loaded is None:
            progress.finish(offset)
            return
        record, properties = loaded
        if not request.filter.matches(properties.get(TAGS), properties):
            progress.finish(offset)
            return
        group = properties.get(SHARDING_KEY) if request.settings.fifo else None
        entry.message_group = group
        if group is not None and group in blocked:
            return  # an earlier message of its group is invisible: keep the order
        prior = prior_reconsumes(record, request.group)
        tried = prior + entry.attempt
        if entry.attempt > 0 and group is None and self._on_retry is not None:
            # Came back unacknowledged: RocketMQ's non-orderly consumers retry through
            # %RETRY%<group> (or the DLQ once out of attempts); the copy stored, this
            # delivery counts as consumed.
            exhausted = tried >= request.settings.retry_max_times + 1
            hand_off = self._on_exhausted if exhausted else self._on_retry
            if hand_off is not None and hand_off(request.group, record, properties, tried):
                progress.finish(offset)
                self.changes += 1
            return
        if tried >= request.settings.retry_max_times + 1 and self._on_exhausted:
            if self._on_exhausted(request.group, record, properties, tried):
                progress.finish(offset)
                self.changes += 1
            elif group is not None:
                blocked.add(group)
            return
        invisible_ms = _RENEW_MS if request.auto_renew else request.invisible_ms
        attempt = entry.attempt + 1
        # Only the group's own retry copies show (and are acknowledged) as their original
        # topic; another group's %RETRY% topic read by this one is a topic like any other.
        own_retry = request.topic == retry_topic(request.group)
        progress.deliver(
            offset,
            InFlight(
                attempt,
                now + invisible_ms,
                record.position,
                group,
                request.client_id,
                request.auto_renew,
            ),
        )
        self.changes += 1
        handle = ReceiptHandle(
            broker_name=self._broker_name,
            queue_id=queue_id,
            queue_offset=offset,
            physical_offset=record.position,
            retrieve_ms=now,
            invisible_ms=invisible_ms,
            attempt=attempt,
            nonce=self.nonce,
            topic_type="1" if own_retry else "0",
        )
        shown = properties.get(RETRY_TOPIC, request.topic) if own_retry else request.topic
        out.append(Delivery(shown, handle, record, properties, prior))

    def _load(
        self, topic: str, queue_id: int, offset: int, entry: InFlight
    ) -> tuple[DecodedRecord, dict[str, str]] | None:
        """The record at ``offset`` and its properties; None if the store no longer has it."""
        physical = entry.physical_offset
        if physical < 0:  # known from before a restart by its queue offset only
            units = self._source.units(topic, queue_id, offset, 1)
            if not units or not units[0].names_record:
                return None
            physical = entry.physical_offset = units[0].physical_offset
        try:
            record = self._store.read_decoded(physical)
        except OffsetOutOfRangeError:
            return None  # deleted by retention meanwhile
        return record, parse_properties(record.record.properties)

    def _renew(self, progress: QueueProgress, now: int) -> None:
        """Auto-renewed deliveries stay invisible while their client is alive (the proxy
        renews them until acknowledged)."""
        for entry in progress.in_flight.values():
            if entry.auto_renew and entry.deadline_ms <= now and entry.attempt > 0:
                if self._client_alive(entry.client_id):
                    entry.deadline_ms = now + _RENEW_MS

    def walk(self, group: str, topic: str, queue_id: int, visit: Callable[[CqUnit], bool]) -> None:
        """Move ``group``'s position in the queue over each unit ``visit`` returns True for
        (done with it), up to the first False: an internal reader (the retry reviver) whose
        position persists as a group's does."""
        with self._lock:
            progress = self._progress_of(group, topic, queue_id)
            end = self._source.max_offset(topic, queue_id)
            while progress.frontier < end:
                count = min(end - progress.frontier, 256)
                units = self._source.units(topic, queue_id, progress.frontier, count)
                if not units:
                    return
                for unit in units:
                    if not visit(unit):
                        return
                    offset = progress.frontier
                    progress.take_new(offset)
                    progress.finish(offset)
                    self.changes += 1

    # --- ack / change invisible --------------------------------------------------------------

    def _current(
        self, group: str, topic: str, handle: ReceiptHandle
    ) -> tuple[QueueProgress, InFlight] | None:
        if handle.nonce != self.nonce or handle.broker_name != self._broker_name:
            return None
        if handle.topic_type != "0":  # a %RETRY% copy: acknowledged under its original topic
            topic = retry_topic(group)
        progress = self._progress.get((group, topic, handle.queue_id))
        if progress is None:
            return None
        entry = progress.matches(handle.queue_offset, handle.attempt)
        return None if entry is None else (progress, entry)

    def is_current(self, group: str, topic: str, handle: ReceiptHandle) -> bool:
        """Whether ``handle`` names the latest delivery of a message still unacknowledged."""
        with self._lock:
            return self._current(group, topic, handle) is not None

    def delivered_offset(self, group: str, topic: str, handle: ReceiptHandle) -> int | None:
        """The CommitLog offset of the record ``handle``'s delivery handed out, while that
        delivery is current; None otherwise (the handle's own offset is not trusted)."""
        with self._lock:
            found = self._current(group, topic, handle)
            return None if found is None else found[1].physical_offset

    def ack(self, group: str, topic: str, handle: ReceiptHandle) -> HandleCode:
        """Acknowledge one delivery; a stale handle (acknowledged, redelivered since, or from
        another broker run) is ``INVALID``."""
        with self._lock:
            found = self._current(group, topic, handle)
            if found is None:
                return HandleCode.INVALID
            found[0].finish(handle.queue_offset)
            self.changes += 1
            return HandleCode.OK

    def change_invisible(
        self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int
    ) -> ReceiptHandle | HandleCode:
        """Make the delivery visible again ``invisible_ms`` from now; returns its new handle."""
        with self._lock:
            found = self._current(group, topic, handle)
            if found is None:
                return HandleCode.INVALID
            now = self._clock.now_ms()
            entry = found[1]
            entry.deadline_ms = now + invisible_ms
            entry.auto_renew = False  # the client decides from now on (a nack, or a renewal)
            self.changes += 1
            return ReceiptHandle(
                broker_name=handle.broker_name,
                queue_id=handle.queue_id,
                queue_offset=handle.queue_offset,
                physical_offset=handle.physical_offset,
                retrieve_ms=now,
                invisible_ms=invisible_ms,
                attempt=handle.attempt,
                nonce=handle.nonce,
                topic_type=handle.topic_type,
            )

    def release_client(self, client_id: str) -> int:
        """A client said goodbye: its auto-renewed messages come back soon; returns how many."""
        released = 0
        with self._lock:
            deadline = self._clock.now_ms() + _RELEASE_MS
            for progress in self._progress.values():
                for entry in progress.in_flight.values():
                    if entry.client_id == client_id and entry.auto_renew:
                        entry.auto_renew = False
                        entry.deadline_ms = min(entry.deadline_ms, deadline)
                        released += 1
        return released

    # --- state -------------------------------------------------------------------------------

    def _progress_of(self, group: str, topic: str, queue_id: int) -> QueueProgress:
        key = (group, topic, queue_id)
        progress = self._progress.get(key)
        min_offset = self._source.min_offset(topic, queue_id)
        if progress is None:
            committed = self._committed.get((topic, group), {}).get(queue_id)
            extra = self._extra.get(f"{topic}@{group}", {}).get(str(queue_id))
            if committed is None:
                committed = min_offset  # a new group reads the queue from its oldest message
            progress = self._progress[key] = QueueProgress.restore(committed, extra)
        progress.clamp(min_offset)
        return progress

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in the queue; None when it never committed there."""
        with self._lock:
            progress = self._progress.get((group, topic, queue_id))
            if progress is not None:
                return progress.committed
            return self._committed.get((topic, group), {}).get(queue_id)

    def set_committed(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` as the group's position (RocketMQ's UpdateOffset: it may move
        back); what was in flight or acknowledged in the queue is forgotten."""
        with self._lock:
            self._progress[(group, topic, queue_id)] = QueueProgress(offset)
            self.changes += 1

    def next_deadline_ms(self, group: str, topic: str) -> int | None:
        """When the earliest invisible message of (group, topic) becomes visible again."""
        with self._lock:
            deadlines = [
                d
                for (g, t, _q), p in self._progress.items()
                if g == group and t == topic and (d := p.next_deadline_ms()) is not None
            ]
        return min(deadlines, default=None)

    def snapshot(
        self,
    ) -> tuple[dict[tuple[str, str], dict[int, int]], dict[str, dict[str, dict[str, object]]]]:
        """(consumerOffset.json's table, the in-flight file's table), consistent with each
        other; groups loaded from disk but not used since are kept as they were."""
        with self._lock:
            offsets = {key: dict(queues) for key, queues in self._committed.items()}
            extra = {key: dict(queues) for key, queues in self._extra.items()}
            for (group, topic, queue_id), progress in self._progress.items():
                offsets.setdefault((topic, group), {})[queue_id] = progress.committed
                extra.setdefault(f"{topic}@{group}", {})[str(queue_id)] = progress.snapshot()
            return offsets, extra

    def positions(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(group, topic, queue) -> (committed offset, messages in flight): for operators."""
        with self._lock:
            return {
                key: (p.committed, sum(1 for f in p.in_flight.values() if f.attempt > 0))
                for key, p in self._progress.items()
            }
