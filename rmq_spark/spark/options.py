"""PURE: the ``rocketmq`` source's option strings -> one frozen ``SourceOptions``.

Owns ``SourceOptions`` (every option parsed, with its default) and ``parse_options`` /
``check_options``: which options apply to streaming or batch queries, which go together or
exclude each other, and the error for an unknown option. Spark hands options over
case-insensitively (lower-cased keys); every error names the option in its documented
spelling and lists what is valid. Does not touch the store (whether an offset exists is
checked in ``planner.py``).

The syntax of one value lives in ``option_values.py``, the starting and ending modes in
``option_modes.py``; the names callers import from here are re-exported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.broker.config import parse_namesrv_addr
from rmq_spark.errors import SourceError
from rmq_spark.spark.isolation import isolation_value
from rmq_spark.spark.option_hints import SPARK_TABLE_KEYS, unknown_option
from rmq_spark.spark.option_modes import EndingMode, StartingMode, ending_values, starting_values
from rmq_spark.spark.option_values import (
    EARLIEST_QUEUE_OFFSET,
    LATEST_QUEUE_OFFSET,
    OPTION_NAMES,
    QueuePositions,
    bad_value,
    bool_value,
    bytes_value,
    duration_ms_value,
    int_value,
    pattern_value,
    topics_value,
)

__all__ = [
    "EARLIEST_QUEUE_OFFSET",
    "EndingMode",
    "LATEST_QUEUE_OFFSET",
    "OPTION_NAMES",
    "QueuePositions",
    "SourceOptions",
    "StartingMode",
    "check_options",
    "parse_options",
]

_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Every option of the ``rocketmq`` source, parsed and validated.

    Built by ``parse_options``; the fields below are snake_case forms of the option names.
    """

    path: str = ""  # store root directory (the one holding commitlog/ and checkpoint)
    topics: tuple[str, ...] = ()  # only these topics; () means every topic
    topic_pattern: str = ""  # only topics matching this regex (full match); "" = no pattern
    starting_mode: StartingMode = StartingMode.EARLIEST  # where reading starts
    starting_physical_offset: int = -1  # with StartingMode.OFFSET
    starting_timestamp_ms: int = -1  # with StartingMode.TIMESTAMP
    ending_mode: EndingMode = EndingMode.LATEST  # batch only: where reading stops
    ending_physical_offset: int = -1  # with EndingMode.OFFSET
    ending_timestamp_ms: int = -1  # with EndingMode.TIMESTAMP
    max_bytes_per_trigger: int = 0  # streaming admission control; 0 = unlimited
    max_messages_per_trigger: int = 0  # streaming admission control; 0 = unlimited
    min_partitions: int = 0  # split a large range into at least this many tasks; 0: CPU count
    max_bytes_per_partition: int = 128 * _MIB  # and into tasks of at most this many bytes
    fail_on_data_loss: bool = True  # deleted data the query needed: fail (True) or skip
    include_body: bool = True  # False: body column is null and bodies are not copied
    check_crc: bool = True  # verify each body's BODYCRC while reading
    decompress_body: bool = True  # inflate compressed bodies, as a consumer gets them
    isolation: str = "read_committed"  # read_uncommitted: transactions' half/op records too
    driver_read_max_bytes: int = 0  # streaming: read batches this small on the driver; 0 = off
    streaming: bool = False  # parsed for a streaming query (changes defaults and checks)
    # Kafka-source parity (docs/SOURCE.md "Options Spark's Kafka source has"):
    min_messages_per_trigger: int = 0  # streaming: wait for this many messages; 0 = no wait
    max_trigger_delay_ms: int = 15 * 60_000  # ... but at most this long after the last batch
    starting_queues: QueuePositions = ()  # StartingMode.QUEUES: per-queue queue offsets
    starting_queue_times: QueuePositions = ()  # StartingMode.QUEUES: per-queue store times
    timestamp_strategy_latest: bool = False  # no record at/after a queue's time: its end
    ending_queues: QueuePositions = ()  # EndingMode.QUEUES: per-queue queue offsets (excl.)
    ending_queue_times: QueuePositions = ()  # EndingMode.QUEUES: per-queue store times
    consumer_group: str = ""  # commit progress as this RocketMQ group's offsets; "" = none
    brokers: str = ""  # the broker holding the store (gRPC host:port) for group commits
    credentials: tuple[str, str] | None = None  # accessKey/secretKey: signs the group commits
    namesrv: str = ""  # name servers to discover the brokers' stores from (cluster_discovery)
    cluster: str = ""  # with namesrv: only this cluster's brokers; "" = every cluster
    store_roots: tuple[str, ...] = ()  # with namesrv: discovered stores must be under one

    def __post_init__(self) -> None:
        if self.min_partitions < 0:
            raise ValueError(f"min_partitions: must be >= 0, got {self.min_partitions}")
        if self.max_bytes_per_partition < 1:
            raise ValueError(
                f"max_bytes_per_partition: must be >= 1, got {self.max_bytes_per_partition}"
            )
        if self.max_bytes_per_trigger < 0 or self.max_messages_per_trigger < 0:
            raise ValueError("max_*_per_trigger: must be >= 0 (0 means unlimited)")
        if self.driver_read_max_bytes < 0:
            raise ValueError("driver_read_max_bytes: must be >= 0 (0 means off)")
        if self.max_messages_per_trigger and (
            self.min_messages_per_trigger > self.max_messages_per_trigger
        ):
            raise SourceError(
                f"option minMessagesPerTrigger={self.min_messages_per_trigger} is above "
                f"maxMessagesPerTrigger={self.max_messages_per_trigger}"
            )

    def wants_topic_filter(self) -> bool:
        """True when some topics are to be skipped."""
        return bool(self.topics) or bool(self.topic_pattern)


