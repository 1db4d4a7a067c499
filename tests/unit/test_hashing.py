"""Unit tests of store/hashing.py against the JDK-verified vectors of spec 6.3 and 7.4."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.store.hashing import index_key_hash, java_string_hash, tags_code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("TagA || TagB", 1359775119),
        ("中文", 646394),
        ("😀", 1772899),
        ("TopicTest#KEY1", -1656969516),
        ("polygenelubricants", -2147483648),
        ("", 0),
        ("a\x00b", 93315),  # JDK 17
        ("ÿ\uffff", 73440),  # JDK 17
    ],
)
def test_java_string_hash_matches_the_jdk(text, expected):
    assert java_string_hash(text) == expected


def _reference_hash(text: str) -> int:
    data = text.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    total = sum(unit * pow(31, len(units) - 1 - i, 1 << 32) for i, unit in enumerate(units))
    total %= 1 << 32
    return total - (1 << 32) if total >= 1 << 31 else total


@given(st.text())
def test_java_string_hash_equals_the_closed_form_over_utf16_units(text):
    assert java_string_hash(text) == _reference_hash(text)


def test_tags_code_is_zero_for_absent_or_empty_tags():
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("TopicTest#KEY1") == -1656969516  # negative: sign-extended, not abs


@pytest.mark.parametrize(
    ("key", "expected"),
    [("TopicTest#KEY1", 1656969516), ("polygenelubricants", 0), ("TagA", 2598919), ("", 0)],
)
def test_index_key_hash_is_abs_with_min_value_mapped_to_zero(key, expected):
    assert index_key_hash(key) == expected


def test_index_key_hash_slots_match_the_spec_examples():
    assert index_key_hash("TopicTest#KEY1") % 5_000_000 == 1969516
    assert index_key_hash("polygenelubricants") % 5_000_000 == 0
