"""The broker's topic table: which topics exist, how many queues each has, which names are legal.

Owns topic-name validation (RocketMQ's rules: ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters,
no system topics), namespaces (``ns%topic``), auto-creation, and queue selection for a send
(round robin, or Guava's consistent hash of the FIFO message group, as RocketMQ's proxy).
Knows nothing of gRPC or the store.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.rocketmq_config import TopicConfig
from rmq_spark.broker.rocketmq_config_files import read_topics, write_topics
from rmq_spark.clock import Clock
from rmq_spark.errors import StoreIOError
from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)

__all__ = [
    "TopicLookup",
    "TopicStatus",
    "TopicTable",
    "consistent_hash",
    "full_topic_name",
    "group_queue_id",
    "stored_topic_problem",
    "topic_name_problem",
]

TOPIC_LENGTH_MAX = 127
_STORED_LENGTH_MAX = 255  # a group's %RETRY%/%DLQ% topic may be longer; a file name may not
_TOPIC_CHARS = frozenset("%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# TopicValidator.SYSTEM_TOPIC_SET (RocketMQ 5) plus our own reserved names.
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "SCHEDULE_TOPIC_XXXX",
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_WHEEL_TIMER_TOPIC,
    }
)
_SYSTEM_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%", "%LMQ%")
_GROUP_PREFIXES = ("%RETRY%", "%DLQ%")  # a consumer group's own topics: readable
log = logging.getLogger("rmq_spark.broker")
# Our topics take NORMAL, FIFO and DELAY messages alike; RocketMQ 5's proxy accepts that on a
# topic only with message.type MIXED (without the attribute a topic is NORMAL only).
_MIXED = {"attributes": {"message.type": "MIXED"}}
_MASK64 = (1 << 64) - 1
_LCG_MULTIPLIER = 2862933555777941757  # Guava Hashing.LinearCongruentialGenerator
_TWO_POW_31 = float(1 << 31)
_INT_MAX = (1 << 31) - 1


class TopicStatus(enum.Enum):
    """Outcome of a topic lookup."""

    OK = "ok"
    ILLEGAL = "illegal"  # the name breaks the naming rules or is a system topic
    NOT_FOUND = "not_found"  # legal, but absent and auto-creation is off


@dataclass(frozen=True, slots=True)
class TopicLookup:
    """A topic lookup: ``status``, the stored ``topic`` name, its ``queue_count``, a reason."""

    status: TopicStatus
    topic: str
    queue_count: int = 0
    reason: str = ""


def group_queue_id(message_group: str, queue_count: int) -> int:
    """The queue of a FIFO message group, as RocketMQ 5.3.3's proxy picks it
    (``SendMessageActivity``): Guava ``Hashing.consistentHash(group.hashCode(), queue_count)``.

    A store that changes hands between rmq-spark and RocketMQ keeps each group in its queue.

    Examples
    --------
    >>> group_queue_id("group-0", 8), group_queue_id("group-1", 8)
    (1, 7)
    """
    return consistent_hash(java_string_hash(message_group), queue_count)


def consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)`` (jump hash over Guava's own
    ``LinearCongruentialGenerator``); ``key`` is a Java long (an int is sign-extended)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive: {buckets}")
    state = key & _MASK64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _MASK64
        # ((double) ((int) (state >>> 33) + 1)) / 2^31, the int sum wrapping at 2^31
        draw = (state >> 33) + 1
        next_double = (draw if draw <= _INT_MAX else draw - (1 << 32)) / _TWO_POW_31
        # Java's (int) cast truncates toward zero and saturates at the int range.
        next_bucket = max(min(int((candidate + 1) / next_double), _INT_MAX), -_INT_MAX - 1)
        if not 0 <= next_bucket < buckets:
            return candidate
        candidate = next_bucket


def _user_topic(topic: str, queue_count: int) -> TopicConfig:
    return TopicConfig(topic, queue_count, queue_count, extra=_MIXED)


def full_topic_name(name: str, namespace: str) -> str:
    """The stored topic name: ``namespace%name`` when a namespace is given (as RocketMQ 5)."""
    return f"{namespace}%{name}" if namespace else name


def stored_topic_problem(name: str, limit: int = _STORED_LENGTH_MAX) -> str | None:
    """Why ``name`` cannot be the name of any stored topic (the broker's own system topics
    included), or ``None``: also the check of a topic name that comes from a URL, since a
    legal name is one safe path component (no ``/``, no ``.``)."""
    if not name:
        return "topic name is empty"
    if len(name) > limit:
        return f"topic name is {len(name)} characters long, the limit is {limit}"
    if not set(name) <= _TOPIC_CHARS:
        return f"topic {name!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user topic, or ``None`` when it can."""
    problem = stored_topic_problem(name, TOPIC_LENGTH_MAX)
    if problem is not None:
        return problem
    if name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_PREFIXES):
        return f"topic {name!r} is a system topic; producers cannot send to it"
    return None


