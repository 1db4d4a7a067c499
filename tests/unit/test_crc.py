"""The formats' CRC-32 (``rmq_spark/store/crc.py``): zlib's values for every input shape the
store hands it, and for many slices of one buffer at once, checked against an independent
implementation (crcmod's "crc-32")."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import zlib
from pathlib import Path

import crcmod.predefined
import numpy as np
import pytest

from rmq_spark.store import crc
from rmq_spark.store.crc import crc32, crc32_slices

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


# ``crc32_slices``: many slices of one buffer in one call (the native loop ``make setup``
# builds, and the Python loop where it is missing), against the oracle slice by slice.


def _slices(size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, size + 50, count)
    ends = starts + rng.integers(-20, 3000, count)
    ends[::7] = starts[::7]  # empty slices
    return starts, np.maximum(ends, 0)


def _expected(data: bytes, starts: np.ndarray, ends: np.ndarray) -> list[int]:
    return [_ORACLE(data[start:end]) for start, end in zip(starts, ends, strict=True)]


def test_make_setup_builds_the_native_slice_loop() -> None:
    assert crc.native_slices() is not None, "make setup builds build/native-crc (needs cc)"


@pytest.mark.parametrize("loop", ["native", "python"])
def test_crc32_slices_answer_what_python_slicing_and_the_oracle_answer(loop: str) -> None:
    data = os.urandom(20_000)
    starts, ends = _slices(len(data), 2_000)  # ends past the buffer, ends before starts
    slices = crc.native_slices() if loop == "native" else crc._python_slices
    assert slices is not None
    for buf in (data, bytearray(data), memoryview(data)):
        assert slices(buf, starts, ends).tolist() == _expected(data, starts, ends)


def test_crc32_slices_read_a_memory_map_and_take_no_slice_at_all(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(1 << 16))
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        starts, ends = np.array([0, 100, 65_000]), np.array([1 << 16, 4196, 1 << 17])
        assert crc32_slices(mapped, starts, ends).tolist() == _expected(
            path.read_bytes(), starts, ends
        )
    assert crc32_slices(b"abc", np.array([], np.int64), np.array([], np.int64)).tolist() == []


def test_crc32_slices_refuse_a_negative_bound_python_would_count_from_the_end() -> None:
    with pytest.raises(ValueError, match="negative"):
        crc32_slices(b"abcdef", np.array([-3]), np.array([6]))


def test_a_missing_library_leaves_the_python_loop_with_the_same_answers(tmp_path: Path) -> None:
    script = (
        "import numpy as np; from rmq_spark.store import crc; "
        "assert crc.native_slices() is None; "
        "print(crc.crc32_slices(b'123456789', np.array([0]), np.array([9]))[0])"
    )
    env = {**os.environ, "RMQ_SPARK_NATIVE_CRC": str(tmp_path / "absent.so")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert int(done.stdout) == 0xCBF43926
