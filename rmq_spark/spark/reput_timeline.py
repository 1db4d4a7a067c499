"""Where a reput micro-batch's time goes: one log line per event, for tail-latency profiles.

Three kinds of ``reput timeline {json}`` line, joined by ``batch_id`` and wall-clock
milliseconds (one clock, one machine):

* ``trigger`` (Spark's progress of a batch, from a query listener): when the trigger fired
  (``start_ms``) and Spark's ``durationMs`` (``latestOffset``, ``walCommit``,
  ``queryPlanning``, ``addBatch`` = the writer, ``commitOffsets``, ``triggerExecution``);
* ``batch`` (the writer, ``reput_writer.py``): when ``foreachBatch`` began (``start_ms``), the
  log range look-up (``range_ms``), the data files (``files_ms``: the Python workers decode and
  write), each table's Delta commit as ``[begin, end]`` ms after ``start_ms``, and the
  maintenance chores seen running beside it (``beside``);
* ``maintenance`` (``reput_maintenance.py``): one chore's ``[start_ms, end_ms]``.

``parse_timeline`` reads them back (``bench/peers/visible.py`` reports its slowest batches
with them). Owns the line format and the listener; not what is timed.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["TIMELINE_PREFIX", "log_timeline", "parse_timeline", "watch_progress"]

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


def watch_progress(spark: SparkSession, query: StreamingQuery) -> object:
    """Log a ``trigger`` line for each progress of ``query``; returns the listener (pass it
    to ``spark.streams.removeListener`` when the query ends). Spark's listener bus calls it
    asynchronously: a batch never waits for it."""
    from pyspark.sql.streaming import StreamingQueryListener

    query_id = str(query.id)

    class _ProgressLines(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if str(progress.id) != query_id:
                return
            log_timeline(
                "trigger",
                batch_id=progress.batchId,
                start_ms=_epoch_ms(progress.timestamp),
                duration_ms=dict(progress.durationMs),
                rows=progress.numInputRows,
            )

    listener = _ProgressLines()
    spark.streams.addListener(listener)
    return listener
