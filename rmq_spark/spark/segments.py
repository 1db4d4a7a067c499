"""The read-only store view, as the Spark source has always imported it.

Everything here lives in ``rmq_spark/store/view.py`` (the one read-only view of a store,
shared by ``spark/``, ``delay/`` and ``cli/``); this module only re-exports it so that
``from rmq_spark.spark.segments import StoreView`` keeps working.
"""

from __future__ import annotations

from rmq_spark.store.view import (
    ABORT_FILE,
    CHECKPOINT_FILE,
    LOCK_FILE,
    MappedSegment,
    StoreView,
    broker_has_store_open,
    read_confirm_offset,
    segment_path,
)

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "LOCK_FILE",
    "MappedSegment",
    "StoreView",
    "broker_has_store_open",
    "read_confirm_offset",
    "segment_path",
]
