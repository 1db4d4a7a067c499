"""Unit tests of store/msg_id.py: offset message ids and UNIQ_KEY generation (spec 4)."""

from __future__ import annotations

import struct
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from rmq_spark.clock import ManualClock
from rmq_spark.errors import InvalidMessageError, InvalidMessageIdError
from rmq_spark.store.message import HostAddress
from rmq_spark.store.msg_id import (
    UniqKeyGenerator,
    decode_offset_msg_id,
    month_start_ms,
    offset_msg_id,
)


def ms(*args: int, tz: timezone = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def test_offset_msg_id_matches_the_spec_example():
    host = HostAddress("192.168.0.1", 10911)
    assert offset_msg_id(host, 1073743058) == "C0A8000100002A9F00000000400004D2"
    assert decode_offset_msg_id("C0A8000100002A9F00000000400004D2") == (host, 1073743058)


def test_offset_msg_id_of_an_ipv6_store_host_has_56_chars():
    host = HostAddress("2001:db8::2", 10911)
    msg_id = offset_msg_id(host, 5)
    assert msg_id == "20010DB8000000000000000000000002" + "00002A9F" + "0000000000000005"
    assert decode_offset_msg_id(msg_id) == (host, 5)


def test_decode_offset_msg_id_accepts_lower_case():
    host, offset = decode_offset_msg_id("c0a8000100002a9f00000000400004d2")
    assert (str(host), offset) == ("192.168.0.1:10911", 1073743058)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "C0A8000100002A9F00000000400004D",  # 31 chars
        "C0A8000100002A9F00000000400004D2A",  # 33 chars
        "G0A8000100002A9F00000000400004D2",  # not hex
        " 0A8000100002A9F00000000400004D2",
        "C0A80001FFFFFFFF00000000400004D2",  # negative port
        "C0A8000100002A9F80000000400004D2",  # negative offset
    ],
)
def test_decode_offset_msg_id_rejects_malformed_ids(text):
    with pytest.raises(InvalidMessageIdError) as info:
        decode_offset_msg_id(text)
    assert isinstance(info.value, InvalidMessageError)


def test_offset_msg_id_rejects_a_negative_offset():
    with pytest.raises(InvalidMessageError):
        offset_msg_id(HostAddress("10.0.0.1", 1), -1)


def test_month_start_is_midnight_of_day_one_in_the_given_zone():
    now = ms(2024, 3, 15, 12, 30)
    assert month_start_ms(now, UTC) == (ms(2024, 3, 1), ms(2024, 4, 1))
    plus8 = timezone(timedelta(hours=8))
    start, following = month_start_ms(ms(2024, 2, 29, 23, 0), plus8)  # 2024-03-01 07:00 at +8
    assert (start, following) == (ms(2024, 3, 1, tz=plus8), ms(2024, 4, 1, tz=plus8))
    assert month_start_ms(ms(2023, 12, 31, 23, 59), UTC) == (ms(2023, 12, 1), ms(2024, 1, 1))


def test_month_start_in_local_zone_is_a_local_midnight():
    start, following = month_start_ms(ms(2024, 7, 10))
    local = datetime.fromtimestamp(start / 1000)
    assert (local.day, local.hour, local.minute, local.second) == (1, 0, 0, 0)
    assert datetime.fromtimestamp(following / 1000).month == local.month % 12 + 1


def fields(key: str) -> tuple[bytes, int, int, int, int]:
    raw = bytes.fromhex(key)
    ip_size = len(raw) - 12
    pid, instance, diff, count = struct.unpack(">HIiH", raw[ip_size:])
    return raw[:ip_size], pid, instance, diff, count


def test_uniq_key_has_the_client_layout():
    clock = ManualClock(ms(2024, 3, 15) + 1234)
    gen = UniqKeyGenerator(clock, "192.168.0.100", pid=0x12345, instance_hash=0xCAFEBABE, tz=UTC)
    key = gen.next_key()
    assert len(key) == 32 and key == key.upper()
    assert key.startswith("C0A80064" + "2345" + "CAFEBABE")
    assert fields(key) == (
        bytes([192, 168, 0, 100]),
        0x2345,
        0xCAFEBABE,
        14 * 86_400_000 + 1234,
        0,
    )


def test_uniq_key_counter_increments_and_wraps_at_16_bits():
    gen = UniqKeyGenerator(ManualClock(ms(2024, 3, 1)), "10.0.0.1", pid=1, tz=UTC)
    counts = [fields(gen.next_key())[4] for _ in range(65537)]
    assert counts[:3] == [0, 1, 2]
    assert counts[65535:] == [65535, 0]


def test_uniq_key_time_part_restarts_with_each_month():
    clock = ManualClock(ms(2024, 1, 31, 23, 59, 59))
    gen = UniqKeyGenerator(clock, "10.0.0.1", pid=1, tz=UTC)
    assert fields(gen.next_key())[3] == ms(2024, 1, 31, 23, 59, 59) - ms(2024, 1, 1) - (1 << 32)
    clock.set(ms(2024, 2, 1, 0, 0, 1))
    assert fields(gen.next_key())[3] == 1000


def test_uniq_key_time_part_wraps_like_a_java_int_cast():
    clock = ManualClock(ms(2024, 3, 25))  # 24 days in: 2_073_600_000 < 2**31
    gen = UniqKeyGenerator(clock, "10.0.0.1", pid=1, tz=UTC)
    assert fields(gen.next_key())[3] == 24 * 86_400_000
    clock.set(ms(2024, 3, 26))  # 25 days: 2_160_000_000 >= 2**31, negative as int32
    assert fields(gen.next_key())[3] == 25 * 86_400_000 - (1 << 32)


def test_uniq_key_forces_a_small_negative_time_part_to_zero():
    clock = ManualClock(ms(2024, 3, 1))
    gen = UniqKeyGenerator(clock, "10.0.0.1", pid=1, tz=UTC)
    clock.set(ms(2024, 3, 1) - 999_999)  # clock stepped back just before the month start
    assert fields(gen.next_key())[3] == 0
    clock.set(ms(2024, 3, 1) - 1_000_000)
    assert fields(gen.next_key())[3] == -1_000_000


def test_uniq_key_of_an_ipv6_producer_has_56_chars():
    gen = UniqKeyGenerator(ManualClock(), "::1", pid=7, tz=UTC)
    assert len(gen.next_key()) == 56


def test_uniq_keys_from_many_threads_are_all_distinct():
    gen = UniqKeyGenerator(ManualClock(), "10.0.0.1", pid=1, tz=UTC)
    keys: list[list[str]] = [[] for _ in range(8)]

    def work(out: list[str]) -> None:
        out.extend(gen.next_key() for _ in range(4000))

    threads = [threading.Thread(target=work, args=(out,)) for out in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [key for out in keys for key in out]
    assert len(set(flat)) == len(flat) == 32000


def test_uniq_key_generators_started_at_different_times_differ_by_default():
    a = UniqKeyGenerator(ManualClock(1_700_000_000_000), "10.0.0.1", pid=1, tz=UTC)
    b = UniqKeyGenerator(ManualClock(1_700_000_000_001), "10.0.0.1", pid=1, tz=UTC)
    assert fields(a.next_key())[2] != fields(b.next_key())[2]
