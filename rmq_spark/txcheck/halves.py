"""Where the txcheck job's halves come from: the store's files, or Spark over them.

Owns ``FileHalves`` (the half queue's ConsumeQueue and the CommitLog records it points at,
read-only, as ``rmq-spark transactions`` reads them) and ``SparkHalves`` (the ``rocketmq``
source with ``isolation=read_uncommitted``, the half topic from the progress on). Both answer
the halves from a half-queue offset on, in queue order, as ``HalfInfo``; which transactions
are resolved is ``TransactionService``'s rule over the read-only files
(``broker/transactions/ledger.py``) for both, so the plan is the broker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from rmq_spark.broker.transactions.check_plan import HalfInfo, half_info
from rmq_spark.broker.transactions.ledger import ReadOnlyStore
from rmq_spark.broker.transactions.records import HALF_QUEUE_ID
from rmq_spark.broker.transactions.service import TransactionService
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC

__all__ = ["FileHalves", "HalfSource", "Halves", "SparkHalves"]


@dataclass
class Halves:
    """The halves from some offset on and the rule's view of what is resolved."""

    halves: list[HalfInfo]
    resolved: TransactionService

    def is_resolved(self, key: tuple[str, str]) -> bool:
        return self.resolved.is_resolved(key)


class HalfSource(Protocol):
    name: str

    def read(self, start: int) -> Halves:
        """The halves at half-queue offsets ``start`` and after."""
        ...

    def close(self) -> None: ...


def _has_half_queue(root: Path) -> bool:
    return (root / CONSUME_QUEUE_DIR / RMQ_SYS_TRANS_HALF_TOPIC / str(HALF_QUEUE_ID)).is_dir()


class _Ledger:
    """A fresh read-only store (the files move while a broker runs) per pass."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._store: ReadOnlyStore | None = None

    def open(self) -> ReadOnlyStore | None:
        self.close()
        if not _has_half_queue(self._root):
            return None
        self._store = ReadOnlyStore(self._root)
        return self._store

    def resolved(self, store: ReadOnlyStore) -> TransactionService:
        service = TransactionService(cast(Any, store))
        service.refresh()
        return service

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class FileHalves:
    """The half queue read from the store's files."""

    name = "files"

    def __init__(self, root: Path) -> None:
        self._ledger = _Ledger(root)

    def read(self, start: int) -> Halves:
        store = self._ledger.open()
        if store is None:
            return Halves([], TransactionService(cast(Any, None)))
        resolved = self._ledger.resolved(store)
        halves = [half_info(h) for h in store.records(RMQ_SYS_TRANS_HALF_TOPIC, 0, start)]
        return Halves(halves, resolved)

    def close(self) -> None:
        self._ledger.close()


class SparkHalves:
    """The half topic read with Spark (``rocketmq`` source, ``read_uncommitted``)."""

    name = "spark"

    def __init__(self, spark: Any, root: Path) -> None:
        self._spark = spark
        self._root = root
        self._ledger = _Ledger(root)

    def read(self, start: int) -> Halves:
        from pyspark.sql import functions as F  # noqa: N812

        from rmq_spark.spark.isolation import READ_UNCOMMITTED

        store = self._ledger.open()
        if store is None:
            return Halves([], TransactionService(cast(Any, None)))
        resolved = self._ledger.resolved(store)
        props = F.col("properties")
        frame = (
            self._spark.read.format("rocketmq")
            .option("isolation", READ_UNCOMMITTED)
            .option("topics", RMQ_SYS_TRANS_HALF_TOPIC)
            .option("includeBody", "false")
            .load(str(self._root))
            .where((F.col("queue_id") == HALF_QUEUE_ID) & (F.col("queue_offset") >= start))
            .select(
                props.getItem("REAL_TOPIC").alias("topic"),
                "uniq_key",
                "physical_offset",
                "queue_offset",
                F.expr("unix_millis(born_timestamp)").alias("born_ms"),
                F.coalesce(props.getItem("TRANSACTION_CHECK_TIMES").cast("int"), F.lit(0)).alias(
                    "checks"
                ),
            )
            .orderBy("queue_offset")
        )
        halves = [
            HalfInfo(
                (row.topic or "", row.uniq_key or ""),
                row.physical_offset,
                row.queue_offset,
                row.born_ms,
                row.checks,
            )  # fmt: skip
            for row in frame.collect()
        ]
        return Halves(halves, resolved)

    def close(self) -> None:
        self._ledger.close()
