"""The raw-properties fast path (``raw.py``) writes what the codec and the general
path write, and keeps the general path's rules."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.store.codec import encode_record
from rmq_spark.store.config import IoMode
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmq_spark.store.message import LOCALHOST, HostAddress, MessageRecord
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest, PutStatus

_HOST = HostAddress("10.0.0.9", 10911)
_PROPERTIES = [
    "UNIQ_KEY\x01K1\x02TAGS\x01a\x02",  # trailing separator (5.2+)
    "UNIQ_KEY\x01K2\x02TAGS\x01a",  # none (older brokers)
    "",  # no properties at all, no UNIQ_KEY
    "TAGS\x01étiquette 😀\x02UNIQ_KEY\x01K3\x02",  # unicode
    "DELAY\x013\x02UNIQ_KEY\x01K4\x02",  # raw: stored verbatim, never rewritten
    "REAL_TOPIC\x01T\x02TIMER_DELIVER_MS\x011\x02UNIQ_KEY\x01K5\x02",
    "xUNIQ_KEY\x01no\x02",  # not the UNIQ_KEY property
]


def _raw_requests(seed: int, count: int) -> list[PutRequest]:
    rng = random.Random(seed)
    hosts = [LOCALHOST, HostAddress("10.1.2.3", 40_000), HostAddress("fe80::1", 7)]
    tx = [0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]
    return [
        PutRequest(
            rng.choice(["TopicA", "B", "%RETRY%g", "T" * 127, "%RETRY%" + "g" * 130]),
            rng.choice([bytes, bytes, bytes, bytearray])(rng.randbytes(rng.choice([0, 1, 100]))),
            queue_id=rng.choice([0, 1, 7, (1 << 31) - 1]),
            flag=rng.choice([0, 3, -(1 << 31)]),
            sys_flag=rng.choice(tx) | rng.choice([0, 0x1, 0x30, 0x800]),
            born_timestamp_ms=rng.choice([None, 0, 1_600_000_000_000, -5]),
            born_host=rng.choice(hosts),
            reconsume_times=rng.choice([0, 2, (1 << 31) - 1]),
            prepared_transaction_offset=rng.choice([0, 1 << 40, -1]),
            raw_properties=rng.choice(_PROPERTIES),
        )
        for _ in range(count)
    ]


def _expected(request: PutRequest, result) -> MessageRecord:  # type: ignore[no-untyped-def]
    born = request.born_timestamp_ms
    return MessageRecord(
        request.topic, bytes(request.body), request.raw_properties or "", request.queue_id,
        request.flag, result.queue_offset, result.physical_offset, request.sys_flag,
        result.store_timestamp_ms if born is None else born, request.born_host,
        result.store_timestamp_ms, _HOST, request.reconsume_times,
        request.prepared_transaction_offset,
    )  # fmt: skip


def _consumes(request: PutRequest) -> bool:
    return (request.sys_flag & 0xC) in (0, TRANSACTION_COMMIT_TYPE)


def _eligible(request: PutRequest) -> bool:
    return (
        type(request.body) is bytes
        and not request.born_host.is_ipv6
        and len(request.topic) <= 127
        and not request.idempotent
    )


def _store(path: Path, clock: ManualClock, io_mode: IoMode = IoMode.MMAP):  # type: ignore[no-untyped-def]
    return open_store(
        path, clock=clock, io_mode=io_mode, store_host=str(_HOST), segment_size_bytes=8192
    )


@pytest.mark.parametrize("io_mode", [IoMode.MMAP, IoMode.PWRITE])
def test_raw_batches_and_puts_store_exactly_what_the_codec_encodes(
    tmp_path: Path, io_mode: IoMode
) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = _store(tmp_path, clock, io_mode)
    raw_batches: list[int] = []
    put_raw = store._appender._put_packed
    store._appender._put_packed = lambda parts, *facts: (
        raw_batches.append(len(parts)) or put_raw(parts, *facts)
    )
    requests = _raw_requests(seed=5, count=600)
    rng = random.Random(9)
    queue_offsets: dict[tuple[str, int], int] = {}
    while requests:
        size = rng.choice([1, 2, 5, 9])
        batch = requests[:size]
        if rng.random() < 0.6:  # mostly batches the raw path may take whole
            batch = [r for r in requests if _eligible(r)][:size] or batch
        for request in batch:
            requests.remove(request)
        clock.advance(1)
        single = rng.random() < 0.3
        results = [store.put(r) for r in batch] if single else store.put_batch(batch)
        for request, result in zip(batch, results, strict=True):
            assert result.ok, result.detail
            assert (result.topic, result.queue_id) == (request.topic, request.queue_id)
            key = (request.topic, request.queue_id)
            if _consumes(request):
                assert result.queue_offset == queue_offsets.get(key, 0)
                queue_offsets[key] = result.queue_offset + 1
            else:
                assert result.queue_offset == 0
            stored = store.commitlog.read(result.physical_offset, result.total_size)
            assert stored == encode_record(_expected(request, result), record_crc=True)
            assert result.uniq_key == parse_properties(request.raw_properties).get("UNIQ_KEY")
    assert len(raw_batches) > 100 and len(store.commitlog.segments) > 10
    for key, next_offset in queue_offsets.items():
        assert store.queue_offset(*key) == next_offset
    store.close()


def test_the_raw_path_writes_the_same_log_and_results_as_the_general_path(
    tmp_path: Path,
) -> None:
    logs = []
    for name in ("raw", "general"):
        clock = ManualClock(1_700_000_000_000)
        store = _store(tmp_path / name, clock)
        if name == "general":
            store._appender._raw = None
        requests = _raw_requests(seed=21, count=300)
        results = []
        for start in range(0, len(requests), 7):
            clock.advance(1)
            results.append(store.put_batch(requests[start : start + 7]))
            results.append(store.put(requests[start]))
        logs.append((results, store.commitlog.read(0, store.max_offset)))
        store.close()
    assert logs[0] == logs[1]


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"topic": "bad topic"}, PutStatus.MESSAGE_ILLEGAL),
        ({"queue_id": -1}, PutStatus.MESSAGE_ILLEGAL),
        ({"queue_id": 1 << 31}, PutStatus.MESSAGE_ILLEGAL),
        ({"body": b"x" * 1025}, PutStatus.MESSAGE_ILLEGAL),
        ({"flag": 1 << 31}, PutStatus.MESSAGE_ILLEGAL),
        ({"sys_flag": None}, PutStatus.MESSAGE_ILLEGAL),
        ({"tags": "T"}, PutStatus.MESSAGE_ILLEGAL),
        ({"raw_properties": "k\x01\ud800"}, PutStatus.MESSAGE_ILLEGAL),
        ({"raw_properties": "k\x01" + "v" * 32_766}, PutStatus.PROPERTIES_SIZE_EXCEEDED),
    ],
)
@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_batch"])
def test_raw_requests_the_general_path_refuses_are_refused_and_nothing_is_written(
    tmp_path: Path, change: dict[str, object], status: PutStatus, batch: bool
) -> None:
    store = _store(tmp_path, ManualClock(1_700_000_000_000))
    good = PutRequest("T", b"ok", raw_properties="UNIQ_KEY\x01A\x02")
    values = {"topic": "T", "body": b"x", "raw_properties": "UNIQ_KEY\x01B\x02", **change}
    bad = PutRequest(**values)  # type: ignore[arg-type]
    if batch:
        results = store.put_batch([good, bad])
        assert results[0].status is status and "batch rejected" in results[0].detail
        result = results[1]
    else:
        result = store.put(bad)
    assert result.status is status, result
    assert store.max_offset == 0
    store.close()


def test_a_raw_batch_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, ManualClock(1_700_000_000_000))
    request = PutRequest("T", b"x" * 1000, raw_properties="UNIQ_KEY\x01A\x02")
    results = store.put_batch([request] * 9)
    assert {r.status for r in results} == {PutStatus.MESSAGE_ILLEGAL}
    assert "does not fit a segment" in results[0].detail
    assert store.max_offset == 0
    store.close()


def test_a_raw_delay_property_is_stored_verbatim_while_a_producer_delay_is_rewritten(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path, ManualClock(1_700_000_000_000))
    raw, produced = store.put_batch(
        [
            PutRequest("T", b"r", queue_id=2, raw_properties="DELAY\x013\x02UNIQ_KEY\x01A\x02"),
            PutRequest("T", b"r", queue_id=2, raw_properties="DELAY\x013\x02UNIQ_KEY\x01B\x02"),
        ]
    )
    assert (raw.topic, raw.queue_id, produced.queue_offset) == ("T", 2, 1)
    assert store.read(raw.physical_offset).properties == "DELAY\x013\x02UNIQ_KEY\x01A\x02"
    delayed = store.put(PutRequest("T", b"d", queue_id=2, properties={"DELAY": "3"}))
    assert (delayed.topic, delayed.queue_id) == (RMQ_SYS_SCHEDULE_TOPIC, 2)
    store.close()


def test_raw_puts_fill_the_idempotency_window_and_idempotent_retries_are_stored_once(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path, ManualClock(1_700_000_000_000))
    first = store.put_batch(
        [PutRequest("T", b"x", raw_properties=f"UNIQ_KEY\x01K{i}\x02") for i in range(3)]
    )
    retry = PutRequest("T", b"x", raw_properties="UNIQ_KEY\x01K1\x02", idempotent=True)
    again = store.put_batch([retry, retry])
    assert all(r.duplicate and r.physical_offset == first[1].physical_offset for r in again)
    assert store.put(retry).physical_offset == first[1].physical_offset
    assert store.max_offset == sum(r.total_size for r in first)
    # Not idempotent: stored again (a second redelivery of the same message).
    plain = store.put(PutRequest("T", b"x", raw_properties="UNIQ_KEY\x01K1\x02"))
    assert plain.ok and not plain.duplicate and plain.queue_offset == 3
    store.close()


def test_raw_puts_survive_reopen_with_their_queue_offsets(tmp_path: Path) -> None:
    store = _store(tmp_path, ManualClock(1_700_000_000_000))
    requests = [
        PutRequest("T", bytes([i]) * 50, queue_id=i % 2, raw_properties=f"UNIQ_KEY\x01K{i}\x02")
        for i in range(60)
    ]
    results = store.put_batch(requests[:5]) + [store.put(r) for r in requests[5:]]
    store.close()
    store = _store(tmp_path, ManualClock(1_700_000_000_100))
    assert store.queue_offset("T", 0) == store.queue_offset("T", 1) == 30
    for index, result in enumerate(results):
        assert store.read(result.physical_offset).body == bytes([index]) * 50
    store.close()
