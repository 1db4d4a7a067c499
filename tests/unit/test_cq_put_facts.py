"""The live ConsumeQueue dispatch writes units from the facts the put path hands over
(``cq_facts.py``), never reading a record back: its units must be byte for byte those the
recovery scan (``cq_dispatch.collect_units``) writes for the same CommitLog."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from cq_helpers import actual_units, expected_units
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.store import cq_dispatch
from rmq_spark.store.config import FlushPolicy, IoMode
from rmq_spark.store.cq_facts import PendingUnits, pack_units
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.cq_rule import TagsCodes, unit_tags_code
from rmq_spark.store.fileio import FaultPlan, FaultyOpener, OsOpener
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest, PutStatus

POLICIES = [FlushPolicy.ASYNC, FlushPolicy.SYNC]
TAGS = ["TagA", None, "TagA || TagB", "中文", ""]


def _put_a_mix(store: MessageStore) -> None:
    """Every put path: template, general, raw, batches of each, columns, arrow, async,
    delayed, timer and transaction records, an idempotent repeat; enough to roll segments."""
    ok = []
    for i in range(30):
        ok.append(store.put(PutRequest("T", b"p%d" % i, queue_id=i % 3, tags=TAGS[i % 5])))
    ok.append(store.put(PutRequest("T", b"g", properties={"k": "v"}, tags="TagG", keys=("a",))))
    ok.append(store.put(PutRequest("T", b"d", properties={"DELAY": "3"}, tags="TagD")))
    ok.append(store.put(PutRequest("T", b"d", properties={"DELAY": "99"})))
    timer = {"TIMER_OUT_MS": "1700000123000", "REAL_TOPIC": "T", "REAL_QID": "0"}
    ok.append(store.put(PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"t", properties=timer)))
    ok.append(store.put(PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"t", tags="TagT")))
    ok.append(store.put(PutRequest(RMQ_SYS_SCHEDULE_TOPIC, b"s", tags="TagS")))
    for kind in (TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
        ok.append(store.put(PutRequest("Tx", b"x", sys_flag=kind, tags="TagX")))
    raw = "TAGS\x01TagR\x02UNIQ_KEY\x01ABC\x02"
    ok.append(store.put(PutRequest("T", b"r", queue_id=1, raw_properties=raw)))
    raw_schedule = "DELAY\x012\x02TAGS\x01TagR\x02REAL_TOPIC\x01T\x02"
    ok.append(store.put(PutRequest(RMQ_SYS_SCHEDULE_TOPIC, b"r", 1, raw_properties=raw_schedule)))
    ok += store.put_batch(
        [PutRequest("T", b"b%d" % i, queue_id=i % 2, tags=TAGS[i % 5]) for i in range(12)]
    )
    ok += store.put_batch([PutRequest("U", b"u%d" % i, tags="TagU") for i in range(8)])
    ok += store.put_batch(
        [PutRequest("T", b"gb", queue_id=2, properties={"p": str(i)}) for i in range(4)]
        + [PutRequest("Tx", b"gx", sys_flag=TRANSACTION_PREPARED_TYPE)]
    )
    ok += store.put_batch(
        [PutRequest("T", b"rb", queue_id=i, raw_properties=raw) for i in range(3)]
        + [PutRequest("Tx", b"rx", raw_properties=raw, sys_flag=TRANSACTION_COMMIT_TYPE)]
    )
    # Batches of cq_dispatch._INLINE_RECORDS and more are dispatched by their writer under
    # ASYNC (after_write).
    ok += store.put_batch(
        [PutRequest("T", b"L%d" % i, queue_id=i % 3, tags=TAGS[i % 5]) for i in range(130)]
    )
    ok += store.put_batch(
        [PutRequest("T", b"LG", queue_id=i % 2, properties={"p": str(i)}) for i in range(128)]
        + [PutRequest("Tx", b"Lx", sys_flag=TRANSACTION_PREPARED_TYPE)]
    )
    twice = PutRequest("T", b"i", properties={"UNIQ_KEY": "K1"}, idempotent=True)
    ok += [store.put(twice), store.put(twice)]
    receipts = [
        store.put_columns("T", [b"c%d" % i for i in range(10)], queue_id=2, tags="TagC"),
        store.put_columns(["T", "V"] * 3, [b"c"] * 6, [0, 1, 2] * 2, tags=TAGS[:3] * 2),
        store.put_columns("V", [b"c", b"d"], tags="TagP", properties=[{"x": "1"}, None]),
        store.put_columns("T", [b"C%d" % i for i in range(128)], [0, 1, 2, 3] * 32, tags="TagC"),
        store.put_arrow(pa.table({"topic": ["W"] * 3, "body": [b"a", b"b", b"c"]})),
    ]
    ok.append(asyncio.run(store.put_async(PutRequest("T", b"async", tags="TagA"))))
    assert all(result.ok for result in ok), [r for r in ok if not r.ok]
    assert all(receipt.ok for receipt in receipts)


def _files(root: Path) -> dict[str, bytes]:
    directory = root / CONSUME_QUEUE_DIR
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("policy", POLICIES)
def test_live_units_are_byte_for_byte_those_a_rebuild_writes(
    tmp_path: Path, policy: FlushPolicy
) -> None:
    def reopen() -> MessageStore:
        return open_store(
            tmp_path, ManualClock(1_700_000_000_000), flush_policy=policy,
            consume_queue_file_units=16, segment_size_bytes=32768,
        )  # fmt: skip

    store = reopen()
    _put_a_mix(store)
    assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)
    assert store.consume_queues.failure is None
    assert len(store.commitlog.segments) > 1  # records around BLANKs too
    store.close()
    live = _files(tmp_path)
    assert len(live) > 5
    shutil.rmtree(tmp_path / CONSUME_QUEUE_DIR)
    store = reopen()
    try:
        assert store.consume_queue_recovery.rebuilt
    finally:
        store.close()
    assert _files(tmp_path) == live


class _TickingClock(ManualClock):
    """A millisecond later at every reading: each single put gets its own store timestamp."""

    def now_ms(self) -> int:
        self.advance(1)
        return super().now_ms()


def test_single_puts_keep_their_own_store_timestamps_when_some_records_get_no_unit(
    tmp_path: Path,
) -> None:
    # A delayed record's tagsCode is its delivery time (store timestamp + delay). Single puts'
    # facts carry a timestamp each; PREPARED records among them get no unit, and the
    # timestamps must stay with their records when those are left out.
    store = open_store(tmp_path, _TickingClock(), flush_policy=FlushPolicy.ASYNC)
    try:
        for i in range(40):
            if i % 3 == 0:
                store.put(PutRequest("Tx", b"half", sys_flag=TRANSACTION_PREPARED_TYPE))
            store.put(PutRequest("T", b"d%d" % i, properties={"DELAY": "3"}, tags="TagD"))
        assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_the_facts_of_a_failed_write_are_dropped(tmp_path: Path) -> None:
    """A write that fails after its facts were handed over takes them back: no unit names
    the bytes it did not write, and the next record's unit takes that queue offset."""
    plan = FaultPlan(fail_at="append", times=0)
    opener = FaultyOpener(plan, OsOpener(IoMode.PWRITE))
    store = open_store(tmp_path, opener=opener, segment_size_bytes=1 << 20)
    try:
        first = store.put(PutRequest("T", b"a", tags="TagA"))
        for put in (
            lambda: {store.put(PutRequest("T", b"b", tags="TagB")).status},
            lambda: {store.put(PutRequest("T", b"b", properties={"k": "v"})).status},
            lambda: {r.status for r in store.put_batch([PutRequest("T", b"b")] * 3)},
            lambda: {r.status for r in store.put_batch([PutRequest("T", b"b", keys=("k",))] * 2)},
            lambda: {store.put_columns("T", [b"c"] * 2, tags="TagC").status},
        ):
            plan.times = plan.failures + 1  # fail the next write once
            assert put() == {PutStatus.UNKNOWN_ERROR}
        again = store.put(PutRequest("T", b"c", tags="TagC"))
        assert again.ok and again.queue_offset == 1
        assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)
        units = store.consume_queues.units("T", 0, 0, 10)
        assert [(u.physical_offset, u.tags_code) for u in units] == [
            (first.physical_offset, tags_code("TagA")),
            (again.physical_offset, tags_code("TagC")),
        ]
        assert actual_units(store) == expected_units(store)
    finally:
        store.close()


