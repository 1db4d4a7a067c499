"""How far the reput tables are behind the durable log (bytes, messages, seconds).

``reput_lag`` counts the records from a log position to the readable end; ``tables_lag``
finds the position the three tables are complete up to from their newest reput commits.
Split from ``reput.py`` (which re-exports these names); writes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.tables import (
    MESSAGES,
    TABLE_NAMES,
    StoreLayout,
    table_path,
    tables_layout,
)
from rmq_spark.store.readable import TailCache
from rmq_spark.store.view import StoreView

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ReputLag", "reput_lag", "tables_lag"]

log = logging.getLogger("rmq_spark.reput")

_HISTORY_DEPTH = 20  # commits looked at for the newest reput commit of a table


@dataclass(frozen=True, slots=True)
class ReputLag:
    """How far the tables are behind the durable log.

    ``behind_messages`` is exact when ``messages_exact``, else a lower bound (the scan stops
    after ``ReputConfig.lag_scan_messages_max`` records). ``behind_ms`` is how long the oldest
    message not yet in the tables has been stored (0 when caught up).
    """

    durable_offset: int
    reput_offset: int
    behind_bytes: int
    behind_messages: int
    messages_exact: bool
    behind_ms: int

    def describe(self) -> str:
        more = "" if self.messages_exact else "+"
        return (
            f"{self.behind_bytes} bytes, {self.behind_messages}{more} messages, "
            f"{self.behind_ms / 1000:.1f} s behind the durable log (at {self.reput_offset} "
            f"of {self.durable_offset})"
        )


def reput_lag(
    store_dir: str | Path,
    reput_offset: int,
    *,
    clock: Clock,
    scan_messages_max: int = 100_000,
    cache: TailCache | None = None,
) -> ReputLag:
    """Lag of tables that hold every message below ``reput_offset``, read from the log itself.

    The end is the source's (``planner.readable_end``, the one judge; ``cache`` keeps its
    answer while the files it read do not change), the messages up to it are counted by the
    source's header walk (``planner.count_records``, at most ``scan_messages_max``), without
    locks. Damage met on the way is logged with its file and position and leaves the count a
    lower bound: the lag is a report, the source fails on that range when it reads it.
    """
    from rmq_spark.spark.planner import count_records, first_store_time, readable_end

    view = StoreView.open(store_dir)
    durable = readable_end(view, cache)
    position = max(reput_offset, view.min_offset)
    count, exact, first_store_ms = 0, True, -1
    if position < durable:
        try:
            count, exact = count_records(view, position, durable, scan_messages_max)
            first_store_ms = first_store_time(view, position, durable)
        except CorruptRecordError as err:
            log.warning("reput lag: counting the unread messages stopped: %s", err)
            count, exact = 0, False
    behind_ms = 0 if first_store_ms < 0 else max(0, clock.now_ms() - first_store_ms)
    return ReputLag(
        durable_offset=durable,
        reput_offset=reput_offset,
        behind_bytes=max(0, durable - reput_offset),
        behind_messages=count,
        messages_exact=exact,
        behind_ms=behind_ms,
    )


def _committed_end(spark: SparkSession, path: Path, layout: StoreLayout) -> int | None:
    """The log position a table is complete up to: ``end_offset`` of its newest reput commit
    of ``layout``'s rows."""
    from delta.tables import DeltaTable

    if not (path / "_delta_log").is_dir():
        return None
    history = DeltaTable.forPath(spark, str(path)).history(_HISTORY_DEPTH)
    for row in history.select("userMetadata").collect():
        if row.userMetadata and "end_offset" in row.userMetadata:
            metadata = json.loads(row.userMetadata)
            if layout.owns(metadata):
                return int(metadata["end_offset"])
    return None


def tables_lag(
    spark: SparkSession,
    store_dir: str | Path,
    tables_dir: str | Path,
    *,
    clock: Clock | None = None,
    scan_messages_max: int = 100_000,
) -> ReputLag:
    """How far the tables under ``tables_dir`` are behind the log of ``store_dir`` now (in
    tables of several stores, ``tables_layout``: by that store's rows).

    The tables' position is the smallest ``end_offset`` among the three tables' newest reput
    commits (each commit records it next to its Delta txn version); when a table's recent
    history holds only OPTIMIZE commits, the end of the last message in ``messages`` is used.
    """
    from pyspark.sql import functions as F

    layout = tables_layout(spark, tables_dir, store_dir)
    ends = [_committed_end(spark, table_path(tables_dir, name), layout) for name in TABLE_NAMES]
    if all(end is not None for end in ends):
        reput_offset = min(end for end in ends if end is not None)
    else:
        reput_offset = 0
        path = table_path(tables_dir, MESSAGES)
        if (path / "_delta_log").is_dir():
            table = layout.rows(spark.read.format("delta").load(str(path)))
            top = table.agg(F.max("physical_offset")).first()[0]
            if top is not None:
                size = table.where(F.col("physical_offset") == F.lit(top)).first()["total_size"]
                reput_offset = int(top) + int(size)
    return reput_lag(
        store_dir, reput_offset, clock=clock or SystemClock(), scan_messages_max=scan_messages_max
    )
