"""A slave's bulk path (``store/replica_batch.py`` under ``store/replica_log.py``): runs of
records checked together pass exactly what the decoder passes (single-byte damage anywhere,
records with and without the record CRC property, KEYS, IPv6 hosts, transactions); damage is
refused with the file and position of the damaged record and nothing of the run written; a
partial record is never written (so never reported); the derived state (queue offsets,
ConsumeQueue, IndexFile) is the master's."""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

import pytest
from store_helpers import open_store

from rmq_spark.broker.replication.slave import HaClient
from rmq_spark.broker.replication.wire import HEADER, REPORT
from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.cq_facts import PendingUnits
from rmq_spark.store.hashing import index_key_hash
from rmq_spark.store.index_file import KeyHashes
from rmq_spark.store.message import HostAddress
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest
from rmq_spark.store.record_decode import DecodedRecord, decode_record
from rmq_spark.store.replica_batch import RecordColumns, check_run
from rmq_spark.store.replica_log import ReplicaRefusedError

SEGMENT = 1 << 20
PREPARED, COMMIT, ROLLBACK = 0x4, 0x8, 0xC


def _fill(store: MessageStore, count: int, seed: int, ipv6: bool = True) -> list[tuple[str, str]]:
    """``count`` varied messages; the (topic, key) of each indexed key."""
    rng = random.Random(seed)
    keyed = []
    for index in range(count):
        kind = rng.randrange(6 if ipv6 else 3)
        request = PutRequest(
            topic=rng.choice(["TopicA", "TopicB", "%RETRY%g", "T-1"]),
            body=rng.randbytes(rng.randint(0, 300)),
            queue_id=rng.randrange(3),
            tags=rng.choice([None, "TagA", "TagB"]),
            properties={"caf\u00e9": "cr\u00e8me"} if kind == 0 else None,
            keys=(f"k{index}", "x") if kind == 1 else (),
            sys_flag=(PREPARED, COMMIT, ROLLBACK)[index % 3] if kind == 2 else 0,
            born_host=HostAddress("::1", 9) if kind == 3 else HostAddress("10.0.0.1", 7),
        )
        result = store.put(request)
        assert result.status.name == "PUT_OK", (request.topic, result.detail)
        if request.sys_flag != ROLLBACK:
            keyed += [(request.topic, key) for key in (result.uniq_key, *request.keys)]
    return keyed


def _log_bytes(store: MessageStore) -> bytes:
    store.flush()
    return store.commitlog.read(0, store.max_offset)


def _decoder_walk(buf: bytes) -> tuple[list[int], str | None]:
    """Record starts the decoder passes from 0 (PHYSICALOFFSET at its place), and why it
    stopped (``None``: the end of the buffer)."""
    passed, position = [], 0
    while position < len(buf):
        try:
            outcome = decode_record(buf, position, path="f", with_body=False)
        except CorruptRecordError as err:
            return passed, err.reason
        if not isinstance(outcome, DecodedRecord) or outcome.record.physical_offset != position:
            return passed, type(outcome).__name__
        passed.append(position)
        position = outcome.next_position
    return passed, None


@pytest.mark.parametrize("record_crc", [True, False])
def test_a_run_passes_only_what_the_decoder_passes(tmp_path: Path, record_crc: bool) -> None:
    with open_store(tmp_path / "m", segment_size_bytes=SEGMENT, append_record_crc=record_crc) as m:
        _fill(m, 400, seed=7, ipv6=False)
        clean = _log_bytes(m)
    whole, why = _decoder_walk(clean)
    assert why is None and len(whole) == 400
    columns = RecordColumns()
    stop = check_run(clean, 0, 0, columns)
    assert columns.positions == whole[: len(columns.positions)]
    if record_crc:
        assert stop == len(clean)  # every clean record vouched for
    else:  # a clean tail may look like a torn record-CRC property: the decoder's to judge
        assert stop == len(clean) or stop in whole
    rng = random.Random(11)
    for _ in range(400):
        damaged = bytearray(clean)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        data = bytes(damaged)
        passed, _ = _decoder_walk(data)
        columns = RecordColumns()
        stop = check_run(data, 0, 0, columns)
        assert columns.positions == passed[: len(columns.positions)], "passed a bad record"
        assert stop == len(data) or stop not in passed[: len(columns.positions)]


