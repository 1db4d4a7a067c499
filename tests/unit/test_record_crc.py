"""The record CRC property (``__CRC32#``, docs/FORMAT.md 2.3): written by every put path,
checked by the decoder, so that a flipped bit anywhere in a record is detected."""

from __future__ import annotations

import struct
from pathlib import Path

import crcmod.predefined
import pytest
from store_helpers import open_store

from rmq_spark.errors import CorruptRecordError
from rmq_spark.store.codec import DecodedRecord, NeedMoreData, decode_record, encode_record
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest
from rmq_spark.store.record_crc import RECORD_CRC_BYTES, record_crc_digits

_SLACK = 1 << 17  # zero bytes after the record: a TOTALSIZE flip up to 2^16 stays in the buffer


def test_the_digits_follow_the_spec_examples() -> None:
    assert record_crc_digits(891568578) == b"8758651980"
    assert record_crc_digits(1274296614) == b"4166924721"
    assert record_crc_digits(0) == b"0000000000"
    assert record_crc_digits(7) == b"7000000000"


def _stored(store: MessageStore, request: PutRequest, batch: bool) -> bytes:
    result = store.put_batch([request])[0] if batch else store.put(request)
    assert result.ok, result.detail
    return store.commitlog.read(result.physical_offset, result.total_size)


_REQUESTS = {
    "template": PutRequest("TopicTest", b"body bytes", 2, tags="TagA"),
    "raw": PutRequest(
        "TopicTest", b"copy", 1, raw_properties="REAL_TOPIC\x01T\x02UNIQ_KEY\x01K1\x02", flag=3
    ),
    "general": PutRequest(
        "TopicTest", b"general", 0, properties={"a": "b"}, keys=("k1",), reconsume_times=2
    ),
    "ipv6": PutRequest("TopicTest", b"v6", 0, born_host=HostAddress("fe80::1", 7)),
}


@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_batch"])
@pytest.mark.parametrize("path", sorted(_REQUESTS))
def test_every_flipped_bit_of_a_stored_record_is_detected(
    tmp_path: Path, path: str, batch: bool
) -> None:
    store = open_store(tmp_path / "store")
    data = _stored(store, _REQUESTS[path], batch)
    store.close()
    assert data[-RECORD_CRC_BYTES:-11] == b"__CRC32#\x01"
    buf = bytearray(data) + bytes(_SLACK)
    assert isinstance(decode_record(buf, 0, check_crc=True), DecodedRecord)
    missed = []
    for index in range(len(data)):
        for bit in range(8):
            buf[index] ^= 1 << bit
            try:
                outcome = decode_record(buf, 0, check_crc=True)
            except CorruptRecordError:
                outcome = None
            finally:
                buf[index] ^= 1 << bit
            # A TOTALSIZE beyond the buffer is a record still being written, for the decoder;
            # where the log ends is the scan's judgement, not the codec's.
            beyond = index < 4 and struct.unpack_from(">i", bytes(buf[:4]))[0] ^ (
                1 << (bit + 8 * (3 - index))
            ) > len(buf)
            if outcome is not None and not (beyond and isinstance(outcome, NeedMoreData)):
                missed.append((index, bit))
    assert missed == []


