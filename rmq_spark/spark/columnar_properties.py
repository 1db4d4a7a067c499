"""Vectorised parsing of a column of stored properties strings (``docs/FORMAT.md`` 2.2).

Owns turning the concatenated properties bytes of many records into the ``properties`` map
column and the columns derived from it (``tags``, ``keys``, ``uniq_key``, ``delay_level``),
with the same rules as ``rmq_spark.store.properties.parse_properties``: entries split on
``\\x02``, key and value on the *first* ``\\x01``, entries with an empty key or value dropped,
a later duplicate key wins. All in numpy/Arrow; no Python loop over rows. Does not own the
record layout (``columnar.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.spark.arrow_views import pieces
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.properties import DELAY, KEYS, TAGS, UNIQ_KEY

__all__ = ["PROPERTY_COLUMNS", "parse_properties_column"]

_NAME_VALUE_SEPARATOR = 1
_PROPERTY_SEPARATOR = 2
_KEY_SEPARATOR = " "
_MAP_TYPE = ARROW_SCHEMA.field("properties").type
_KEYS_TYPE = ARROW_SCHEMA.field("keys").type
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


PROPERTY_COLUMNS = frozenset({"properties", "tags", "keys", "uniq_key", "delay_level"})
"""Output columns derived from the properties string."""


def _entries(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, start, end) of every non-empty ``\\x02``-separated entry, in position order."""
    size = len(data)
    seps = np.flatnonzero(data == _PROPERTY_SEPARATOR)
    # Entries start at a row start or after a separator, and end at the next separator or at
    # their row's end. Marks collapse coinciding starts; only empty entries are lost that way.
    start_mark = np.zeros(size + 1, dtype=bool)
    start_mark[offsets[:-1]] = True
    start_mark[seps + 1] = True
    starts = np.flatnonzero(start_mark[:size])
    rows = np.searchsorted(offsets, starts, side="right") - 1
    ends = offsets[rows + 1]
    if len(seps):
        next_sep = np.searchsorted(seps, starts, side="left")
        found = next_sep < len(seps)
        ends[found] = np.minimum(ends[found], seps[next_sep[found]])
    return rows, starts, ends


def parse_properties_column(
    data: np.ndarray,
    offsets: np.ndarray,
    *,
    wanted: frozenset[str] | set[str] = PROPERTY_COLUMNS,
    map_type: pa.DataType | None = None,
    keys_type: pa.DataType | None = None,
) -> dict[str, pa.Array]:
    """Parse the properties strings ``data[offsets[i]:offsets[i + 1]]`` of ``n`` records.

    Parameters
    ----------
    data
        The concatenated properties bytes as a ``uint8`` array; valid UTF-8 per record (the
        caller validates).
    offsets
        ``int64`` array of ``n + 1`` positions into ``data``.
    wanted
        Which of ``PROPERTY_COLUMNS`` to build.
    map_type, keys_type
        Arrow types of the ``properties`` and ``keys`` columns (nested nullability follows
        the query's schema); default: ``schema.ARROW_SCHEMA``'s.

    Returns
    -------
    dict
        Column name -> array with one value per record: ``properties`` (map), ``tags`` and
        ``uniq_key`` (string, null where absent), ``keys`` (list of KEYS split on spaces,
        empty where absent), ``delay_level`` (int32, null where absent or not an int32).
    """
    count = len(offsets) - 1
    rows, starts, ends = _entries(data, offsets)

    # The first \x01 at or after each entry's start, if it lies inside the entry; entries
    # with an empty key or value are dropped (as the broker's parser does).
    ones = np.flatnonzero(data == _NAME_VALUE_SEPARATOR)
    if len(ones):
        first = np.searchsorted(ones, starts, side="left")
        split_at = np.where(first < len(ones), ones[np.minimum(first, len(ones) - 1)], -1)
    else:
        split_at = np.full(len(starts), -1, dtype=np.int64)
    ok = (split_at > starts) & (split_at < ends - 1)
    rows, starts, ends, split_at = rows[ok], starts[ok], ends[ok], split_at[ok]

    # Pieces: key, \x01, value, gap to the next entry; keys and values are Arrow takes.
    bounds = np.empty(4 * len(starts), dtype=np.int32)
    bounds[0::4], bounds[1::4], bounds[2::4], bounds[3::4] = starts, split_at, split_at + 1, ends
    texts = pieces(pa.py_buffer(data), bounds, pa.string())
    entry_index = np.arange(len(starts), dtype=np.int64) * 4
    keys = texts.take(pa.array(entry_index))
    key_codes = pc.dictionary_encode(keys)
    dictionary = key_codes.dictionary.to_pylist()
    codes = key_codes.indices.to_numpy().astype(np.int64)

    # A later duplicate key wins: keep the last entry of each (row, key) pair.
    pair = rows * max(len(dictionary), 1) + codes
    ordered = np.sort(pair)  # np.unique is far slower here (numpy 2.x hashes)
    if len(pair) and bool((ordered[1:] == ordered[:-1]).any()):
        order = np.argsort(pair, kind="stable")
        last_of_pair = np.ones(len(pair), dtype=bool)
        last_of_pair[:-1] = pair[order][1:] != pair[order][:-1]
        keep = np.sort(order[last_of_pair])
        rows, codes, entry_index = rows[keep], codes[keep], entry_index[keep]
        keys = keys.take(pa.array(keep))
    values = texts.take(pa.array(entry_index + 2))

    def per_row(name: str) -> pa.Array:
        """The value of property ``name`` for every row (null where absent)."""
        code = dictionary.index(name) if name in dictionary else -1
        hits = np.flatnonzero(codes == code)
        index = np.full(count, -1, dtype=np.int64)
        index[rows[hits]] = hits
        return values.take(pa.array(index, mask=index < 0))

    columns: dict[str, pa.Array] = {}
    if "properties" in wanted:
        map_offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=count), out=map_offsets[1:])
        columns["properties"] = pa.MapArray.from_arrays(
            pa.array(map_offsets), keys, values, type=map_type or _MAP_TYPE
        )
    if "tags" in wanted:
        columns["tags"] = per_row(TAGS)
    if "keys" in wanted:
        columns["keys"] = _split_keys(per_row(KEYS), keys_type or _KEYS_TYPE)
    if "uniq_key" in wanted:
        columns["uniq_key"] = per_row(UNIQ_KEY)
    if "delay_level" in wanted:
        columns["delay_level"] = _int32_or_null(per_row(DELAY))
    return columns


def _split_keys(keys_value: pa.Array, keys_type: pa.DataType) -> pa.Array:
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
    return pa.ListArray.from_arrays(pa.array(offsets), kept, type=keys_type)


def _int32_or_null(text: pa.Array) -> pa.Array:
    """Decimal int32 strings (Java ``Integer.parseInt`` syntax) to int32; null otherwise."""
    valid = pc.fill_null(pc.match_substring_regex(text, r"^[+-]?[0-9]{1,10}$"), False)
    cleaned = pc.if_else(valid, pc.utf8_ltrim(text, "+"), pa.scalar(None, pa.string()))
    wide = pc.cast(cleaned, pa.int64())
    in_range = pc.and_(pc.greater_equal(wide, _INT32_MIN), pc.less_equal(wide, _INT32_MAX))
    return pc.cast(pc.if_else(in_range, wide, pa.scalar(None, pa.int64())), pa.int32())
