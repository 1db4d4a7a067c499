"""The broker's topic table: which topics exist, how many queues each has, which names are legal.

Owns topic-name validation (RocketMQ's rules: ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters,
no system topics), namespaces (``ns%topic``), auto-creation, and queue selection for a send
(round robin, or a stable hash of the FIFO message group). Knows nothing of gRPC or the store.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass

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
    "full_topic_name",
    "group_queue_id",
    "topic_name_problem",
]

TOPIC_LENGTH_MAX = 127
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
    """The queue a FIFO message group always lands in: ``|hash(group)| % queue_count``."""
    assert queue_count > 0
    return (java_string_hash(message_group) & 0x7FFFFFFF) % queue_count


def full_topic_name(name: str, namespace: str) -> str:
    """The stored topic name: ``namespace%name`` when a namespace is given (as RocketMQ 5)."""
    return f"{namespace}%{name}" if namespace else name


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user topic, or ``None`` when it can."""
    if not name:
        return "topic name is empty"
    if len(name) > TOPIC_LENGTH_MAX:
        return f"topic name is {len(name)} characters long, the limit is {TOPIC_LENGTH_MAX}"
    if not set(name) <= _TOPIC_CHARS:
        return f"topic {name!r} has characters outside [%|a-zA-Z0-9_-]"
    if name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_PREFIXES):
        return f"topic {name!r} is a system topic; producers cannot send to it"
    return None


class TopicTable:
    """Topics and their queue counts; creates unknown topics when ``auto_create`` is on.

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
        for topic, queue_count in initial:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise ValueError(f"topics: {problem}")
            self._queue_counts[topic] = queue_count

    def lookup(self, name: str, namespace: str = "") -> TopicLookup:
        """Find (or create) the topic ``name`` in ``namespace``."""
        topic = full_topic_name(name, namespace)
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
        return TopicLookup(TopicStatus.OK, topic, queue_count)

    def next_queue_id(self, topic: str, queue_count: int) -> int:
        """Round-robin queue choice for a message without a group."""
        with self._lock:
            counter = self._round_robin.setdefault(topic, itertools.count())
            return next(counter) % queue_count

    def snapshot(self) -> dict[str, int]:
        """Topic -> queue count, as now."""
        with self._lock:
            return dict(self._queue_counts)