def test_a_damaged_property_key_is_reported_not_taken_for_absent(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    data = bytearray(_stored(store, _REQUESTS["template"], False))
    store.close()
    data[-RECORD_CRC_BYTES + 2] ^= 0x01  # "__CRC32#" -> "__BRC32#"
    with pytest.raises(CorruptRecordError, match="damaged record CRC property"):
        decode_record(data, 0, check_crc=True)


def test_without_the_check_a_damaged_record_reads_and_the_property_is_never_shown(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store")
    data = bytearray(_stored(store, _REQUESTS["template"], False))
    store.close()
    data[40] ^= 0x01  # BORNTIMESTAMP
    outcome = decode_record(data, 0, check_crc=False)
    assert isinstance(outcome, DecodedRecord)
    assert "__CRC32#" not in outcome.record.properties
    assert "__CRC32#" not in parse_properties(data[-100:].decode("latin-1"))


def test_a_store_configured_without_it_writes_records_rocketmq_4_can_read(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store", append_record_crc=False)
    for path in sorted(_REQUESTS):
        data = _stored(store, _REQUESTS[path], False)
        assert b"__CRC32#" not in data
        outcome = decode_record(data, 0, check_crc=True)
        assert isinstance(outcome, DecodedRecord)
        assert encode_record(outcome.record) == data
    store.close()


@pytest.mark.parametrize("idempotent", [False, True], ids=["raw path", "general path"])
def test_a_copy_put_back_gets_a_fresh_record_crc_instead_of_its_stale_one(
    tmp_path: Path, idempotent: bool
) -> None:
    stale = "TAGS\x01A\x02UNIQ_KEY\x01K1\x02__CRC32#\x011234567890\x02"
    store = open_store(tmp_path / "store")
    request = PutRequest("TopicTest", b"again", 0, raw_properties=stale, idempotent=idempotent)
    data = _stored(store, request, False)
    store.close()
    assert data.count(b"__CRC32#") == 1
    outcome = decode_record(data, 0, check_crc=True)
    assert isinstance(outcome, DecodedRecord)
    assert outcome.record.properties == "TAGS\x01A\x02UNIQ_KEY\x01K1\x02"


def test_old_records_without_the_property_stay_readable() -> None:
    record = MessageRecord("TopicTest", b"old", "TAGS\x01A\x02" + "X" * 30)
    data = encode_record(record)
    outcome = decode_record(data, 0, check_crc=True)
    assert isinstance(outcome, DecodedRecord)
    assert outcome.record.properties == record.properties


def test_a_damaged_body_is_still_named_a_body_crc_mismatch(tmp_path: Path) -> None:
    # A good record CRC makes BODYCRC redundant (it is skipped); a bad one is explained.
    store = open_store(tmp_path / "store")
    data = bytearray(_stored(store, _REQUESTS["template"], False))
    store.close()
    data[90] ^= 0x10  # inside the body
    with pytest.raises(CorruptRecordError, match="BODYCRC mismatch"):
        decode_record(data, 0, check_crc=True)


def test_digit_runs_and_tails_are_the_sealed_property_of_each_record() -> None:
    """The batch writer's digits (one format for the whole batch, reversed, then cut) and
    the single put's tail are what ``seal_record`` writes into a reserved property."""
    import random
    import zlib

    from rmq_spark.store.record_crc import (
        RECORD_CRC_KEY,
        RECORD_CRC_PLACEHOLDER,
        record_crc_digit_runs,
        record_crc_tail,
        seal_record,
    )

    rng = random.Random(4)
    for count in (1, 2, 7, 256):
        records = [rng.randbytes(rng.randrange(0, 300)) for _ in range(count)]
        records[0] = b""  # CRC 0: all ten digits are padding
        sealed = []
        for record in records:
            buf = bytearray(record + RECORD_CRC_PLACEHOLDER)
            seal_record(buf, 0, len(buf))
            sealed.append(bytes(buf[len(record) :]))
        runs = [RECORD_CRC_KEY + digits + b"\x02" for digits in record_crc_digit_runs(records)]
        assert runs == sealed == [record_crc_tail(record) for record in records]
        assert zlib.crc32(b"") == 0


@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_batch"])
@pytest.mark.parametrize("path", sorted(_REQUESTS))
def test_both_crcs_agree_with_an_independent_crc32(tmp_path: Path, path: str, batch: bool) -> None:
    """crcmod's CRC-32 (its own tables, not zlib's) is the oracle for BODYCRC and for the
    record CRC over every byte before the ``__CRC32#`` property (docs/FORMAT.md 2.3)."""
    crc32 = crcmod.predefined.mkCrcFun("crc-32")
    store = open_store(tmp_path / "store")
    data = _stored(store, _REQUESTS[path], batch)
    store.close()
    record = decode_record(bytearray(data), 0, check_crc=True)
    assert isinstance(record, DecodedRecord)
    assert record.record.body_crc == crc32(record.record.body) & 0x7FFFFFFF
    value = data[-RECORD_CRC_BYTES + 9 : -1]
    assert value == record_crc_digits(crc32(data[:-RECORD_CRC_BYTES]) & 0x7FFFFFFF)
