"""The redelivery job: wire the parts together, then run once or continuously.

Owns choosing the entry source (consume_queue table or the CommitLog, ``DelayConfig``
``entry_source``) and the sink (the store in this process, or a broker over gRPC), the
``--once`` rule (passes until nothing due now is left), the continuous loop (a pass every
``trigger_interval_ms``, sooner when something falls due earlier; stops on ``stop``), and
the progress line each pass logs (JSON: counts, lateness p50/p99, consume_queue lag).
``run_schedule`` is the one function ``jobs/schedule.py`` and ``rmq-spark schedule`` call.
Does not own a pass (``redeliver.py``) or argument parsing (jobs/, cli/).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.clock import Clock, SystemClock
from rmq_spark.delay.config import DelayConfig, EntrySourceKind
from rmq_spark.delay.entries import (
    EntrySource,
    LogEntrySource,
    TableEntrySource,
    consume_queue_table_exists,
)
from rmq_spark.delay.log_reader import LogReader
from rmq_spark.delay.progress import ProgressFiles
from rmq_spark.delay.redeliver import PassReport, Redeliverer
from rmq_spark.delay.sink import GrpcSink, Sink, StoreSink
from rmq_spark.errors import BrokerError, ConfigError, RedeliveryFailedError, RmqError
from rmq_spark.store.delay_levels import parse_message_delay_level

__all__ = [
    "SCHEDULE_JOB_GROUP",
    "ScheduleJobSpec",
    "open_redeliverer",
    "run_continuous",
    "run_once",
    "run_schedule",
]

log = logging.getLogger("rmq_spark.delay")

_ONCE_PASSES_MAX = 10_000
# The job is a loop of passes, not a streaming query: its Spark jobs (consume_queue reads)
# carry this job group in the UI and the status tracker, as the reput query carries its name.
SCHEDULE_JOB_GROUP = "rmq-schedule"
_LAG_CHECK_INTERVAL_MS = 10_000


@dataclass(frozen=True, slots=True)
class ScheduleJobSpec:
    """What ``rmq-spark schedule`` / ``jobs/schedule.py`` were asked to do."""

    store_dir: Path
    tables_dir: Path | None = None
    broker: str | None = None  # host:port; None: put into the store in this process
    once: bool = False
    trigger_interval_ms: int | None = None  # overrides DelayConfig.trigger_interval_ms


def open_redeliverer(
    store_dir: str | Path,
    sink: Sink,
    *,
    config: DelayConfig,
    delay_levels_ms: tuple[int, ...],
    clock: Clock,
    spark: Any = None,
    tables_dir: str | Path | None = None,
) -> Redeliverer:
    """A ready ``Redeliverer`` (lock taken, journal loaded) over the store at ``store_dir``.

    Raises
    ------
    ConfigError
        ``entry_source = CONSUME_QUEUE`` but there is no table (or no Spark session).
    ScheduleLockedError
        Another redelivery job runs on this store.
    """
    files = ProgressFiles(store_dir)
    reader = LogReader(store_dir)
    source = _entry_source(config, reader, delay_levels_ms, spark, tables_dir, store_dir)
    redeliverer = Redeliverer(files, source, reader, sink, clock, config)
    redeliverer.open()
    if isinstance(source, LogEntrySource):
        source.start_at(redeliverer.journal.log_scan_from)
    return redeliverer


def _entry_source(
    config: DelayConfig,
    reader: LogReader,
    delay_levels_ms: tuple[int, ...],
    spark: Any,
    tables_dir: str | Path | None,
    store_dir: str | Path,
) -> EntrySource:
    kind = config.entry_source
    has_table = tables_dir is not None and consume_queue_table_exists(tables_dir)
    if kind is EntrySourceKind.CONSUME_QUEUE and not (has_table and spark is not None):
        where = f"{Path(tables_dir) / 'consume_queue'}" if tables_dir else "(no --tables given)"
        raise ConfigError(
            "delay.entry_source",
            f"CONSUME_QUEUE needs the consume_queue Delta table, not found at {where}: start "
            "the reput job first, or set delay.entry_source=AUTO to read the CommitLog",
        )
    if kind is not EntrySourceKind.COMMITLOG and has_table and spark is not None:
        assert tables_dir is not None
        return TableEntrySource(spark, tables_dir, store=store_dir)
    if kind is EntrySourceKind.AUTO:
        log.warning(
            "no consume_queue table at %s: reading %s straight from the CommitLog instead "
            "(start the reput job to build the table)",
            Path(tables_dir) / "consume_queue" if tables_dir else "(no --tables given)",
            "SCHEDULE_TOPIC_XXXX / rmq_sys_wheel_timer",
        )
    return LogEntrySource(reader, delay_levels_ms, timer_enabled=config.timer_enabled)


def run_once(redeliverer: Redeliverer) -> PassReport:
    """Redeliver everything due now, then return the summed report.

    Raises
    ------
    RedeliveryFailedError
        A pass could not finish (unknown put outcome) or some puts were refused.
    """
    total = PassReport(now_ms=redeliverer.clock.now_ms(), source=redeliverer.source.name)
    redeliverer.lookahead_enabled = False  # nothing is waited for: no reading ahead
    for _ in range(_ONCE_PASSES_MAX):
        report = redeliverer.run_pass()
        _add(total, report)
        _log_pass(redeliverer, report)
        if report.error is not None:
            raise RedeliveryFailedError(
                f"redelivery stopped: {report.error} ({total.delivered} delivered before that)"
            )
        if report.exhausted:
            break
    if total.refused:
        raise RedeliveryFailedError(
            f"the broker refused {total.refused} message(s) (see the log); they stay pending "
            f"and are retried by the next run ({total.delivered} delivered)"
        )
    return total


def run_continuous(
    redeliverer: Redeliverer,
    *,
    trigger_interval_ms: int,
    stop: threading.Event,
    on_pass: Callable[[PassReport], None] | None = None,
    check_lag: Callable[[], str | None] | None = None,
) -> None:
    """Run passes until ``stop`` is set: one every ``trigger_interval_ms``, or sooner when
    the next known due time comes first (messages read ahead are put as soon as they fall
    due). A failed pass is logged and retried next time. Passes that delivered are summed
    into one progress line at most every ``trigger_interval_ms`` (lateness p50/p99 of those
    passes and of the last ``lateness_window_messages``)."""
    last_lag_check_ms: float | None = None
    pending: PassReport | None = None  # delivering passes not logged yet
    last_log_ms: float | None = None
    while not stop.is_set():
        started_ms = redeliverer.clock.monotonic_ms()
        try:
            report = redeliverer.run_pass()
        except RmqError as err:
            log.error("redelivery pass failed: %s; retrying in %d ms", err, trigger_interval_ms)
            report = PassReport(now_ms=redeliverer.clock.now_ms(), error=str(err))
        if check_lag is not None and (
            last_lag_check_ms is None or started_ms - last_lag_check_ms >= _LAG_CHECK_INTERVAL_MS
        ):
            last_lag_check_ms = started_ms
            note = check_lag()
            if note:
                report.notes.append(note)
        if report.delivered or report.settled_put or report.error or report.notes:
            if pending is None:
                pending = PassReport(now_ms=report.now_ms, source=report.source)
            _add(pending, report)
            pending.error = pending.error or report.error
        now_mono_ms = redeliverer.clock.monotonic_ms()
        if pending is not None and (
            pending.error
            or pending.notes
            or last_log_ms is None
            or now_mono_ms - last_log_ms >= trigger_interval_ms
            or stop.is_set()
        ):
            _log_pass(redeliverer, pending)
            pending, last_log_ms = None, now_mono_ms
        if on_pass is not None:
            on_pass(report)
        wait_ms = float(trigger_interval_ms)
        if report.next_due_ms is not None and report.error is None:
            wait_ms = min(wait_ms, max(0.0, report.next_due_ms - redeliverer.clock.now_ms()))
        wait_ms -= redeliverer.clock.monotonic_ms() - started_ms
        stop.wait(max(wait_ms, 1.0) / 1000)
    if pending is not None:
        _log_pass(redeliverer, pending)


def run_schedule(
    spec: ScheduleJobSpec,
    config: Any,
    *,
    spark_factory: Callable[[], Any] | None = None,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
    on_pass: Callable[[Redeliverer, PassReport], None] | None = None,
) -> int:
    """The whole job: open everything, run once or continuously, close everything.

    Parameters
    ----------
    spec
        Store, tables, broker address, once/continuous.
    config
        The ``RmqConfig`` (sections ``store`` and ``delay``; ``delay`` defaults when absent).
    spark_factory
        Builds the SparkSession, called only when a consume_queue table is there to read.
    on_pass
        Called after every pass (``--once``: with the summed report), e.g. by the metrics.

    Returns
    -------
    int
        0 on success.

    Raises
    ------
    RmqError
        Bad config, the store or the job lock taken, the broker unreachable (``--once``).
    """
    clock = clock or SystemClock()
    delay_config: DelayConfig = getattr(config, "delay", None) or DelayConfig()
    if spec.trigger_interval_ms is not None:
        delay_config = dataclasses.replace(
            delay_config,
            trigger_interval_ms=spec.trigger_interval_ms,
            pass_messages_max=max(delay_config.pass_messages_max, delay_config.batch_messages_max),
        )
    try:
        levels = parse_message_delay_level(config.store.message_delay_level)
    except ValueError as err:
        raise ConfigError("store.message_delay_level", str(err)) from err
    if not spec.store_dir.is_dir():
        raise ConfigError("--store", f"{spec.store_dir} is not a store directory")
    with ExitStack() as stack:
        spark = None
        if spec.tables_dir is not None and delay_config.entry_source is not (
            EntrySourceKind.COMMITLOG
        ):
            if consume_queue_table_exists(spec.tables_dir) and spark_factory is not None:
                spark = spark_factory()
                spark.sparkContext.setJobGroup(SCHEDULE_JOB_GROUP, "rmq-spark schedule job")
        sink = _open_sink(spec, config, clock, stack)
        redeliverer = open_redeliverer(
            spec.store_dir,
            sink,
            config=delay_config,
            delay_levels_ms=levels,
            clock=clock,
            spark=spark,
            tables_dir=spec.tables_dir,
        )
        stack.callback(redeliverer.close)
        check_lag = _lag_checker(spark, spec, clock, delay_config)
        if spec.once:
            note = check_lag() if check_lag else None
            if note:
                log.warning("%s", note)
            total = run_once(redeliverer)
            if on_pass is not None:
                on_pass(redeliverer, total)
            print(json.dumps({"schedule": "once", **total.as_dict()}), flush=True)
            return 0
        log.info(
            "redelivery running on %s (entries from %s, puts %s); Ctrl-C stops",
            spec.store_dir,
            redeliverer.source.name,
            sink.name,
        )
        run_continuous(
            redeliverer,
            trigger_interval_ms=spec.trigger_interval_ms or delay_config.trigger_interval_ms,
            stop=stop or threading.Event(),
            check_lag=check_lag,
            on_pass=None if on_pass is None else lambda report: on_pass(redeliverer, report),
        )
    return 0


def _open_sink(spec: ScheduleJobSpec, config: Any, clock: Clock, stack: ExitStack) -> Sink:
    if spec.broker is not None:
        sink: Sink = GrpcSink(spec.broker, spec.store_dir, clock=clock)
        stack.callback(sink.close)
        return sink
    from rmq_spark.broker.embedded import Broker

    try:
        broker = Broker(
            spec.store_dir, store_config=config.store, broker_config=config.broker, clock=clock
        )
    except BrokerError as err:
        raise BrokerError(
            f"{err}; a broker runs on this store: pass --broker HOST:PORT to put through it"
        ) from err
    stack.callback(broker.close)
    return StoreSink(broker)


def _lag_checker(
    spark: Any, spec: ScheduleJobSpec, clock: Clock, config: DelayConfig
) -> Callable[[], str | None] | None:
    if spark is None or spec.tables_dir is None:
        return None
    tables_dir = spec.tables_dir

    def check() -> str | None:
        from rmq_spark.spark.reput import tables_lag

        try:
            lag = tables_lag(spark, spec.store_dir, tables_dir, clock=clock)  # this store's
        except Exception as err:  # RmqError, or Py4J/Delta: a note, not a failed pass
            return f"could not measure the consume_queue lag: {err}"
        if lag.behind_bytes > config.lag_warn_bytes:
            return (
                f"consume_queue lags the log by {lag.describe()}: messages stored since are "
                "not redelivered until the reput job indexes them (is it running?)"
            )
        return None

    return check


def _add(total: PassReport, report: PassReport) -> None:
    for name in ("delivered", "discarded", "settled_found", "settled_put", "refused"):
        setattr(total, name, getattr(total, name) + getattr(report, name))
    total.skipped_missing += report.skipped_missing
    total.early += report.early
    total.batches += report.batches
    total.lateness_ms.extend(report.lateness_ms)
    total.notes.extend(report.notes)
    total.next_due_ms = report.next_due_ms
    total.exhausted = report.exhausted


def _log_pass(redeliverer: Redeliverer, report: PassReport) -> None:
    doc = report.as_dict(redeliverer.lateness_window)
    level = logging.ERROR if report.error else logging.INFO
    log.log(level, "schedule pass %s", json.dumps(doc, separators=(",", ":")))
