"""``settle_collector``: the broker process's collector after start-up (``collector.py``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rmq_spark.broker.collector import YOUNG_THRESHOLD, settle_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_start_up_objects_are_frozen_and_young_collections_come_rarely() -> None:
    started_up = [object() for _ in range(100)]  # the broker's long-lived state, stood in
    settle_collector()
    assert gc.get_freeze_count() >= len(started_up)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 20, 20)


@pytest.mark.usefixtures("restored_collector")
def test_cyclic_garbage_is_still_collected_after_it() -> None:
    settle_collector()

    class Node:
        pass

    node = Node()
    node.self = node  # a cycle: reference counting alone never frees it
    collected = []
    gc.callbacks.append(lambda phase, info: collected.append(info) if phase == "stop" else None)
    try:
        del node
        for _ in range(3):  # enough allocations for a young collection to run by itself
            _ = [Node() for _ in range(YOUNG_THRESHOLD)]
    finally:
        gc.callbacks.pop()
    assert sum(info["collected"] for info in collected) >= 1
