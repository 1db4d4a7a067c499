"""PURE: the ``rocketmq`` sink's options and input columns -> one frozen ``SinkOptions``.

Owns option names, defaults and value syntax of ``df.write[Stream].format("rocketmq")``, the
columns the sink accepts and their Spark types, and the errors for both, raised on the
driver when Spark plans the write (never a traceback from an executor). Spark hands options
over lower-cased; every error names the option in its documented spelling.
Does not touch a store or a broker (``sink_targets.py``) nor read rows (``sink_rows.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rmq_spark.errors import SinkError
from rmq_spark.spark.option_hints import (
    SPARK_TABLE_KEYS,
    kafka_column_hint,
    unknown_sink_option,
)

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = ["COLUMNS", "SINK_OPTION_NAMES", "SinkOptions", "check_columns", "parse_sink_options"]

# Column -> the Spark type names it accepts (``DataType.typeName()``).
COLUMNS: dict[str, tuple[str, ...]] = {
    "topic": ("string",),
    "body": ("binary", "string"),
    "tags": ("string",),
    "keys": ("string", "array<string>"),
    "properties": ("map<string,string>",),
    "message_group": ("string",),
    "delivery_time": ("timestamp", "timestamp_ntz", "long"),
    "delay_level": ("byte", "short", "integer", "long"),
}
_REQUIRED = ("topic", "body")

SINK_OPTION_NAMES = (
    "path", "brokers", "namespace", "keyColumn", "writeId", "lockTimeoutMs", "batchMessages",
    "maxInflightRequests", "requestTimeoutMs", "maxAttempts", "config", "checkpointLocation",
    "accessKey", "secretKey", "namesrv", "retryTimesWhenSendFailed", "sendLatencyFaultEnable",
)  # fmt: skip
# store.* and broker.* options are configuration overrides of the embedded broker.
_OVERRIDE_SECTIONS = ("store.", "broker.")
_WRITE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Every option of the ``rocketmq`` sink, parsed; snake_case forms of the option names."""

    path: str = ""  # embedded: the store root (save(path) / start(path) / option path)
    brokers: str = ""  # through a broker: its gRPC host:port
    namespace: str = ""  # RocketMQ namespace of the topics (through a broker)
    key_column: str = ""  # the column holding each row's UNIQ_KEY; "" = derived keys
    write_id: str = ""  # batch writes: the first part of derived keys; "" = one per write
    lock_timeout_ms: int = 120_000  # embedded: how long a task waits for the store's lock
    batch_messages: int = 512  # rows per store put_batch / per SendMessage request
    max_inflight_requests: int = 8  # through a broker: requests in flight per task
    request_timeout_ms: int = 30_000  # through a broker: deadline of one SendMessage
    max_attempts: int = 5  # through a broker: attempts of one request (same ids)
    config: str = ""  # embedded: TOML configuration file (as --config)
    overrides: tuple[tuple[str, str], ...] = field(default=())  # embedded: store.*/broker.*
    credentials: tuple[str, str] | None = None  # through a broker with auth: accessKey/secretKey
    namesrv: str = ""  # through a cluster: name servers "h:p;h:p" (sink_cluster.py)
    retry_times_when_send_failed: int = 2  # through a cluster: other brokers tried per request
    send_latency_fault_enable: bool = False  # through a cluster: the latency fault table

    @property
    def embedded(self) -> bool:
        return not self.brokers and not self.namesrv


_DEFAULTS = SinkOptions()


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    by_lower = {name.lower(): name for name in SINK_OPTION_NAMES}
    canonical: dict[str, str] = {}
    for key, value in options.items():
        lower = key.lower()
        if lower in SPARK_TABLE_KEYS:
            continue
        if lower.startswith(_OVERRIDE_SECTIONS):
            canonical[lower] = value
        elif lower in by_lower:
            canonical[by_lower[lower]] = value
        else:
            raise unknown_sink_option(key, (*SINK_OPTION_NAMES, "store.<key>", "broker.<key>"))
    return canonical


