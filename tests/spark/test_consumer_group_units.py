"""consumerGroup without Spark: options, CommitLog offset <-> queue offsets, offline commits.

The store is written by the embedded broker (real ConsumeQueue files); no JVM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.broker.config_files.rocketmq_config_files import (
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.embedded import Broker
from rmq_spark.errors import GroupOffsetError, SourceError
from rmq_spark.spark.group_offsets import (
    GroupSync,
    group_start_offset,
    group_topics,
    queue_offsets_at,
)
from rmq_spark.spark.options import StartingMode, parse_options
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR
from rmq_spark.store.cq_view import CqView
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def test_consumer_group_options() -> None:
    options = parse_options(
        {"path": "/s", "topics": "a,b", "consumergroup": "g1", "startingoffsets": "group"},
        streaming=True,
    )
    assert options.consumer_group == "g1" and options.starting_mode is StartingMode.GROUP
    assert options.topics == ("a", "b", "%RETRY%g1")  # the group's retry topic is read too
    pattern = parse_options(
        {"path": "/s", "topicPattern": "a.*", "consumerGroup": "g"}, streaming=True
    ).topic_pattern
    assert pattern == r"(?:a.*)|%RETRY%g"
    with pytest.raises(SourceError, match="needs the option consumerGroup"):
        parse_options({"path": "/s", "startingOffsets": "group"}, streaming=True)
    with pytest.raises(SourceError, match="streaming queries only"):
        parse_options({"path": "/s", "startingOffsets": "group"}, streaming=False)
    with pytest.raises(SourceError, match="consumerGroup"):
        parse_options({"path": "/s", "consumerGroup": "no spaces"}, streaming=True)
    with pytest.raises(SourceError, match="brokers"):
        parse_options({"path": "/s", "brokers": "nohostport"}, streaming=True)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[tuple[str, int], list[int]]]:
    """Two queues of ``orders`` and one of ``other``, interleaved; (topic, queue) -> the
    CommitLog offsets of its messages."""
    root = tmp_path / "store"
    placed: dict[tuple[str, int], list[int]] = {}
    store = MessageStore.open(StoreConfig(root_dir=root))
    try:
        for i in range(12):
            topic = "other" if i % 4 == 3 else "orders"
            result = store.put(PutRequest(topic, f"m{i}".encode(), queue_id=i % 2))
            placed.setdefault((topic, i % 2), []).append(result.physical_offset)
    finally:
        store.close()
    return root, placed


def test_queue_offsets_follow_the_commitlog_offset(
    store: tuple[Path, dict[tuple[str, int], list[int]]],
) -> None:
    root, placed = store
    for (topic, queue_id), offsets in placed.items():
        index = CqView.open(root / CONSUME_QUEUE_DIR / topic / str(queue_id))
        assert (index.min_offset, index.max_offset) == (0, len(offsets))
        for position, physical in enumerate(offsets):
            assert index.physical_at(position) == physical
            assert index.first_at_or_after(physical) == position
            assert index.first_at_or_after(physical + 1) == position + 1
    assert group_topics(root, "g") == ["orders", "other", "%RETRY%g"]
    assert group_topics(root, "g", topic_pattern="ord.*") == ["orders", "%RETRY%g"]
    middle = placed[("orders", 1)][2]
    at = queue_offsets_at(root, ["orders", "%RETRY%g"], middle)
    assert at[("orders", 1)] == 2
    assert at[("orders", 0)] == sum(1 for o in placed[("orders", 0)] if o < middle)
    # The start for the group is the least CommitLog offset of a unit at a committed offset.
    assert group_start_offset(root, ["orders"], at) == min(
        placed[("orders", 0)][at[("orders", 0)]], middle
    )
    # A queue without a committed offset counts from its oldest message.
    assert group_start_offset(root, ["orders"], {("orders", 1): 2}) == placed[("orders", 0)][0]
    everything = {("orders", 0): 99, ("orders", 1): 99}  # consumed to the end
    assert group_start_offset(root, ["orders"], everything) > placed[("orders", 1)][-1]


def test_offline_group_commits_move_forward_only(
    store: tuple[Path, dict[tuple[str, int], list[int]]],
) -> None:
    root, placed = store
    options = parse_options(
        {"path": str(root), "topics": "orders", "consumerGroup": "g"}, streaming=True
    )
    sync = GroupSync(options)
    end = placed[("orders", 0)][3]
    sync.advance(end)
    committed = read_consumer_offsets(root)[("orders", "g")]
    assert committed == {0: 3, 1: sum(1 for o in placed[("orders", 1)] if o < end)}
    GroupSync(options).advance(placed[("orders", 0)][1])  # a replayed, older commit
    assert read_consumer_offsets(root)[("orders", "g")] == committed
    assert ("other", "g") not in read_consumer_offsets(root)


def test_a_broker_holding_the_store_needs_the_brokers_option(
    store: tuple[Path, dict[tuple[str, int], list[int]]],
) -> None:
    root, placed = store
    write_consumer_offsets(root, {})
    options = parse_options(
        {"path": str(root), "topics": "orders", "consumerGroup": "g"}, streaming=True
    )
    with Broker(root), pytest.raises(GroupOffsetError, match="give the source option brokers"):
        GroupSync(options).advance(placed[("orders", 0)][1])


def test_group_commits_sign_with_the_credentials_options() -> None:
    from rmq_spark.errors import SourceError
    from rmq_spark.spark.options import parse_options

    raw = {"path": "/s", "consumerGroup": "g", "accessKey": "ak", "secretKey": "sk"}
    assert parse_options(raw, streaming=True).credentials == ("ak", "sk")
    with pytest.raises(SourceError, match="go together"):
        parse_options({"path": "/s", "accessKey": "ak"}, streaming=True)
