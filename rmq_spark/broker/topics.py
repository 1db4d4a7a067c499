"""The broker's topic table: which topics exist, how many queues each has, which names are legal.

Owns topic- and group-name validation (RocketMQ's rules: ``^[%|a-zA-Z0-9_-]+$``, a topic at
most 127 characters and no system topic, a group at most 255 and, where a client consumes or
commits as it, no system group; ``stored_topic_problem`` for any stored name, also one from a
URL), the full name of a namespaced topic or group (``ns%name``), auto-creation and its
per-client budget (``CreationBudget``), and queue selection for a send (round robin, or Guava's
consistent hash of the FIFO message group, as RocketMQ's proxy).
Knows nothing of gRPC or the store.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config import TopicConfig
from rmq_spark.broker.config_files.rocketmq_config_files import read_topics_versioned, write_topics
from rmq_spark.broker.config_files.topics_file import TopicsFileWriter
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.store.hashing import java_string_hash
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)

__all__ = [
    "CreationBudget",
    "TopicLookup",
    "TopicStatus",
    "TopicTable",
    "consistent_hash",
    "full_topic_name",
    "group_name_problem",
    "group_queue_id",
    "stored_topic_problem",
    "topic_name_problem",
]

TOPIC_LENGTH_MAX = 127
GROUP_LENGTH_MAX = 255  # Validators.CHARACTER_MAX_LENGTH
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
        "TRANS_CHECK_MAX_TIME_TOPIC",  # discarded half messages (broker/transactions/)
    }
)
_SYSTEM_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%", "%LMQ%")
_GROUP_PREFIXES = ("%RETRY%", "%DLQ%")  # a consumer group's own topics: readable
# MixAll's system consumer groups (CID_RMQ_SYS_*) and the names of a group's own topics.
_SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", *_GROUP_PREFIXES)
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


def _logged_topics(
    seen: Iterable[tuple[str, int]], known: dict[str, TopicConfig], default_queue_count: int
) -> dict[str, TopicConfig]:
    """Topics of the log that topics.json lacks: a producer's (``_user_topic``) and a
    group's retry and dead-letter topics, with at least as many queues as the log shows."""
    queues: dict[str, int] = {}
    for topic, queue_id in seen:
        if topic not in known:
            queues[topic] = max(queues.get(topic, 0), queue_id + 1)
    found = {}
    for topic, count in queues.items():
        if topic.startswith(_GROUP_PREFIXES) and stored_topic_problem(topic) is None:
            found[topic] = TopicConfig(topic, count, count)
        elif topic_name_problem(topic.rpartition("%")[2]) is None:
            count = max(count, default_queue_count)
            found[topic] = _user_topic(topic, count)
    return found


def full_topic_name(name: str, namespace: str) -> str:
    """The stored name of a topic or group: ``namespace%name`` when a namespace is given (as
    RocketMQ 5's NamespaceUtil). The one name the ACL checks and the service uses."""
    return f"{namespace}%{name}" if namespace else name


def group_name_problem(name: str, namespace: str = "", *, system_ok: bool = False) -> str | None:
    """Why ``name`` in ``namespace`` cannot be a consumer group, or ``None`` when it can.

    As the 5.x proxy's ``validateConsumerGroup``: not empty, at most 255 characters of
    ``[%|a-zA-Z0-9_-]`` (the namespaced name too), and, unless ``system_ok``, not a system
    group (``CID_RMQ_SYS_*``, ``%RETRY%*``, ``%DLQ%*``)."""
    full = full_topic_name(name, namespace)
    if not name:
        return "consumer group name is empty"
    if len(full) > GROUP_LENGTH_MAX:
        return (
            f"consumer group name is {len(full)} characters long, the limit is {GROUP_LENGTH_MAX}"
        )
    if not set(full) <= _TOPIC_CHARS:
        return f"consumer group {full[:GROUP_LENGTH_MAX]!r} has characters outside [%|a-zA-Z0-9_-]"
    if not system_ok and name.startswith(_SYSTEM_GROUP_PREFIXES):
        return f"consumer group {name!r} is a system group; clients cannot consume as it"
    return None


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


class CreationBudget:
    """How many topics each client may auto-create: a token bucket per client (its source
    address), ``rate_per_s`` tokens a second up to ``burst``; ``rate_per_s`` 0: no limit.
    Not thread-safe (``TopicTable`` calls it under its lock)."""

    _MAX_CLIENTS = 10_000  # full buckets are forgotten beyond this many clients

    def __init__(self, rate_per_s: float, burst: int, clock: Clock | None = None) -> None:
        self.rate_per_s = rate_per_s
        self.burst = max(1, burst)
        self._clock = clock or SystemClock()
        self._buckets: dict[str, tuple[float, int]] = {}  # client -> (tokens, at ms)

    def take(self, client: str) -> bool:
        """Spend one creation of ``client``; ``False`` when its budget is used up."""
        if self.rate_per_s <= 0:
            return True
        now = self._clock.now_ms()
        if len(self._buckets) >= self._MAX_CLIENTS and client not in self._buckets:
            self._forget_full(now)
            if len(self._buckets) >= self._MAX_CLIENTS:
                client = "*"  # more clients at once than we track: they share one bucket
        tokens, at = self._buckets.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s / 1000)
        if tokens < 1:
            self._buckets[client] = (tokens, now)
            return False
        self._buckets[client] = (tokens - 1, now)
        return True

    def _forget_full(self, now: int) -> None:
        refill = self.burst * 1000 / self.rate_per_s
        self._buckets = {c: b for c, b in self._buckets.items() if now - b[1] < refill}