class TopicTable:
    """Topics and their queue counts; creates unknown topics when ``auto_create`` is on.

    With ``use_config_file`` the table is kept in RocketMQ's ``config/topics.json``.
    Thread-safe: gRPC handlers look topics up from several threads.
    """

    def __init__(
        self,
        *,
        auto_create: bool,
        default_queue_count: int,
        initial: Iterable[tuple[str, int]] = (),
    ) -> None:
        self._auto_create = auto_create
        self._default_queue_count = default_queue_count
        self._lock = threading.Lock()
        self._queue_counts: dict[str, int] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._configs: dict[str, TopicConfig] = {}  # what topics.json holds
        self._config_root: Path | None = None
        self._clock: Clock | None = None
        self._persist_lock = threading.Lock()
        for topic, queue_count in initial:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise ValueError(f"topics: {problem}")
            self._queue_counts[topic] = queue_count

    def lookup(self, name: str, namespace: str = "", *, reading: bool = False) -> TopicLookup:
        """Find (or create) the topic ``name`` in ``namespace``. ``reading`` (a route query
        or a consumer) may also name a group's ``%RETRY%``/``%DLQ%`` topic once the broker
        wrote to it, as RocketMQ lets a consumer subscribe to ``%DLQ%<group>``; sends to
        those stay refused."""
        topic = full_topic_name(name, namespace)
        if reading and name.startswith(_GROUP_PREFIXES):
            with self._lock:
                queue_count = self._queue_counts.get(topic)
            if queue_count is not None:
                return TopicLookup(TopicStatus.OK, topic, queue_count)
        problem = topic_name_problem(name) or (topic_name_problem(topic) if namespace else None)
        if problem is not None:
            return TopicLookup(TopicStatus.ILLEGAL, topic, reason=problem)
        with self._lock:
            queue_count = self._queue_counts.get(topic)
            if queue_count is None:
                if not self._auto_create:
                    return TopicLookup(
                        TopicStatus.NOT_FOUND,
                        topic,
                        reason=f"topic {topic!r} does not exist and auto-creation is off",
                    )
                queue_count = self._default_queue_count
                self._queue_counts[topic] = queue_count
                self._configs[topic] = _user_topic(topic, queue_count)
                created = True
            else:
                created = False
        if created:  # in topics.json before the first message of the topic is put
            self._persist_logging_failure()
        return TopicLookup(TopicStatus.OK, topic, queue_count)

    def next_queue_id(self, topic: str, queue_count: int) -> int:
        """Round-robin queue choice for a message without a group."""
        with self._lock:
            counter = self._round_robin.setdefault(topic, itertools.count())
            return next(counter) % queue_count

    def use_config_file(self, root: Path, *, clock: Clock | None = None) -> None:
        """Load ``<root>/config/topics.json`` and keep it current from now on.

        Topics in the file join the table with their write queue count; a topic configured
        for this start keeps its configured count (the file is updated). Other fields a
        RocketMQ broker wrote are kept. The file is written now and after every topic
        creation, so a RocketMQ broker started on a copy of the store routes every topic.
        Raises ``StoreMetadataError`` (unreadable file) or ``StoreIOError``.
        """
        stored = read_topics(root)
        with self._lock:
            configured = dict(self._queue_counts)
            for topic, config in stored.items():
                self._configs[topic] = config
                self._queue_counts.setdefault(topic, config.write_queue_nums)
            for topic, queue_count in configured.items():
                existing = self._configs.get(topic)
                if existing is None:
                    self._configs[topic] = _user_topic(topic, queue_count)
                elif existing.write_queue_nums != queue_count:
                    self._configs[topic] = dataclasses.replace(
                        existing, read_queue_nums=queue_count, write_queue_nums=queue_count
                    )
            self._config_root, self._clock = Path(root), clock
        self._persist()

    def add_internal(self, topic: str, queue_count: int = 1) -> None:
        """Record a topic the broker itself writes (``%RETRY%group``, ``%DLQ%group``) so that
        topics.json lists it; its name stays illegal for producers."""
        with self._lock:
            if topic in self._queue_counts:
                return
            self._queue_counts[topic] = queue_count
            self._configs[topic] = TopicConfig(topic, queue_count, queue_count)
        self._persist_logging_failure()

    def _persist(self) -> None:
        """Write topics.json from the table (no-op without ``use_config_file``)."""
        with self._persist_lock:
            with self._lock:
                root, configs = self._config_root, dict(self._configs)
            if root is not None:
                write_topics(root, configs, clock=self._clock)

    def _persist_logging_failure(self) -> None:
        # The topic exists in memory and the send may go on; topics.json is RocketMQ's view
        # of the table and is rewritten whole at the next creation.
        try:
            self._persist()
        except StoreIOError as err:
            log.error("topics.json not updated: %s", err)

    def snapshot(self) -> dict[str, int]:
        """Topic -> queue count, as now."""
        with self._lock:
            return dict(self._queue_counts)
