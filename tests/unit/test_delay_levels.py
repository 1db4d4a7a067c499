"""Unit tests of store/delay_levels.py (spec 9.1, 6.3)."""

from __future__ import annotations

import pytest

from rmq_spark.store.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    delivery_time_ms,
    level_of_queue_id,
    parse_message_delay_level,
    queue_id_of_level,
    schedule_tags_code,
)

S, M, H = 1000, 60_000, 3_600_000
DEFAULT = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)


def test_default_levels_are_the_18_rocketmq_levels():
    assert DEFAULT == (
        1 * S, 5 * S, 10 * S, 30 * S,
        1 * M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M, 7 * M, 8 * M, 9 * M, 10 * M, 20 * M, 30 * M,
        1 * H, 2 * H,
    )  # fmt: skip


def test_parse_knows_seconds_minutes_hours_and_days():
    assert parse_message_delay_level("1s 1m 1h 1d 0s +2s") == (S, M, H, 86_400_000, 0, 2 * S)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("1s  5s", "''"),  # two spaces: an empty token
        ("1s 5x", "'5x'"),
        ("1s s", "'s'"),
        ("1.5s", "'1.5s'"),
        ("-1s", "'-1s'"),
        ("1S", "'1S'"),
        (" 1s", "''"),
        ("1s ", "''"),
        ("10", "'10'"),
    ],
)
def test_parse_rejects_a_bad_token_and_names_it(text, bad):
    with pytest.raises(ValueError) as info:
        parse_message_delay_level(text)
    assert bad in str(info.value)


def test_parse_rejects_an_empty_string_and_an_int64_overflow():
    with pytest.raises(ValueError, match="empty"):
        parse_message_delay_level("")
    with pytest.raises(ValueError, match="overflows"):
        parse_message_delay_level("9223372036854775807d")


def test_delivery_time_adds_the_level_delay():
    assert delivery_time_ms(1_000_000, 1, DEFAULT) == 1_001_000
    assert delivery_time_ms(1_000_000, 18, DEFAULT) == 1_000_000 + 2 * H


def test_delivery_time_clamps_a_level_above_the_highest():
    assert delivery_time_ms(0, 99, DEFAULT) == 2 * H


@pytest.mark.parametrize(("level", "levels"), [(0, DEFAULT), (-3, DEFAULT), (2, ())])
def test_delivery_time_of_an_unknown_level_is_one_second_later(level, levels):
    assert delivery_time_ms(5000, level, levels) == 6000


def test_schedule_tags_code_is_none_unless_the_clamped_level_is_positive():
    assert schedule_tags_code(100, 3, DEFAULT) == 100 + 10 * S
    assert schedule_tags_code(100, 50, DEFAULT) == 100 + 2 * H
    assert schedule_tags_code(100, 0, DEFAULT) is None
    assert schedule_tags_code(100, 3, ()) is None


def test_queue_id_and_level_are_off_by_one():
    assert queue_id_of_level(1) == 0 and level_of_queue_id(17) == 18
    with pytest.raises(ValueError):
        queue_id_of_level(0)
    with pytest.raises(ValueError):
        level_of_queue_id(-1)
