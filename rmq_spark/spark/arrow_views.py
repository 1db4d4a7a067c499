"""Vectorised byte gathering into numpy and Arrow, without a Python object per row.

Owns three tricks the columnar decoder is built from:

* ``gather_rows``: copy a fixed-width window at many byte positions of a buffer in one numpy
  fancy-index operation, through a strided view whose row ``i`` is bytes ``[i, i + width)``.
* ``slices_to_array``: turn (start, length) pairs into an Arrow ``binary``/``string`` array by
  describing them as a ``binary_view`` array over the buffer (16 bytes per row, built in
  numpy) and letting Arrow's C++ cast copy the bytes; the cast to ``string`` validates UTF-8.
* ``pieces``: when the wanted slices are disjoint and in order, describe the *whole* buffer
  as one Arrow array whose offsets are all the slice boundaries (zero copy, the bytes between
  slices become junk values), then ``take`` the wanted values: Arrow copies them in C++.
  This is the fastest of the three; ``slices_to_array`` handles overlapping or unordered
  slices.
* ``hex_strings``: upper-case hex of a fixed-width byte matrix through a 256-entry table.

Knows nothing of RocketMQ records.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["gather_rows", "hex_strings", "pieces", "slices_to_array"]

_INLINE_MAX = 12  # binary_view stores values of up to 12 bytes inside the view itself
# _KEEP[n] masks the first n of 12 inline bytes (the rest of an inline view must be zero).
_KEEP = (np.arange(_INLINE_MAX)[None, :] < np.arange(_INLINE_MAX + 1)[:, None]).astype(np.uint8)
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
# _HEX_PAIRS[b] is the two ASCII hex digits of byte b, as one uint16 (memory order).
_HEX_PAIRS = (
    np.stack([_HEX_DIGITS[np.arange(256) >> 4], _HEX_DIGITS[np.arange(256) & 0xF]], axis=1)
    .astype(np.uint8)
    .copy()
    .view(np.uint16)
    .reshape(256)
)


def gather_rows(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """``out[i] = data[positions[i] : positions[i] + width]``, zero-padded past the end.

    Parameters
    ----------
    data
        1-D ``uint8`` array (e.g. ``np.frombuffer`` of a segment map).
    positions
        1-D integer array of start positions, each ``>= 0`` and ``< len(data)``.
    width
        Bytes per row.

    Returns
    -------
    numpy.ndarray
        C-contiguous ``(len(positions), width)`` ``uint8`` array.
    """
    count = len(positions)
    if count == 0:
        return np.zeros((0, width), dtype=np.uint8)
    size = len(data)
    if size >= width:
        # Item i of this void view is bytes [i, i + width): fancy indexing then copies each
        # row with one memcpy (much faster than a 2-D strided view).
        windows = np.ndarray(
            shape=(size - width + 1,), dtype=f"V{width}", buffer=data, strides=(1,)
        )
        if int(positions.max()) <= size - width:
            return windows[positions].view(np.uint8).reshape(count, width)
    out = np.zeros((count, width), dtype=np.uint8)
    full = positions <= size - width
    if full.any():
        out[full] = windows[positions[full]].view(np.uint8).reshape(-1, width)
    for row in np.flatnonzero(~full):
        start = int(positions[row])
        tail = data[start:size]
        out[row, : len(tail)] = tail
    return out


def slices_to_array(
    data: np.ndarray,
    buffer: pa.Buffer,
    starts: np.ndarray,
    lengths: np.ndarray,
    value_type: pa.DataType,
) -> pa.Array:
    """An Arrow array whose value ``i`` is ``data[starts[i] : starts[i] + lengths[i]]``.

    Parameters
    ----------
    data, buffer
        The same bytes as a numpy ``uint8`` array and as an Arrow buffer (< 2 GiB).
    starts, lengths
        Integer arrays, one entry per value; every slice must lie inside ``data``.
    value_type
        ``pa.binary()`` or ``pa.string()``.

    Returns
    -------
    pyarrow.Array
        Of ``value_type``, no nulls, with its own copy of the bytes.

    Raises
    ------
    pyarrow.ArrowInvalid
        ``value_type`` is ``string`` and some value is not valid UTF-8.
    """
    count = len(starts)
    assert len(data) < (1 << 31), "binary_view offsets are int32"
    views = np.zeros((count, 4), dtype=np.int32)
    if count:
        lengths32 = lengths.astype(np.int32, copy=False)
        views[:, 0] = lengths32
        view_bytes = views.view(np.uint8).reshape(count, 16)
        inline = lengths32 <= _INLINE_MAX
        if inline.all():
            head = gather_rows(data, starts, _INLINE_MAX)
            head *= _KEEP[lengths32]
            view_bytes[:, 4:16] = head
        elif not inline.any():
            view_bytes[:, 4:8] = gather_rows(data, starts, 4)
            views[:, 3] = starts  # buffer index (column 2) stays 0: the single data buffer
        else:
            head = gather_rows(data, starts, _INLINE_MAX)
            view_bytes[inline, 4:16] = head[inline] * _KEEP[lengths32[inline]]
            outline = ~inline
            view_bytes[outline, 4:8] = head[outline, :4]
            views[outline, 3] = starts[outline]
    view_array = pa.Array.from_buffers(pa.binary_view(), count, [None, pa.py_buffer(views), buffer])
    return view_array.cast(value_type)


def hex_strings(matrix: np.ndarray) -> pa.Array:
    """Upper-case hex strings of the rows of a ``(n, k)`` ``uint8`` matrix (``2k`` chars each).

    Examples
    --------
    >>> hex_strings(np.array([[0xC0, 0xA8]], dtype=np.uint8)).to_pylist()
    ['C0A8']
    """
    count, width = matrix.shape
    chars = np.ascontiguousarray(_HEX_PAIRS[matrix])
    offsets = np.arange(count + 1, dtype=np.int32) * (2 * width)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    )


def pieces(buffer: pa.Buffer, bounds: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """A zero-copy array over ``buffer`` whose value ``i`` is ``buffer[bounds[i]:bounds[i+1]]``.

    ``bounds`` must be non-decreasing positions (relative to ``buffer``, < 2 GiB). Meant to be
    ``take``-n from: with a ``string`` type the junk values between wanted ones may not be
    UTF-8, so validate what is taken (``validate(full=True)``), never the whole array.
    """
    offsets = np.ascontiguousarray(bounds, dtype=np.int32)
    if len(offsets) == 0:
        return pa.array([], value_type)
    return pa.Array.from_buffers(
        value_type, len(offsets) - 1, [None, pa.py_buffer(offsets), buffer]
    )
