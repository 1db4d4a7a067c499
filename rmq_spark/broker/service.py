"""The broker's logic: validate a send, pick its queue, build the stored message, put it.

Owns the decisions a RocketMQ 5 broker (proxy + broker) makes for a producer's message:
validation and the matching status code, the topic/route table (``topics.py``), FIFO and
round-robin queue choice, the properties a record carries (TAGS, KEYS, UNIQ_KEY, CLUSTER, user
properties, ``__SHARDINGKEY``), the timer transform of delayed messages (docs/DELAY.md:
``rmq_sys_wheel_timer`` queue 0 with TIMER_OUT_MS, REAL_TOPIC, REAL_QID), idempotence of
retried sends, and refusing work once a shutdown began.

Does not own: protobuf or gRPC (``grpc_api.py`` translates), process lifecycle (``server.py``),
record encoding and durability (the store: a put is acknowledged only when the store says OK).
"""

from __future__ import annotations

import contextvars
import enum
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig, parse_topic_spec
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED, RedeliveryRef
from rmq_spark.broker.redelivery_journal import (
    RedeliveredCopy,
    RedeliveryJournal,
    redeliver_once,
    store_min_offset,
)
from rmq_spark.broker.topics import TopicStatus, TopicTable, group_queue_id
from rmq_spark.broker.traffic import TrafficStats
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import StoreClosedError, StoreError
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level
from rmq_spark.store.layout import RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import LOCALHOST, HostAddress
from rmq_spark.store.properties import (
    BORN_TIMESTAMP,
    CLUSTER,
    KEYS,
    REAL_QID,
    REAL_TOPIC,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
)
from rmq_spark.store.put import PutRequest, PutResult, PutStatus

__all__ = [
    "BrokerService",
    "DELIVERY_MS_MAX",
    "MessageKind",
    "RESERVED_PROPERTY_KEYS",
    "RouteOutcome",
    "SendCode",
    "SendCommand",
    "SendOutcome",
]

log = logging.getLogger("rmq_spark.broker")

# Properties the broker writes that properties.py has no constant for (FORMAT.md 2.2).
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"

# MessageConst.STRING_HASH_SET: keys a user property may not use (RocketMQ 5 plus TIMER_*).
RESERVED_PROPERTY_KEYS = frozenset(
    {
        "TRACE_ON", "MSG_REGION", KEYS, TAGS, "WAIT", "DELAY", "RETRY_TOPIC", REAL_TOPIC,
        REAL_QID, "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        UNIQ_KEY, "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", CLUSTER, "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
        "INNER_MULTI_DISPATCH", "INNER_NUM", "INNER_BASE", "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS", "__transactionId__", "TIMER_DELAY_SEC",
        TIMER_DELIVER_MS, "TIMER_DELAY_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", TIMER_OUT_MS, "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        SHARDING_KEY, BORN_HOST, TRACE_CONTEXT, BORN_TIMESTAMP, "__CRC32#",
        "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "REDIRECT", "PROPERTY_FORWARD_QUEUE_ID",
    }
)  # fmt: skip
_MESSAGE_ID_LENGTH_MAX = 128
# google.protobuf.Timestamp's range ends at 9999-12-31T23:59:59.999Z; a Java reader parses
# TIMER_DELIVER_MS as a long, so anything wider must never be stored.
DELIVERY_MS_MAX = 253_402_300_799_999
_KEY_LENGTH_MAX = 128 * 1024


class MessageKind(enum.Enum):
    """The message type a producer declared (``apache.rocketmq.v2.MessageType``)."""

    UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


class SendCode(enum.Enum):
    """Outcome of a send; ``grpc_api`` maps each to the RocketMQ status code of the same name."""

    OK = "OK"
    BAD_REQUEST = "BAD_REQUEST"
    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"
    ILLEGAL_MESSAGE_TAG = "ILLEGAL_MESSAGE_TAG"
    ILLEGAL_MESSAGE_KEY = "ILLEGAL_MESSAGE_KEY"
    ILLEGAL_MESSAGE_GROUP = "ILLEGAL_MESSAGE_GROUP"
    ILLEGAL_MESSAGE_PROPERTY_KEY = "ILLEGAL_MESSAGE_PROPERTY_KEY"
    ILLEGAL_MESSAGE_ID = "ILLEGAL_MESSAGE_ID"
    ILLEGAL_DELIVERY_TIME = "ILLEGAL_DELIVERY_TIME"
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    MESSAGE_BODY_EMPTY = "MESSAGE_BODY_EMPTY"
    MESSAGE_BODY_TOO_LARGE = "MESSAGE_BODY_TOO_LARGE"
    MESSAGE_PROPERTIES_TOO_LARGE = "MESSAGE_PROPERTIES_TOO_LARGE"
    UNSUPPORTED = "UNSUPPORTED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FLUSH_TIMEOUT = "FLUSH_TIMEOUT"
    STORE_ERROR = "STORE_ERROR"


