"""PURE: the ``rocketmq`` source's option strings -> one frozen ``SourceOptions``.

Owns option names (Spark's Kafka/Delta spelling), defaults, value syntax and the errors for
unknown options and bad values. Spark hands options over case-insensitively (lower-cased
keys); every error names the option in its documented spelling and lists what is valid.
Does not touch the store (whether an offset exists is checked in ``planner.py``).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.errors import SourceError
from rmq_spark.spark.option_hints import unknown_option

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


class StartingMode(enum.Enum):
    """Where a query starts reading."""

    EARLIEST = "earliest"  # the oldest byte still stored
    LATEST = "latest"  # the durable end when the query starts
    OFFSET = "offset"  # an explicit physical offset (startingOffsets JSON)
    TIMESTAMP = "timestamp"  # the first record stored at or after startingTimestamp
    QUEUES = "queues"  # per queue: startingOffsets {"topic": {"queue": n}} or ...ByTimestamp
    GROUP = "group"  # where consumerGroup's committed offsets point (group_offsets.py)


class EndingMode(enum.Enum):
    """Where a batch query stops reading."""

    LATEST = "latest"  # the durable end when the query is planned
    OFFSET = "offset"  # an explicit physical offset (endingOffsets JSON)
    TIMESTAMP = "timestamp"  # the first record stored at or after endingTimestamp
    QUEUES = "queues"  # per queue: endingOffsets {"topic": {"queue": n}}


# (topic, queue id, queue offset or store time in ms); offsets -2 = earliest, -1 = latest
QueuePositions = tuple[tuple[str, int, int], ...]
EARLIEST_QUEUE_OFFSET = -2  # Kafka's spelling in per-partition JSON
LATEST_QUEUE_OFFSET = -1


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


# Documented spelling -> (value syntax shown in errors). Order is the order in the docs.
_SYNTAX: dict[str, str] = {
    "path": "a store directory (normally given to load())",
    "topics": "a comma-separated list of topic names",
    "topicPattern": "a regular expression a whole topic name must match",
    "startingOffsets": (
        'earliest, latest, group, a JSON object {"physical_offset": N} or per queue '
        '{"topic": {"queueId": queueOffset}} (-2 earliest, -1 latest)'
    ),
    "startingTimestamp": "store time in epoch milliseconds (an integer >= 0)",
    "endingOffsets": (
        'latest, a JSON object {"physical_offset": N} or per queue '
        '{"topic": {"queueId": queueOffset}} (-1 latest; batch queries only)'
    ),
    "endingTimestamp": "store time in epoch milliseconds (batch queries only)",
    "maxBytesPerTrigger": "a positive number of bytes, e.g. 67108864 or 64m (streaming only)",
    "maxMessagesPerTrigger": "a positive integer number of messages (streaming only)",
    "minPartitions": "a positive integer",
    "maxBytesPerPartition": "a positive number of bytes, e.g. 134217728 or 128m",
    "failOnDataLoss": "true or false",
    "includeBody": "true or false",
    "checkCrc": "true or false",
    "decompressBody": "true or false (false: compressed bodies as stored)",
    "driverReadMaxBytes": "a number of bytes >= 0, e.g. 4m; 0 turns it off (streaming only)",
    "minMessagesPerTrigger": "a positive integer number of messages (streaming only)",
    "maxTriggerDelay": "a duration such as 500ms, 30s, 15m or 1h (streaming only)",
    "startingOffsetsByTimestamp": 'per queue {"topic": {"queueId": epochMillis}}',
    "startingOffsetsByTimestampStrategy": "error or latest",
    "endingOffsetsByTimestamp": 'per queue {"topic": {"queueId": epochMillis}} (batch only)',
    "consumerGroup": "a RocketMQ consumer group name (letters, digits, %|_-; 255 at most)",
    "brokers": "the gRPC address host:port of the broker that holds the store",
    "accessKey": "the access key the broker's authentication knows (with secretKey)",
    "secretKey": "the secret key of accessKey (Spark redacts it from plans and logs)",
}

OPTION_NAMES: tuple[str, ...] = tuple(_SYNTAX)
"""Every option the source accepts, in documented spelling."""

_BY_LOWER = {name.lower(): name for name in OPTION_NAMES}
_OFFSET_KEY = "physical_offset"


def _bad(name: str, value: str, reason: str = "") -> SourceError:
    detail = f" ({reason})" if reason else ""
    return SourceError(f"option {name}={value!r} is invalid{detail}; expected {_SYNTAX[name]}")


def _int(name: str, value: str, minimum: int) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise _bad(name, value, "not an integer")
    number = int(text)
    if number < minimum:
        raise _bad(name, value, f"must be >= {minimum}")
    return number


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _bytes(name: str, value: str, minimum: int) -> int:
    """A byte count: an integer, optionally with a binary unit as Spark writes them (64m, 1g)."""
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", value.lower())
    if not match:
        raise _bad(name, value, "not a byte count")
    number = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if number < minimum:
        raise _bad(name, value, f"must be >= {minimum}")
    return number


def _bool(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _bad(name, value)


def _offset_json(name: str, value: str) -> int:
    try:
        parsed = json.loads(value)
    except ValueError as err:
        raise _bad(name, value, f"not JSON: {err}") from err
    if not isinstance(parsed, dict) or set(parsed) != {_OFFSET_KEY}:
        raise _bad(name, value, f'the JSON object must have exactly the key "{_OFFSET_KEY}"')
    number = parsed[_OFFSET_KEY]
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise _bad(name, value, "the physical offset must be an integer >= 0")
    return number


def _topics(name: str, value: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not topics:
        raise _bad(name, value, "no topic named")
    return topics


def _pattern(name: str, value: str) -> str:
    try:
        re.compile(value)
    except re.error as err:
        raise _bad(name, value, f"not a regular expression: {err}") from err
    if not value:
        raise _bad(name, value, "empty")
    return value


def _canonical_keys(options: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in options.items():
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
    if not path:
        raise SourceError(
            "the rocketmq source needs a store directory: "
            'spark.read.format("rocketmq").load("/path/to/store") (option path)'
        )
    values["path"] = path

    if "topics" in raw and "topicPattern" in raw:
        raise SourceError("options topics and topicPattern exclude each other; give one")
    if "topics" in raw:
        values["topics"] = _topics("topics", raw["topics"])
    if "topicPattern" in raw:
        values["topic_pattern"] = _pattern("topicPattern", raw["topicPattern"])

    values.update(_starting(raw, streaming))
    values.update(_group(raw, values))
    values.update(_credentials(raw))
    values.update(_ending(raw, streaming))

    for name, key in (
        ("maxBytesPerTrigger", "max_bytes_per_trigger"),
        ("maxMessagesPerTrigger", "max_messages_per_trigger"),
    ):
        if name in raw:
            if not streaming:
                raise SourceError(f"option {name} applies to streaming queries only (readStream)")
            parse = _bytes if name == "maxBytesPerTrigger" else _int
            values[key] = parse(name, raw[name], 1)
    if "minPartitions" in raw:
        values["min_partitions"] = _int("minPartitions", raw["minPartitions"], 1)
    if "maxBytesPerPartition" in raw:
        values["max_bytes_per_partition"] = _bytes(
            "maxBytesPerPartition", raw["maxBytesPerPartition"], 1
        )
    if "driverReadMaxBytes" in raw:
        if not streaming:
            raise SourceError(
                "option driverReadMaxBytes applies to streaming queries only (readStream)"
            )
        values["driver_read_max_bytes"] = _bytes("driverReadMaxBytes", raw["driverReadMaxBytes"], 0)
    for name, key in (
        ("failOnDataLoss", "fail_on_data_loss"),
        ("includeBody", "include_body"),
        ("checkCrc", "check_crc"),
        ("decompressBody", "decompress_body"),
    ):
        if name in raw:
            values[key] = _bool(name, raw[name])
    values.update(_trigger_wait(raw, streaming))
    _check_queue_topics(values)
    return SourceOptions(**values)  # type: ignore[arg-type]


def _trigger_wait(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    found: dict[str, object] = {}
    for name in ("minMessagesPerTrigger", "maxTriggerDelay"):
        if name in raw and not streaming:
            raise SourceError(f"option {name} applies to streaming queries only (readStream)")
    if "minMessagesPerTrigger" in raw:
        found["min_messages_per_trigger"] = _int(
            "minMessagesPerTrigger", raw["minMessagesPerTrigger"], 1
        )
    if "maxTriggerDelay" in raw:
        found["max_trigger_delay_ms"] = _duration_ms("maxTriggerDelay", raw["maxTriggerDelay"])
    return found


_DURATION_MS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _duration_ms(name: str, value: str) -> int:
    """A duration as Spark writes them (``timeStringAsMs``: a bare number is milliseconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", value.lower())
    if not match:
        raise _bad(name, value, "not a duration")
    return int(match.group(1)) * _DURATION_MS[match.group(2) or ""]


def _queue_json(name: str, value: str, minimum: int) -> QueuePositions:
    """``{"topic": {"queueId": n}}`` (Kafka's per-partition JSON) as sorted triples."""
    try:
        parsed = json.loads(value)
    except ValueError as err:
        raise _bad(name, value, f"not JSON: {err}") from err
    if not isinstance(parsed, dict) or not parsed:
        raise _bad(name, value, "a JSON object naming at least one topic")
    found: list[tuple[str, int, int]] = []
    for topic, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise _bad(
                name,
                value,
                f'the JSON object must have exactly the key "{_OFFSET_KEY}" or map each topic '
                f"to an object of queues (topic {topic!r})",
            )
        for queue, number in queues.items():
            if not re.fullmatch(r"\d+", str(queue)) or int(queue) > 2**31 - 1:
                raise _bad(name, value, f"queue id {queue!r} of topic {topic!r} is not an int")
            if not isinstance(number, int) or isinstance(number, bool) or number < minimum:
                raise _bad(name, value, f"{topic}/{queue}: must be an integer >= {minimum}")
            found.append((str(topic), int(queue), number))
    return tuple(sorted(found))


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


def _starting(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    strategy = raw.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _bad("startingOffsetsByTimestampStrategy", strategy)
    if "startingOffsetsByTimestamp" in raw:  # Kafka's precedence: before startingTimestamp
        times = _queue_json("startingOffsetsByTimestamp", raw["startingOffsetsByTimestamp"], 0)
        return {
            "starting_mode": StartingMode.QUEUES,
            "starting_queue_times": times,
            "timestamp_strategy_latest": strategy == "latest",
        }
    if "startingTimestamp" in raw:  # takes precedence over startingOffsets, as in Kafka's source
        return {
            "starting_mode": StartingMode.TIMESTAMP,
            "starting_timestamp_ms": _int("startingTimestamp", raw["startingTimestamp"], 0),
        }
    text = raw.get("startingOffsets", "latest" if streaming else "earliest").strip()
    if text.lower() == "earliest":
        return {"starting_mode": StartingMode.EARLIEST}
    if text.lower() == "latest":
        if not streaming:
            raise _bad("startingOffsets", text, "latest is for streaming queries only")
        return {"starting_mode": StartingMode.LATEST}
    if text.startswith("{") and _is_queue_json(text):
        queues = _queue_json("startingOffsets", text, EARLIEST_QUEUE_OFFSET)
        if any(n == LATEST_QUEUE_OFFSET for _, _, n in queues):  # docs/SOURCE.md: why not
            raise _bad("startingOffsets", text, "-1 (latest) per queue is not supported")
        return {"starting_mode": StartingMode.QUEUES, "starting_queues": queues}
    if text.lower() == "group":
        if not streaming:
            raise _bad("startingOffsets", text, "group is for streaming queries only")
        return {"starting_mode": StartingMode.GROUP}
    if text.startswith("{"):
        return {
            "starting_mode": StartingMode.OFFSET,
            "starting_physical_offset": _offset_json("startingOffsets", text),
        }
    raise _bad("startingOffsets", text)


def _is_queue_json(text: str) -> bool:
    """A JSON object whose values are all objects: per-queue positions, not a physical one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(parsed, dict)
        and bool(parsed)
        and all(isinstance(v, dict) for v in parsed.values())
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
            raise _bad("brokers", raw["brokers"])
        found["brokers"] = raw["brokers"].strip()
    if "consumerGroup" not in raw:
        if values.get("starting_mode") is StartingMode.GROUP:
            raise SourceError("startingOffsets=group needs the option consumerGroup")
        return found
    group = raw["consumerGroup"].strip()
    if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,255}", group):
        raise _bad("consumerGroup", raw["consumerGroup"])
    found["consumer_group"] = group
    retry = f"%RETRY%{group}"
    topics = values.get("topics")
    if isinstance(topics, tuple) and retry not in topics:
        found["topics"] = (*topics, retry)
    pattern = values.get("topic_pattern")
    if isinstance(pattern, str) and pattern:
        found["topic_pattern"] = f"(?:{pattern})|{re.escape(retry)}"
    return found


def _ending(raw: dict[str, str], streaming: bool) -> dict[str, object]:
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name in raw and streaming:
            raise SourceError(f"option {name} applies to batch queries only (spark.read)")
    if "endingOffsetsByTimestamp" in raw:  # Kafka's precedence: before endingTimestamp
        times = _queue_json("endingOffsetsByTimestamp", raw["endingOffsetsByTimestamp"], 0)
        return {"ending_mode": EndingMode.QUEUES, "ending_queue_times": times}
    if "endingTimestamp" in raw:  # takes precedence over endingOffsets
        return {
            "ending_mode": EndingMode.TIMESTAMP,
            "ending_timestamp_ms": _int("endingTimestamp", raw["endingTimestamp"], 0),
        }
    text = raw.get("endingOffsets", "latest").strip()
    if text.lower() == "latest":
        return {"ending_mode": EndingMode.LATEST}
    if text.startswith("{") and _is_queue_json(text):
        queues = _queue_json("endingOffsets", text, LATEST_QUEUE_OFFSET)
        return {"ending_mode": EndingMode.QUEUES, "ending_queues": queues}
    if text.startswith("{"):
        return {
            "ending_mode": EndingMode.OFFSET,
            "ending_physical_offset": _offset_json("endingOffsets", text),
        }
    raise _bad("endingOffsets", text)