def test_run_columns_equal_the_decoder_fields(tmp_path: Path) -> None:
    with open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as m:
        _fill(m, 200, seed=3)
        clean = _log_bytes(m)
    columns, position = RecordColumns(), 0
    while position < len(clean):
        stop = check_run(clean, position, 0, columns)
        if stop < len(clean):  # an IPv6 record: the decoder's
            stop = decode_record(clean, stop, path="f").next_position
        position = stop
    for at, topic, props, queue_offset in zip(
        columns.positions, columns.topics, columns.properties, columns.queue_offsets, strict=True
    ):
        record = decode_record(clean, at, path="f").record
        assert (topic, props, queue_offset) == (
            record.topic, record.properties, record.queue_offset
        )  # fmt: skip


def test_damage_in_a_large_transfer_is_refused_with_file_and_position(tmp_path: Path) -> None:
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as master,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
    ):
        _fill(master, 300, seed=5)
        data = bytearray(_log_bytes(master))
        starts, _ = _decoder_walk(bytes(data))
        victim = starts[250]
        data[victim + 100] ^= 0x40  # BODYCRC or the record CRC covers it
        log = slave.replica_log()
        log.start()
        with pytest.raises(
            ReplicaRefusedError,
            match=rf"corrupt record .*file 00000000000000000000, position {victim}: .*mismatch",
        ):
            log.feed(0, bytes(data))
        assert slave.max_offset == 0  # nothing of the run was written


def test_a_partial_record_is_never_written(tmp_path: Path) -> None:
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as master,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
    ):
        _fill(master, 300, seed=9)
        data = _log_bytes(master)
        starts, _ = _decoder_walk(data)
        cut = starts[200] + 37
        log = slave.replica_log()
        log.start()
        log.feed(0, data[:cut])
        assert slave.max_offset == slave.confirmed_offset == starts[200]
        log.feed(cut, data[cut:])
        assert slave.max_offset == master.max_offset


def test_derived_state_is_the_masters(tmp_path: Path) -> None:
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as master,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
    ):
        keyed = _fill(master, 600, seed=13)
        data = _log_bytes(master)
        log = slave.replica_log()
        log.start()
        log.feed(0, data)
        slave.flush()
        for topic in ("TopicA", "TopicB", "%RETRY%g", "T-1"):
            for queue_id in range(3):
                assert slave.queue_offset(topic, queue_id) == master.queue_offset(topic, queue_id)
                count = master.queue_offset(topic, queue_id)
                want = _units(master, topic, queue_id, count)
                got = _units(slave, topic, queue_id, count)
                assert [(u.physical_offset, u.size, u.tags_code) for u in got] == [
                    (u.physical_offset, u.size, u.tags_code) for u in want
                ]
        for topic, key in keyed:  # the IndexFile: each key finds the same records
            for _ in range(250):  # both indexes are written in the round after the units
                if _query(slave, topic, key) == _query(master, topic, key):
                    break
                time.sleep(0.02)
            assert _query(slave, topic, key) == _query(master, topic, key)


def _query(store: MessageStore, topic: str, key: str) -> list[int]:
    return sorted(store._cq.index.query(topic, key, 64, 0, 1 << 62))  # type: ignore[union-attr]


def _units(store: MessageStore, topic: str, queue_id: int, count: int) -> list:
    for _ in range(250):
        units = store.consume_queues.units(topic, queue_id, 0, 1000)
        if len(units) >= count:
            return units
        time.sleep(0.02)
    return units


def test_a_slave_applies_back_to_back_transfers_as_one_run(tmp_path: Path) -> None:
    """A master far ahead sends many small transfers at once (RocketMQ's 32 KiB each): the
    slave applies those that continue one another as one run, not one at a time."""
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as master,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
        socket.create_server(("127.0.0.1", 0)) as server,
    ):
        _fill(master, 500, seed=17)
        data = _log_bytes(master)
        transfers = b"".join(
            HEADER.pack(at, len(data[at : at + 1000])) + data[at : at + 1000]
            for at in range(0, len(data), 1000)
        )
        client = HaClient(slave, f"127.0.0.1:{server.getsockname()[1]}")
        feeds = []
        feed = client._replica.feed
        client._replica.feed = lambda offset, chunk: feeds.append(len(chunk)) or feed(offset, chunk)
        client.start()
        try:
            peer, _ = server.accept()
            with peer:
                assert REPORT.unpack(peer.recv(8)) == (0,)
                peer.sendall(transfers)
                deadline = time.monotonic() + 30
                while slave.confirmed_offset < len(data) and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert slave.confirmed_offset == len(data)
        finally:
            client.stop()
        assert sum(feeds) == len(data)
        assert len(feeds) < len(data) // 1000 // 4, feeds