def test_pending_facts_drop_and_split_at_the_acknowledged_end() -> None:
    pending = PendingUnits()
    pending.add((0, 10, "T", 0, 0, 0, "a", None, 1, "K0"))
    batch = ([10, 20, 30], [10] * 3, ["T"] * 3, [0] * 3, [1, 2, 3], [0] * 3, None, None, 1, "abc")
    pending.add(batch)
    pending.add((40, 10, "T", 0, 4, 0, None, None, 1, None))
    pending.drop_from(40)
    assert len(pending) == 2
    head = pending.take(25)
    assert [fact[0] for fact in head] == [0, [10, 20]]
    assert head[1][9] == "ab"  # the UNIQ_KEY column is split with the others
    assert [fact[0] for fact in pending.take(100)] == [[30]]
    later = ([60, 70, 80], [10] * 3, ["T"] * 3, [0] * 3, [6, 7, 8], [0] * 3, None, None, 1, None)
    single, last = (
        (50, 10, "T", 0, 5, 0, None, None, 1, None),
        (90, 10, "T", 0, 9, 0, None, None, 1, None),
    )
    for fact in (single, later, last):
        pending.add(fact)
    assert pending.take(90) == [single, later]  # 90 is not below 90
    assert pending.take(31) == []
    assert pending.take(91) == [last]  # all below the end: taken at once
    assert pending.take(1000) == []
    pending.close()
    pending.add(batch)
    assert len(pending) == 0


