"""The one segment scan and the one end-of-log judge.

Every reader of the CommitLog (recovery, ``dump``/``verify``, the msg-id query, the delay
job's log reader, the Spark planner's tail check, the reput progress) walks records with
``LogScan`` and asks ``judge_end`` where the log ends; ``readable.readable_end`` puts both
together for a store directory seen through a ``StoreView``.

This module owns no code, only the names callers import: the scan lives in
``segment_scan.py`` (``LogScan``, ``SegmentCursor``, where a scan stops and why), the judge
and the rule for where the readable log ends in ``log_end.py``.
"""

from __future__ import annotations

from rmq_spark.store.log_end import DEFAULT_MAX_RECORD_BYTES, LogEnd, first_non_zero, judge_end
from rmq_spark.store.segment_scan import (
    LogScan,
    ScanStop,
    SegmentCursor,
    SegmentSource,
    StopKind,
    Walk,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "LogEnd",
    "LogScan",
    "ScanStop",
    "SegmentCursor",
    "SegmentSource",
    "StopKind",
    "Walk",
    "first_non_zero",
    "judge_end",
]
