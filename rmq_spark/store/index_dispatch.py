"""Dispatch into the IndexFile: records -> keys (RocketMQ ``CommitLogDispatcherBuildIndex``,
``IndexService.buildIndex``; docs/FORMAT.md 11).

Owns ``IndexDispatch``: the index's half of a ConsumeQueue dispatch round (``cq_dispatch``
hands it the same put-time facts, ``cq_facts.py``, in the same pass) and of the recovery scan
at open (``index_recovery.py`` hands it records read back). A record is indexed once (when
its physical offset is past the last one indexed, or it is that one and lacks keys) under
``topic#UNIQ_KEY`` and ``topic#<each KEYS token>`` (``index_file.record_keys``), with its
stored topic, unless it is a rolled-back transaction message. Does not own the files
(``index_files.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from rmq_spark.store.cq_facts import BatchFact, Fact, SingleFact
from rmq_spark.store.index_file import KeyHashes, indexed, record_keys
from rmq_spark.store.index_files import IndexFiles
from rmq_spark.store.properties import KEYS, UNIQ_KEY, parse_properties

__all__ = ["IndexDispatch"]

_log = logging.getLogger(__name__)
_KEYS_MARK = KEYS + "\x01"


class IndexDispatch:
    """Builds keys for ``files`` (one caller at a time: the dispatch round or recovery)."""

    def __init__(self, files: IndexFiles) -> None:
        self.files = files
        self._hashes = KeyHashes()
        self._through, self._done_keys = files.indexed_through()
        self._failed = False

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """Index the records of a dispatch round's facts (log order). A failed write is
        logged and ends indexing until the next open (the ConsumeQueue goes on)."""
        if self._failed:
            return
        hashes: list[int] = []
        offsets: list[int] = []
        stamps: list[int] = []
        # Consecutive single template puts to one topic (only a UNIQ_KEY each) are hashed
        # as one column; anything else ends the run. Keys stay in log order.
        run: list[SingleFact] = []
        for fact in facts:
            if type(fact[0]) is int:
                single = cast("SingleFact", fact)
                if single[7] is None and single[5] == 0 and single[9] is not None:
                    if run and run[0][2] != single[2]:
                        self._add_run(hashes, offsets, stamps, run)
                        run = []
                    run.append(single)
                    continue
                if run:
                    self._add_run(hashes, offsets, stamps, run)
                    run = []
                offset, _, topic, _, _, sys_flag, _, props, stamp, uniq = single
                self.add_record(
                    hashes, offsets, stamps, offset, topic, sys_flag, props, uniq, stamp
                )
            else:
                if run:
                    self._add_run(hashes, offsets, stamps, run)
                    run = []
                self._add_batch(hashes, offsets, stamps, cast("BatchFact", fact))
        if run:
            self._add_run(hashes, offsets, stamps, run)
        self.put(hashes, offsets, stamps)

    def _add_run(
        self, hashes: list[int], offsets: list[int], stamps: list[int], run: list[SingleFact]
    ) -> None:
        if run[0][0] <= self._through:  # not after recovery: the dispatcher starts past it
            run = [fact for fact in run if fact[0] > self._through]
            if not run:
                return
        hashes += self._hashes.of(run[0][2] + "#", [cast("str", fact[9]) for fact in run])
        offsets += [fact[0] for fact in run]
        stamps += [fact[8] for fact in run]

    def put(self, hashes: list[int], offsets: list[int], stamps: list[int]) -> None:
        if not hashes or self._failed:
            return
        try:
            self.files.put(hashes, offsets, stamps)
        except OSError as err:
            self._failed = True
            _log.error("index: building stopped at %d: %s", offsets[0], err, exc_info=err)
            return
        self._through = offsets[-1]

    def _add_batch(
        self, hashes: list[int], offsets: list[int], stamps: list[int], fact: BatchFact
    ) -> None:
        columns, sys_flags, props, stamp, uniqs = fact[0], fact[5], fact[7], fact[8], fact[9]
        n = len(columns)
        topics = fact[2]
        if (
            props is None and uniqs is not None and None not in uniqs
            and columns[0] > self._through and topics.count(topics[0]) == n
            and sys_flags.count(0) == n
        ):  # fmt: skip
            # A template batch: one topic, only UNIQ_KEYs, not a transaction.
            hashes += self._hashes.of(topics[0] + "#", cast("Sequence[str]", uniqs))
            offsets += columns
            stamps += [stamp] * n if type(stamp) is int else cast("Sequence[int]", stamp)
            return
        if props is not None and self._keyed_column(hashes, offsets, stamps, fact):
            return
        for i in range(n):
            self.add_record(
                hashes, offsets, stamps, columns[i], topics[i], sys_flags[i],
                None if props is None else props[i], None if uniqs is None else uniqs[i],
                stamp if type(stamp) is int else cast("Sequence[int]", stamp)[i],
            )  # fmt: skip

    def _keyed_column(
        self, hashes: list[int], offsets: list[int], stamps: list[int], fact: BatchFact
    ) -> bool:
        """A batch with properties (a slave's replicated records) whose records all have one
        topic, are all indexed, past the index's end and have a UNIQ_KEY and no KEYS (their
        properties do not even contain ``KEYS``'s name): its keys hashed as one column.
        ``False`` (nothing added): ``add_record`` takes each record."""
        columns, topics, sys_flags, props, stamp = fact[0], fact[2], fact[5], fact[7], fact[8]
        n = len(columns)
        if columns[0] <= self._through or topics.count(topics[0]) != n:
            return False
        if not all(map(indexed, sys_flags)):
            return False
        texts = cast("Sequence[str]", props)
        if _KEYS_MARK in "".join(texts):  # some record may have KEYS: add_record's
            return False
        uniqs = [parse_properties(text).get(UNIQ_KEY) for text in texts]
        if None in uniqs:
            return False
        hashes += self._hashes.of(topics[0] + "#", cast("list[str]", uniqs))
        offsets += columns
        stamps += [stamp] * n if type(stamp) is int else cast("Sequence[int]", stamp)
        return True

    def add_record(
        self,
        hashes: list[int],
        offsets: list[int],
        stamps: list[int],
        offset: int,
        topic: str,
        sys_flag: int,
        props: str | None,
        uniq: str | None,
        stamp: int,
    ) -> None:
        """Add one record's keys to the columns: ``props`` its stored properties (then
        ``uniq`` is not read), or ``None`` when they are only TAGS and ``uniq``."""
        if offset < self._through or not indexed(sys_flag):
            return
        if props is None:
            keys = [] if uniq is None else [uniq]
        else:
            parsed = parse_properties(props)
            keys = record_keys(parsed.get(UNIQ_KEY), parsed.get(KEYS))
        if offset == self._through:  # the last record indexed: only the keys it lacks
            keys = keys[self._done_keys :]
        if keys:
            hashes += self._hashes.of(topic + "#", keys)
            offsets += [offset] * len(keys)
            stamps += [stamp] * len(keys)
