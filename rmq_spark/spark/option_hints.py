"""PURE: the error for an option name (or a sink column) the ``rocketmq`` source or sink
does not have.

Users come from Spark's Kafka source and sink: their option and column names get what to use
instead (or why there is nothing), any other name the closest valid one. Spark lower-cases
option names, so a Kafka option is named back in Kafka's spelling. One line, so that it reads
well at ``load()`` / ``save()``.
"""

from __future__ import annotations

import difflib

from rmq_spark.errors import SinkError, SourceError

__all__ = [
    "KAFKA_EQUIVALENT",
    "KAFKA_SINK_COLUMNS",
    "KAFKA_SINK_EQUIVALENT",
    "SPARK_TABLE_KEYS",
    "kafka_column_hint",
    "unknown_option",
    "unknown_read_or_write_option",
    "unknown_sink_option",
]

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

SPARK_TABLE_KEYS = frozenset({"owner", "location", "provider", "comment", "external"})
"""Set by Spark itself on a catalog table (``CREATE TABLE ... USING rocketmq``) and handed over
with the user's options: ignored by the source and the sink."""

KAFKA_SINK_EQUIVALENT: dict[str, str] = {
    "topic": 'use a topic column, e.g. .withColumn("topic", lit("Orders"))',
    "includeHeaders": "not needed: a properties column (a map) is always written",
}
"""Spark's Kafka sink options (Kafka's spelling) -> what to use instead."""

KAFKA_SINK_COLUMNS: dict[str, str] = {
    "value": "use body",
    "key": "use keys (RocketMQ's message keys; option keyColumn names a UNIQ_KEY column)",
    "headers": "use properties (a map<string,string>)",
    "partition": "none: the broker picks the queue; use message_group to keep an order",
}
"""Spark's Kafka sink columns -> the rocketmq sink's."""

_KAFKA_BY_LOWER = {name.lower(): name for name in KAFKA_EQUIVALENT}
_KAFKA_SINK_BY_LOWER = {name.lower(): name for name in KAFKA_SINK_EQUIVALENT}


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
        hint = _closest(lower, valid)
    return SourceError(
        f"unknown option {key!r} for the rocketmq source: {hint}; valid options: "
        + ", ".join(valid)
    )


def unknown_sink_option(key: str, valid: tuple[str, ...]) -> SinkError:
    """The error for sink option ``key``, which is not one of ``valid``.

    Examples
    --------
    >>> print(unknown_sink_option("topic", ("brokers",)))  # doctest: +ELLIPSIS
    unknown option 'topic' for the rocketmq sink: use a topic column, ...Kafka sink)...
    """
    lower = key.lower()
    kafka_name = _KAFKA_SINK_BY_LOWER.get(lower)
    if kafka_name is not None:
        key = kafka_name
        hint = f"{KAFKA_SINK_EQUIVALENT[kafka_name]} (an option of Spark's Kafka sink)"
    elif lower.startswith("kafka."):
        hint = "use brokers (a broker's gRPC host:port) or a store path; no kafka.* settings"
    else:
        hint = _closest(lower, valid)
    return SinkError(
        f"unknown option {key!r} for the rocketmq sink: {hint}; valid options: " + ", ".join(valid)
    )


def unknown_read_or_write_option(
    key: str, source: tuple[str, ...], sink: tuple[str, ...]
) -> SourceError | SinkError:
    """The error for ``key``, an option of neither the source nor the sink, before Spark says
    whether it reads or writes: the sink's when only a sink option is close to it."""
    lower = key.lower()
    if _closest_name(lower, sink) and not _closest_name(lower, source):
        return unknown_sink_option(key, sink)
    return unknown_option(key, source)


def kafka_column_hint(column: str) -> str:
    """What to use instead of a column of Spark's Kafka sink, or "" for any other name."""
    hint = KAFKA_SINK_COLUMNS.get(column.lower())
    return f"{hint} (a column of Spark's Kafka sink)" if hint else ""


def _closest_name(lower: str, valid: tuple[str, ...]) -> str:
    by_lower = {name.lower(): name for name in valid}
    close = difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else ""


def _closest(lower: str, valid: tuple[str, ...]) -> str:
    name = _closest_name(lower, valid)
    return f"did you mean {name}?" if name else "no option is close to it"
