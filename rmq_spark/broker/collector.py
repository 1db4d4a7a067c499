"""The broker process's garbage collector: started-up objects frozen, young collections rarer.

A send allocates a few hundred short-lived objects (protobuf messages, commands, results,
futures), almost all freed by reference counting. With CPython's default thresholds (700
allocations) the collector still ran a young collection every few sends and, every tenth of
those, walked the broker's long-lived state (topic table, idempotency window, consumer
groups), about a tenth of the broker's CPU per send at thousands of sends a second
(BENCHMARKS.md, issue 28). Only the ``broker`` command's own process is tuned: an embedded
broker lives in its user's process, whose collector is the user's.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["YOUNG_THRESHOLD", "settle_collector"]

log = logging.getLogger("rmq_spark.broker")

YOUNG_THRESHOLD = 20_000
"""Allocations (net of frees) between young collections: cyclic garbage waits a little
longer (a few MB at most), the collections come thirty times less often."""
_OLDER_THRESHOLD = 20  # young collections per middle one, middle ones per full one


def settle_collector() -> None:
    """Freeze what start-up built (never collected again, so never walked) and raise the
    thresholds; call once the broker serves."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, _OLDER_THRESHOLD, _OLDER_THRESHOLD)
    log.debug(
        "broker: %d start-up objects frozen; collector thresholds %s",
        gc.get_freeze_count(),
        gc.get_threshold(),
    )
