"""Vectorised parsing of a column of stored properties strings (spec STORE_FORMAT.md 3.1).

Owns turning the concatenated properties bytes of many records into the ``properties`` map
column and the columns derived from it (``tags``, ``keys``, ``uniq_key``, ``delay_level``),
with the same rules as ``rmq_spark.store.properties.parse_properties``: entries split on
``\\x02``, key and value on the *first* ``\\x01``, entries with an empty key or value dropped,
a later duplicate key wins. All in numpy/Arrow; no Python loop over rows. Does not own the
record layout (``columnar.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.spark.arrow_views import slices_to_array
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.properties import DELAY, KEYS, TAGS, UNIQ_KEY

__all__ = ["PropertyColumns", "parse_properties_column"]

_NAME_VALUE_SEPARATOR = 1
_PROPERTY_SEPARATOR = 2
_KEY_SEPARATOR = " "
_MAP_TYPE = ARROW_SCHEMA.field("properties").type
_KEYS_TYPE = ARROW_SCHEMA.field("keys").type
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class PropertyColumns:
    """The property-derived output columns of a batch, one value per record."""

    properties: pa.Array  # map<string, string>
    tags: pa.Array  # string, null where absent or empty
    keys: pa.Array  # list<string>, KEYS split on " ", empty tokens dropped
    uniq_key: pa.Array  # string, null where absent
    delay_level: pa.Array  # int32, null where absent or not a decimal int32


def _entries(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, start, end) of every ``\\x02``-separated entry, ordered by row then position."""
    count = len(offsets) - 1
    seps = np.flatnonzero(data == _PROPERTY_SEPARATOR)
    sep_rows = np.searchsorted(offsets, seps, side="right") - 1
    rows = np.concatenate([np.arange(count), sep_rows])
    starts = np.concatenate([offsets[:-1], seps + 1])
    ends = np.concatenate([seps, offsets[1:]])
    end_rows = np.concatenate([sep_rows, np.arange(count)])
    start_order = np.lexsort((starts, rows))
    end_order = np.lexsort((ends, end_rows))
    return rows[start_order], starts[start_order], ends[end_order]


def parse_properties_column(
    data: np.ndarray, buffer: pa.Buffer, offsets: np.ndarray
) -> PropertyColumns:
    """Parse the properties strings ``data[offsets[i]:offsets[i + 1]]`` of ``n`` records.

    Parameters
    ----------
    data, buffer
        The concatenated properties bytes as a ``uint8`` array and as an Arrow buffer; must
        be valid UTF-8 per record (the caller validates).
    offsets
        ``int64`` array of ``n + 1`` positions into ``data``.

    Returns
    -------
    PropertyColumns
    """
    count = len(offsets) - 1
    rows, starts, ends = _entries(data, offsets)

    # The first \x01 at or after each entry's start, if it lies inside the entry.
    ones = np.flatnonzero(data == _NAME_VALUE_SEPARATOR)
    if len(ones):
        first = np.searchsorted(ones, starts, side="left")
        split_at = np.where(first < len(ones), ones[np.minimum(first, len(ones) - 1)], -1)
    else:
        split_at = np.full(len(starts), -1, dtype=np.int64)
    ok = (split_at > starts) & (split_at < ends - 1)
    rows, starts, ends, split_at = rows[ok], starts[ok], ends[ok], split_at[ok]

    keys = slices_to_array(data, buffer, starts, split_at - starts, pa.string())
    key_codes = pc.dictionary_encode(keys)
    dictionary = key_codes.dictionary.to_pylist()
    codes = key_codes.indices.to_numpy().astype(np.int64)

    # A later duplicate key wins: keep the last entry of each (row, key) pair.
    pair = rows * max(len(dictionary), 1) + codes
    if len(pair) and len(np.unique(pair)) != len(pair):
        order = np.argsort(pair, kind="stable")
        last_of_pair = np.ones(len(pair), dtype=bool)
        last_of_pair[:-1] = pair[order][1:] != pair[order][:-1]
        keep = np.sort(order[last_of_pair])
        rows, starts, ends, split_at, codes = (
            rows[keep],
            starts[keep],
            ends[keep],
            split_at[keep],
            codes[keep],
        )
        keys = keys.take(pa.array(keep))
    values = slices_to_array(data, buffer, split_at + 1, ends - split_at - 1, pa.string())

    map_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=count), out=map_offsets[1:])
    properties = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values, type=_MAP_TYPE)

    def per_row(name: str) -> pa.Array:
        """The value of property ``name`` for every row (null where absent)."""
        code = dictionary.index(name) if name in dictionary else -1
        hits = np.flatnonzero(codes == code)
        index = np.full(count, -1, dtype=np.int64)
        index[rows[hits]] = np.arange(len(hits))
        return values.take(hits).take(pa.array(index, mask=index < 0))

    keys_value = per_row(KEYS)
    return PropertyColumns(
        properties=properties,
        tags=per_row(TAGS),
        keys=_split_keys(keys_value),
        uniq_key=per_row(UNIQ_KEY),
        delay_level=_int32_or_null(per_row(DELAY)),
    )


def _split_keys(keys_value: pa.Array) -> pa.Array:
    """KEYS split on single spaces with empty tokens dropped; ``[]`` where KEYS is absent."""
    count = len(keys_value)
    filled = keys_value.fill_null("")
    tokens = pc.split_pattern(filled, _KEY_SEPARATOR)
    flat = tokens.flatten()
    parents = pc.list_parent_indices(tokens).to_numpy()
    nonempty = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    kept = flat.filter(pa.array(nonempty))
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents[nonempty], minlength=count), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), kept, type=_KEYS_TYPE)


def _int32_or_null(text: pa.Array) -> pa.Array:
    """Decimal int32 strings (Java ``Integer.parseInt`` syntax) to int32; null otherwise."""
    valid = pc.fill_null(pc.match_substring_regex(text, r"^[+-]?[0-9]{1,10}$"), False)
    cleaned = pc.if_else(valid, pc.utf8_ltrim(text, "+"), pa.scalar(None, pa.string()))
    wide = pc.cast(cleaned, pa.int64())
    in_range = pc.and_(pc.greater_equal(wide, _INT32_MIN), pc.less_equal(wide, _INT32_MAX))
    return pc.cast(pc.if_else(in_range, wide, pa.scalar(None, pa.int64())), pa.int32())
