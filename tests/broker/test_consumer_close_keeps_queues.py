"""Closing an embedded broker right after puts keeps every ConsumeQueue unit.

The consume service used to close the store's ConsumeQueues (its queue source) before the
store had dispatched the last puts; the store then re-created the queue and wrote the
pre-blank filler over the first unit of a new queue, so consumers never saw that message.
"""

from __future__ import annotations

from pathlib import Path

from rmq_spark.broker.embedded import Broker
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def test_the_first_units_of_new_queues_survive_an_immediate_close(tmp_path: Path) -> None:
    for attempt in range(3):  # a race: the old code lost the unit on every try here
        root = tmp_path / f"store{attempt}"
        broker = Broker(root)
        placed = [
            broker.store.put(PutRequest("orders", f"m{i}".encode(), queue_id=0)) for i in range(3)
        ]
        broker.close()
        store = MessageStore.open(StoreConfig(root_dir=root))
        try:
            units = store.consume_queues.units("orders", 0, 0, 3)
        finally:
            store.close()
        assert units == [CqUnit(p.physical_offset, p.total_size, 0) for p in placed]