_BY_LOWER = {name.lower(): name for name in OPTION_NAMES}


def _canonical_keys(options: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in options.items():
        if str(key).lower() in SPARK_TABLE_KEYS:
            continue
        name = _BY_LOWER.get(str(key).lower())
        if name is None:
            raise unknown_option(str(key), OPTION_NAMES)
        found[name] = str(value)
    return found


def check_options(options: Mapping[str, str]) -> None:
    """Fail early (at ``load()``, before Spark knows whether the query streams) on what is
    wrong for both ``read`` and ``readStream``: unknown names, bad values, no path.

    A ``SourceError`` raised while Spark creates a *stream* reader is buried under an
    ``UnboundLocalError`` of PySpark's source runner; here it is one line at ``load()``.
    """
    try:
        parse_options(options, streaming=True)
    except SourceError as as_stream:
        try:
            parse_options(options, streaming=False)
        except SourceError as as_batch:
            raise as_stream if "queries only" in str(as_batch) else as_batch from None


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse and validate the options given to ``spark.read[Stream].format("rocketmq")``.

    Parameters
    ----------
    options
        Option names (any letter case, as Spark passes them) to string values.
    streaming
        True for ``readStream``: ``startingOffsets`` defaults to ``latest`` (as Spark's
        Kafka source) and ending options are refused; False for ``read``: it defaults to
        ``earliest`` and ``startingOffsets=latest`` and trigger limits are refused.

    Returns
    -------
    SourceOptions

    Raises
    ------
    SourceError
        An unknown option (the message lists the valid ones), a bad value (the message
        names the option and the expected syntax), a missing path, or options that
        contradict each other.

    Examples
    --------
    >>> parse_options({"path": "/s", "maxbytespertrigger": "1024"}, streaming=True)
    ... # doctest: +ELLIPSIS
    SourceOptions(path='/s', ..., max_bytes_per_trigger=1024, ...)
    """
    raw = _canonical_keys(options)
    values: dict[str, object] = {"streaming": streaming}

    path = raw.get("path", "").strip()
    values.update(_cluster(raw, path))
    if not path and not values.get("namesrv"):
        raise SourceError(
            "the rocketmq source needs a store directory: "
            'spark.read.format("rocketmq").load("/path/to/store") (option path), '
            "or name servers to discover the stores from (option namesrv)"
        )
    values["path"] = path

    if "topics" in raw and "topicPattern" in raw:
        raise SourceError("options topics and topicPattern exclude each other; give one")
    if "topics" in raw:
        values["topics"] = topics_value("topics", raw["topics"])
    if "topicPattern" in raw:
        values["topic_pattern"] = pattern_value("topicPattern", raw["topicPattern"])

    values.update(starting_values(raw, streaming))
    values.update(_group(raw, values))
    values.update(_credentials(raw))
    values.update(ending_values(raw, streaming))
    values.update(_sizes_and_flags(raw, streaming))
    values.update(_trigger_wait(raw, streaming))
    _check_queue_topics(values)
    return SourceOptions(**values)  # type: ignore[arg-type]


def _sizes_and_flags(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    """Trigger limits, partition sizes, ``driverReadMaxBytes`` and the boolean options."""
    values: dict[str, object] = {}
    for name, key in (
        ("maxBytesPerTrigger", "max_bytes_per_trigger"),
        ("maxMessagesPerTrigger", "max_messages_per_trigger"),
    ):
        if name in raw:
            if not streaming:
                raise SourceError(f"option {name} applies to streaming queries only (readStream)")
            parse = bytes_value if name == "maxBytesPerTrigger" else int_value
            values[key] = parse(name, raw[name], 1)
    if "minPartitions" in raw:
        values["min_partitions"] = int_value("minPartitions", raw["minPartitions"], 1)
    if "maxBytesPerPartition" in raw:
        values["max_bytes_per_partition"] = bytes_value(
            "maxBytesPerPartition", raw["maxBytesPerPartition"], 1
        )
    if "driverReadMaxBytes" in raw:
        if not streaming:
            raise SourceError(
                "option driverReadMaxBytes applies to streaming queries only (readStream)"
            )
        values["driver_read_max_bytes"] = bytes_value(
            "driverReadMaxBytes", raw["driverReadMaxBytes"], 0
        )
    for name, key in (
        ("failOnDataLoss", "fail_on_data_loss"),
        ("includeBody", "include_body"),
        ("checkCrc", "check_crc"),
        ("decompressBody", "decompress_body"),
    ):
        if name in raw:
            values[key] = bool_value(name, raw[name])
    if "isolation" in raw:
        values["isolation"] = isolation_value(raw["isolation"])
    return values


def _trigger_wait(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    found: dict[str, object] = {}
    for name in ("minMessagesPerTrigger", "maxTriggerDelay"):
        if name in raw and not streaming:
            raise SourceError(f"option {name} applies to streaming queries only (readStream)")
    if "minMessagesPerTrigger" in raw:
        found["min_messages_per_trigger"] = int_value(
            "minMessagesPerTrigger", raw["minMessagesPerTrigger"], 1
        )
    if "maxTriggerDelay" in raw:
        found["max_trigger_delay_ms"] = duration_ms_value("maxTriggerDelay", raw["maxTriggerDelay"])
    return found


def _check_queue_topics(values: dict[str, object]) -> None:
    """Per-queue JSON names the query's topics (as Kafka's ``assign``) unless ``topics`` or
    ``topicPattern`` does; then every topic it names must be one of them."""
    named = {
        topic
        for key in (
            "starting_queues",
            "starting_queue_times",
            "ending_queues",
            "ending_queue_times",
        )
        for topic, _, _ in values.get(key, ())  # type: ignore[attr-defined]
    }
    if not named:
        return
    topics = values.get("topics", ())
    pattern = str(values.get("topic_pattern", ""))
    if not topics and not pattern:
        values["topics"] = tuple(sorted(named))
        return
    for topic in sorted(named):
        if (topics and topic not in topics) or (pattern and not re.fullmatch(pattern, topic)):
            raise SourceError(
                f"per-queue startingOffsets/endingOffsets name topic {topic!r}, which the "
                "topics/topicPattern option does not subscribe"
            )


def _credentials(raw: dict[str, str]) -> dict[str, object]:
    """accessKey + secretKey (both or neither): what our gRPC calls sign with."""
    if ("accessKey" in raw) != ("secretKey" in raw):
        raise SourceError("options accessKey and secretKey go together; give both or neither")
    if "accessKey" not in raw:
        return {}
    return {"credentials": (raw["accessKey"].strip(), raw["secretKey"])}


def _group(raw: dict[str, str], values: dict[str, object]) -> dict[str, object]:
    """consumerGroup and brokers; a group's query reads its %RETRY% topic too."""
    found: dict[str, object] = {}
    if "brokers" in raw:
        if not re.fullmatch(r"[^\s,]+:\d+", raw["brokers"].strip()):
            raise bad_value("brokers", raw["brokers"])
        found["brokers"] = raw["brokers"].strip()
    if "consumerGroup" not in raw:
        if values.get("starting_mode") is StartingMode.GROUP:
            raise SourceError("startingOffsets=group needs the option consumerGroup")
        return found
    group = raw["consumerGroup"].strip()
    if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,255}", group):
        raise bad_value("consumerGroup", raw["consumerGroup"])
    found["consumer_group"] = group
    retry = f"%RETRY%{group}"
    topics = values.get("topics")
    if isinstance(topics, tuple) and retry not in topics:
        found["topics"] = (*topics, retry)
    pattern = values.get("topic_pattern")
    if isinstance(pattern, str) and pattern:
        found["topic_pattern"] = f"(?:{pattern})|{re.escape(retry)}"
    return found


