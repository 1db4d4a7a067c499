"""The formats' CRC-32 (``rmq_spark/store/crc.py``): zlib's values for every input shape the
store hands it, checked against an independent implementation (crcmod's "crc-32")."""

from __future__ import annotations

import os
import zlib

import crcmod.predefined
import pytest

from rmq_spark.store.crc import crc32

_ORACLE = crcmod.predefined.mkCrcFun("crc-32")


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 100, 255, 256, 1024, 4097, 1 << 20])
def test_crc32_is_zlibs_crc32_for_every_size(size: int) -> None:
    data = os.urandom(size)
    assert crc32(data) == _ORACLE(data) == zlib.crc32(data)


def test_crc32_takes_memoryview_slices_and_bytearrays_as_the_store_passes_them() -> None:
    segment = bytearray(os.urandom(8192))
    view = memoryview(segment)
    for start, end in ((0, 100), (3, 1027), (4000, 8192)):
        assert crc32(view[start:end]) == _ORACLE(bytes(segment[start:end]))
    assert crc32(segment) == _ORACLE(bytes(segment))


def test_crc32_continues_from_a_running_value() -> None:
    data = os.urandom(3000)
    assert crc32(data[1000:], crc32(data[:1000])) == _ORACLE(data)
    assert crc32(b"123456789") & 0x7FFFFFFF == 1274296614  # record_layout.body_crc's doctest