def test_a_replicated_batch_split_by_the_dispatcher_keeps_each_records_timestamp() -> None:
    pending = PendingUnits()
    stamps = [100, 101, 102, 103]
    pending.add(([0, 200, 400, 600], [200] * 4, ["T"] * 4, [0] * 4, [0, 1, 2, 3], [0] * 4,
                 None, [""] * 4, stamps, None))  # fmt: skip
    head = pending.take(400)  # the records below the acknowledged end
    tail = pending.take(1000)
    assert [fact[8] for fact in head + tail] == [[100, 101], [102, 103]]


@pytest.mark.parametrize("keys", [(), ("k1 k2",)])
def test_a_one_topic_run_is_indexed_as_on_the_master(tmp_path: Path, keys: tuple) -> None:
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT) as master,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
    ):
        uniqs = [
            master.put(PutRequest("TopicA", b"x" * 50, index % 4, keys=keys)).uniq_key
            for index in range(300)
        ]
        log = slave.replica_log()
        log.start()
        log.feed(0, _log_bytes(master))
        everything = _keyed(master, uniqs, keys)
        for key in [*uniqs, "k1", "k2"]:
            want = _query(master, "TopicA", key) if key in everything else []
            for _ in range(250):
                if _query(slave, "TopicA", key) == want:
                    break
                time.sleep(0.02)
            assert _query(slave, "TopicA", key) == want, key


def _keyed(store: MessageStore, uniqs: list, keys: tuple) -> set[str]:
    """The keys every record is indexed under, once the store's own index has them all."""
    last = uniqs[-1]
    for _ in range(250):
        if _query(store, "TopicA", last):
            break
        time.sleep(0.02)
    return {*uniqs, *(token for value in keys for token in value.split())}


def test_large_transfers_cut_anywhere_give_the_masters_bytes(tmp_path: Path) -> None:
    """Transfers of 64-200 KiB cut inside records: the record split across two is finished
    on its own, the rest checked where it lies; the copy is the master's, byte for byte."""
    with (
        open_store(tmp_path / "m", segment_size_bytes=SEGMENT, max_message_size_bytes=8192) as m,
        open_store(tmp_path / "s", segment_size_bytes=SEGMENT) as slave,
    ):
        rng = random.Random(23)
        while m.max_offset < 3 * SEGMENT:
            m.put(PutRequest("TopicA", rng.randbytes(rng.randint(10, 6000)), rng.randrange(4)))
        data_end = m.max_offset
        m.flush()
        log = slave.replica_log()
        offset = log.start()
        while offset < data_end:
            room = SEGMENT - offset % SEGMENT  # a transfer never crosses a file
            size = min(room, data_end - offset, rng.randint(65536, 200000))
            chunk = m.commitlog.read(offset, size)
            log.feed(offset, chunk)
            offset += len(chunk)
        slave.flush()
        assert slave.max_offset == data_end
        assert slave.commitlog.read(0, data_end) == m.commitlog.read(0, data_end)
        for queue_id in range(4):
            assert slave.queue_offset("TopicA", queue_id) == m.queue_offset("TopicA", queue_id)


def test_text_that_is_not_utf8_ends_the_run_where_the_decoder_refuses(tmp_path: Path) -> None:
    """Without the record CRC property, BODYCRC does not cover the properties: bad UTF-8
    there passes every CRC, and the run stops at that record for the decoder to refuse."""
    with open_store(tmp_path / "m", segment_size_bytes=SEGMENT, append_record_crc=False) as m:
        request = PutRequest("TopicA", b"b" * 40, properties={"p": "vv"})
        results = [m.put(request) for _ in range(60)]
        data = bytearray(_log_bytes(m))
    victim = results[40]
    at = victim.physical_offset + victim.total_size - 3  # inside the value "vv"
    data[at] = 0xFF
    columns = RecordColumns()
    assert check_run(bytes(data), 0, 0, columns) == victim.physical_offset
    assert len(columns) == 40
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        decode_record(bytes(data), victim.physical_offset, path="f")


def test_keys_of_several_batches_hash_as_one_by_one() -> None:
    """A replicated run's UNIQ_KEYs come from several put batches: a head per batch."""
    rng = random.Random(29)
    keys = []
    for batch in range(6):
        head = f"7F00000166282CC7FE2847B7{batch:04X}"
        keys += [f"{head}{rng.randrange(1 << 16):04X}" for _ in range(rng.randint(16, 90))]
    assert KeyHashes().of("TopicA#", keys) == [index_key_hash("TopicA#" + key) for key in keys]
    keys += ["ab", "order-\u00e4", "\U0001f600\U0001f600"]  # short and odd keys too
    assert KeyHashes().of("TopicA#", keys) == [index_key_hash("TopicA#" + key) for key in keys]
