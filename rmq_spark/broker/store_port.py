"""What the broker needs of its store, as one ``Protocol``: ``BrokerStore``.

``store.message_store.MessageStore`` is the one implementation; the broker's parts
(``service.py``, the consume path, the redelivery journal, metrics, the assembly) type their
store with this, so what the broker relies on is written down once and checked by mypy
instead of reached through ``getattr``. The consume path's narrower view is
``consumer/ports.ConsumerStore``; this extends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rmq_spark.broker.consumer.ports import ConsumerStore
from rmq_spark.errors import StoreError
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.latency import LatencySnapshot
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.put import PutRequest, PutResult

__all__ = ["BrokerStore"]


class BrokerStore(ConsumerStore, Protocol):
    """An open ``MessageStore`` as the broker uses it."""

    @property
    def config(self) -> StoreConfig: ...

    @property
    def min_offset(self) -> int:
        """The first CommitLog offset still held (records below it were deleted)."""
        ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def fsync_stats(self) -> LatencySnapshot: ...

    @property
    def consume_queues(self) -> ConsumeQueues: ...

    @property
    def commitlog(self) -> CommitLog:
        """The segments: a record's stored bytes (``read(offset, size)``), as a remoting
        pull sends them."""
        ...

    def put_batch(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """All or nothing; one write, one fsync under SYNC."""
        ...

    async def put_async(self, request: PutRequest) -> PutResult:
        """``put`` whose durability wait is awaited on the caller's loop."""
        ...

    async def put_many_async(self, requests: Sequence[PutRequest]) -> list[PutResult | StoreError]:
        """``put_async`` of each, awaited together: each result or its put's ``StoreError``."""
        ...

    async def put_batch_async(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """``put_batch`` whose durability wait is awaited on the caller's loop."""
        ...

    def read(self, physical_offset: int) -> MessageRecord: ...

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        """The next queue offset of every (topic, queue id) the log holds."""
        ...

    def close(self) -> None:
        """Flush, write a clean checkpoint, remove ``abort``."""
        ...
