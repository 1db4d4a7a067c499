"""The broker's journal of redeliveries: which schedule record it put back, and where.

Owns ``<store>/config/redelivered.log``: one line per redelivered schedule record,
``<schedule physical offset> <topic> <queue id> <queue offset> <physical offset>``, appended
after the copy was stored and fsynced before the SendMessage reply leaves the broker (``sync``).
A second request for the same schedule record is answered with the first copy's position
and stores nothing: a replayed or retried request cannot make a second copy.

Keyed by the schedule record, not by UNIQ_KEY: every consumer retry of one message carries
the same UNIQ_KEY, so the store's (topic, UNIQ_KEY) window would drop a legitimate second
retry (docs/DELAY.md, "Why not the store's idempotent put"). Entries whose schedule record was
deleted with its segment are dropped when the journal is opened and every ``prune_every``
records (the file is then rewritten): such a record cannot be named any more.

``redeliver_once`` is the whole idempotent step: look up, resolve (``redelivery.py``), put,
journal. Does not own: what a redelivery stores (``redelivery.py``), the reply (``service.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rmq_spark.broker.redelivery import NotDue, RedeliveryRef, resolve_redelivery
from rmq_spark.broker.store_port import BrokerStore
from rmq_spark.errors import StoreMetadataError
from rmq_spark.store.put import PutResult, PutStatus

__all__ = [
    "JOURNAL_FILE",
    "RedeliveredCopy",
    "RedeliveryJournal",
    "redeliver_once",
]

log = logging.getLogger("rmq_spark.broker")

JOURNAL_FILE = "redelivered.log"


@dataclass(frozen=True, slots=True)
class RedeliveredCopy:
    """Where the copy of a redelivered schedule record was stored."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int


class RedeliveryJournal:
    """Schedule physical offset -> ``RedeliveredCopy``, kept in memory and on disk.

    ``lock`` serialises a redelivery's lookup, put and ``record`` (two requests for one
    record must not both miss the lookup). ``record`` writes to the OS; ``sync`` fsyncs the
    lines written since the last ``sync``.
    """

    prune_every = 65_536

    def __init__(self, path: Path, entries: dict[int, RedeliveredCopy]) -> None:
        self.path = path
        self.lock = threading.Lock()
        self._entries = entries
        self._file: TextIO | None = None  # open from a record to the next sync
        self._records_since_prune = 0

    @classmethod
    def open(cls, config_dir: Path, min_offset: int = 0) -> RedeliveryJournal:
        """Load ``config_dir/redelivered.log``, dropping entries below ``min_offset``.

        Raises
        ------
        StoreMetadataError
            A damaged line before the last (the last may be torn by a crash: ignored).
        """
        config_dir.mkdir(parents=True, exist_ok=True)
        path = config_dir / JOURNAL_FILE
        entries: dict[int, RedeliveredCopy] = {}
        dropped = 0
        lines = path.read_text(encoding="utf-8").split("\n") if path.exists() else []
        for number, line in enumerate(lines, start=1):
            if not line:
                continue
            parsed = _parse(line)
            if parsed is None:
                if number < len(lines):  # not the last: a crash tears only the end
                    raise StoreMetadataError(str(path), f"line {number} is damaged: {line[:80]!r}")
                log.info("broker: %s: ignoring a torn last line", path)
                dropped += 1
                continue
            schedule_offset, copy = parsed
            if schedule_offset < min_offset:
                dropped += 1
                continue
            entries[schedule_offset] = copy
        if dropped:
            _rewrite(path, entries)
        return cls(path, entries)

    def lookup(self, schedule_offset: int) -> RedeliveredCopy | None:
        return self._entries.get(schedule_offset)

    def record(self, schedule_offset: int, copy: RedeliveredCopy, min_offset: int = 0) -> None:
        """Append an entry (call under ``lock``); durable at the next ``sync``. Every
        ``prune_every`` records, entries below ``min_offset`` (the log's start) are dropped."""
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(_line(schedule_offset, copy))
        self._file.flush()
        self._entries[schedule_offset] = copy
        self._records_since_prune += 1
        if self._records_since_prune >= self.prune_every:
            self._prune(min_offset)

    def _prune(self, min_offset: int) -> None:
        self._records_since_prune = 0
        kept = {offset: c for offset, c in self._entries.items() if offset >= min_offset}
        if len(kept) == len(self._entries):
            return
        if self._file is not None:  # the rewrite is fsynced: it covers these lines too
            self._file.close()
            self._file = None
        _rewrite(self.path, kept)
        self._entries = kept

    def sync(self) -> None:
        """Make every ``record`` so far durable (before the reply that reports them)."""
        with self.lock:
            handle, self._file = self._file, None
            if handle is not None:
                try:
                    os.fsync(handle.fileno())
                finally:
                    handle.close()

    def __len__(self) -> int:
        return len(self._entries)


def redeliver_once(
    journal: RedeliveryJournal, store: BrokerStore, ref: RedeliveryRef, now_ms: int
) -> RedeliveredCopy | PutResult | str:
    """Redeliver ``ref`` unless it was: its first copy (nothing put), the put's result
    (journaled when OK), or why it is refused. Puts synchronously (``store.put``; a
    ``StoreError`` propagates)."""
    with journal.lock:
        copy = journal.lookup(ref.physical_offset)
        if copy is not None:
            return copy
        found = resolve_redelivery(store, ref, now_ms)
        if isinstance(found, NotDue):
            return f"not due until {found.due_ms}"
        if isinstance(found, str):
            return found
        result: PutResult = store.put(found)
        if result.status is PutStatus.PUT_OK:
            copy = RedeliveredCopy(
                result.topic, result.queue_id, result.queue_offset, result.physical_offset
            )
            journal.record(ref.physical_offset, copy, store.min_offset)
        return result


def _line(schedule_offset: int, copy: RedeliveredCopy) -> str:
    return (
        f"{schedule_offset} {copy.topic} {copy.queue_id} {copy.queue_offset} "
        f"{copy.physical_offset}\n"
    )


def _parse(line: str) -> tuple[int, RedeliveredCopy] | None:
    parts = line.split(" ")
    if len(parts) != 5 or not all(p.lstrip("-").isdigit() for p in parts[:1] + parts[2:]):
        return None
    schedule, topic, queue_id, queue_offset, physical = parts
    return int(schedule), RedeliveredCopy(topic, int(queue_id), int(queue_offset), int(physical))


def _rewrite(path: Path, entries: dict[int, RedeliveredCopy]) -> None:
    temp = path.with_suffix(".tmp")
    with temp.open("w", encoding="utf-8") as handle:
        handle.writelines(_line(offset, copy) for offset, copy in entries.items())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
