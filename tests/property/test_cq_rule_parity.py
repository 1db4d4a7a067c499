"""One dispatch rule: for records of every kind, the units the broker's store writes (its
live put path and, after ``consumequeue/`` is deleted, the recovery scan: both through
``store/cq_rule.py``) are exactly the rows the reput job's vectorised rule
(``spark/reput_rows.consume_queue_rows``) derives from the same bytes read back by the
``rocketmq`` source's decoder. No Spark: the source's partition reader runs in-process.

Kinds: normal messages (tags, no tags, empty or odd tags, repeated TAGS entries), retry and
DLQ topics, compressed bodies, transaction half/commit/rollback flags, delay-level schedule
records (levels in and out of range, malformed), and timer records (TIMER_OUT_MS,
TIMER_DELIVER_MS, both, malformed, out of int64).
"""

from __future__ import annotations

import shutil
import tempfile
import zlib
from pathlib import Path

import pyarrow as pa
from cq_kinds import every_kind, raw_properties
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rmq_spark.spark.options import parse_options
from rmq_spark.spark.partitions import plan, read_partition
from rmq_spark.spark.planner import readable_end
from rmq_spark.spark.reput_rows import consume_queue_rows
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR, FLUSHED_RECORD_FILE
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.view import StoreView

Unit = tuple[str, int, int, int, int, int]

TX_FLAGS = st.sampled_from([0, 0, 0x4, 0x8, 0xC])  # none, half, commit, rollback
COMPRESSED = st.sampled_from([0, 0x1])
TAGS = st.sampled_from([None, "", "TagA", "TagA || TagB", "中文", " spaced ", "a\tb"])
NUMBERS = st.sampled_from(
    ["0", "1", "2", "18", "19", "100", "-1", " 3 ", "+2", "abc", "", "9" * 25, "1.5"]
)
STAMPS = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1).map(str),
    st.sampled_from(["", "x", " 1700000000000 ", str(1 << 63), "-0"]),
)


@st.composite
def normal(draw: st.DrawFn) -> PutRequest:
    topic = draw(st.sampled_from(["orders", "%RETRY%group", "%DLQ%group"]))
    extra = draw(st.sampled_from([None, {"KEYS": "k1 k2"}, {"RETRY_TOPIC": "orders"}]))
    body, compressed = draw(st.binary(max_size=64)), draw(COMPRESSED)
    return PutRequest(
        topic,
        zlib.compress(body) if compressed else body,
        queue_id=draw(st.integers(0, 2)),
        tags=draw(TAGS),
        properties=extra,
        sys_flag=draw(TX_FLAGS) | compressed,
        reconsume_times=draw(st.integers(0, 3)),
    )


@st.composite
def raw(draw: st.DrawFn) -> PutRequest:
    """Stored properties strings a client can send: repeated, empty or trailing TAGS."""
    text = draw(
        st.sampled_from(
            [
                "TAGS\x01a\x02TAGS\x01b\x02",
                "TAGS\x01a\x02TAGS\x01\x02",
                "TAGS\x01\x02",
                "XTAGS\x01a\x02",
                "KEYS\x01k\x02TAGS\x01t",
                "",
            ]
        )
    )
    return PutRequest("orders", b"r", sys_flag=draw(TX_FLAGS), raw_properties=text)


@st.composite
def scheduled(draw: st.DrawFn) -> PutRequest:
    delay = draw(st.one_of(st.none(), NUMBERS))
    properties = {"REAL_TOPIC": "orders", "REAL_QID": "0"}
    if delay is not None:
        properties["DELAY"] = delay
    return PutRequest(
        RMQ_SYS_SCHEDULE_TOPIC,
        b"s",
        queue_id=draw(st.integers(0, 3)),
        raw_properties=raw_properties(properties, draw(TAGS)),
        sys_flag=draw(TX_FLAGS),
    )


@st.composite
def timer(draw: st.DrawFn) -> PutRequest:
    properties = {"REAL_TOPIC": "orders"}
    for key in ("TIMER_OUT_MS", "TIMER_DELIVER_MS"):
        value = draw(st.one_of(st.none(), STAMPS))
        if value is not None:
            properties[key] = value
    raw = raw_properties(properties, draw(TAGS))
    return PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"t", raw_properties=raw)


MESSAGES = st.lists(st.one_of(normal(), raw(), scheduled(), timer()), min_size=1, max_size=12)


def _broker_units(store: MessageStore) -> list[Unit]:
    queues = store.consume_queues
    assert queues.wait_dispatched(store.confirmed_offset, 10)
    units: list[Unit] = []
    for topic, queue_ids in queues.queues().items():
        for queue_id in queue_ids:
            start = queues.min_offset(topic, queue_id)
            found = queues.units(topic, queue_id, start, queues.max_offset(topic, queue_id))
            units += [
                (topic, queue_id, start + i, u.physical_offset, u.size, u.tags_code)
                for i, u in enumerate(found)
            ]
    return sorted(units)


def _reput_units(root: Path, levels: tuple[int, ...]) -> list[Unit]:
    view = StoreView.open(root)
    options = parse_options({"path": str(root), "isolation": "read_uncommitted"}, streaming=False)
    end = readable_end(view)
    batches = [
        batch
        for partition in plan(view, options, view.min_offset, end, [])
        for batch in read_partition(partition, options)
    ]
    rows = consume_queue_rows(pa.Table.from_batches(batches), levels)
    names = ["topic", "queue_id", "queue_offset", "physical_offset", "total_size", "tags_code"]
    return sorted(zip(*(rows.column(name).to_pylist() for name in names), strict=True))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(requests=MESSAGES)
@example(requests=every_kind())
def test_the_store_and_the_reput_derive_the_same_units(requests: list[PutRequest]) -> None:
    root = Path(tempfile.mkdtemp(prefix="cq-rule-"))
    try:
        config = StoreConfig(root_dir=root, segment_size_bytes=1 << 16)
        levels = parse_message_delay_level(config.message_delay_level)
        with MessageStore.open(config) as store:
            for request in requests:
                result = store.put(request)
                assert result.ok, (request, result)
            live = _broker_units(store)
        shutil.rmtree(root / CONSUME_QUEUE_DIR)
        (root / FLUSHED_RECORD_FILE).unlink(missing_ok=True)
        with MessageStore.open(config) as store:
            assert _broker_units(store) == live  # the recovery scan: the same rule
        assert _reput_units(root, levels) == live
    finally:
        shutil.rmtree(root, ignore_errors=True)
