"""A Spark query as a RocketMQ consumer group: physical offsets <-> the group's queue offsets.

Owns (1) translating the end of a committed micro-batch (one CommitLog offset) into a queue
offset per (topic, queue) of the query's topics: the first unit whose record starts at or
after the end, by binary search in the ConsumeQueue (``store.cq_view.CqView``, read-only);
a queue whose ConsumeQueue lags behind the end gets what is dispatched, so the group never
runs ahead of Spark's commit; (2) committing them forward only, through a running
broker (gRPC GetOffset + UpdateOffset) or, with none, into consumerOffset.json under the
offsets lock (``persist.commit_offsets_offline``); (3) the other way for
``startingOffsets=group``: the smallest physical offset that skips no unit at or after any
queue's committed offset. The Spark checkpoint stays the query's source of truth; this is
what other tools see.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.broker.config_files.rocketmq_config_files import read_consumer_offsets
from rmq_spark.broker.consumer.persist import commit_offsets_offline
from rmq_spark.errors import BrokerError, ConsumeRejectedError, GroupOffsetError, StoreLockedError
from rmq_spark.spark.options import SourceOptions
from rmq_spark.store.cq_view import CqView, queue_dirs, queue_topics
from rmq_spark.store.view import StoreView

if TYPE_CHECKING:
    from rmq_spark.broker.offset_client import OffsetClient

__all__ = [
    "GroupCommitter",
    "GroupSync",
    "committer_for",
    "group_start_offset",
    "group_topics",
    "queue_offsets_at",
    "retry_topic_of",
    "start_of_group",
]

log = logging.getLogger("rmq_spark.spark")

_SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "%LMQ%", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_")


def retry_topic_of(group: str) -> str:
    return f"%RETRY%{group}"


def group_topics(
    root: Path, group: str, topics: Iterable[str] = (), topic_pattern: str = ""
) -> list[str]:
    """The topics a query with ``consumerGroup=group`` consumes as the group: its topics (or
    every non-system topic with a ConsumeQueue matching the pattern, or every one) and the
    group's retry topic."""
    named = list(topics)
    if not named:
        named = [t for t in queue_topics(root) if not t.startswith(_SYSTEM_PREFIXES)]
        if topic_pattern:
            named = [t for t in named if re.fullmatch(topic_pattern, t)]
    retry = retry_topic_of(group)
    return [t for t in named if t != retry] + [retry]


def queue_offsets_at(root: Path, topics: Iterable[str], end: int) -> dict[tuple[str, int], int]:
    """(topic, queue) -> the queue offset of the first record at or after CommitLog ``end``."""
    offsets: dict[tuple[str, int], int] = {}
    for topic in topics:
        for queue_id, directory in queue_dirs(root, topic).items():
            with CqView.open(directory) as queue:
                offsets[(topic, queue_id)] = queue.first_at_or_after(end)
    return offsets


def group_start_offset(
    root: Path, topics: Iterable[str], committed: Mapping[tuple[str, int], int]
) -> int | None:
    """The smallest CommitLog offset from which no unit at or after any queue's committed
    offset is skipped; None when no queue of ``topics`` has a unit.

    A queue the group never committed in counts from its oldest unit (as the broker serves a
    new group); a queue consumed to its end bounds the start by the end of its last record.
    """
    bounds: list[int] = []
    for topic in topics:
        for queue_id, directory in queue_dirs(root, topic).items():
            with CqView.open(directory) as queue:
                bound = _start_bound(queue, committed.get((topic, queue_id), queue.min_offset))
            if bound is not None:
                bounds.append(bound)
    return min(bounds, default=None)


def _start_bound(queue: CqView, committed: int) -> int | None:
    """Where the record at ``committed`` (or the first after it naming one) starts; past the
    queue's last record when it is consumed to its end; ``None`` for a queue without units."""
    position = max(committed, queue.min_offset)
    while position < queue.max_offset:
        physical = queue.physical_at(position)
        if physical is not None:
            return physical
        position += 1  # the pre-blank filler names no record
    last = queue.unit(queue.max_offset - 1)
    return None if last is None else last[0] + last[1]


def committed_offsets(root: Path, group: str) -> dict[tuple[str, int], int]:
    """(topic, queue) -> committed offset of ``group`` in consumerOffset.json."""
    return {
        (topic, queue_id): offset
        for (topic, name), queues in read_consumer_offsets(Path(root)).items()
        if name == group
        for queue_id, offset in queues.items()
    }


