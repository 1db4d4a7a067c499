"""The redelivery job over several stores (one per broker): the one-store job, per store.

A delayed message's SCHEDULE_TOPIC_XXXX (or timer) entry and the record it restores live in
one broker's log, and RocketMQ's ScheduleMessageService puts it back into the same broker.
So the job over several stores is the one-store job (``job.run_schedule``) run once per
store, each with its own progress (``<store>/config/delayOffset.json``,
``scheduleJournal.json``, ``schedule.lock``) and its own sink (an embedded broker on that
store, or that store's ``--broker``): a message never crosses stores, and exactly once holds
per store for the one-store job's reasons, unchanged. Sharing anything between stores (one
journal, one pass over all stores) would couple their progress and failures for no gain:
each store's passes are independent. Entries come from the store's own log or from the
consume_queue table, whose rows of several stores are told apart by their ``store`` column
(``entries.TableEntrySource``).

``--once``: the stores one after the other; a store that fails (its job locked, its broker
down) does not stop the others, and the run fails at the end naming it. Continuous: one
thread per store, sharing the stop event; a store's job that fails to start stops all (so
a broken store is noticed, not left behind silently). Does not own a store's job
(``job.py``) or argument parsing (cli/, jobs/).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rmq_spark.clock import Clock
from rmq_spark.delay.job import ScheduleJobSpec, run_schedule
from rmq_spark.delay.redeliver import PassReport, Redeliverer
from rmq_spark.errors import ConfigError, RedeliveryFailedError, RmqError

__all__ = ["run_schedule_stores", "store_specs"]

log = logging.getLogger("rmq_spark.delay")


def store_specs(
    spec: ScheduleJobSpec, stores: Sequence[Path], brokers: Sequence[str] = ()
) -> list[ScheduleJobSpec]:
    """One job spec per store, from ``spec`` (tables, once, trigger shared). ``brokers``:
    none (each store opened in this process) or one ``host:port`` per store, in order.

    Raises
    ------
    ConfigError
        A store named twice, or a number of brokers other than 0 or one per store.
    """
    if len({Path(store).absolute() for store in stores}) != len(stores):
        raise ConfigError("--store", f"a store is named twice: {', '.join(map(str, stores))}")
    if brokers and len(brokers) != len(stores):
        raise ConfigError(
            "--broker",
            f"{len(brokers)} broker(s) for {len(stores)} stores: give one --broker per "
            "--store (in the same order), or none",
        )
    addresses: Sequence[str | None] = brokers or [None] * len(stores)
    return [
        dataclasses.replace(spec, store_dir=Path(store), broker=broker)
        for store, broker in zip(stores, addresses, strict=True)
    ]


def run_schedule_stores(
    specs: Sequence[ScheduleJobSpec],
    config: Any,
    *,
    spark_factory: Callable[[], Any] | None = None,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
    on_pass: Callable[[Redeliverer, PassReport], None] | None = None,
) -> int:
    """Run the one-store job for every spec (``store_specs``): once, or continuously until
    ``stop`` is set. Returns 0.

    Raises
    ------
    RedeliveryFailedError
        ``--once``: a store's run failed (the others ran; the message names each failure).
    RmqError
        Continuous: a store's job could not start or failed (the others are stopped).
    """
    if all(spec.once for spec in specs):
        return _run_once(specs, config, spark_factory, clock, on_pass)
    return _run_continuous(specs, config, spark_factory, clock, stop or threading.Event(), on_pass)


def _run_once(
    specs: Sequence[ScheduleJobSpec],
    config: Any,
    spark_factory: Callable[[], Any] | None,
    clock: Clock | None,
    on_pass: Callable[[Redeliverer, PassReport], None] | None,
) -> int:
    failures: list[str] = []
    for spec in specs:
        try:
            run_schedule(spec, config, spark_factory=spark_factory, clock=clock, on_pass=on_pass)
        except RmqError as err:
            log.error("schedule: %s: %s", spec.store_dir, err)
            failures.append(f"{spec.store_dir}: {err}")
    if failures:
        raise RedeliveryFailedError(
            f"{len(failures)} of {len(specs)} stores failed (the others ran): "
            + "; ".join(failures)
        )
    return 0


def _run_continuous(
    specs: Sequence[ScheduleJobSpec],
    config: Any,
    spark_factory: Callable[[], Any] | None,
    clock: Clock | None,
    stop: threading.Event,
    on_pass: Callable[[Redeliverer, PassReport], None] | None,
) -> int:
    errors: list[BaseException] = []
    factory = _built_once(spark_factory)

    def run(spec: ScheduleJobSpec) -> None:
        try:
            run_schedule(
                spec, config, spark_factory=factory, clock=clock, stop=stop, on_pass=on_pass
            )
        except BaseException as err:  # noqa: BLE001  (handed to the caller's thread)
            log.error("schedule: %s stopped every store: %s", spec.store_dir, err)
            errors.append(err)
            stop.set()

    threads = [
        threading.Thread(target=run, args=(spec,), name=f"schedule-{index}", daemon=True)
        for index, spec in enumerate(specs)
    ]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.2)  # short joins: the caller's signal handlers keep running
    if errors:
        raise errors[0]
    return 0


def _built_once(factory: Callable[[], Any] | None) -> Callable[[], Any] | None:
    """``factory``, called at most once however many threads ask (one session for all)."""
    if factory is None:
        return None
    lock = threading.Lock()
    built: list[Any] = []

    def build() -> Any:
        with lock:
            if not built:
                built.append(factory())
            return built[0]

    return build
