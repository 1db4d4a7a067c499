"""FIFO queue selection (rmq_spark/broker/topics.py): the queue RocketMQ 5.3.3's proxy picks.

``rocketmq_reference/consistent_hash.json`` holds Guava 32.0.1's
``Hashing.consistentHash(group.hashCode(), n)`` (what ``SendMessageActivity`` calls) for
1,006 group names and nine queue counts, written with the real jar by
``rocketmq_reference/make_reference.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_spark.broker.topics import group_queue_id
from rmq_spark.store.hashing import java_string_hash

REFERENCE = json.loads(
    (Path(__file__).parent / "rocketmq_reference" / "consistent_hash.json").read_text("utf-8")
)
BUCKET_COUNTS: list[int] = REFERENCE["bucket_counts"]
QUEUES: dict[str, list[int]] = REFERENCE["queues"]


@pytest.mark.parametrize("queue_count", BUCKET_COUNTS)
def test_group_queue_is_guava_consistent_hash_of_the_java_hash(queue_count: int) -> None:
    column = BUCKET_COUNTS.index(queue_count)
    mismatches = {
        group: (group_queue_id(group, queue_count), expected[column])
        for group, expected in QUEUES.items()
        if group_queue_id(group, queue_count) != expected[column]
    }
    assert mismatches == {}


def test_the_old_modulo_formula_disagrees_for_most_groups() -> None:
    # (hashCode & 0x7FFFFFFF) % n, used before: a group changed queue when a store changed
    # hands between rmq-spark and RocketMQ (123 of these 1,000 names agree at 8 queues).
    column = BUCKET_COUNTS.index(8)
    names = [f"group-{index}" for index in range(1000)]
    old = sum((java_string_hash(n) & 0x7FFFFFFF) % 8 == QUEUES[n][column] for n in names)
    assert old == 123


def test_consistent_hash_takes_a_long_key_and_rejects_no_buckets() -> None:
    from rmq_spark.broker.topics import consistent_hash

    assert consistent_hash(-1, 1) == 0
    assert 0 <= consistent_hash(1 << 62, 1 << 20) < 1 << 20
    with pytest.raises(ValueError, match="buckets must be positive"):
        consistent_hash(1, 0)


def test_growing_the_queue_count_moves_a_group_only_to_a_new_queue() -> None:
    # Jump consistent hash: from n to n+1 queues a group stays or moves to queue n.
    for index in range(200):
        group = f"order-{index}"
        for queue_count in range(1, 17):
            before = group_queue_id(group, queue_count)
            after = group_queue_id(group, queue_count + 1)
            assert after in (before, queue_count)