class TopicTable:
    """Topics and their queue counts; creates unknown topics when ``auto_create`` is on, at
    most as fast as ``budget`` lets each client.

    With ``use_config_file`` the table is kept in RocketMQ's ``config/topics.json`` by a
    ``TopicsFileWriter``: a creation changes memory only; ``close`` writes the rest.
    Thread-safe: gRPC handlers look topics up from several threads.
    """

    def __init__(
        self,
        *,
        auto_create: bool,
        default_queue_count: int,
        initial: Iterable[tuple[str, int]] = (),
        budget: CreationBudget | None = None,
    ) -> None:
        self._auto_create = auto_create
        self._default_queue_count = default_queue_count
        self._budget = budget or CreationBudget(0, 1)
        self._lock = threading.Lock()
        self._queue_counts: dict[str, int] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._configs: dict[str, TopicConfig] = {}  # what topics.json holds
        self._change = 0  # bumped with every change of _configs
        self._writer: TopicsFileWriter | None = None
        for topic, queue_count in initial:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise ValueError(f"topics: {problem}")
            self._queue_counts[topic] = queue_count

    def lookup(
        self, name: str, namespace: str = "", *, reading: bool = False, client: str = ""
    ) -> TopicLookup:
        """Find (or create) the topic ``name`` in ``namespace``. ``reading`` (a route query
        or a consumer) may also name a group's ``%RETRY%``/``%DLQ%`` topic once the broker
        wrote to it, as RocketMQ lets a consumer subscribe to ``%DLQ%<group>``; sends to
        those stay refused. ``client`` (its address; "" when unknown) spends the creation
        budget; over it, an absent topic is ``NOT_FOUND``."""
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
            if queue_count is not None:
                return TopicLookup(TopicStatus.OK, topic, queue_count)
            refusal = self._creation_refusal(topic, client)
            if refusal is not None:
                return TopicLookup(TopicStatus.NOT_FOUND, topic, reason=refusal)
            queue_count = self._default_queue_count
            self._queue_counts[topic] = queue_count
            change = self._changed_locked(topic, _user_topic(topic, queue_count))
        self._written_later(change)
        return TopicLookup(TopicStatus.OK, topic, queue_count)

    def _creation_refusal(self, topic: str, client: str) -> str | None:
        if not self._auto_create:
            return f"topic {topic!r} does not exist and auto-creation is off"
        if not self._budget.take(client):
            return (
                f"topic {topic!r} does not exist and client {client or '(unknown)'} may "
                f"auto-create no more topics now (broker.auto_create_topics_per_s = "
                f"{self._budget.rate_per_s:g}, burst {self._budget.burst})"
            )
        return None

    def _changed_locked(self, topic: str, config: TopicConfig) -> int:
        self._configs[topic] = config
        self._change += 1
        return self._change

    def _written_later(self, change: int) -> None:
        # Outside the lock, no I/O: the writer thread puts it in topics.json.
        if self._writer is not None:
            self._writer.changed(change)

    def next_queue_id(self, topic: str, queue_count: int) -> int:
        """Round-robin queue choice for a message without a group."""
        with self._lock:
            counter = self._round_robin.setdefault(topic, itertools.count())
            return next(counter) % queue_count

    def use_config_file(
        self,
        root: Path,
        *,
        clock: Clock | None = None,
        seen: Iterable[tuple[str, int]] = (),
    ) -> None:
        """Load ``<root>/config/topics.json`` and keep it current from now on.

        Topics in the file join the table with their write queue count; a topic configured
        for this start keeps its configured count (the file is updated). Other fields a
        RocketMQ broker wrote are kept. ``seen``: the (topic, queue id) pairs of the store's
        log; a topic in it that the file lacks (created just before a crash) joins too. The
        file is written now, after topic creations (``TopicsFileWriter``) and at ``close``,
        so a RocketMQ broker started on the store routes every topic.
        Raises ``StoreMetadataError`` (unreadable file) or ``StoreIOError``.
        """
        stored, version = read_topics_versioned(root)
        stored = {**_logged_topics(seen, stored, self._default_queue_count), **stored}
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
            change, configs = self._change, dict(self._configs)
        version = write_topics(root, configs, clock=clock, version=version)
        self._writer = TopicsFileWriter(Path(root), self._copy, version, clock)
        self._writer.changed(change)  # already written: the writer starts there

    def _copy(self) -> tuple[int, dict[str, TopicConfig]]:
        with self._lock:
            return self._change, dict(self._configs)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until topics.json holds every topic so far; ``False`` on timeout."""
        return self._writer.flush(timeout_s) if self._writer is not None else True

    def close(self) -> None:
        """Write what topics.json lacks and stop its writer (a broker's clean stop)."""
        if self._writer is not None:
            self._writer.close()

    def add_internal(self, topic: str, queue_count: int = 1, *, client: str | None = None) -> bool:
        """Record a topic the broker itself writes (``%RETRY%group``, ``%DLQ%group``) so that
        topics.json lists it; its name stays illegal for producers. ``client`` (an address):
        a new topic spends its creation budget; False (nothing created) when over it."""
        with self._lock:
            if topic in self._queue_counts:
                return True
            if client is not None and not self._budget.take(client):
                return False
            self._queue_counts[topic] = queue_count
            change = self._changed_locked(topic, TopicConfig(topic, queue_count, queue_count))
        self._written_later(change)
        return True

    def queue_count(self, topic: str) -> int | None:
        """The queue count of the stored topic ``topic``; None when the table has no such
        topic (never creates one: a reader's question)."""
        with self._lock:
            return self._queue_counts.get(topic)

    def snapshot(self) -> dict[str, int]:
        """Topic -> queue count, as now."""
        with self._lock:
            return dict(self._queue_counts)
