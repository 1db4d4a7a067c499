"""The rocketmq sink without Spark: options, column checks, rows -> messages with their keys,
and the embedded target against a real store (idempotent puts, per-row refusals, the lock)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from sink_support import stored_messages as stored

from rmq_spark.errors import SinkError, SinkRowError
from rmq_spark.spark.sink import write_partition
from rmq_spark.spark.sink_options import check_columns, parse_sink_options
from rmq_spark.spark.sink_rows import derived_key, key_prefix, messages_of
from rmq_spark.spark.sink_targets import EmbeddedTarget, is_broker_process, lock_holder
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import UNIQ_KEY

SMALL = {"store.segment_size_bytes": "1048576", "store.flush_policy": "ASYNC"}


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, dtype, True) for name, dtype in fields])  # type: ignore[arg-type]


BASIC_FIELDS = (("topic", StringType()), ("body", BinaryType()))
BASIC = schema(*BASIC_FIELDS)


def test_options_need_exactly_one_destination() -> None:
    with pytest.raises(SinkError, match="exactly one destination"):
        parse_sink_options({})
    with pytest.raises(SinkError, match="exactly one destination"):
        parse_sink_options({"path": "/s", "brokers": "h:1"})
    with pytest.raises(SinkError, match="unknown option 'maxoffsetspertrigger'"):
        parse_sink_options({"path": "/s", "maxoffsetspertrigger": "1"})
    with pytest.raises(SinkError, match="option batchMessages: expected a positive integer"):
        parse_sink_options({"path": "/s", "batchmessages": "0"})
    with pytest.raises(SinkError, match="option brokers"):
        parse_sink_options({"brokers": "h1:1,h2:2"})
    with pytest.raises(SinkError, match="configure the embedded sink"):
        parse_sink_options({"brokers": "h:1", "store.flush_policy": "ASYNC"})
    parsed = parse_sink_options({"PATH": "/s", "keycolumn": "k", "store.flush_policy": "ASYNC"})
    assert parsed.path == "/s" and parsed.key_column == "k" and parsed.embedded
    assert parsed.overrides == (("store.flush_policy", "ASYNC"),)


def test_columns_are_checked_by_name_and_type() -> None:
    embedded = parse_sink_options({"path": "/s"})
    check_columns(BASIC, embedded)
    full = schema(
        ("topic", StringType()), ("body", StringType()), ("tags", StringType()),
        ("properties", MapType(StringType(), StringType())), ("delivery_time", TimestampType()),
        ("delay_level", IntegerType()), ("message_group", StringType()),
    )  # fmt: skip
    check_columns(full, embedded)
    with pytest.raises(SinkError, match="needs a 'topic' column"):
        check_columns(schema(("body", BinaryType())), embedded)
    with pytest.raises(SinkError, match="unknown column 'value'"):
        check_columns(schema(*BASIC_FIELDS, ("value", LongType())), embedded)
    with pytest.raises(SinkError, match="column 'delay_level' has type string"):
        check_columns(schema(*BASIC_FIELDS, ("delay_level", StringType())), embedded)
    with pytest.raises(SinkError, match="keyColumn 'id' is not a column"):
        check_columns(BASIC, parse_sink_options({"path": "/s", "keycolumn": "id"}))
    with pytest.raises(SinkError, match="delay_level needs the embedded sink"):
        check_columns(full, parse_sink_options({"brokers": "h:1"}))


def batch(**columns: object) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)  # type: ignore[arg-type]


def test_rows_become_messages_with_deterministic_keys() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    rows = batch(
        topic=["t", "t"],
        body=["a", "b"],
        keys=["k1 k2", None],
        properties=pa.array([[("p", "1"), ("q", None)], None], pa.map_(pa.string(), pa.string())),
        delivery_time=pa.array([when, None], pa.timestamp("us", tz="UTC")),
    )
    first = list(messages_of(rows, partition=3, first_row=10, prefix=key_prefix("w", 7)))
    again = list(messages_of(rows, partition=3, first_row=10, prefix=key_prefix("w", 7)))
    assert first == again
    assert (
        [m.uniq_key for m in first]
        == ["w-7-3-10", "w-7-3-11"]
        == [
            derived_key("w-7", 3, 10),
            derived_key("w-7", 3, 11),
        ]
    )
    assert first[0].body == b"a" and first[0].keys == ("k1", "k2")
    assert first[0].properties == {"p": "1"} and first[1].properties == {}
    assert first[0].delivery_ms == int(when.timestamp() * 1000) and first[1].delivery_ms is None


def test_bad_rows_are_refused_naming_the_row() -> None:
    rows = batch(topic=["t", "t", "t"], body=[b"a", b"b", b"c"], delay_level=[1, 19, 2])
    with pytest.raises(
        SinkRowError, match=r"partition 0, row 6 \(UNIQ_KEY w-0-0-6\): delay_level 19"
    ):
        list(messages_of(rows, partition=0, first_row=5, prefix="w-0"))
    with pytest.raises(SinkRowError, match="row 1 .*body is null"):
        nulls = batch(topic=["t", "t"], body=[b"a", None])
        list(messages_of(nulls, partition=0, first_row=0, prefix="w"))
    with pytest.raises(SinkRowError, match="keyColumn value"):
        empty = batch(topic=["t"], body=[b"a"], id=[""])
        list(messages_of(empty, partition=0, first_row=0, prefix="w", key_column="id"))


def test_embedded_writes_are_idempotent_and_refusals_name_the_row(tmp_path: Path) -> None:
    root = tmp_path / "store"
    options = parse_sink_options({"path": str(root), **SMALL})
    rows = batch(topic=["t"] * 5, body=[f"m{i}" for i in range(5)], tags=["A"] * 5)
    first = write_partition(options, iter([rows]), 2, "w-0")
    again = write_partition(options, iter([rows.slice(0, 3), rows.slice(3)]), 2, "w-0")
    assert (first.rows, first.stored, first.duplicates) == (5, 5, 0)
    assert (again.rows, again.stored, again.duplicates) == (5, 0, 5)
    records = stored(root)
    assert [r[UNIQ_KEY] for r in records] == [f"w-0-2-{i}" for i in range(5)]
    assert [r["body"] for r in records] == [f"m{i}" for i in range(5)]
    bad = batch(topic=["t", "t"], body=["x", "y"], tags=["A", "bad|tag"])
    with pytest.raises(SinkRowError, match=r"row 1 \(UNIQ_KEY v-0-0-1\): ILLEGAL_MESSAGE_TAG"):
        write_partition(options, iter([bad]), 0, "v-0")
    assert all(r["body"] != "y" for r in stored(root))


def test_a_held_store_is_waited_for_then_refused(tmp_path: Path) -> None:
    from rmq_spark.store.config import StoreConfig

    root = tmp_path / "store"
    options = parse_sink_options({"path": str(root), "locktimeoutms": "200", **SMALL})
    config = StoreConfig(root_dir=root, segment_size_bytes=1 << 20)
    with MessageStore.open(config):
        with pytest.raises(SinkError, match="lockTimeoutMs=200"):
            EmbeddedTarget(options)
    EmbeddedTarget(options).close()
    assert lock_holder(root) is None
    assert not is_broker_process(1 << 22)


def test_key_column_delays_groups_and_timer_messages_take_the_broker_path(tmp_path: Path) -> None:
    root = tmp_path / "store"
    options = parse_sink_options({"path": str(root), "keycolumn": "id", **SMALL})
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    rows = batch(
        topic=["t"] * 4,
        body=["plain", "fifo", "timer", "level"],
        message_group=[None, "g1", None, None],
        delivery_time=pa.array([None, None, later, None], pa.timestamp("us", tz="UTC")),
        delay_level=pa.array([None, None, None, 2], pa.int32()),
        id=["a", "b", "c", "d"],
    )
    assert write_partition(options, iter([rows]), 0, "ignored").stored == 4
    assert write_partition(options, iter([rows]), 1, "ignored").duplicates == 4
    records = {r[UNIQ_KEY]: r for r in stored(root)}
    assert set(records) == {"a", "b", "c", "d"}
    assert records["a"]["topic"] == "t" and records["b"]["__SHARDINGKEY"] == "g1"
    assert records["c"]["topic"] == "rmq_sys_wheel_timer" and records["c"]["REAL_TOPIC"] == "t"
    assert records["d"]["topic"] == "SCHEDULE_TOPIC_XXXX" and records["d"]["DELAY"] == "2"


def test_a_store_a_broker_holds_is_refused_pointing_at_brokers(tmp_path: Path) -> None:
    from sink_support import start_broker

    root = tmp_path / "store"
    broker = start_broker(root, tmp_path / "work", "store.segment_size_bytes=1048576")
    try:
        options = parse_sink_options({"path": str(root), **SMALL})
        with pytest.raises(SinkError, match=r"held by a running broker \(pid \d+\).*brokers="):
            EmbeddedTarget(options)
        assert lock_holder(root) == broker.proc.pid and is_broker_process(broker.proc.pid)
    finally:
        broker.stop()


def test_exactly_once_holds_within_the_window_and_across_reopens_only(tmp_path: Path) -> None:
    """The documented conditions: a repeat is dropped after the store was closed and opened
    again (the window is rebuilt from the log), but not once more than
    ``store.idempotency_window_messages`` messages were stored in between."""
    root = tmp_path / "store"
    options = parse_sink_options(
        {"path": str(root), "store.idempotency_window_messages": "4", **SMALL}
    )
    first = batch(topic=["t"] * 2, body=["a", "b"])
    others = batch(topic=["t"] * 3, body=["c", "d", "e"])
    write_partition(options, iter([first]), 0, "w-0")
    assert write_partition(options, iter([first]), 0, "w-0").duplicates == 2  # reopened
    write_partition(options, iter([others]), 0, "x-0")  # 5 keys since: "w-0-0-0" is out
    again = write_partition(options, iter([first]), 0, "w-0")
    assert (again.stored, again.duplicates) == (1, 1)
    assert sorted(m["body"] for m in stored(root)) == ["a", "a", "b", "c", "d", "e"]


def test_send_batch_answers_each_command_in_order_like_send(tmp_path: Path) -> None:
    from rmq_spark.broker.service import BrokerService, SendCode, SendCommand
    from rmq_spark.store.config import StoreConfig

    config = StoreConfig(root_dir=tmp_path / "store", segment_size_bytes=1 << 20)
    with MessageStore.open(config) as store:
        service = BrokerService(store)
        commands = [
            SendCommand(topic="t", body=b"ok", message_id="id-1", tag="A"),
            SendCommand(topic="t", body=b"", message_id="id-2"),
            SendCommand(topic="t", body=b"ok too", message_id="id-3", message_group="g"),
            SendCommand(topic="t", body=b"ok", message_id="id-1", tag="A"),
        ]
        outcomes = service.send_batch(commands)
        assert [o.code for o in outcomes] == [
            SendCode.OK, SendCode.MESSAGE_BODY_EMPTY, SendCode.OK, SendCode.OK,
        ]  # fmt: skip
        assert [o.message_id for o in outcomes] == ["id-1", "id-2", "id-3", "id-1"]
        assert not outcomes[0].duplicate and outcomes[3].duplicate
        assert outcomes[3].physical_offset == outcomes[0].physical_offset
        single = service.send(commands[0])
        assert single.duplicate and single.physical_offset == outcomes[0].physical_offset


def test_sink_credentials_go_with_brokers_and_together() -> None:
    from rmq_spark.spark.sink_options import parse_sink_options

    signed = parse_sink_options({"brokers": "127.0.0.1:1", "accessKey": "a", "secretKey": "s"})
    assert signed.credentials == ("a", "s")
    with pytest.raises(SinkError, match="go together"):
        parse_sink_options({"brokers": "127.0.0.1:1", "accessKey": "a"})
    with pytest.raises(SinkError, match="give brokers"):
        parse_sink_options({"path": "/s", "accessKey": "a", "secretKey": "s"})
