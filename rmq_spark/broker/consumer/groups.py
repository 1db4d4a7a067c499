"""Consumer groups' progress over the store: pop (receive), ack, change invisible time.

Owns ``ConsumerGroups``: one ``QueueProgress`` per (group, topic, queue), one lock per group,
the choice of what a receive looks at (expired messages first, then new ones; queues
round-robin), reading the records those messages are, and receipt handles. What happens to
each message is ``delivery.py``'s (the state machine); what a pop asks to be stored (a retry
or DLQ copy: ``Copy``) the caller stores after the pop returned, outside every lock, and
reports back with ``settle``. So one group's SYNC put never waits in another group's pop, ack
or change-invisible. Knows nothing of gRPC or files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rmq_spark.broker.consumer import delivery
from rmq_spark.broker.consumer.copies import prior_reconsumes
from rmq_spark.broker.consumer.delivery import (
    Ask,
    CopyKind,
    Deliver,
    HandOff,
    InFlight,
    Message,
    QueueProgress,
)
from rmq_spark.broker.consumer.pop_model import (
    RETRY_PREFIX,
    Copy,
    Delivery,
    HandleCode,
    Popped,
    PopRequest,
    retry_topic,
)
from rmq_spark.broker.consumer.ports import QueueSource, RecordReader
from rmq_spark.broker.consumer.receipt import ReceiptHandle
from rmq_spark.clock import Clock
from rmq_spark.errors import OffsetOutOfRangeError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.consume_queue import PRE_BLANK_SIZE, CqUnit
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.properties import RETRY_TOPIC, SHARDING_KEY, TAGS, parse_properties

__all__ = [
    "ConsumerGroups",
    "Copy",
    "CopyKind",
    "Delivery",
    "HandleCode",
    "PopRequest",
    "Popped",
    "RETRY_PREFIX",
    "retry_topic",
]

_SCAN_LIMIT = 4096  # queue offsets one pop looks at per queue (filtered-out ones included)
_READ_MAX = 256  # units read at once: a pop reads what it still needs, more while filtering
_RELEASE_MS = 1_000  # a terminated client's auto-renewed messages come back after this


@dataclass(slots=True)
class _Group:
    """One group's state and the lock that guards it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    queues: dict[tuple[str, int], QueueProgress] = field(default_factory=dict)
    round_robin: dict[str, int] = field(default_factory=dict)


_NO_GROUP = _Group()  # read only: what a group that never received looks like


@dataclass(slots=True)
class _QueuePop:
    """One pop of one queue: what each of its offers shares (``popped`` collects them)."""

    request: PopRequest
    queue_id: int
    view: CqView
    ask: Ask
    blocked: set[str]
    now: int
    popped: Popped


