"""The reput job: Spark's replacement for RocketMQ's ReputMessageService.

A streaming query over the ``rocketmq`` source plans micro-batches of the CommitLog
(admission control, the offset log); per micro-batch, the batch's log range is decoded and
written as data files of ``messages``, ``message_index`` and ``consume_queue`` (``tables.py``,
``reput_files.py``) by one Spark job, and the files are committed to each table in one
idempotent step: each commit carries Delta ``txnAppId`` =
``ReputConfig.txn_app_id`` and ``txnVersion`` = the log position the batch ends at, so a batch
replayed after a crash adds nothing to a table that already has it, and rows below what a
table already holds are filtered out when a job starts over a fresh checkpoint. A batch's
log range comes from the stream's offset log (``reput_start.py``, no Spark job); table
checkpoints and OPTIMIZE run beside the stream (``reput_maintenance.py``). Progress
(``reput_lag``, ``tables_lag``) lives in ``reput_progress.py``; both are re-exported here.
After each committed
batch (and at start) the job publishes the log position its tables are complete up to as
reader ``ReputConfig.reader_name`` in the store (``store/reader_progress.py``), so that
retention keeps what the tables do not hold yet; ``rmq-spark reput --unregister`` removes it.
Over several stores (``start_reput`` given a list) the stream reads them all in one query
and ``reput_multi.py`` runs one ``ReputBatchWriter`` per store, each with its own Delta txn
app id, floors and published progress, all into the same tables (with a ``store`` column).
The per-batch writer is ``reput_writer.py`` (re-exported here). Does not own table schemas
(``tables.py``), the source (``source.py``) or argument parsing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rmq_spark.clock import Clock
from rmq_spark.errors import ReputError
from rmq_spark.spark.interrupt import stop_requested
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.spark.reput_multi import MultiStoreReputWriter
from rmq_spark.spark.reput_progress import ReputLag, reput_lag, tables_lag
from rmq_spark.spark.reput_start import (
    StoreDirs,
    fresh_start_offset,
    has_progress,
    logged_batch_range,
    parse_offset_log_entry,
    starting_offsets,
    store_list,
    warm_python_workers,
)
from rmq_spark.spark.reput_timeline import ProgressLines
from rmq_spark.spark.reput_writer import BatchReport, ReputBatchWriter
from rmq_spark.spark.session import jvm_gone
from rmq_spark.spark.tables import ONE_STORE, StoreOfSeveral, check_store_layout, register_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "BatchReport",
    "REPUT_QUERY_NAME",
    "ReputBatchWriter",
    "ReputLag",
    "StoreDirs",
    "fresh_start_offset",
    "logged_batch_range",
    "parse_offset_log_entry",
    "reput_lag",
    "run_reput",
    "start_reput",
    "store_list",
    "tables_lag",
    "warm_python_workers",
]

log = logging.getLogger("rmq_spark.reput")

REPUT_QUERY_NAME = "rmq-reput"  # the streaming query's name (Spark UI, spark.streams, progress)


def start_reput(
    spark: SparkSession,
    store_dir: StoreDirs,
    config: ReputConfig,
    delay_levels_ms: tuple[int, ...],
    *,
    clock: Clock | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> tuple[StreamingQuery, ReputBatchWriter | MultiStoreReputWriter]:
    """Register the tables and start the reput stream; returns the query and its writer.

    Parameters
    ----------
    store_dir
        The store root (the directory holding ``commitlog/`` and ``checkpoint``), or several
        (``store_list``): one query reads them all, the tables get a ``store`` column.
    config
        The ``[reput]`` section: tables and checkpoint directories, trigger, limits.
    delay_levels_ms
        ``parse_message_delay_level(store.message_delay_level)``.

    Raises
    ------
    TableError
        The tables cannot be created or registered (``StoreLayoutMismatchError``: they were
        built from one store and are asked for several, or the other way round).
    """
    stores = store_list(store_dir)
    checkpoint = config.resolved_checkpoint_dir
    one_store = len(stores) == 1
    # Refused before the query touches the checkpoint (StoreLayoutMismatchError): a query
    # over the wrong stores would log a batch of their offsets there.
    check_store_layout(
        spark, config.tables_dir, ONE_STORE if one_store else StoreOfSeveral(stores[0])
    )
    reader = spark.readStream.format("rocketmq")
    if not has_progress(checkpoint):
        # One store: after what existing tables hold. The source takes no one-store JSON
        # offset over several stores: each store's writer drops what its tables hold instead.
        start = starting_offsets(spark, config) if one_store else "earliest"
        reader = reader.option("startingOffsets", start)
    if config.max_bytes_per_trigger:
        reader = reader.option("maxBytesPerTrigger", str(config.max_bytes_per_trigger))
    warm_python_workers(spark)
    pending = _PendingWriter()
    stream = (
        reader.load(",".join(stores))
        .writeStream.foreachBatch(pending)
        .queryName(REPUT_QUERY_NAME)
        .option("checkpointLocation", str(checkpoint.absolute()))
    )
    if config.available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{config.trigger_interval_ms} milliseconds")
    # The query starts its source's Python process (~1 s of imports) while the writer
    # creates and reads the tables; its first batch waits for the writer.
    query = stream.start()
    try:
        writer = _new_writer(
            spark, stores, config, delay_levels_ms, clock=clock, on_batch=on_batch,
            offset_log=checkpoint / "offsets",
        )  # fmt: skip
        register_tables(spark, config.tables_dir, config.database)
    except BaseException as err:
        pending.refuse(err)
        query.stop()
        raise
    pending.ready(writer)
    return query, writer


def _new_writer(
    spark: SparkSession,
    stores: tuple[str, ...],
    config: ReputConfig,
    delay_levels_ms: tuple[int, ...],
    **kwargs: Any,
) -> ReputBatchWriter | MultiStoreReputWriter:
    """The writer of one store or of several (it creates the tables in its layout)."""
    if len(stores) == 1:
        return ReputBatchWriter(spark, stores[0], config, delay_levels_ms, **kwargs)
    return MultiStoreReputWriter(spark, stores, config, delay_levels_ms, **kwargs)


class _PendingWriter:
    """The query's ``foreachBatch`` function until the writer exists: a batch waits for it
    (or fails with the error that kept it from being built)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._writer: Callable[[DataFrame, int], None] | None = None
        self._error: BaseException | None = None

    def ready(self, writer: Callable[[DataFrame, int], None]) -> None:
        self._writer = writer
        self._done.set()

    def refuse(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self._done.wait()
        if self._writer is None:
            raise ReputError(f"the reput writer could not start: {self._error}")
        self._writer(batch_df, batch_id)


# Spark gives a Python worker started on its own (the streaming source's runner) a fixed
# 10 s to connect back (PythonWorkerFactory; not configurable). On a starved machine the
# stream then fails at start although nothing is wrong with it. A restart from the checkpoint
# is exactly-once safe (each table commit is idempotent by txnVersion), so the job restarts on
# this failure, up to this many times in a row without a batch written in between.
_WORKER_START_FAILURE = "Python worker failed to connect back"
WORKER_START_RESTARTS = 3


def run_reput(
    spark: SparkSession,
    store_dir: StoreDirs,
    config: ReputConfig,
    delay_levels_ms: tuple[int, ...],
    *,
    clock: Clock | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> ReputBatchWriter | MultiStoreReputWriter:
    """Run the reput stream until it ends (``available_now``) or is interrupted (Ctrl-C/TERM).
    ``store_dir``: one store or several (``start_reput``). A stream that failed because a
    Python worker did not start in Spark's 10 s is restarted from its checkpoint (a warning
    says so), at most ``WORKER_START_RESTARTS`` times in a row.

    Returns the writer (``batches_written``, ``messages_written``, ``last_report``).

    Raises
    ------
    ReputError
        The stream failed; carries the first line of Spark's message.
    TableError
        The tables cannot be created or registered.
    """
    restarts_left = WORKER_START_RESTARTS
    while True:
        query, writer = start_reput(
            spark, store_dir, config, delay_levels_ms, clock=clock, on_batch=on_batch
        )
        log.info(
            "reput: %s -> %s (checkpoint %s, %s)",
            store_dir,
            config.tables_dir,
            config.resolved_checkpoint_dir,
            "available now" if config.available_now else f"every {config.trigger_interval_ms} ms",
        )
        error = _until_ended(query, writer)
        if error is None:
            break
        if writer.batches_written:
            restarts_left = WORKER_START_RESTARTS
        if _WORKER_START_FAILURE not in error or restarts_left == 0:
            raise ReputError(f"the reput stream failed: {error}")
        restarts_left -= 1
        log.warning(
            "reput: %s (Spark waits 10 s for it; the machine is busy?); restarting from the "
            "checkpoint, %d restart(s) left",
            _WORKER_START_FAILURE,
            restarts_left,
        )
    log.info(
        "reput: done, %d batches, %d messages", writer.batches_written, writer.messages_written
    )
    return writer


def _until_ended(
    query: StreamingQuery, writer: ReputBatchWriter | MultiStoreReputWriter
) -> str | None:
    """Wait for ``query`` to end or for Ctrl-C/TERM (then stop it); the first line of its
    failure, or None. Returns once the writer's maintenance is done."""
    progress = ProgressLines(query)
    stop = threading.Event()
    try:
        error = _wait_or_stop(query, progress, stop)
        writer.maintenance.wait(end_optimize=stop.is_set())
        progress.poll()
        if error is None and not stop.is_set():
            error = query.exception()
    except Exception as err:
        if not jvm_gone(err):
            raise
        writer.maintenance.wait(end_optimize=True)
        if not stop.is_set():
            return f"the Spark driver's JVM ended ({type(err).__name__}: {err})"
        log.warning(
            "reput: the Spark driver's JVM ended with the signal, before the job could stop "
            "its query; the next run resumes from the checkpoint"
        )
        return None
    return None if error is None else _first_line(error)


def _first_line(error: Exception) -> str:
    """Spark's message goes on with the query's state over several lines."""
    return (str(error).strip().splitlines() or ["?"])[0]


def _wait_or_stop(
    query: StreamingQuery, progress: ProgressLines, stop: threading.Event
) -> Exception | None:
    """Wait for ``query`` to end, or stop it when ``stop`` is set (by Ctrl-C/TERM); the
    query's failure, or None."""
    from pyspark.errors import StreamingQueryException

    try:
        with stop_requested(stop):  # Ctrl-C/TERM: a flag, so py4j is never interrupted
            while query.isActive and not stop.is_set():
                query.awaitTermination(1)
                progress.poll()
    except KeyboardInterrupt:  # arrived before the handlers were swapped in
        stop.set()
    except StreamingQueryException as err:
        if not stop.is_set():
            return err
        # A TERM to the whole process group reaches Spark's Python workers too.
        log.warning("reput: the query failed as it was being stopped: %s", _first_line(err))
        return None
    if stop.is_set():
        log.info("reput: stopping")
        query.stop()
    return None
