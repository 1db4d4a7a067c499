"""The operator's decisions behind ``rmq-spark recover`` on a store that does not open.

Recovery (``recovery.py``) refuses a store whose checkpoint is damaged, whose oldest segment
is gone without retention having recorded it, or whose log does not end in one torn write,
and names the command that accepts the state. Each decision here changes only what it names
and deletes nothing:

* ``reset_checkpoint``: the damaged ``checkpoint`` (a file or whatever is in its place) is
  moved to ``quarantine/checkpoint-<time>/``; a new one keeps the old timestamps when they
  are readable and has both offsets at 0, so the next open judges the real end of the data
  (FORMAT.md 10, "nobody has it open") and publishes it;
* ``accept_missing``: the lost prefix is recorded in ``config/retention.json`` (reason
  ``lost``), as retention records what it deletes, so readers and recovery take the oldest
  segment left as the start of the log;
* ``truncate_store`` (``quarantine.py``): the log is cut at an offset.

The caller holds the store's lock.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from rmq_spark.errors import CheckpointDamagedError, StoreError
from rmq_spark.store.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointValues,
    read_checkpoint,
    write_checkpoint,
)
from rmq_spark.store.layout import segment_name
from rmq_spark.store.quarantine import quarantine_file
from rmq_spark.store.readable import missing_prefix
from rmq_spark.store.retention import RETENTION_FILE, Deletion, record_deletions
from rmq_spark.store.view import StoreView

__all__ = ["accept_missing", "reset_checkpoint"]


def reset_checkpoint(root_dir: Path) -> Path:
    """Move the checkpoint aside and write one with zero offsets; the quarantine directory.

    Raises ``StoreError`` when the store has no checkpoint, ``OSError`` when a file
    operation fails.
    """
    path = root_dir / CHECKPOINT_FILE
    if not path.exists():
        raise StoreError(f"{path}: there is no checkpoint to reset")
    try:
        old = read_checkpoint(root_dir) or CheckpointValues()
    except CheckpointDamagedError:
        old = CheckpointValues()  # unreadable: nothing of it is kept but the quarantined copy
    fresh = dataclasses.replace(old, master_flushed_offset=0, confirm_phy_offset=0)
    directory = quarantine_file(root_dir, path, "rmq-spark recover --reset-checkpoint")
    write_checkpoint(root_dir, fresh)
    return directory


def accept_missing(root_dir: Path) -> tuple[int, int]:
    """Record the missing prefix ``[floor, first)`` of the log as lost; returns it.

    Raises ``StoreError`` when nothing is missing.
    """
    view = StoreView.open(root_dir)
    missing = missing_prefix(view)
    if missing is None:
        raise StoreError(
            f"{root_dir}: no segment is missing below the oldest one (nothing to accept)"
        )
    floor, first = missing
    lost = Deletion(
        segment=segment_name(floor - floor % view.segment_size),
        base_offset=floor,
        end_offset=first,
        deleted_at_ms=int(time.time() * 1000),
        reason="lost",
        unprocessed_bytes=first - floor,
    )
    record_deletions(root_dir / RETENTION_FILE, [lost])
    return floor, first
