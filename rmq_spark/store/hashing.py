"""PURE: the Java ``String.hashCode`` family used by the store (``docs/FORMAT.md`` 1, 6).

Owns ``java_string_hash`` (UTF-16 code units, int32 wrap, signed), the ConsumeQueue
``tags_code`` and the IndexFile ``index_key_hash``. Does not own where these values are
stored (``consume_queue.py``, the index writer) or delay-level tag codes (``delay_levels.py``).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["index_key_hash", "java_string_hash", "tags_code"]

_MASK32 = 0xFFFFFFFF
_INT_MIN = -(1 << 31)


@lru_cache(maxsize=8192)
def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, as signed int32.

    A character outside the BMP counts as its two surrogate code units.

    Examples
    --------
    >>> java_string_hash("TagA")
    2598919
    >>> java_string_hash("TopicTest#KEY1")
    -1656969516
    """
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & _MASK32
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value: its Java hash, sign-extended; 0 if absent/empty.

    The whole string is hashed, also for ``"TagA || TagB"`` (``docs/FORMAT.md`` 6).
    """
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile keyHash: ``abs(key.hashCode())``, and 0 when hashCode is Integer.MIN_VALUE.

    Examples
    --------
    >>> index_key_hash("TopicTest#KEY1")
    1656969516
    >>> index_key_hash("polygenelubricants")
    0
    """
    h = java_string_hash(key)
    if h == _INT_MIN:
        return 0
    return -h if h < 0 else h