@dataclass
class GroupCommitter:
    """Commits a query's progress as ``group``'s offsets, forward only.

    ``brokers`` is a broker's gRPC address (``host:port``); without it, a broker found holding
    the store is an error (its address is needed) and a store nobody holds gets the file.
    """

    root: Path
    group: str
    topics: tuple[str, ...]
    brokers: str = ""
    credentials: tuple[str, str] | None = None  # signs the offset RPCs (broker auth on)

    def commit(self, end: int) -> dict[tuple[str, int], int]:
        """Commit the queue offsets at CommitLog ``end``; returns the ones that moved."""
        return self.commit_offsets(queue_offsets_at(self.root, self.topics, end))

    def commit_offsets(self, wanted: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commit ``wanted`` (forward only); returns the offsets that moved."""
        if not wanted:
            return {}
        if self.brokers:
            return self._commit_rpc(wanted)
        try:
            return commit_offsets_offline(self.root, self.group, wanted)
        except StoreLockedError as err:
            raise GroupOffsetError(
                f"{self.root}: a broker holds the store; give the source option brokers "
                f"(its gRPC host:port) to commit group {self.group!r} through it"
            ) from err

    def committed(self) -> dict[tuple[str, int], int]:
        """The group's committed offsets (through the broker when there is one)."""
        if self.brokers:
            with _client(self.brokers, self.credentials) as client:
                return {
                    key: found
                    for key in queue_offsets_at(self.root, self.topics, 0)
                    if (found := client.get(self.group, *key)) is not None
                }
        return committed_offsets(self.root, self.group)

    def _commit_rpc(self, wanted: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        moved: dict[tuple[str, int], int] = {}
        with _client(self.brokers, self.credentials) as client:
            for (topic, queue_id), offset in wanted.items():
                current = client.get(self.group, topic, queue_id)
                if current is not None and current >= offset:
                    continue
                if client.update(self.group, topic, queue_id, offset):
                    moved[(topic, queue_id)] = offset
        return moved


@contextmanager
def _client(address: str, credentials: tuple[str, str] | None) -> Iterator[OffsetClient]:
    """The broker's offset RPCs; its errors as ``GroupOffsetError`` (the query's)."""
    # Imported here: the gRPC client and its protobufs cost every stream's planning process
    # ~35 ms of start, and only a query with a broker address uses them.
    from rmq_spark.broker.offset_client import OffsetClient

    try:
        with OffsetClient(address, credentials=credentials) as client:
            yield client
    except (BrokerError, ConsumeRejectedError) as err:
        raise GroupOffsetError(f"consumer group offsets on {address}: {err}") from err


class GroupSync:
    """A ``consumerGroup`` query's link to its group: ``advance(end)`` once Spark committed the
    batch ending at ``end``. Sends only what changed since the last success; a broker that
    cannot be reached is logged, not raised (the group stays behind and catches up with a
    later batch: the checkpoint is the truth); a broker holding the store without the
    ``brokers`` option is raised."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._sent: dict[tuple[str, int], int] = {}

    def advance(self, end: int) -> None:
        committer = committer_for(self._options)
        wanted = queue_offsets_at(committer.root, committer.topics, end)
        if wanted == self._sent:
            return
        try:
            committer.commit_offsets(wanted)
        except GroupOffsetError as err:
            if not committer.brokers:
                raise
            log.error(
                "group %s: commit through %s failed: %s", committer.group, committer.brokers, err
            )
            return
        self._sent = wanted


def committer_for(options: SourceOptions) -> GroupCommitter:
    """The committer of a ``consumerGroup`` query (its topics looked up now: new ones join)."""
    root = Path(options.path)
    group = options.consumer_group
    topics = group_topics(root, group, options.topics, options.topic_pattern)
    return GroupCommitter(root, group, tuple(topics), options.brokers, options.credentials)


def start_of_group(view: StoreView, options: SourceOptions, end: int) -> int:
    """``startingOffsets=group``: where the group's committed offsets say to start (a queue
    without one from its oldest unit; the oldest stored byte when the topics have no unit),
    within ``[view.min_offset, end]``."""
    committer = committer_for(options)
    start = group_start_offset(committer.root, committer.topics, committer.committed())
    if start is None:
        start = view.min_offset
    if start < view.min_offset:
        log.warning(
            "group %s: committed offsets point at %d, deleted; starting at %d",
            options.consumer_group,
            start,
            view.min_offset,
        )
    return min(max(start, view.min_offset), end)