def _cluster(raw: dict[str, str], path: str) -> dict[str, object]:
    """namesrv (instead of a path), cluster and storeRoots (only with namesrv)."""
    if "namesrv" not in raw:
        for name in ("cluster", "storeRoots"):
            if name in raw:
                raise SourceError(f"option {name} goes with the option namesrv")
        return {}
    if path:
        raise SourceError(
            "options namesrv and path (load's argument) exclude each other: the name servers "
            "name the stores; give one"
        )
    try:
        addresses = parse_namesrv_addr(raw["namesrv"])  # the broker's syntax for namesrvAddr
    except ValueError as err:
        raise bad_value("namesrv", raw["namesrv"], str(err)) from None
    if not addresses:
        raise bad_value("namesrv", raw["namesrv"], "no name server")
    found: dict[str, object] = {"namesrv": ";".join(f"{h}:{p}" for h, p in addresses)}
    if "cluster" in raw:
        if not re.fullmatch(r"[%|a-zA-Z0-9_.-]{1,255}", raw["cluster"].strip()):
            raise bad_value("cluster", raw["cluster"])
        found["cluster"] = raw["cluster"].strip()
    if "storeRoots" in raw:
        roots = tuple(root.strip() for root in raw["storeRoots"].split(",") if root.strip())
        if not roots or not all(root.startswith("/") for root in roots):
            raise bad_value("storeRoots", raw["storeRoots"], "each must be an absolute path")
        found["store_roots"] = roots
    return found
