"""The consume path of a broker: receive (with long polling), ack, change invisible time, DLQ.

Owns ``ConsumeService``: request validation (group and topic names, invisible time, filter
expressions) with the status each failure gets, what a receive does in which thread (the pop
under its group's lock in a pop thread; then the retry and DLQ copies it asked for, stored by
``hand_off.CopyStore`` in a copy thread, outside every lock; long polling by
``waiters.Waiters``: a receive waits until the queue source reports new messages or an
invisible message comes back, within its deadline), client liveness for auto-renewed
deliveries, and saving progress. Used by the gRPC handlers (``consume_grpc.py``) and the
embedded broker. Knows nothing of protobuf.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from rmq_spark.broker.consumer.groups import (
    ConsumerGroups,
    Delivery,
    HandleCode,
    Popped,
    PopRequest,
    retry_topic,
)
from rmq_spark.broker.consumer.hand_off import CopyStore, dlq_topic
from rmq_spark.broker.consumer.persist import ProgressFiles, ProgressSaver
from rmq_spark.broker.consumer.ports import (
    ConsumerStore,
    ConsumerWiring,
    GroupSettingsLike,
    GroupSettingsSource,
)
from rmq_spark.broker.consumer.receipt import ReceiptHandle, decode_receipt_handle
from rmq_spark.broker.consumer.revive import RetryReviver
from rmq_spark.broker.consumer.waiters import Waiters, long_poll
from rmq_spark.broker.consumer.wiring import broker_wiring
from rmq_spark.broker.service import BrokerService, RouteOutcome, SendCode
from rmq_spark.broker.topics import group_name_problem
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import CorruptRecordError, OffsetOutOfRangeError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest, PutResult

__all__ = [
    "BATCH_MAX",
    "ConsumeCode",
    "ConsumeService",
    "POLL_MS_MAX",
    "Receive",
    "Rejected",
    "dlq_topic",
]

INVISIBLE_MS_MIN = 10_000  # ProxyConfig.minInvisibleTimeMillsForRecv (receive only)
INVISIBLE_MS_MAX = 12 * 3_600_000  # ProxyConfig.maxInvisibleTimeMills
POLL_MS_MIN = 5_000  # grpcClientConsumerMinLongPollingTimeoutMillis
POLL_MS_MAX = 20_000  # grpcClientConsumerMaxLongPollingTimeoutMillis
BATCH_MAX = 32  # grpcClientConsumerLongPollingBatchSize
CLIENT_ALIVE_MS = 30_000  # a client unheard of for this long no longer renews its messages
_MATCH_ALL = "*"  # the retry topic is read unfiltered: its copies matched when first taken


class ConsumeCode(enum.Enum):
    """Why a consumer request was refused; ``consume_grpc`` maps each to the v2 code."""

    ILLEGAL_CONSUMER_GROUP = "ILLEGAL_CONSUMER_GROUP"
    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    ILLEGAL_FILTER_EXPRESSION = "ILLEGAL_FILTER_EXPRESSION"
    ILLEGAL_INVISIBLE_TIME = "ILLEGAL_INVISIBLE_TIME"
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STORE_ERROR = "STORE_ERROR"
    FORBIDDEN = "FORBIDDEN"  # a SLAVE: pops write to the log


@dataclass(frozen=True, slots=True)
class Rejected:
    code: ConsumeCode
    reason: str


@dataclass(frozen=True, slots=True)
class Receive:
    """A validated receive: what to pop, from which queues."""

    request: PopRequest
    queue_ids: tuple[int, ...]
    retry: PopRequest | None = None  # the group's %RETRY% topic (queue 0); None for FIFO


class ConsumeService:
    """Consumer groups over one broker's store. ``close()`` saves progress a last time.

    Parameters
    ----------
    broker
        The broker service: its topic table and broker name.
    store
        The open store (reads, DLQ puts, ``root_dir`` for the progress files).
    wiring
        ConsumeQueue, filters, group settings, offsets file (default: ``wiring.broker_wiring``
        over the store's directory).
    save_interval_s
        How often progress is saved while it changes: the at-least-once window after a kill.
    """

    def __init__(
        self,
        broker: BrokerService,
        store: ConsumerStore,
        *,
        clock: Clock | None = None,
        wiring: ConsumerWiring | None = None,
        save_interval_s: float = 1.0,
    ) -> None:
        self._broker = broker
        self._store = store
        self._clock = clock or SystemClock()
        self._wiring = wiring = wiring or broker_wiring(Path(store.root_dir), self._clock)
        self._clients: dict[str, int] = {}
        self._members: dict[str, set[str]] = {}  # group -> clients that said they consume it
        self._closed = False
        self._stopping = False
        self.source = wiring.queue_source(store)
        files = ProgressFiles(Path(store.root_dir), wiring)
        offsets, extra = files.load()
        self.groups = ConsumerGroups(
            store,
            self.source,
            self._clock,
            broker_name=broker.config.broker_name,
            nonce=secrets.token_hex(4),
            committed=offsets,
            extra=extra,
            client_alive=self._alive,
        )
        self.copies = CopyStore(
            store, self.groups, broker.topics.add_internal, wiring.group_settings
        )
        levels = getattr(getattr(store, "config", None), "message_delay_level", None)
        self.reviver = RetryReviver(
            self.groups,
            self.source,
            store,
            self._clock,
            parse_message_delay_level(levels or DEFAULT_MESSAGE_DELAY_LEVEL),
        )
        self.waiters = Waiters()
        self.source.add_listener(self.waiters.wake)
        self._saver = ProgressSaver(
            files, self.groups.snapshot, lambda: self.groups.changes, save_interval_s
        )
        self._close_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="consume-pop")
        # Retry and DLQ copies are stored by threads of their own: a SYNC put waiting for
        # its fsync never holds a pop thread (nor a group's lock) that other groups need.
        self._copy_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="consume-copy")
        # A SLAVE's log is its master's bytes: nothing here may write to it (revive, pops'
        # retry and DLQ copies); it serves offset-based reads only (docs/REPLICATION.md).
        self._slave = getattr(broker.config, "role", "") == "SLAVE"
        if not self._slave:
            self.reviver.start()

    # --- clients -----------------------------------------------------------------------------

    def settings_of(self, group: str) -> GroupSettingsLike:
        return self._wiring.group_settings.get(group)

    @property
    def group_settings(self) -> GroupSettingsSource:
        """Every group's settings (``config/subscriptionGroup.json``), for mqadmin's calls."""
        return self._wiring.group_settings

    def seen(self, client_id: str, group: str = "") -> None:
        if client_id:
            self._clients[client_id] = self._clock.now_ms()
            if group:
                self._members.setdefault(group, set()).add(client_id)

    def consumers_of(self, group: str, *, besides: str = "") -> list[str]:
        """The live clients (heartbeat within the alive window) consuming ``group``."""
        members = self._members.get(group, set())
        return sorted(c for c in members if c != besides and self._alive(c))

    def _alive(self, client_id: str) -> bool:
        last = self._clients.get(client_id)
        return last is not None and self._clock.now_ms() - last < CLIENT_ALIVE_MS

    def terminated(self, client_id: str) -> int:
        """A client shut down: its auto-renewed messages come back; returns how many."""
        self._clients.pop(client_id, None)
        for members in self._members.values():
            members.discard(client_id)
        released = self.groups.release_client(client_id)
        if released:
            self.waiters.wake_all()  # waiting receives recompute when those come back
        return released

    def route(self, topic: str, namespace: str = "") -> RouteOutcome:
        return self._broker.route(topic, namespace, reading=True)

    # --- receive -----------------------------------------------------------------------------

    def prepare(
        self,
        group: str,
        topic: str,
        namespace: str = "",
        *,
        filter_kind: str = "TAG",
        expression: str = "*",
        batch_size: int = BATCH_MAX,
        invisible_ms: int = 0,
        auto_renew: bool = False,
        client_id: str = "",
    ) -> Receive | Rejected:
        """Check a receive and resolve its topic, filter and group settings. ``group`` is the
        group's full name (``topics.full_topic_name``); ``namespace`` is the topic's."""
        if self._stopping or self._broker.shutting_down:
            return Rejected(ConsumeCode.SHUTTING_DOWN, "broker is shutting down")
        if self._slave:
            return Rejected(ConsumeCode.FORBIDDEN, "this broker is a SLAVE: receive (pop) from "
                            "its master; a slave serves offset-based pulls only")  # fmt: skip
        problem = group_name_problem(group)
        if problem is not None:
            return Rejected(ConsumeCode.ILLEGAL_CONSUMER_GROUP, problem)
        route = self._broker.route(topic, namespace, reading=True)
        if route.code is not SendCode.OK:
            code = ConsumeCode.ILLEGAL_TOPIC
            if route.code is SendCode.TOPIC_NOT_FOUND:
                code = ConsumeCode.TOPIC_NOT_FOUND
            return Rejected(code, route.reason)
        if not auto_renew and not INVISIBLE_MS_MIN <= invisible_ms <= INVISIBLE_MS_MAX:
            return Rejected(
                ConsumeCode.ILLEGAL_INVISIBLE_TIME,
                f"invisible time {invisible_ms} ms is outside "
                f"[{INVISIBLE_MS_MIN}, {INVISIBLE_MS_MAX}] ms",
            )
        try:
            message_filter = self._wiring.compile_filter(filter_kind, expression)
        except self._wiring.filter_errors as err:
            return Rejected(ConsumeCode.ILLEGAL_FILTER_EXPRESSION, str(err))
        self.seen(client_id)
        request = PopRequest(
            group=group,
            topic=route.topic,
            filter=message_filter,
            batch_size=max(1, min(batch_size, BATCH_MAX)),
            invisible_ms=invisible_ms,
            settings=self.settings_of(group),
            client_id=client_id,
            auto_renew=auto_renew,
        )
        retry = None
        if not request.settings.fifo and route.topic != retry_topic(request.group):
            everything = self._wiring.compile_filter("TAG", _MATCH_ALL)
            retry = replace(request, topic=retry_topic(request.group), filter=everything)
        return Receive(request, tuple(range(route.queue_count)), retry)

    def receive_now(self, receive: Receive) -> list[Delivery]:
        """The topic's deliverable messages, then the group's retry copies (RocketMQ's
        consumers read ``%RETRY%<group>`` beside their topics); the retry and DLQ copies the
        pop asked for are stored before it returns, after the group's lock is released."""
        popped = self._pop(receive)
        self.copies.store_all(popped.copies)
        return self._received(receive, popped.deliveries)

    def _pop(self, receive: Receive) -> Popped:
        popped = self.groups.pop(receive.request, receive.queue_ids)
        room = receive.request.batch_size - len(popped.deliveries)
        if receive.retry is not None and room > 0:
            try:
                more = self.groups.pop(replace(receive.retry, batch_size=room), (0,))
            except BaseException:
                for copy in popped.copies:  # nobody will store them: deliverable again
                    self.groups.settle(copy, False)
                raise
            popped.deliveries += more.deliveries
            popped.copies += more.copies
        return popped

    def _received(self, receive: Receive, found: list[Delivery]) -> list[Delivery]:
        if found:
            self._broker.traffic.received(receive.request.group, len(found))
        return found

    @staticmethod
    def _topics(receive: Receive) -> tuple[str, ...]:
        if receive.retry is None:
            return (receive.request.topic,)
        return (receive.request.topic, receive.retry.topic)

    async def receive(self, receive: Receive, wait_s: float) -> list[Delivery]:
        """Pop; when nothing is deliverable, wait (at most ``wait_s``) for new messages or
        for an invisible one to come back, then pop again (``waiters.long_poll``)."""
        steps = long_poll(wait_s, asyncio.get_running_loop().time)
        next(steps)
        with self.waiters.watch_async(*self._topics(receive)) as woken:
            while True:
                woken.clear()  # registered before the pop: a put meanwhile still wakes us
                try:
                    remaining_s = steps.send((await self._pop_off_loop(receive), self._stopping))
                except StopIteration as answer:
                    return list(answer.value)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self._pause_s(receive, remaining_s))

    def receive_blocking(self, receive: Receive, wait_s: float) -> list[Delivery]:
        """``receive`` for a thread without an event loop (the embedded consumer)."""
        steps = long_poll(wait_s, time.monotonic)
        next(steps)
        with self.waiters.watch_thread(*self._topics(receive)) as woken:
            while True:
                woken.clear()
                try:
                    remaining_s = steps.send((self.receive_now(receive), self._stopping))
                except StopIteration as answer:
                    return list(answer.value)
                woken.wait(self._pause_s(receive, remaining_s))

    async def _pop_off_loop(self, receive: Receive) -> list[Delivery]:
        """The pop in a worker thread (it reads records and may build the index), then its
        copies in a copy thread (a SYNC put waits for its fsync). If the caller is cancelled
        meanwhile, what the pop took comes back at once instead of after its invisible time,
        and its copies are still stored."""
        work = self._pool.submit(self._pop, receive)
        try:
            popped = await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            work.add_done_callback(lambda done: self._release_taken(receive, done))
            raise
        if popped.copies:
            stored = self._copy_pool.submit(self.copies.store_all, popped.copies)
            await asyncio.shield(asyncio.wrap_future(stored))
        return self._received(receive, popped.deliveries)

    def _release_taken(self, receive: Receive, done: Future[Popped]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        popped = done.result()
        if popped.copies:
            self._copy_pool.submit(self.copies.store_all, popped.copies)
        request = receive.request
        for delivery in popped.deliveries:
            self.change_invisible(request.group, request.topic, delivery.handle.encode(), 0)

    def _pause_s(self, receive: Receive, remaining_s: float) -> float:
        """Until the earliest invisible message comes back, at most ``remaining_s``."""
        group = receive.request.group
        deadlines = [self.groups.next_deadline_ms(group, topic) for topic in self._topics(receive)]
        deadline = min((d for d in deadlines if d is not None), default=None)
        if deadline is None:
            return remaining_s
        return max(0.001, min(remaining_s, (deadline - self._clock.now_ms()) / 1000 + 0.001))

    # --- ack, invisible time, DLQ ------------------------------------------------------------

    def _handle(self, text: str) -> ReceiptHandle | Rejected:
        handle = decode_receipt_handle(text)
        if isinstance(handle, str):
            return Rejected(ConsumeCode.INVALID_RECEIPT_HANDLE, handle)
        return handle

    def ack(self, group: str, topic: str, receipt_handle: str) -> Rejected | None:
        """Acknowledge one delivery; None when done."""
        handle = self._handle(receipt_handle)
        if isinstance(handle, Rejected):
            return handle
        if self.groups.ack(group, topic, handle) is HandleCode.INVALID:
            return _stale(receipt_handle)
        self._broker.traffic.acked(group)
        return None

    def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str | Rejected:
        """The delivery's new handle, visible again ``invisible_ms`` from now."""
        if not 0 <= invisible_ms <= INVISIBLE_MS_MAX:
            return Rejected(
                ConsumeCode.ILLEGAL_INVISIBLE_TIME,
                f"invisible time {invisible_ms} ms is outside [0, {INVISIBLE_MS_MAX}] ms",
            )
        handle = self._handle(receipt_handle)
        if isinstance(handle, Rejected):
            return handle
        changed = self.groups.change_invisible(group, topic, handle, invisible_ms)
        if changed is HandleCode.INVALID or not isinstance(changed, ReceiptHandle):
            return _stale(receipt_handle)
        # Waiting receives recompute when the earliest invisible message comes back.
        self.waiters.wake({(topic, handle.queue_id)})
        return changed.encode()

    def forward_to_dlq(
        self, group: str, topic: str, receipt_handle: str, attempts: int
    ) -> Rejected | None:
        """The client gave up on this delivery (FIFO): copy it to ``%DLQ%<group>``, then
        count it consumed. Nothing changes if the copy could not be stored."""
        handle = self._handle(receipt_handle)
        if isinstance(handle, Rejected):
            return handle
        try:
            record = self._store.read_decoded(handle.physical_offset)
        except (OffsetOutOfRangeError, CorruptRecordError) as err:
            return Rejected(ConsumeCode.INVALID_RECEIPT_HANDLE, f"no message there: {err}")
        if not self.groups.is_current(group, topic, handle):
            return _stale(receipt_handle)
        properties = parse_properties(record.record.properties)
        if not self.copies.to_dlq(group, record, properties, max(attempts, handle.attempt)):
            return Rejected(ConsumeCode.STORE_ERROR, "the DLQ copy could not be stored")
        # Consumed only now that the copy is stored; if the message was delivered again in
        # between, that delivery stands (at least once).
        self.groups.ack(group, topic, handle)
        return None

    def _max_reconsume(self, group: str) -> int:
        return self.settings_of(group).retry_max_times

    max_reconsume = _max_reconsume

    def read_record(self, physical_offset: int) -> DecodedRecord:
        """The record at ``physical_offset`` (``send_back.py``'s read)."""
        return self._store.read_decoded(physical_offset)

    def put_send_back(self, request: PutRequest) -> PutResult:
        """Put a send-back copy (``send_back.py`` decides whether one may be made)."""
        return self.copies.put(request)

    # --- offsets (UpdateOffset / GetOffset / QueryOffset) --------------------------------------

    def queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offset of a queue of the store."""
        view = self.source.view(topic, queue_id)
        return view.min_offset, view.max_offset

    def update_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` for the group (clamped to the queue's bounds) and save soon."""
        low, high = self.queue_bounds(topic, queue_id)
        self.groups.set_committed(group, topic, queue_id, max(low, min(offset, high)))

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (max offset if none)."""
        stamp = lambda offset: self._store.read_decoded(offset).record.store_timestamp_ms  # noqa: E731
        return self.source.view(topic, queue_id).offset_for_time(timestamp_ms, stamp)

    def save_offsets_now(self) -> None:
        """Write the offsets files now (an offset update is durable on return)."""
        self._saver.save_now()

    # --- lifecycle ---------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """End every long poll now (each answers with what it has); refuse new receives."""
        self._stopping = True
        self.waiters.wake_all()

    def close(self) -> None:
        """Stop long polls, save progress a last time, close a queue source of our own."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.begin_shutdown()
        self.reviver.close()
        self._pool.shutdown(wait=True)
        self._copy_pool.shutdown(wait=True)
        try:
            self._saver.close()
        finally:
            # The store's own ConsumeQueues stay open: the store still dispatches the last
            # puts into them and closes them itself (closing them here made it re-create a
            # queue and write the pre-blank filler over its first unit).
            close = getattr(self.source, "close", None)
            if close is not None and self.source is not getattr(
                self._store, "consume_queues", None
            ):
                close()


def _stale(receipt_handle: str) -> Rejected:
    return Rejected(
        ConsumeCode.INVALID_RECEIPT_HANDLE,
        f"receipt handle {receipt_handle[:120]!r} is stale: acknowledged, delivered again "
        "since, or from an earlier broker run",
    )