@dataclass(frozen=True, slots=True)
class SendCommand:
    """One message a producer asks us to store, already out of its wire form.

    ``delivery_timestamp_ms`` is absolute epoch milliseconds (the wire layer normalises the
    client's seconds/milliseconds quirk). ``born_host`` is the peer address when known;
    ``born_host_text`` is what the client said its host was.
    """

    topic: str
    body: bytes
    message_id: str
    namespace: str = ""
    kind: MessageKind = MessageKind.UNSPECIFIED
    tag: str | None = None
    keys: tuple[str, ...] = ()
    user_properties: Mapping[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    born_timestamp_ms: int = 0
    born_host: HostAddress | None = None
    born_host_text: str = ""
    trace_context: str = ""
    delay_level: int | None = None  # RocketMQ 4 style delay level (embedded sends only)
    # A redelivery request of the schedule job (``redelivery.py``): names a schedule record in
    # this store (a str: why the request could not be read); nothing else of the command is used.
    redelivery: RedeliveryRef | str | None = None


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """What happened to a send. On ``OK``: where the message is (its stored topic/queue)."""

    code: SendCode
    reason: str = ""
    message_id: str = ""
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    physical_offset: int = -1
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        return self.code is SendCode.OK


@dataclass(frozen=True, slots=True)
class RouteOutcome:
    """A route answer: ``code`` is OK, ILLEGAL_TOPIC or TOPIC_NOT_FOUND."""

    code: SendCode
    topic: str
    queue_count: int = 0
    reason: str = ""


# How a store refusal reaches the producer (RocketMQ's SendMessageProcessor + proxy mapping).
_PUT_CODES = {
    PutStatus.FLUSH_DISK_TIMEOUT: SendCode.FLUSH_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: SendCode.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.SERVICE_NOT_AVAILABLE: SendCode.SHUTTING_DOWN,
    PutStatus.CREATE_MAPPED_FILE_FAILED: SendCode.STORE_ERROR,
    PutStatus.UNKNOWN_ERROR: SendCode.STORE_ERROR,
}


def _reject(code: SendCode, reason: str, message_id: str = "") -> SendOutcome:
    return SendOutcome(code, reason, message_id)


_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _has_control_chars(text: str) -> bool:
    return _CONTROL_CHARS.search(text) is not None


# Set by ``send_async`` around its (synchronous) ``send``: ``_put`` then hands the request
# back (``_PutLater``) instead of putting it, and the coroutine awaits ``put_async``.
_PUT_LATER: contextvars.ContextVar[bool] = contextvars.ContextVar("put_later", default=False)


class _PutLater(Exception):  # noqa: N818 - control flow inside BrokerService, never escapes
    def __init__(self, request: PutRequest, message_id: str) -> None:
        super().__init__(message_id)
        self.request = request
        self.message_id = message_id


def _store_failure(err: StoreError, message_id: str) -> SendOutcome:
    if isinstance(err, StoreClosedError):
        return _reject(SendCode.SHUTTING_DOWN, "the store is closed", message_id)
    return _reject(SendCode.STORE_ERROR, f"store error: {err}", message_id)


def _put_outcome(result: PutResult, message_id: str) -> SendOutcome:
    """``OK`` with the stored position for ``PUT_OK``, else the matching refusal."""
    if result.status is PutStatus.PUT_OK:
        return SendOutcome(
            SendCode.OK,
            message_id=message_id,
            topic=result.topic,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            physical_offset=result.physical_offset,
            duplicate=result.duplicate,
        )
    code = _PUT_CODES.get(result.status, SendCode.STORE_ERROR)
    return _reject(code, f"{result.status.name}: {result.detail}", message_id)


class BrokerService:
    """Puts producers' messages into a ``MessageStore``; thread-safe.

    Parameters
    ----------
    store
        The open store (anything with ``put(PutRequest) -> PutResult``). The service does not
        close it.
    config
        The broker section of the configuration.
    clock
        Used for delivery-time checks of delayed messages.
    max_message_size_bytes
        Largest body accepted: the store's ``StoreConfig.max_message_size_bytes`` (one knob
        for both, so the broker never accepts what the store would refuse).
    """

    def __init__(
        self,
        store: object,
        config: BrokerConfig | None = None,
        *,
        clock: Clock | None = None,
        max_message_size_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._store = store
        self._config = config or BrokerConfig()
        self._clock = clock or SystemClock()
        self.max_message_size_bytes = max_message_size_bytes
        self.topics = TopicTable(
            auto_create=self._config.auto_create_topics,
            default_queue_count=self._config.default_queue_count,
            initial=[
                parse_topic_spec(spec, self._config.default_queue_count)
                for spec in self._config.topics
            ],
        )
        # Delay levels past the last are refused (the store alone would clamp them silently).
        store_config = getattr(store, "config", None)
        levels = getattr(store_config, "message_delay_level", DEFAULT_MESSAGE_DELAY_LEVEL)
        self._delay_level_max = len(parse_message_delay_level(levels))
        self._state_lock = threading.Condition()
        self._journal: RedeliveryJournal | None = None
        self._journal_lock = threading.Lock()
        self._shutting_down = False
        self._in_flight = 0
        self.traffic = TrafficStats()  # read by metrics.py at scrape time

    @property
    def config(self) -> BrokerConfig:
        return self._config

    # --- lifecycle ------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new sends from now on (``SHUTTING_DOWN``); sends in progress finish."""
        with self._state_lock:
            self._shutting_down = True
            self._state_lock.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no send is in progress; ``False`` if ``timeout_s`` passed first."""
        with self._state_lock:
            return self._state_lock.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    # --- routes ---------------------------------------------------------------------------

    def route(self, topic: str, namespace: str = "", *, reading: bool = False) -> RouteOutcome:
        """The queues of ``topic`` (creating it when auto-creation is on); ``reading``: see
        ``TopicTable.lookup``."""
        found = self.topics.lookup(topic, namespace, reading=reading)
        if found.status is TopicStatus.ILLEGAL:
            return RouteOutcome(SendCode.ILLEGAL_TOPIC, found.topic, reason=found.reason)
        if found.status is TopicStatus.NOT_FOUND:
            return RouteOutcome(SendCode.TOPIC_NOT_FOUND, found.topic, reason=found.reason)
        return RouteOutcome(SendCode.OK, found.topic, found.queue_count)

    # --- sends ----------------------------------------------------------------------------

    @property
    def puts_async(self) -> bool:
        """Whether the store has ``put_async``: then ``send_async`` never blocks its loop."""
        return hasattr(self._store, "put_async")

    async def send_async(self, command: SendCommand) -> SendOutcome:
        """``send`` for a coroutine on an event loop (the gRPC handlers): the same checks and
        the same acknowledgement (``OK`` only once the store made the record durable under its
        flush policy), but the put is the store's ``put_async``: under SYNC the coroutine
        awaits the fsync, no thread blocks per send. Needs ``puts_async``."""
        with self._state_lock:  # in flight until the put is answered (send counts itself too)
            self._in_flight += 1
        try:
            token = _PUT_LATER.set(True)
            try:
                return self.send(command)  # refused, or answered without a put
            except _PutLater as later:
                request, message_id = later.request, later.message_id
            finally:
                _PUT_LATER.reset(token)
            started = time.perf_counter()
            try:
                result: PutResult = await self._store.put_async(request)  # type: ignore[attr-defined]
            except StoreError as err:
                return _store_failure(err, message_id)
            self.traffic.put_done((result,), time.perf_counter() - started)
            return _put_outcome(result, message_id)
        finally:
            with self._state_lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._state_lock.notify_all()

    def send(self, command: SendCommand) -> SendOutcome:
        """Validate, place and store one message.

        Returns
        -------
        SendOutcome
            ``OK`` only once the store acknowledged the record (durable under the store's
            flush policy). A retried send (same topic and message id) returns the first
            outcome's position with ``duplicate=True`` and stores nothing new.
        """
        with self._state_lock:
            if self._shutting_down:
                return _reject(
                    SendCode.SHUTTING_DOWN, "broker is shutting down", command.message_id
                )
            self._in_flight += 1
        try:
            return self._send(command)
        finally:
            with self._state_lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._state_lock.notify_all()

    def send_batch(self, commands: Sequence[SendCommand]) -> list[SendOutcome]:
        """``send`` of many messages with one store ``put_batch`` (one lock, one write, one
        fsync under SYNC), in order; the same checks and outcomes as ``send`` one by one,
        except that a refusal by the store itself (not by the checks) refuses the whole
        batch, as ``put_batch`` is all or nothing. Redelivery commands are not accepted."""
        with self._state_lock:
            if self._shutting_down:
                return [
                    _reject(SendCode.SHUTTING_DOWN, "broker is shutting down", c.message_id)
                    for c in commands
                ]
            self._in_flight += 1
        try:
            placed = [self._place(command) for command in commands]
            requests = [p for p in placed if isinstance(p, PutRequest)]
            started = time.perf_counter()
            try:
                results: list[PutResult] = (
                    self._store.put_batch(requests) if requests else []  # type: ignore[attr-defined]
                )
            except StoreError as err:
                return [_store_failure(err, c.message_id) for c in commands]
            self.traffic.put_done(results, time.perf_counter() - started)
            stored = iter(results)
            return [
                _put_outcome(next(stored), c.message_id) if isinstance(p, PutRequest) else p
                for c, p in zip(commands, placed, strict=True)
            ]
        finally:
            with self._state_lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._state_lock.notify_all()

    def _send(self, command: SendCommand) -> SendOutcome:
        if command.redelivery is not None:
            return self._redeliver(command.redelivery, command.message_id)
        placed = self._place(command)
        if isinstance(placed, SendOutcome):
            return placed
        return self._put(placed, command.message_id)

    def _place(self, command: SendCommand) -> PutRequest | SendOutcome:
        """The checks and the placement of a send: its put request, or the refusal."""
        if command.redelivery is not None:
            return _reject(SendCode.BAD_REQUEST, "a redelivery in a batch", command.message_id)
        problem = self._validate(command)
        if problem is not None:
            return problem
        route = self.route(command.topic, command.namespace)
        if route.code is not SendCode.OK:
            return _reject(route.code, route.reason, command.message_id)
        if command.message_group is not None:
            queue_id = group_queue_id(command.message_group, route.queue_count)
        else:
            queue_id = self.topics.next_queue_id(route.topic, route.queue_count)
        properties = self._properties(command, route.topic)
        if command.delay_level is not None:
            # The store's put path rewrites it into SCHEDULE_TOPIC_XXXX (docs/DELAY.md).
            properties["DELAY"] = str(command.delay_level)
        topic, stored_queue_id = route.topic, queue_id
        if command.delivery_timestamp_ms is not None:
            timer = self._timer_transform(command.delivery_timestamp_ms, properties)
            if isinstance(timer, SendOutcome):
                return timer
            if timer:
                properties[REAL_TOPIC] = route.topic
                properties[REAL_QID] = str(queue_id)
                topic, stored_queue_id = RMQ_SYS_WHEEL_TIMER_TOPIC, 0
        request = PutRequest(
            topic=topic,
            queue_id=stored_queue_id,
            body=command.body,
            properties=properties,
            born_timestamp_ms=command.born_timestamp_ms or None,
            born_host=command.born_host or LOCALHOST,
            idempotent=True,
        )
        return request

    def _redeliver(self, ref: RedeliveryRef | str, message_id: str) -> SendOutcome:
        """Put back a due schedule record of this store exactly as the in-process schedule
        job does (docs/DELAY.md, "Redelivery through a broker"), once: a second request for
        the same record answers the first copy's position. Every refusal is the same
        ``REDELIVERY_REFUSED`` (the reason is logged). Puts synchronously (never from
        ``send_async``: ``grpc_api`` runs redeliveries on its executor)."""
        if isinstance(ref, str):  # the wire layer could not read the request
            return self._refuse_redelivery(ref, message_id)
        try:
            found = redeliver_once(
                self.redelivery_journal(), self._store, ref, self._clock.now_ms()
            )
        except StoreError as err:
            return _store_failure(err, message_id)
        if isinstance(found, str):
            return self._refuse_redelivery(found, message_id)
        if not isinstance(found, RedeliveredCopy):
            self.traffic.put_done((found,), None)
        if isinstance(found, RedeliveredCopy):  # redelivered before: its first copy
            return SendOutcome(
                SendCode.OK,
                message_id=message_id,
                topic=found.topic,
                queue_id=found.queue_id,
                queue_offset=found.queue_offset,
                physical_offset=found.physical_offset,
                duplicate=True,
            )
        return _put_outcome(found, message_id)

    @staticmethod
    def _refuse_redelivery(reason: str, message_id: str) -> SendOutcome:
        log.info("broker: redelivery request %r refused: %s", message_id, reason)
        return _reject(SendCode.BAD_REQUEST, REDELIVERY_REFUSED, message_id)

    @property
    def store_root(self) -> Path | None:
        """The store's root directory (``None`` for a store without one)."""
        root = getattr(self._store, "root_dir", None)
        return Path(root) if root is not None else None

    @property
    def clock(self) -> Clock:
        return self._clock

    def redelivery_journal(self) -> RedeliveryJournal:
        """The journal of redeliveries (``<store>/config/redelivered.log``), opened once."""
        with self._journal_lock:
            if self._journal is None:
                root = Path(getattr(self._store, "root_dir", "."))
                self._journal = RedeliveryJournal.open(
                    root / "config", store_min_offset(self._store)
                )
            return self._journal

    def sync_redeliveries(self) -> None:
        """Make the journal lines of the redeliveries answered so far durable: call before
        replying to a request that redelivered."""
        if self._journal is not None:
            self._journal.sync()

    def _put(self, request: PutRequest, message_id: str) -> SendOutcome:
        if _PUT_LATER.get():  # inside send_async: it awaits the put itself
            raise _PutLater(request, message_id)
        started = time.perf_counter()
        try:
            result: PutResult = self._store.put(request)  # type: ignore[attr-defined]
        except StoreError as err:
            return _store_failure(err, message_id)
        self.traffic.put_done((result,), time.perf_counter() - started)
        return _put_outcome(result, message_id)

    # --- the pieces -----------------------------------------------------------------------

    def validate(self, command: SendCommand) -> SendOutcome | None:
        """The broker's rules for one message, without storing it: ``None`` when it may be
        sent, else the refusal ``send`` would answer (the CLI's ``send`` applies them too)."""
        return self._validate(command)

    def _validate(self, command: SendCommand) -> SendOutcome | None:
        cfg, mid = self._config, command.message_id
        if not mid or len(mid) > _MESSAGE_ID_LENGTH_MAX or _has_control_chars(mid):
            return _reject(SendCode.ILLEGAL_MESSAGE_ID, f"bad message id {mid!r}", mid)
        if not command.body:
            return _reject(SendCode.MESSAGE_BODY_EMPTY, "message body is empty", mid)
        if len(command.body) > self.max_message_size_bytes:
            return _reject(
                SendCode.MESSAGE_BODY_TOO_LARGE,
                f"message body is {len(command.body)} bytes, "
                f"the limit is {self.max_message_size_bytes}",
                mid,
            )
        kind = command.kind
        if kind in (MessageKind.TRANSACTION, MessageKind.LITE, MessageKind.PRIORITY):
            return _reject(
                SendCode.UNSUPPORTED, f"{kind.name} messages are not supported by this broker", mid
            )
        has_group = command.message_group is not None
        has_delay = command.delivery_timestamp_ms is not None
        if command.delay_level is not None:
            if not 1 <= command.delay_level <= self._delay_level_max:
                return _reject(
                    SendCode.BAD_REQUEST,
                    f"delay_level must be in [1, {self._delay_level_max}], "
                    f"got {command.delay_level}",
                    mid,
                )
            if has_group or has_delay:
                return _reject(
                    SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    "delay_level cannot be combined with message_group or delivery_timestamp_ms",
                    mid,
                )
        if has_delay and not 0 <= (command.delivery_timestamp_ms or 0) <= DELIVERY_MS_MAX:
            return _reject(
                SendCode.ILLEGAL_DELIVERY_TIME,
                f"delivery time {command.delivery_timestamp_ms} ms is outside "
                f"[0, {DELIVERY_MS_MAX}] (1970 to 9999)",
                mid,
            )
        conflict = (
            (kind is MessageKind.NORMAL and (has_group or has_delay))
            or (kind is MessageKind.FIFO and not has_group)
            or (kind is MessageKind.DELAY and not has_delay)
            or (has_group and has_delay)
        )
        if conflict:
            return _reject(
                SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"message type {kind.name} conflicts with "
                f"message_group={command.message_group!r}, "
                f"delivery_timestamp_ms={command.delivery_timestamp_ms!r}",
                mid,
            )
        if command.tag is not None and (
            not command.tag.strip() or "|" in command.tag or _has_control_chars(command.tag)
        ):
            return _reject(SendCode.ILLEGAL_MESSAGE_TAG, f"bad tag {command.tag!r}", mid)
        for key in command.keys:
            if not key.strip() or _has_control_chars(key) or len(key) > _KEY_LENGTH_MAX:
                return _reject(SendCode.ILLEGAL_MESSAGE_KEY, f"bad message key {key!r}", mid)
        if has_group:
            group = command.message_group or ""
            if (
                not group.strip()
                or _has_control_chars(group)
                or len(group) > cfg.message_group_length_max
            ):
                return _reject(
                    SendCode.ILLEGAL_MESSAGE_GROUP,
                    f"bad message group {group[:80]!r} (1 to {cfg.message_group_length_max} "
                    "characters, no control characters)",
                    mid,
                )
        return self._validate_user_properties(command.user_properties, mid)

    def _validate_user_properties(
        self, properties: Mapping[str, str], mid: str
    ) -> SendOutcome | None:
        cfg = self._config
        if len(properties) > cfg.user_property_count_max:
            return _reject(
                SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
                f"{len(properties)} user properties, the limit is {cfg.user_property_count_max}",
                mid,
            )
        size_bytes = 0
        for key, value in properties.items():
            if not key or _has_control_chars(key) or key in RESERVED_PROPERTY_KEYS:
                return _reject(
                    SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
                    f"user property key {key!r} is empty, reserved or has control characters",
                    mid,
                )
            if _has_control_chars(value):
                return _reject(
                    SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY,
                    f"user property {key!r} has control characters in its value",
                    mid,
                )
            size_bytes += len(key.encode("utf-8")) + len(value.encode("utf-8"))
        if size_bytes > cfg.user_properties_size_bytes_max:
            return _reject(
                SendCode.MESSAGE_PROPERTIES_TOO_LARGE,
                f"user properties take {size_bytes} bytes, "
                f"the limit is {cfg.user_properties_size_bytes_max}",
                mid,
            )
        return None

    def _properties(self, command: SendCommand, topic: str) -> dict[str, str]:
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
        if command.born_host_text and not _has_control_chars(command.born_host_text):
            properties[BORN_HOST] = command.born_host_text
        if command.trace_context and not _has_control_chars(command.trace_context):
            properties[TRACE_CONTEXT] = command.trace_context
        properties[CLUSTER] = self._config.cluster_name
        return properties

    def _timer_transform(self, deliver_ms: int, properties: dict[str, str]) -> bool | SendOutcome:
        """HookUtils.transformTimerMessage: True when the message must wait in the timer topic.

        A delivery time already past is stored in the real topic at once (as RocketMQ does).
        """
        now_ms = self._clock.now_ms()
        if deliver_ms <= now_ms:
            return False
        if deliver_ms - now_ms > self._config.delay_ms_max:
            return _reject(
                SendCode.ILLEGAL_DELIVERY_TIME,
                f"delivery time {deliver_ms} is {deliver_ms - now_ms} ms ahead, "
                f"the limit is {self._config.delay_ms_max} ms",
                properties[UNIQ_KEY],
            )
        precision_ms = self._config.timer_precision_ms
        # RocketMQ rounds down to the wheel's precision, and an exact multiple one step down.
        if deliver_ms % precision_ms == 0:
            out_ms = deliver_ms - precision_ms
        else:
            out_ms = deliver_ms // precision_ms * precision_ms
        properties[TIMER_OUT_MS] = str(out_ms)
        return True
