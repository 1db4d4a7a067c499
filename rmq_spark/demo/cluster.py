"""The cluster demo (``rmq-spark demo --brokers 2``, ``make cluster``): RocketMQ's NameServer,
two rmq-spark broker processes serving the demo topics, official 5.x producers and a push
consumer through broker-a, and the reput job over both stores in one Spark query; broker-b is
SIGKILLed a third of the way through and restarted a few seconds later.

Then it checks what ``make run`` checks, over the cluster: every acknowledged message is in
``rmq.messages`` (each store's rows carry the ``store`` column) exactly once, every message was
consumed at least once, and it prints the longest pause any producer saw (the time between
two acknowledgements of one producer, the kill included). ``ClusterDemo.run`` stops everything
it started, in reverse order, also on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.config import RmqConfig
from rmq_spark.demo.cluster_parts import (
    TOPICS,
    BrokerProc,
    ClusterProducers,
    NamesrvProc,
    PushRecorder,
)
from rmq_spark.demo.run import jobs_log_to_file
from rmq_spark.demo.traffic import import_official_client

__all__ = ["ClusterDemo", "ClusterOptions"]

CLUSTER = "DemoCluster"
GROUP = "demo-consumers"
STATUS_INTERVAL_S = 2.0
DRAIN_DEADLINE_S = 120.0


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    workdir: Path
    duration_s: float = 60.0
    rate_per_s: float = 20.0  # per producer thread
    producers: int = 2
    down_s: float = 5.0  # broker-b stays dead this long


class ClusterDemo:
    """Starts the parts, kills and restarts broker-b while traffic flows, drains, checks."""

    def __init__(self, config: RmqConfig, options: ClusterOptions) -> None:
        self.options = options
        self.workdir = options.workdir.absolute()
        self.tables_dir = self.workdir / "tables"
        self.logs_dir = self.workdir / "logs"
        self.stores = [self.workdir / "store-a", self.workdir / "store-b"]
        self.config = config.replace("reput", tables_dir=self.tables_dir)
        self.summary: dict[str, Any] = {}

    def run(self) -> dict[str, Any]:
        for folder in (self.tables_dir, self.logs_dir, *self.stores):
            folder.mkdir(parents=True, exist_ok=True)
        jobs_log_to_file(self.logs_dir)
        began = time.monotonic()
        with ExitStack() as stack:
            spark = self._start_spark(stack)  # the JVM first: it forks this process
            namesrv = NamesrvProc(self.workdir / "namesrv")
            stack.callback(namesrv.stop)
            _say(f"namesrv: Apache RocketMQ NameServer on {namesrv.addr}")
            brokers = self._start_brokers(namesrv.addr, stack)
            writer, query = self._start_reput(spark, stack)
            rocketmq = import_official_client(self.logs_dir / "client-home")
            consumer = PushRecorder(rocketmq, brokers[0].address, GROUP)
            stack.callback(consumer.stop)
            producers = ClusterProducers(
                rocketmq, brokers[0].address, self.workdir / "acked.jsonl",
                threads=self.options.producers, rate_per_s=self.options.rate_per_s,
            )  # fmt: skip
            stack.callback(producers.stop)
            producers.start()
            self._traffic(brokers[1], producers, consumer, writer, query)
            producers.stop()
            _say("producers stopped; waiting for the tables and the consumer")
            self._drain(spark, producers, consumer, query)
            self.summary = self._check(spark, brokers, producers, consumer)
            (self.workdir / "summary.json").write_text(json.dumps(self.summary, indent=2))
        self.summary["elapsed_s"] = round(time.monotonic() - began, 1)
        return self.summary

    def _start_spark(self, stack: ExitStack) -> Any:
        from rmq_spark.spark.session import build_session

        _say("spark: starting a local session with Delta Lake ...")
        spark = build_session(self.config.spark, app_name="rmq-spark-cluster-demo")
        stack.callback(spark.stop)
        return spark

    def _start_brokers(self, namesrv: str, stack: ExitStack) -> list[BrokerProc]:
        topics = ",".join(f"{topic}:4" for topic in TOPICS)
        brokers = []
        for name, store in zip(("broker-a", "broker-b"), self.stores, strict=True):
            broker = BrokerProc(name, store, self.logs_dir, namesrv, CLUSTER, topics)
            stack.callback(broker.stop)
            broker.start()
            brokers.append(broker)
            _say(f"{name}: gRPC {broker.address}, remoting {broker.remoting_port}, store {store}")
        return brokers

    def _start_reput(self, spark: Any, stack: ExitStack) -> tuple[Any, Any]:
        from rmq_spark.spark.reput import start_reput
        from rmq_spark.store.delay_levels import parse_message_delay_level

        levels = parse_message_delay_level(self.config.store.message_delay_level)
        reput = dataclasses.replace(self.config.reput, tables_dir=self.tables_dir)
        query, writer = start_reput(spark, list(self.stores), reput, levels)
        stack.callback(lambda: query.stop() if query.isActive else None)
        _say(f"reput: both stores into one set of Delta tables under {self.tables_dir}")
        return writer, query

    def _traffic(
        self, victim: BrokerProc, producers: ClusterProducers, consumer: PushRecorder,
        writer: Any, query: Any,
    ) -> None:  # fmt: skip
        started = time.monotonic()
        kill_at = started + self.options.duration_s / 3
        end = started + self.options.duration_s
        restart_at = None
        while time.monotonic() < end:
            time.sleep(min(STATUS_INTERVAL_S, max(0.0, end - time.monotonic())))
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                victim.kill()
                kill_at, restart_at = None, now + self.options.down_s
                _say(f"{victim.name}: killed with SIGKILL")
            elif restart_at is not None and now >= restart_at:
                victim.start()
                restart_at = None
                _say(f"{victim.name}: restarted on the same ports and store")
            self._status(started, producers, consumer, writer, query)

    def _status(
        self, started: float, producers: Any, consumer: Any, writer: Any, query: Any
    ) -> None:
        if not query.isActive:
            raise RuntimeError(f"the reput query stopped: {query.exception()}")
        _say(
            f"[{time.monotonic() - started:5.0f}s] sent {producers.sent:>6} acked "
            f"{len(producers.acked):>6} failed {producers.failed:>4} | consumed "
            f"{len(consumer.seen()):>6} | tables: {writer.messages_written:>6} msgs | longest "
            f"producer pause {producers.longest_pause_s:.2f} s"
        )

    def _drain(self, spark: Any, producers: Any, consumer: Any, query: Any) -> None:
        acked = set(producers.acked)
        end = time.monotonic() + DRAIN_DEADLINE_S
        while time.monotonic() < end:
            if not query.isActive:
                raise RuntimeError(f"the reput query stopped: {query.exception()}")
            in_tables = acked & set(_stored(spark))
            consumed = acked & consumer.seen()
            _say(f"drain: {len(in_tables)} of {len(acked)} in the tables, {len(consumed)} consumed")
            if len(in_tables) == len(acked) == len(consumed):
                return
            time.sleep(STATUS_INTERVAL_S)
        _say("drain: deadline reached; the checks show what was there by then")

    def _check(
        self, spark: Any, brokers: list[BrokerProc], producers: Any, consumer: Any
    ) -> dict[str, Any]:
        from rmq_spark.demo.cluster_report import cluster_checks

        return cluster_checks(spark, self, brokers, producers, consumer)


def _stored(spark: Any) -> list[str]:
    """The uniq keys of every demo-topic row of ``rmq.messages`` (both stores)."""
    topics = ", ".join(f"'{topic}'" for topic in TOPICS)
    rows = spark.sql(f"SELECT uniq_key FROM rmq.messages WHERE topic IN ({topics})").collect()
    return [row.uniq_key for row in rows if row.uniq_key]


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def run_cluster_demo(config: RmqConfig, workdir: Path, duration_s: float, rate: float) -> int:
    """``rmq-spark demo --brokers 2``: 0 when every check passed."""
    import signal

    def terminate(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)  # stop as cleanly as on Ctrl-C
    demo = ClusterDemo(config, ClusterOptions(workdir, duration_s, rate))
    try:
        summary = demo.run()
    except KeyboardInterrupt:
        _say("interrupted; everything was stopped")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    _say(f"done in {summary['elapsed_s']} s; summary in {demo.workdir / 'summary.json'}")
    bad = summary["missing"] or summary["duplicated_in_a_store"] or summary["not_consumed"]
    return 1 if bad else 0
