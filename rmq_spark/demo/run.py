"""One demo run: broker on loopback, producers, the reput and delay jobs, live status, report.

Everything runs in this process except Spark's JVM and Python workers: an embedded broker
serving gRPC on 127.0.0.1 (the official client connects to it like to any broker), the reput
job as a Structured Streaming query, and the delay job's passes on a thread. ``DemoRun.run``
always stops everything it started, in reverse order, also on Ctrl-C; the store is closed
cleanly, so no ``abort`` file is left behind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.clock import SystemClock
from rmq_spark.config import RmqConfig
from rmq_spark.demo.traffic import AckLog, DemoTraffic

__all__ = ["DemoOptions", "DemoRun", "jobs_log_to_file"]

log = logging.getLogger("rmq_spark.demo")

STATUS_INTERVAL_S = 2.0
DRAIN_DEADLINE_S = 90.0


def jobs_log_to_file(logs_dir: Path) -> None:
    """The reput and schedule jobs' per-batch lines go to ``logs/jobs.log``: the console
    keeps the demo's own status lines (warnings and errors still reach both)."""
    handler = logging.FileHandler(logs_dir / "jobs.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)
    for name in ("rmq_spark.reput", "rmq_spark.delay"):
        job_log = logging.getLogger(name)
        job_log.addHandler(handler)
        job_log.addHandler(console)
        job_log.propagate = False


@dataclass(frozen=True, slots=True)
class DemoOptions:
    workdir: Path
    duration_s: float = 60.0
    rate_per_s: float = 25.0  # per official-client producer thread
    segment_size_bytes: int = 4 * 1024 * 1024  # small, so that segments roll during the demo


@dataclass
class DelayStats:
    delivered: int = 0
    early: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, report: Any) -> None:
        self.delivered += report.delivered + report.settled_put
        self.early += report.early
        self.lateness_ms.extend(report.lateness_ms)
        if report.error:
            self.errors.append(report.error)


