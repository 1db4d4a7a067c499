"""The transactions of a store as it is on disk, read-only: for ``rmq-spark transactions`` and
``rmq-spark groups``, also while a broker runs (as of the files' last writes).

Owns ``transaction_rows`` (one row per transaction, (real topic, UNIQ_KEY): its first half,
born time, check count, producer group and state), ``pending_counts`` and
``pending_by_group`` (the dashboard's pending view). Which transactions are resolved and
which were discarded is ``TransactionService``'s rule, run here over read-only ConsumeQueue
views and CommitLog reads (``ReadOnlyStore``); a resolved one is ``committed`` when its
committed copy (tx bits COMMIT, ``prepared_transaction_offset`` = one of its halves) is in its
real queue; the states and their precedence are ``store/tx_states.py``'s, which the Spark
``transactions`` view applies too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rmq_spark.broker.transactions.records import HALF_QUEUE_ID, check_times
from rmq_spark.broker.transactions.service import TransactionService, TxKey, key_of
from rmq_spark.errors import StoreError
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.layout import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
)
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import PRODUCER_GROUP, REAL_QID, parse_properties
from rmq_spark.store.reader import read_record_at
from rmq_spark.store.tx_states import tx_state
from rmq_spark.store.view import StoreView

__all__ = [
    "PendingGroup",
    "ReadOnlyStore",
    "TxRow",
    "pending_by_group",
    "pending_counts",
    "transaction_rows",
]

_BATCH = 1024


class _Queues:
    """``consume_queues`` as ``TransactionService`` reads it, over read-only views."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._views: dict[tuple[str, int], CqView] = {}

    def view(self, topic: str, queue_id: int) -> CqView:
        key = (topic, queue_id)
        if key not in self._views:
            self._views[key] = CqView.open(self._root / CONSUME_QUEUE_DIR / topic / str(queue_id))
        return self._views[key]

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.view(topic, queue_id).min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.view(topic, queue_id).max_offset

    def units(self, topic: str, queue_id: int, start: int, count: int) -> list[CqUnit]:
        return self.view(topic, queue_id).cq_units(start, count)

    def close(self) -> None:
        for view in self._views.values():
            view.close()


class ReadOnlyStore:
    """The parts of a ``BrokerStore`` the transaction rule reads, opening nothing for write."""

    def __init__(self, root: Path) -> None:
        self.consume_queues = _Queues(root)
        self._view = StoreView.open(root)

    def read(self, physical_offset: int) -> MessageRecord:
        span = self._view.span_at(physical_offset)
        if span is None:
            raise StoreError(f"no record at {physical_offset} (deleted or not written)")
        try:
            with self._view.segment(span) as segment:
                found = read_record_at(segment, physical_offset, check_crc=False)
        except (OSError, ValueError) as err:
            raise StoreError(f"no record at {physical_offset}: {err}") from err
        if found is None:
            raise StoreError(f"no record at {physical_offset}")
        return found.record

    def records(self, topic: str, queue_id: int, start: int = -1) -> Iterator[MessageRecord]:
        """The records of a queue from ``start`` (default: its first), skipping gone ones."""
        view = self.consume_queues.view(topic, queue_id)
        offset, end = max(start, view.min_offset), view.max_offset
        while offset < end:
            units = view.cq_units(offset, min(_BATCH, end - offset))
            if not units:
                return
            for unit in units:
                try:
                    yield self.read(unit.physical_offset)
                except StoreError:
                    continue
            offset += len(units)

    def close(self) -> None:
        self.consume_queues.close()


@dataclass
class TxRow:
    """One transaction: as the Spark ``transactions`` view's row."""

    topic: str
    uniq_key: str
    queue_id: int
    half_offset: int  # the first half's CommitLog offset
    born_timestamp: int  # ms
    check_count: int
    state: str = "pending"
    commit_offset: int = -1  # the committed copy's CommitLog offset
    producer_group: str = ""  # the half's PGROUP (the topic, for gRPC producers)
    _halves: set[int] = field(default_factory=set, repr=False)