def _positive(raw: Mapping[str, str], name: str, default: int) -> int:
    text = raw.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise SinkError(f"option {name}: expected a positive integer, got {text!r}")
    return value


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Parse the options given to ``df.write[Stream].format("rocketmq")``.

    Raises
    ------
    SinkError
        An unknown option, a bad value, neither a path nor ``brokers`` (or both).
    """
    raw = _canonical(options)
    path, brokers = raw.get("path", "").strip(), raw.get("brokers", "").strip()
    namesrv = _namesrv(raw.get("namesrv", ""))
    if sum(map(bool, (path, brokers, namesrv))) != 1:
        raise SinkError(
            "the rocketmq sink needs exactly one destination: a store path "
            "(save(path), start(path) or option path: embedded), option brokers "
            "(host:port of a running broker) or option namesrv (a cluster's name servers); "
            f"got path={path!r}, brokers={brokers!r}, namesrv={namesrv!r}"
        )
    if brokers and ("," in brokers or brokers.rpartition(":")[2].isdigit() is False):
        raise SinkError(f"option brokers: expected one broker's host:port, got {brokers!r}")
    write_id = raw.get("writeId", "")
    if write_id and not _WRITE_ID.fullmatch(write_id):
        raise SinkError(f"option writeId: 1 to 64 of [A-Za-z0-9_.:-], got {write_id!r}")
    overrides = tuple(sorted((k, v) for k, v in raw.items() if k.startswith(_OVERRIDE_SECTIONS)))
    if not path and (overrides or raw.get("config")):
        raise SinkError(
            "options config, store.* and broker.* configure the embedded sink; "
            "with brokers the broker's own configuration applies"
        )
    if ("accessKey" in raw) != ("secretKey" in raw):
        raise SinkError("options accessKey and secretKey go together; give both or neither")
    if "accessKey" in raw and path:
        raise SinkError("options accessKey/secretKey sign requests to a broker: give brokers")
    credentials = (raw["accessKey"], raw["secretKey"]) if "accessKey" in raw else None
    return SinkOptions(
        path=path,
        brokers=brokers,
        namesrv=namesrv,
        retry_times_when_send_failed=_count(raw, "retryTimesWhenSendFailed", 2),
        send_latency_fault_enable=_flag(raw, "sendLatencyFaultEnable"),
        credentials=credentials,
        namespace=raw.get("namespace", ""),
        key_column=raw.get("keyColumn", ""),
        write_id=write_id,
        lock_timeout_ms=_positive(raw, "lockTimeoutMs", _DEFAULTS.lock_timeout_ms),
        batch_messages=_positive(raw, "batchMessages", _DEFAULTS.batch_messages),
        max_inflight_requests=_positive(
            raw, "maxInflightRequests", _DEFAULTS.max_inflight_requests
        ),
        request_timeout_ms=_positive(raw, "requestTimeoutMs", _DEFAULTS.request_timeout_ms),
        max_attempts=_positive(raw, "maxAttempts", _DEFAULTS.max_attempts),
        config=raw.get("config", ""),
        overrides=overrides,
    )


def _namesrv(text: str) -> str:
    addrs = [addr.strip() for addr in text.split(";") if addr.strip()]
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SinkError(f"option namesrv: expected host:port;host:port, got {text!r}")
    return ";".join(addrs)


def _count(raw: Mapping[str, str], name: str, default: int) -> int:
    text = raw.get(name)
    if text is None:
        return default
    if not text.strip().isdigit():
        raise SinkError(f"option {name}: expected an integer >= 0, got {text!r}")
    return int(text)


def _flag(raw: Mapping[str, str], name: str) -> bool:
    text = raw.get(name, "false").strip().lower()
    if text not in ("true", "false"):
        raise SinkError(f"option {name}: expected true or false, got {raw[name]!r}")
    return text == "true"


_SQL_NAMES = {"bigint": "long", "int": "integer", "smallint": "short", "tinyint": "byte"}


def _type_name(data_type: DataType) -> str:
    name = data_type.simpleString()
    return _SQL_NAMES.get(name, name)


def check_columns(schema: StructType, options: SinkOptions) -> None:
    """Refuse input the sink cannot write: a missing ``topic``/``body``, an unknown column,
    a column of the wrong type, ``delay_level`` through a broker.

    Raises
    ------
    SinkError
        Naming the column, its type and what is accepted.
    """
    names = [f.name for f in schema.fields]
    for column in schema.fields:
        got = _type_name(column.dataType)
        if column.name == options.key_column:
            if got != "string":
                raise SinkError(f"keyColumn {column.name!r} must be a string, got {got}")
            continue
        accepted = COLUMNS.get(column.name)
        if accepted is None:
            hint = kafka_column_hint(column.name) or "drop or rename it"
            raise SinkError(
                f"unknown column {column.name!r} for the rocketmq sink: {hint}; columns: "
                f"{', '.join(COLUMNS)} and the keyColumn option's"
            )
        if got not in accepted:
            raise SinkError(
                f"column {column.name!r} has type {got}; the rocketmq sink takes "
                f"{' or '.join(accepted)}"
            )
    # after the unknown columns: Kafka's value column gets its hint, not 'needs a body'
    for required in _REQUIRED:
        if required not in names:
            raise SinkError(f"the rocketmq sink needs a {required!r} column; the input has {names}")
    if options.key_column and options.key_column not in names:
        raise SinkError(f"keyColumn {options.key_column!r} is not a column of the input {names}")
    if "delay_level" in names and not options.embedded:
        raise SinkError(
            "column delay_level needs the embedded sink (a store path): RocketMQ 5's gRPC "
            "protocol has no delay levels; through brokers use delivery_time"
        )