class ConsumerGroups:
    """Every group's progress; committed offsets come from ``committed`` (consumerOffset.json)
    and ``extra`` (the in-flight file) when first used. ``copies``: whether a message that came
    back unacknowledged or ran out of attempts is handed off (``Copy``) or delivered again."""

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
        copies: bool = True,
        client_alive: Callable[[str], bool] = lambda _client: False,
    ) -> None:
        self._store = store
        self._source = source
        self._clock = clock
        self._broker_name = broker_name
        self.nonce = nonce
        self._committed = committed or {}
        self._extra = extra or {}
        self._copies = copies
        self._client_alive = client_alive
        self._groups_lock = threading.Lock()  # guards only the table of groups
        self._groups: dict[str, _Group] = {}
        self.changes = 0  # bumped on every change worth persisting (under a group's lock)

    def _group(self, group: str) -> _Group:
        """The group's state (its ``lock`` guards it), created on first use."""
        state = self._groups.get(group)
        if state is None:
            with self._groups_lock:
                state = self._groups.setdefault(group, _Group())
        return state

    def _existing(self, group: str) -> _Group:
        """The group's state, or an empty one nobody writes to: a handle or a question
        naming a group that never received creates nothing."""
        return self._groups.get(group) or _NO_GROUP

    def _all(self) -> list[tuple[str, _Group]]:
        with self._groups_lock:
            return list(self._groups.items())

    # --- receive -----------------------------------------------------------------------------

    def pop(self, request: PopRequest, queue_ids: Sequence[int]) -> Popped:
        """Up to ``batch_size`` deliverable messages of the topic, queues round-robin, and the
        copies to store (``settle`` each); only the group's own lock is held."""
        popped = Popped()
        if not queue_ids:
            return popped
        state = self._group(request.group)
        with state.lock:
            try:
                start = state.round_robin.get(request.topic, 0)
                state.round_robin[request.topic] = start + 1
                for i in range(len(queue_ids)):
                    if len(popped.deliveries) >= request.batch_size:
                        break
                    queue_id = queue_ids[(start + i) % len(queue_ids)]
                    self._pop_queue(state, request, queue_id, popped)
            except BaseException:
                for copy in popped.copies:  # nobody will store them: deliverable again
                    self._settle(state, copy, False)
                raise
        return popped

    def _pop_queue(self, state: _Group, request: PopRequest, queue_id: int, popped: Popped) -> None:
        view = self._source.view(request.topic, queue_id)
        progress = self._progress_of(state, request.group, view, request.topic, queue_id)
        now = self._clock.now_ms()
        delivery.renew(progress, now, self._client_alive)
        blocked = progress.blocked_groups(now) if request.settings.fifo else set()
        ask = Ask(
            invisible_ms=request.invisible_ms,
            retry_max_times=request.settings.retry_max_times,
            fifo=request.settings.fifo,
            auto_renew=request.auto_renew,
            client_id=request.client_id,
            copies=self._copies,
        )
        pop = _QueuePop(request, queue_id, view, ask, blocked, now, popped)
        for offset in progress.deliverable(now):
            if len(popped.deliveries) >= request.batch_size:
                return
            self._offer(pop, progress, offset)
        end, budget = view.max_offset, _SCAN_LIMIT
        found = popped.deliveries
        step = request.batch_size - len(found)
        while len(found) < request.batch_size and progress.frontier < end and budget > 0:
            count = min(end - progress.frontier, budget, step)
            step = min(step * 4, _READ_MAX)  # the next read, when these were filtered out
            units = view.entries(progress.frontier, count)
            if not units:
                return
            for physical, size, tags_code in units:
                if len(found) >= request.batch_size:
                    return
                offset = progress.frontier
                budget -= 1
                self.changes += 1
                candidate = size != PRE_BLANK_SIZE and request.filter.matches_tags_code(tags_code)
                if delivery.take(progress, physical, candidate):
                    self._offer(pop, progress, offset)

    def _offer(self, pop: _QueuePop, progress: QueueProgress, offset: int) -> None:
        """Read the record at ``offset`` and let the state machine decide; collect its effect."""
        request, queue_id, popped = pop.request, pop.queue_id, pop.popped
        loaded = self._load(pop.view, offset, progress.in_flight[offset])
        message = None
        if loaded is not None:
            record, properties = loaded
            message = Message(
                record.position,
                request.filter.matches(properties.get(TAGS), properties),
                properties.get(SHARDING_KEY),
                prior_reconsumes(record, request.group),
            )
        outcome = delivery.offer(progress, offset, message, pop.ask, pop.blocked, pop.now)
        if outcome is delivery.Outcome.HELD:
            return
        self.changes += 1
        if isinstance(outcome, HandOff):
            assert loaded is not None
            popped.copies.append(Copy(request.group, request.topic, queue_id, outcome, *loaded))
        elif isinstance(outcome, Deliver):
            assert loaded is not None
            assert message is not None
            delivered = self._delivery(pop, outcome, message.prior, *loaded)
            popped.deliveries.append(delivered)

    def _delivery(
        self,
        pop: _QueuePop,
        deliver: Deliver,
        prior: int,
        record: DecodedRecord,
        properties: dict[str, str],
    ) -> Delivery:
        request = pop.request
        # Only the group's own retry copies show (and are acknowledged) as their original
        # topic; another group's %RETRY% topic read by this one is a topic like any other.
        own_retry = request.topic == retry_topic(request.group)
        handle = ReceiptHandle(
            broker_name=self._broker_name,
            queue_id=pop.queue_id,
            queue_offset=deliver.offset,
            physical_offset=record.position,
            retrieve_ms=pop.now,
            invisible_ms=deliver.invisible_ms,
            attempt=deliver.attempt,
            nonce=self.nonce,
            topic_type="1" if own_retry else "0",
        )
        shown = properties.get(RETRY_TOPIC, request.topic) if own_retry else request.topic
        return Delivery(shown, handle, record, properties, prior)

    def _load(
        self, view: CqView, offset: int, entry: InFlight
    ) -> tuple[DecodedRecord, dict[str, str]] | None:
        """The record at ``offset`` and its properties; None if the store no longer has it."""
        physical = entry.physical_offset
        if physical < 0:  # known from before a restart by its queue offset only
            units = view.entries(offset, 1)
            if not units or units[0][1] == PRE_BLANK_SIZE:
                return None
            physical = units[0][0]
        try:
            record = self._store.read_decoded(physical)
        except OffsetOutOfRangeError:
            return None  # deleted by retention meanwhile
        return record, parse_properties(record.record.properties)

    def settle(self, copy: Copy, stored: bool) -> None:
        """The copy a pop asked for is stored (its message is done) or not (deliverable
        again, so a later pop tries again)."""
        state = self._existing(copy.group)
        with state.lock:
            self._settle(state, copy, stored)

    def _settle(self, state: _Group, copy: Copy, stored: bool) -> None:
        progress = state.queues.get((copy.topic, copy.queue_id))
        if progress is not None and delivery.settle(progress, copy.hand_off, stored):
            self.changes += 1

    def walk(self, group: str, topic: str, queue_id: int, visit: Callable[[CqUnit], bool]) -> None:
        """Move ``group``'s position in the queue over each unit ``visit`` returns True for
        (done with it), up to the first False: an internal reader (the retry reviver) whose
        position persists as a group's does. ``visit`` runs under the group's lock only."""
        state = self._group(group)
        with state.lock:
            view = self._source.view(topic, queue_id)
            progress = self._progress_of(state, group, view, topic, queue_id)
            while progress.frontier < view.max_offset:
                count = min(view.max_offset - progress.frontier, _READ_MAX)
                units = view.cq_units(progress.frontier, count)
                if not units:
                    return
                for unit in units:
                    if not visit(unit):
                        return
                    delivery.take(progress, unit.physical_offset, False)
                    self.changes += 1

    # --- ack / change invisible --------------------------------------------------------------

    def _handle_ok(self, handle: ReceiptHandle) -> bool:
        return handle.nonce == self.nonce and handle.broker_name == self._broker_name

    @staticmethod
    def _progress_key(group: str, topic: str, handle: ReceiptHandle) -> tuple[str, int]:
        if handle.topic_type != "0":  # a %RETRY% copy: acknowledged under its original topic
            topic = retry_topic(group)
        return topic, handle.queue_id

    def _progress_for(
        self, state: _Group, group: str, topic: str, handle: ReceiptHandle
    ) -> QueueProgress | None:
        """The progress ``handle`` names, if it is one of this broker run's handles."""
        if not self._handle_ok(handle):
            return None
        return state.queues.get(self._progress_key(group, topic, handle))

    def _current(
        self, state: _Group, group: str, topic: str, handle: ReceiptHandle
    ) -> InFlight | None:
        progress = self._progress_for(state, group, topic, handle)
        if progress is None:
            return None
        return delivery.current(progress, handle.queue_offset, handle.attempt)

    def is_current(self, group: str, topic: str, handle: ReceiptHandle) -> bool:
        """Whether ``handle`` names the latest delivery of a message still unacknowledged."""
        state = self._existing(group)
        with state.lock:
            return self._current(state, group, topic, handle) is not None

    def delivered_offset(self, group: str, topic: str, handle: ReceiptHandle) -> int | None:
        """The CommitLog offset of the record ``handle``'s delivery handed out, while that
        delivery is current; None otherwise (the handle's own offset is not trusted)."""
        state = self._existing(group)
        with state.lock:
            entry = self._current(state, group, topic, handle)
            return None if entry is None else entry.physical_offset

    def ack(self, group: str, topic: str, handle: ReceiptHandle) -> HandleCode:
        """Acknowledge one delivery; a stale handle (acknowledged, redelivered since, being
        handed off, or from another broker run) is ``INVALID``."""
        state = self._existing(group)
        with state.lock:
            progress = self._progress_for(state, group, topic, handle)
            if progress is None or not delivery.ack(progress, handle.queue_offset, handle.attempt):
                return HandleCode.INVALID
            self.changes += 1
            return HandleCode.OK

    def change_invisible(
        self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int
    ) -> ReceiptHandle | HandleCode:
        """Make the delivery visible again ``invisible_ms`` from now; returns its new handle."""
        state = self._existing(group)
        with state.lock:
            progress = self._progress_for(state, group, topic, handle)
            now = self._clock.now_ms()
            if progress is None or not delivery.change_invisible(
                progress, handle.queue_offset, handle.attempt, now, invisible_ms
            ):
                return HandleCode.INVALID
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
        for name, _state in self._all():
            state = self._group(name)
            with state.lock:
                deadline = self._clock.now_ms() + _RELEASE_MS
                for progress in state.queues.values():
                    released += delivery.release(progress, client_id, deadline)
        return released

    # --- state -------------------------------------------------------------------------------

    def _progress_of(
        self, state: _Group, group: str, view: CqView, topic: str, queue_id: int
    ) -> QueueProgress:
        progress = state.queues.get((topic, queue_id))
        min_offset = view.min_offset
        if progress is None:
            committed = self._committed.get((topic, group), {}).get(queue_id)
            extra = self._extra.get(f"{topic}@{group}", {}).get(str(queue_id))
            if committed is None:
                committed = min_offset  # a new group reads the queue from its oldest message
            progress = state.queues[(topic, queue_id)] = delivery.restore(committed, extra)
        progress.clamp(min_offset)
        return progress

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in the queue; None when it never committed there."""
        state = self._existing(group)
        with state.lock:
            progress = state.queues.get((topic, queue_id))
            if progress is not None:
                return progress.committed
            return self._committed.get((topic, group), {}).get(queue_id)

    def set_committed(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` as the group's position (RocketMQ's UpdateOffset: it may move
        back); what was in flight or acknowledged in the queue is forgotten (a copy being
        stored meanwhile settles into nothing)."""
        state = self._group(group)
        with state.lock:
            state.queues[(topic, queue_id)] = QueueProgress(offset)
            self.changes += 1

    def next_deadline_ms(self, group: str, topic: str) -> int | None:
        """When the earliest invisible message of (group, topic) becomes visible again."""
        state = self._existing(group)
        with state.lock:
            deadlines = [
                d
                for (t, _q), p in state.queues.items()
                if t == topic and (d := p.next_deadline_ms()) is not None
            ]
        return min(deadlines, default=None)

    def snapshot(
        self,
    ) -> tuple[dict[tuple[str, str], dict[int, int]], dict[str, dict[str, dict[str, object]]]]:
        """(consumerOffset.json's table, the in-flight file's table), each group's consistent
        with itself; groups loaded from disk but not used since are kept as they were."""
        offsets = {key: dict(queues) for key, queues in self._committed.items()}
        extra = {key: dict(queues) for key, queues in self._extra.items()}
        for group, _state in self._all():
            state = self._group(group)
            with state.lock:
                for (topic, queue_id), progress in state.queues.items():
                    offsets.setdefault((topic, group), {})[queue_id] = progress.committed
                    extra.setdefault(f"{topic}@{group}", {})[str(queue_id)] = progress.snapshot()
        return offsets, extra

    def positions(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(group, topic, queue) -> (committed offset, messages in flight): for operators."""
        found: dict[tuple[str, str, int], tuple[int, int]] = {}
        for group, _state in self._all():
            state = self._group(group)
            with state.lock:
                for (topic, queue_id), p in state.queues.items():
                    in_flight = sum(1 for f in p.in_flight.values() if f.attempt > 0)
                    found[(group, topic, queue_id)] = (p.committed, in_flight)
        return found
