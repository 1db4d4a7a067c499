"""Where a reput micro-batch's time goes: one log line per event, for tail-latency profiles.

Three kinds of ``reput timeline {json}`` line, joined by ``batch_id`` and wall-clock
milliseconds (one clock, one machine):

* ``trigger`` (Spark's progress of a batch, polled by ``ProgressLines``): when the trigger fired
  (``start_ms``) and Spark's ``durationMs`` (``latestOffset``, ``walCommit``,
  ``queryPlanning``, ``addBatch`` = the writer, ``commitOffsets``, ``triggerExecution``);
* ``batch`` (the writer, ``reput_writer.py``): when ``foreachBatch`` began (``start_ms``), the
  log range look-up (``range_ms``), the data files (``files_ms``: the Python workers decode and
  write), each table's Delta commit as ``[begin, end]`` ms after ``start_ms``, and the
  maintenance chores seen running beside it (``beside``);
* ``maintenance`` (``reput_maintenance.py``): one chore's ``[start_ms, end_ms]``.

``parse_timeline`` reads them back (``bench/peers/visible.py`` reports its slowest batches
with them). Owns the line format and the progress poll; not what is timed.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["ProgressLines", "TIMELINE_PREFIX", "log_timeline", "parse_timeline"]

log = logging.getLogger("rmq_spark.reput")

TIMELINE_PREFIX = "reput timeline "


def log_timeline(kind: str, **fields: object) -> None:
    """One timeline line of ``kind`` (``trigger``, ``batch`` or ``maintenance``)."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s%s", TIMELINE_PREFIX, json.dumps({"kind": kind, **fields}, sort_keys=True))


def parse_timeline(text: str) -> list[dict[str, Any]]:
    """Every timeline line of a job's log, in order (PURE); other lines are skipped."""
    events = []
    for line in text.splitlines():
        _, found, payload = line.partition(TIMELINE_PREFIX)
        if not found:
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue  # a line cut by the job's end
        if isinstance(event, dict) and "kind" in event:
            events.append(event)
    return events


def _epoch_ms(iso: str) -> int:
    """Spark's progress timestamp (``2026-11-29T04:33:58.123Z``) in epoch milliseconds."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


class ProgressLines:
    """Logs a ``trigger`` line for each progress of a query, read from Spark's recent
    progress (its JSON) by ``poll``, which the loop waiting for the query calls.

    Not a ``StreamingQueryListener``: PySpark converts each progress event for a Python
    listener field by field over py4j, and five of those fields make the JVM throw an
    exception that PySpark then classifies with fourteen more round trips; at 2,000 msgs/s
    that took a fifth of the driver JVM's CPU. Spark keeps the last 100 progresses
    (``spark.sql.streaming.numRecentProgressUpdates``): a poll a second misses none.
    """

    def __init__(self, query: StreamingQuery) -> None:
        self._query = query._jsq  # type: ignore[attr-defined]
        self._logged_ms = -1  # the start of the newest progress logged

    def poll(self) -> None:
        """Log the progresses that came since the last poll, oldest first."""
        recent = self._query.recentProgress()
        fresh = []
        for index in range(len(recent) - 1, -1, -1):
            progress = json.loads(recent[index].json())
            start_ms = _epoch_ms(progress["timestamp"])
            if start_ms <= self._logged_ms:
                break
            fresh.append((start_ms, progress))
        for start_ms, progress in reversed(fresh):
            log_timeline(
                "trigger",
                batch_id=progress["batchId"],
                start_ms=start_ms,
                duration_ms=progress.get("durationMs", {}),
                rows=progress.get("numInputRows", 0),
            )
        if fresh:
            self._logged_ms = fresh[0][0]