class DemoRun:
    """Starts the parts, prints status while traffic flows, drains, reports, stops."""

    def __init__(self, config: RmqConfig, options: DemoOptions) -> None:
        self.options = options
        self.workdir = options.workdir.absolute()
        self.store_dir = self.workdir / "store"
        self.tables_dir = self.workdir / "tables"
        self.logs_dir = self.workdir / "logs"
        store = dataclasses.replace(
            config.store, root_dir=self.store_dir, segment_size_bytes=options.segment_size_bytes
        )
        self.config = config.replace(
            "store", **{f.name: getattr(store, f.name) for f in dataclasses.fields(store)}
        )
        self.config = self.config.replace("broker", listen="127.0.0.1:0")
        self.config = self.config.replace("reput", tables_dir=self.tables_dir)
        self.delay_stats = DelayStats()
        self.summary: dict[str, Any] = {}

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        for folder in (self.store_dir, self.tables_dir, self.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._jobs_log_to_file()
        began = started = time.monotonic()
        with ExitStack() as stack:
            # The JVM first: launching it forks this process, and a fork while the gRPC
            # server's threads run can leave the child without a working gRPC poller (seen as
            # JAVA_GATEWAY_EXITED on a busy machine).
            spark = self._start_spark(stack)
            broker = self._start_broker(stack)
            acks = AckLog(self.workdir / "acked.jsonl")
            stack.callback(acks.close)
            query, writer = self._start_reput(spark, stack)
            self._start_delay_job(spark, broker, stack)
            traffic = DemoTraffic(
                broker, acks, self.logs_dir / "client-home", rate_per_s=self.options.rate_per_s
            )
            stack.callback(traffic.stop)
            traffic.start()
            self._say(f"producing for {self.options.duration_s:.0f} s; Ctrl-C stops cleanly")
            started = time.monotonic()  # status times count from the first message
            deadline = started + self.options.duration_s
            while time.monotonic() < deadline:
                time.sleep(min(STATUS_INTERVAL_S, max(0.0, deadline - time.monotonic())))
                self._status(started, broker, acks, writer, query)
            traffic.stop()
            self._say("producers stopped; waiting for due delayed messages and the tables")
            self._drain(started, broker, acks, writer, query)
            from rmq_spark.demo.report import final_report

            self.summary = final_report(spark, self, acks)
            (self.workdir / "summary.json").write_text(json.dumps(self.summary, indent=2))
        self.summary["elapsed_s"] = round(time.monotonic() - began, 1)
        return self.summary

    # --- the parts ----------------------------------------------------------------------------

    def _jobs_log_to_file(self) -> None:
        jobs_log_to_file(self.logs_dir)

    def _start_broker(self, stack: ExitStack) -> Any:
        from rmq_spark.broker.embedded import Broker

        broker = Broker(
            self.store_dir,
            broker_config=self.config.broker,
            store_config=self.config.store,
            listen="127.0.0.1:0",
        )
        stack.callback(self._close_broker, broker)
        self._say(f"broker: serving RocketMQ 5 gRPC on {broker.address}, store {self.store_dir}")
        return broker

    def _close_broker(self, broker: Any) -> None:
        broker.close()
        self._say("broker: stopped (store closed cleanly, no abort file)")

    def _start_spark(self, stack: ExitStack) -> Any:
        from rmq_spark.spark.session import build_session

        self._say("spark: starting a local session with Delta Lake ...")
        spark = build_session(self.config.spark, app_name="rmq-spark-demo")
        stack.callback(spark.stop)
        return spark

    def _start_reput(self, spark: Any, stack: ExitStack) -> tuple[Any, Any]:
        from rmq_spark.spark.reput import start_reput
        from rmq_spark.store.delay_levels import parse_message_delay_level

        levels = parse_message_delay_level(self.config.store.message_delay_level)
        query, writer = start_reput(spark, self.store_dir, self.config.reput, levels)
        stack.callback(self._stop_query, query)
        self._say(f"reput: streaming the log into Delta tables under {self.tables_dir}")
        return query, writer

    @staticmethod
    def _stop_query(query: Any) -> None:
        if query.isActive:
            query.stop()

    def _start_delay_job(self, spark: Any, broker: Any, stack: ExitStack) -> None:
        from rmq_spark.delay.config import EntrySourceKind
        from rmq_spark.delay.job import open_redeliverer, run_continuous
        from rmq_spark.delay.sink import StoreSink
        from rmq_spark.store.delay_levels import parse_message_delay_level

        levels = parse_message_delay_level(self.config.store.message_delay_level)
        # Next to the store, due entries are read straight from the CommitLog's schedule and
        # timer records: lateness then does not wait for the reput job's tables (docs/DELAY.md,
        # "Which one when"). A job elsewhere reads them from rmq.consume_queue.
        delay_config = dataclasses.replace(
            self.config.delay, entry_source=EntrySourceKind.COMMITLOG
        )
        redeliverer = open_redeliverer(
            self.store_dir,
            StoreSink(broker),
            config=delay_config,
            delay_levels_ms=levels,
            clock=SystemClock(),
            spark=spark,
            tables_dir=self.tables_dir,
        )
        stop = threading.Event()
        thread = threading.Thread(
            target=run_continuous,
            kwargs={
                "redeliverer": redeliverer,
                "trigger_interval_ms": self.config.delay.trigger_interval_ms,
                "stop": stop,
                "on_pass": self.delay_stats.add,
            },
            name="delay-job",
            daemon=True,
        )
        stack.callback(redeliverer.close)
        stack.callback(thread.join, 60)
        stack.callback(stop.set)
        thread.start()
        self._say(f"schedule: redelivering due messages (entries from {redeliverer.source.name})")

    # --- status -------------------------------------------------------------------------------

    def _pending_delayed(self, acks: AckLog) -> int:
        return max(0, len(acks.delayed()) - self.delay_stats.delivered)

    def _status(self, started: float, broker: Any, acks: AckLog, writer: Any, query: Any) -> None:
        if not query.isActive:
            raise RuntimeError(f"the reput query stopped: {query.exception()}")
        report = writer.last_report
        lag = report.lag.describe() if report is not None else "waiting for the first batch"
        durable = broker.store.confirmed_offset
        self._say(
            f"[{time.monotonic() - started:5.0f}s] produced {acks.sent:>6} acked "
            f"{len(acks.acked):>6} | durable log {durable:>10,} B | tables: "
            f"{writer.messages_written:>6} msgs, lag {lag} | delayed pending "
            f"{self._pending_delayed(acks)}, redelivered {self.delay_stats.delivered}"
        )

    def _drain(self, started: float, broker: Any, acks: AckLog, writer: Any, query: Any) -> None:
        end = time.monotonic() + DRAIN_DEADLINE_S
        while time.monotonic() < end:
            time.sleep(STATUS_INTERVAL_S)
            self._status(started, broker, acks, writer, query)
            report = writer.last_report
            caught_up = report is not None and report.end_offset >= broker.store.confirmed_offset
            if self._pending_delayed(acks) == 0 and caught_up:
                # One more batch so that the last redeliveries are in the tables too.
                if report.end_offset >= broker.store.max_offset:
                    return
        self._say("drain: deadline reached; the report shows what was there by then")

    @staticmethod
    def _say(text: str) -> None:
        print(f"demo: {text}", flush=True)
