"""``config/topics.json`` kept current from a thread of its own, at any rate of creation.

A topic is created in memory (``topics.py``, under its lock, no I/O), then ``changed(n)``
tells this writer that the table's change ``n`` is not yet in the file. The writer thread
takes a copy of the table and rewrites the file (``write_topics``: the previous content in
``.bak``, atomic replace, the data version kept in memory), outside every lock a send waits
on. Creations that arrive during a write, or less than ``_PAUSE_S`` (or nine times the
last write's duration, whichever is longer) after it, are written together by the next one:
a creation costs the same whatever the number of topics, a storm of creations costs at most
a tenth of a core for the rewrites (a thread rewriting back to back would hold the GIL
against the event loop serving sends), and the file trails the table by at most that pause
plus one write. ``close`` writes what is left (a broker that stops cleanly
leaves every topic in the file, for a RocketMQ broker taking over); ``flush`` waits for the
file to hold every change made so far. A write that fails is logged and retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config import DataVersion, TopicConfig
from rmq_spark.broker.config_files.rocketmq_config_files import write_topics
from rmq_spark.clock import Clock
from rmq_spark.errors import StoreIOError

__all__ = ["TopicsFileWriter"]

log = logging.getLogger("rmq_spark.broker")
_RETRY_S = 1.0
_PAUSE_S = 1.0  # the shortest time between two rewrites
_DUTY = 0.1  # the largest share of time spent rewriting

# What the writer reads from the table: (change number, topic -> config), copied under the
# table's lock.
Snapshot = Callable[[], tuple[int, Mapping[str, TopicConfig]]]


class TopicsFileWriter:
    """Rewrites ``<root>/config/topics.json`` in the background after each batch of changes."""

    def __init__(
        self, root: Path, snapshot: Snapshot, version: DataVersion, clock: Clock | None
    ) -> None:
        self._root = root
        self._snapshot = snapshot
        self._version = version
        self._clock = clock
        self._cond = threading.Condition()
        self._wanted = 0  # the newest change of the table
        self._written = 0  # the newest change in the file
        self._closing = False
        self._next_at = 0.0  # monotonic time before which no write starts (unless closing)
        self._thread = threading.Thread(target=self._run, name="topics-json", daemon=True)
        self._thread.start()

    def changed(self, change: int) -> None:
        """The table's change ``change`` is to be written (returns at once)."""
        with self._cond:
            if change > self._wanted:
                self._wanted = change
                self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until the file holds every change so far; ``False`` on timeout."""
        with self._cond:
            target = self._wanted
            return self._cond.wait_for(lambda: self._written >= target, timeout=timeout_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """Write what is left and stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.error("topics.json: the last write did not finish within %.0f s", timeout_s)

    def _due(self) -> bool:
        """Whether to write now (called under ``_cond``); waits out the pause first."""
        self._cond.wait_for(lambda: self._wanted > self._written or self._closing)
        while not self._closing and (pause := self._next_at - time.monotonic()) > 0:
            self._cond.wait(pause)
        return self._wanted > self._written

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._due():
                    return  # closing, nothing left
            change, configs = self._snapshot()
            started = time.monotonic()
            try:
                self._version = write_topics(
                    self._root, configs, clock=self._clock, version=self._version
                )
            except StoreIOError as err:
                log.error("topics.json not updated (retried in %.0f s): %s", _RETRY_S, err)
                with self._cond:
                    if self._closing:
                        return
                time.sleep(_RETRY_S)
                continue
            finished = time.monotonic()
            pause = max(_PAUSE_S, (finished - started) * (1 - _DUTY) / _DUTY)
            with self._cond:
                self._written = max(self._written, change)
                self._next_at = finished + pause
                self._cond.notify_all()