def _rows(store: ReadOnlyStore) -> tuple[dict[TxKey, TxRow], TransactionService]:
    service = TransactionService(cast(Any, store))
    service.refresh()
    rows: dict[TxKey, TxRow] = {}
    for half in store.records(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID):
        key = key_of(half)
        row = rows.get(key)
        if row is None:
            props = parse_properties(half.properties)
            queue_id = props.get(REAL_QID, "0")
            row = rows[key] = TxRow(
                key[0], key[1], int(queue_id) if queue_id.isdigit() else 0,
                half.physical_offset, half.born_timestamp_ms, 0,
                producer_group=props.get(PRODUCER_GROUP, ""),
            )  # fmt: skip
        row.check_count = max(row.check_count, check_times(half))
        row._halves.add(half.physical_offset)
    for key, row in rows.items():
        resolved = service.is_resolved(key)
        row.state = tx_state(committed=False, discarded=key in service.discarded, resolved=resolved)
    return rows, service


def _find_commits(store: ReadOnlyStore, rows: dict[TxKey, TxRow]) -> None:
    """Set ``commit_offset`` and the state of the rows whose committed copy is in their real
    queue (read from the queue's first unit at or after their first half): a committed copy
    outranks every other piece of evidence, an op marker not yet written too."""
    asked: dict[tuple[str, int], list[TxRow]] = {}
    for row in rows.values():
        asked.setdefault((row.topic, row.queue_id), []).append(row)
    for (topic, queue_id), wanted in asked.items():
        view = store.consume_queues.view(topic, queue_id)
        start = view.first_at_or_after(min(r.half_offset for r in wanted))
        by_key = {r.uniq_key: r for r in wanted}
        for record in store.records(topic, queue_id, start):
            if record.sys_flag & TRANSACTION_MASK != TRANSACTION_COMMIT_TYPE:
                continue
            row = by_key.get(key_of(record)[1])
            if row is not None and record.prepared_transaction_offset in row._halves:
                row.commit_offset = record.physical_offset
                row.state = tx_state(committed=True, discarded=False, resolved=True)


def transaction_rows(root: Path) -> list[TxRow]:
    """Every transaction of the store at ``root``, in the order of their first halves."""
    store = ReadOnlyStore(root)
    try:
        rows, _ = _rows(store)
        _find_commits(store, rows)
    finally:
        store.close()
    return sorted(rows.values(), key=lambda r: r.half_offset)


def _pending_rows(root: Path) -> list[TxRow]:
    if not (root / CONSUME_QUEUE_DIR / RMQ_SYS_TRANS_HALF_TOPIC).is_dir():
        return []
    store = ReadOnlyStore(root)
    try:
        rows, _ = _rows(store)
    finally:
        store.close()
    return [row for row in rows.values() if row.state == "pending"]


def pending_counts(root: Path) -> dict[tuple[str, int], int]:
    """Pending transactions per (real topic, queue id) of the store at ``root``."""
    counts: dict[tuple[str, int], int] = {}
    for row in _pending_rows(root):
        counts[(row.topic, row.queue_id)] = counts.get((row.topic, row.queue_id), 0) + 1
    return counts


@dataclass
class PendingGroup:
    """The pending transactions of one (real topic, producer group)."""

    topic: str
    producer_group: str
    count: int
    oldest_born_timestamp: int  # ms: the born time of the oldest pending half
    max_check_count: int  # checks of the most-checked pending one


def pending_by_group(root: Path) -> list[PendingGroup]:
    """Pending transactions per (real topic, producer group) of the store at ``root``, sorted."""
    groups: dict[tuple[str, str], PendingGroup] = {}
    for row in _pending_rows(root):
        key = (row.topic, row.producer_group)
        found = groups.get(key)
        if found is None:
            groups[key] = PendingGroup(*key, 1, row.born_timestamp, row.check_count)
            continue
        found.count += 1
        found.oldest_born_timestamp = min(found.oldest_born_timestamp, row.born_timestamp)
        found.max_check_count = max(found.max_check_count, row.check_count)
    return [groups[key] for key in sorted(groups)]
