from __future__ import annotations

from datetime import UTC

import pytest

from rmq_spark.clock import ManualClock
from rmq_spark.store.codec import HEADER_SIZE_IPV4
from rmq_spark.store.msg_id import UniqKeyGenerator
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put_plan import UniqKeys, record_plan
from rmq_spark.store.record_crc import RECORD_CRC_PLACEHOLDER

_UTC = UTC


def _pair(start_ms: int, ip: str = "10.0.0.7") -> tuple[ManualClock, UniqKeyGenerator, UniqKeys]:
    clock = ManualClock(start_ms)
    reference = UniqKeyGenerator(clock, ip, 4242, instance_hash=0x1234ABCD, tz=_UTC)
    fast = UniqKeys(ip, 4242, 0x1234ABCD, start_ms, tz=_UTC)
    return clock, reference, fast


def test_uniq_keys_are_the_keys_of_the_reference_generator() -> None:
    clock, reference, fast = _pair(1_700_000_000_000)
    for step in (0, 0, 1, 0, 999, 86_400_000, 0, 3):
        clock.advance(step)
        assert fast.key_at(clock.now_ms()) == reference.next_key()


def test_uniq_keys_follow_a_month_boundary_like_the_reference() -> None:
    month_end = 1_704_067_200_000  # 2024-01-01T00:00:00Z
    clock, reference, fast = _pair(month_end - 2)
    for _ in range(4):
        assert fast.key_at(clock.now_ms()) == reference.next_key()
        clock.advance(1)


def test_uniq_key_counter_wraps_at_sixteen_bits_like_the_reference() -> None:
    clock, reference, fast = _pair(1_700_000_000_000)
    keys = [fast.key_at(clock.now_ms()) for _ in range(65_537)]
    expected = [reference.next_key() for _ in range(65_537)]
    assert keys[-2:] == expected[-2:]
    assert keys[-1][-4:] == "0000" and keys[-2][-4:] == "FFFF"


def test_uniq_key_size_is_32_for_ipv4_and_56_for_ipv6() -> None:
    assert UniqKeys("1.2.3.4", 1, 2, 0).key_size == 32
    assert len(UniqKeys("::1", 1, 2, 0).key_at(5)) == UniqKeys("::1", 1, 2, 0).key_size == 56


@pytest.mark.parametrize("tags", [None, "TagA", "tag with spaces", "étiquette"])
def test_record_plan_splits_the_properties_around_the_uniq_key(tags: str | None) -> None:
    plan = record_plan("TopicA", tags, 32)
    assert plan is not None
    key = "K" * 32
    # The record CRC property follows ``after``: the writer appends it, sealed, under the lock.
    props = plan.before + key.encode() + plan.after + RECORD_CRC_PLACEHOLDER
    assert plan.topic == b"\x06TopicA"
    assert plan.props_size == len(props)
    expected = {"UNIQ_KEY": key} if tags is None else {"UNIQ_KEY": key, "TAGS": tags}
    assert parse_properties(props.decode()) == expected
    assert plan.fixed_size == HEADER_SIZE_IPV4 + len(plan.topic) + 2 + len(props)
    unsealed = record_plan("TopicA", tags, 32, record_crc=False)
    assert unsealed is not None
    assert (unsealed.before, unsealed.after) == (plan.before, plan.after)
    assert unsealed.props_size == plan.props_size - len(RECORD_CRC_PLACEHOLDER)


@pytest.mark.parametrize(
    ("topic", "tags"),
    [
        ("T" * 128, None),  # a v2 topic
        ("tópico", None),  # not ASCII
        (7, None),  # not a string
        ("T", ""),  # empty TAGS are no TAGS: the caller passes None
        ("T", "a\x02b"),  # a separator
        ("T", 5),  # not a string
        ("T", "\ud800"),  # not encodable
        ("T", "x" * 32_767),  # properties too large
    ],
)
def test_record_plan_declines_what_only_the_general_path_handles(
    topic: object, tags: object
) -> None:
    assert record_plan(topic, tags, 32) is None


def test_record_plan_packer_packs_the_record_up_to_its_crc_property_and_is_cached() -> None:
    plan = record_plan("T", None, 32)
    assert plan is not None
    packer, head = plan.shape(3)
    assert plan.shape(3) == (packer, head)
    assert packer.size + len(RECORD_CRC_PLACEHOLDER) == plan.fixed_size + 3
    assert head == (plan.fixed_size + 3).to_bytes(4, "big") + bytes.fromhex("DAA320A7")
    unsealed = record_plan("T", None, 32, record_crc=False)
    assert unsealed is not None
    assert unsealed.shape(3)[0].size == unsealed.fixed_size + 3
