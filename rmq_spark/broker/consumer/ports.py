"""What the consumer side needs from the rest of the broker, as small protocols.

The consume path reads queues through ``QueueSource`` (the broker's ConsumeQueue: a
``store.cq_view.CqView`` per queue, the one reader of queues Spark and the CLI use too), matches
messages with a ``MessageFilter`` made by a ``FilterCompiler`` and asks ``GroupSettingsSource``
for a group's retry limit and FIFO flag. ``wiring.broker_wiring``
builds the real ones over a store; ``ConsumerWiring`` names them, so a test or an embedding
application can replace one (e.g. group settings) with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.put import PutRequest, PutResult

__all__ = [
    "ConsumerStore",
    "ConsumerWiring",
    "FilterCompiler",
    "GroupSettingsLike",
    "GroupSettingsSource",
    "MessageFilter",
    "QueueListener",
    "QueueSource",
    "RecordReader",
]

QueueListener = Callable[[set[tuple[str, int]]], None]
"""Called with the (topic, queue id) pairs that grew; from the source's own thread."""


class QueueSource(Protocol):
    """The ConsumeQueue: (topic, queue, queue offset) -> CommitLog position."""

    def view(self, topic: str, queue_id: int) -> CqView:
        """The queue, live (its ``max_offset`` moves as messages arrive; an empty view for a
        queue without messages yet: ask again, do not keep it)."""
        ...

    def add_listener(self, listener: QueueListener) -> None:
        """Call ``listener`` whenever queues grow."""
        ...


class RecordReader(Protocol):
    """The store, for reading the records the queues point at."""

    def read_decoded(self, physical_offset: int) -> DecodedRecord: ...


class ConsumerStore(RecordReader, Protocol):
    """What the consume path uses of a ``MessageStore``: reads, retry and DLQ puts, its
    directory."""

    @property
    def root_dir(self) -> Path: ...

    def put(self, request: PutRequest) -> PutResult: ...

    def put_batch(self, requests: Sequence[PutRequest]) -> list[PutResult]: ...


class MessageFilter(Protocol):
    """A compiled TAG or SQL92 subscription expression."""

    def matches_tags_code(self, code: int) -> bool:
        """False only when no message with this ConsumeQueue tags code can match."""
        ...

    def matches(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        """Whether a message with these TAGS and properties is delivered."""
        ...


FilterCompiler = Callable[[str, str], MessageFilter]
"""``compile(kind, expression)`` with kind ``"TAG"`` or ``"SQL92"``; raises on a bad one."""


class GroupSettingsLike(Protocol):
    @property
    def retry_max_times(self) -> int: ...

    @property
    def fifo(self) -> bool: ...


class GroupSettingsSource(Protocol):
    def get(self, group: str) -> GroupSettingsLike: ...

    def snapshot(self) -> Mapping[str, GroupSettingsLike]: ...

    def document(self) -> str: ...

    def update(
        self,
        group: str,
        *,
        retry_max_times: int | None = None,
        fifo: bool | None = None,
        consume_enable: bool | None = None,
    ) -> GroupSettingsLike: ...


@dataclass(frozen=True, slots=True)
class ConsumerWiring:
    """The collaborators of the consume path.

    ``queue_source(store)`` gives the store's ConsumeQueue (closed with the broker when it
    has a ``close``). ``filter_errors`` are the exception types ``compile_filter`` raises for a bad
    expression (answered ``ILLEGAL_FILTER_EXPRESSION``). ``read_offsets``/``write_offsets``
    read and write ``config/consumerOffset.json`` under a store root:
    ``{(topic, group): {queue_id: offset}}``.
    """

    queue_source: Callable[[Any], QueueSource]
    compile_filter: FilterCompiler
    filter_errors: tuple[type[Exception], ...]
    group_settings: GroupSettingsSource
    read_offsets: Callable[..., dict[tuple[str, str], dict[int, int]]]
    write_offsets: Callable[..., None]
