"""PURE: the error for an option name the ``rocketmq`` source does not have.

Users come from Spark's Kafka source: its option names get what to use instead (or why there
is nothing), any other name the closest valid one. Spark lower-cases option names, so a Kafka
option is named back in Kafka's spelling. One line, so that it reads well at ``load()``.
"""

from __future__ import annotations

import difflib

from rmq_spark.errors import SourceError

__all__ = ["KAFKA_EQUIVALENT", "unknown_option"]

KAFKA_EQUIVALENT: dict[str, str] = {
    "subscribe": "use topics",
    "subscribePattern": "use topicPattern",
    "assign": "use topics, and per-queue startingOffsets/endingOffsets JSON for queues",
    "maxOffsetsPerTrigger": "use maxMessagesPerTrigger (or maxBytesPerTrigger)",
    "minOffsetsPerTrigger": "use minMessagesPerTrigger (with maxTriggerDelay)",
    "maxRecordsPerPartition": "use maxBytesPerPartition",
    "includeHeaders": "not needed: the properties column (a map) always holds every property",
    "groupIdPrefix": "none: the source reads store files, no consumer group is created",
    "fetchOffset.numRetries": "none: offsets are read from local files, nothing is fetched",
    "fetchOffset.retryIntervalMs": "none: offsets are read from local files, nothing is fetched",
    "kafkaConsumer.pollTimeoutMs": "none: records are read from local files, nothing is polled",
}
"""Spark's Kafka source options (Kafka's spelling) -> what to use instead."""

_KAFKA_BY_LOWER = {name.lower(): name for name in KAFKA_EQUIVALENT}


def unknown_option(key: str, valid: tuple[str, ...]) -> SourceError:
    """The error for option ``key``, which is not one of ``valid`` (documented spellings).

    Examples
    --------
    >>> str(unknown_option("maxoffsetspertrigger", ("maxMessagesPerTrigger",)))
    ... # doctest: +ELLIPSIS
    "unknown option 'maxOffsetsPerTrigger' for the rocketmq source: use maxMessagesPerTrigger..."
    """
    lower = key.lower()
    kafka_name = _KAFKA_BY_LOWER.get(lower)
    if kafka_name is not None:
        key = kafka_name
        hint = f"{KAFKA_EQUIVALENT[kafka_name]} (an option of Spark's Kafka source)"
    elif lower.startswith("kafka."):
        hint = "none: the source reads the store's files, give the store directory to load()"
    else:
        by_lower = {name.lower(): name for name in valid}
        close = difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.75)
        hint = f"did you mean {by_lower[close[0]]}?" if close else "no option is close to it"
    return SourceError(
        f"unknown option {key!r} for the rocketmq source: {hint}; valid options: "
        + ", ".join(valid)
    )
