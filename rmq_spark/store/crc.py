"""CRC-32 (IEEE 802.3, zlib's polynomial) of every checksum the formats carry: BODYCRC, the
record CRC property, the gRPC body digest, a registration's ``bodyCrc32``.

zlib-ng's ``crc32`` returns what ``zlib.crc32`` returns, 3-8x sooner on record-sized inputs
(it folds with carry-less multiplies; CPython's zlib does not): the broker computes two per
put and the reader two per record, so this is on both hot paths.

``crc32_slices`` checksums many slices of one buffer (a reader's records, a slave's received
run) in one call into ``native/crc`` (built by ``make setup``), which loops over zlib-ng's own
function: a Python call per slice costs ~0.4 us against the 0.01-0.05 us of a record's
checksum. The executors' zip (``make package``) carries the library as
``rmq_spark/store/libcrc_slices.so``; a process importing the package from the zip loads a
private copy of it. Where there is none (no C compiler; another machine kind) it loops in
Python, with the same answers.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from zlib_ng.zlib_ng import crc32

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BUILT_LIBRARY", "PACKAGED_LIBRARY", "crc32", "crc32_slices", "native_slices"]

log = logging.getLogger("rmq_spark.store")

_LIBRARY_ENV = "RMQ_SPARK_NATIVE_CRC"
PACKAGED_LIBRARY = "libcrc_slices.so"  # beside this module in the executors' zip
# Where ``make setup`` builds it in a checkout (``make package`` copies it from there).
BUILT_LIBRARY = Path(__file__).resolve().parents[2] / "build" / "native-crc" / PACKAGED_LIBRARY
_CHECK = b"123456789"  # CRC-32's check value: 0xCBF43926

_Slices = Callable[[object, "np.ndarray", "np.ndarray"], "np.ndarray"]


def crc32_slices(buf: object, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC-32 of each ``buf[start:end]`` as int64, bounds as Python slices them: an end
    past the buffer stops at its end, an end before its start is an empty slice. A negative
    bound raises ``ValueError`` (Python would count it from the end)."""
    import numpy as np

    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    if int(starts.min()) < 0 or int(ends.min()) < 0:
        raise ValueError("crc32_slices: a negative slice bound")
    native = native_slices()
    return (native or _python_slices)(buf, starts, ends)


@functools.cache
def native_slices() -> _Slices | None:
    """The native loop, or None when its library is missing or answers wrongly (logged)."""
    import ctypes

    import numpy as np
    from zlib_ng import zlib_ng

    path = os.environ.get(_LIBRARY_ENV) or (str(BUILT_LIBRARY) if BUILT_LIBRARY.exists() else None)
    where = path or f"the package's {PACKAGED_LIBRARY}"
    try:
        library = ctypes.CDLL(path) if path else _packaged_library()
        crc_z = ctypes.cast(ctypes.CDLL(zlib_ng.__file__).zng_crc32_z, ctypes.c_void_p).value
    except (OSError, AttributeError) as err:
        log.debug("crc32_slices: no native loop (%s); one Python call per slice", err)
        return None
    loop = library.crc32_slices
    pointer = ctypes.c_void_p
    loop.argtypes = [pointer, pointer, pointer, pointer, ctypes.c_int64, pointer]
    loop.restype = None

    def slices(buf: object, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
        low = np.minimum(starts, len(data))
        high = np.ascontiguousarray(np.clip(ends, low, len(data)))
        out = np.empty(len(low), dtype=np.int64)
        # ctypes drops the GIL for the call; ``data`` and the arrays live until it returns.
        loop(crc_z, data.ctypes.data, low.ctypes.data, high.ctypes.data, len(low), out.ctypes.data)
        return out

    check = np.frombuffer(_CHECK, dtype=np.uint8)
    answer = slices(check, np.zeros(1, np.int64), np.full(1, len(_CHECK), np.int64))
    if int(answer[0]) != crc32(_CHECK):
        log.warning("crc32_slices: %s answers wrongly; one Python call per slice", where)
        return None
    log.debug("crc32_slices: native loop %s", where)
    return slices


def _packaged_library() -> object:
    """The library the executors' zip carries beside this module, loaded from a private copy
    (a shared library cannot be mapped from inside a zip); ``OSError`` when there is none."""
    import ctypes
    import importlib.resources
    import tempfile

    packaged = importlib.resources.files(__package__).joinpath(PACKAGED_LIBRARY)
    if not packaged.is_file():
        raise OSError(f"no {PACKAGED_LIBRARY} beside {__name__}")
    handle, copy = tempfile.mkstemp(prefix="rmq-spark-crc-", suffix=".so")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(packaged.read_bytes())
        return ctypes.CDLL(copy)
    finally:
        os.unlink(copy)  # mapped once loaded; nothing left behind


def _python_slices(buf: object, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    import numpy as np

    view = memoryview(buf)  # type: ignore[arg-type]
    spans = map(view.__getitem__, map(slice, starts.tolist(), ends.tolist()))
    return np.fromiter(map(crc32, spans), dtype=np.int64, count=len(starts))