def test_packed_units_are_rocketmqs_20_byte_units() -> None:
    import struct

    offsets, sizes, codes = [0, 1 << 40, 7], [1, 0x7FFFFFFF, 300], [-1, 1 << 62, 0]
    expected = b"".join(
        struct.pack(">qiq", *unit) for unit in zip(offsets, sizes, codes, strict=True)
    )
    assert pack_units(offsets, sizes, codes) == expected


@pytest.mark.parametrize("tags", TAGS)
def test_the_column_tags_codes_are_the_rule_for_plain_records(tags: str | None) -> None:
    assert TagsCodes().codes([tags]) == [unit_tags_code("T", None, tags, 0, ())]
    text = f"TAGS\x01{tags}\x02UNIQ_KEY\x01K" if tags is not None else "UNIQ_KEY\x01K"
    assert unit_tags_code("T", text, None, 0, ()) == tags_code(tags)


def test_the_live_path_reads_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatch thread builds units without the CommitLog scan (recovery's)."""
    store = open_store(tmp_path)
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    real = cq_dispatch.collect_units
    monkeypatch.setattr(cq_dispatch, "collect_units", counting)
    monkeypatch.setattr(cq_dispatch, "LogScan", None)  # any scan would fail the thread
    try:
        store.put_batch([PutRequest("T", b"x", tags="A") for _ in range(10)])
        store.put(PutRequest("T", b"y"))
        assert store.consume_queues.wait_dispatched(store.confirmed_offset, 10)
        assert store.consume_queues.failure is None and not calls
        assert store.consume_queues.max_offset("T", 0) == 11
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(20))
def test_fact_units_are_the_rule_applied_record_by_record(seed: int) -> None:
    """``FactUnits`` (columns, strides, uniform shortcuts) against the rule per record."""
    import random
    import struct

    from rmq_spark.store.cq_facts import FactUnits
    from rmq_spark.store.cq_rule import dispatches

    rng = random.Random(seed)
    levels = (1000, 5000, 10000)
    next_offset, queue_offsets, facts = 0, {}, []
    expected: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    records = []
    for _ in range(rng.randint(1, 12)):
        n = rng.choice([1, 1, 3, 8, 64, 300])
        k = rng.choice([1, 2, 4, 5])
        topic = rng.choice(["T", "U", RMQ_SYS_SCHEDULE_TOPIC])
        mixed = rng.random() < 0.3
        tag = rng.choice(TAGS)
        columns: list[list[object]] = [[] for _ in range(8)]
        for i in range(n):
            t = rng.choice(["T", "U"]) if mixed else topic
            q = i % k if rng.random() < 0.8 else rng.randrange(k)
            sys_flag = rng.choice([0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE])
            size = rng.choice([100, 100, 250])
            tags = tag if rng.random() < 0.7 else rng.choice(TAGS)
            props = None
            if t == RMQ_SYS_SCHEDULE_TOPIC and rng.random() < 0.5:
                props = f"DELAY\x01{rng.randint(0, 4)}\x02TAGS\x01x\x02"
            if dispatches(sys_flag):
                qo = queue_offsets.get((t, q), 0)
                queue_offsets[(t, q)] = qo + 1
            else:
                qo = 0
            row = [next_offset, size, t, q, qo, sys_flag, tags, props]
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            records.append(row)
            next_offset += size
        has_props = any(p is not None for p in columns[7])
        if n == 1 and rng.random() < 0.5:
            facts.append((*records[-1][:8], 77, None))
        else:
            if has_props:  # a general batch: every record's properties, no TAGS column
                for row in records[-n:]:
                    if row[7] is None:
                        row[7] = f"TAGS\x01{row[6]}\x02" if row[6] else ""
                facts.append((*columns[:6], None, [row[7] for row in records[-n:]], 77, None))
            else:
                facts.append((*columns[:7], None, 77, None))
    for offset, size, t, q, qo, sys_flag, tags, props in records:
        if dispatches(sys_flag):
            code = unit_tags_code(t, props, tags, 77, levels)
            expected.setdefault((t, q), []).append((qo, struct.pack(">qiq", offset, size, code)))
    runs = FactUnits(levels).runs(facts, 0)  # type: ignore[arg-type]
    got = {
        key: [(first, b"".join(pieces)) for first, _count, pieces in key_runs]
        for key, key_runs in runs.items()
    }
    want = {key: [(units[0][0], b"".join(u for _, u in units))] for key, units in expected.items()}
    assert got == want
