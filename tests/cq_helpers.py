"""Helpers for the ConsumeQueue tests: the units a store's CommitLog implies, computed
independently of ``cq_dispatch.py``, and the units its ConsumeQueues hold.

``tests/`` is on ``sys.path``: ``from cq_helpers import expected_units``.
"""

from __future__ import annotations

from rmq_spark.store.consume_queue import CqUnit
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.hashing import tags_code
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, TRANSACTION_MASK
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.reader import iter_records

__all__ = ["actual_units", "expected_units"]

Units = dict[tuple[str, int], dict[int, CqUnit]]


def expected_units(store: MessageStore) -> Units:
    """``(topic, queue_id) -> {queue_offset: unit}`` for every dispatchable record below the
    store's acknowledged end."""
    levels = parse_message_delay_level(store.config.message_delay_level)
    units: Units = {}
    for decoded in iter_records(store.commitlog, None, store.confirmed_offset, check_crc=False):
        record = decoded.record
        if record.sys_flag & TRANSACTION_MASK not in (0, 8):
            continue
        properties = parse_properties(record.properties)
        code = tags_code(properties.get("TAGS"))
        if record.topic == RMQ_SYS_SCHEDULE_TOPIC and int(properties.get("DELAY", "0")) > 0:
            level = min(int(properties["DELAY"]), len(levels))
            code = record.store_timestamp_ms + levels[level - 1]
        unit = CqUnit(decoded.position, decoded.total_size, code)
        units.setdefault((record.topic, record.queue_id), {})[record.queue_offset] = unit
    return units


def actual_units(store: MessageStore) -> Units:
    """Every readable unit of every ConsumeQueue of ``store``."""
    queues = store.consume_queues
    units: Units = {}
    for topic, queue_ids in queues.queues().items():
        for queue_id in queue_ids:
            start = queues.min_offset(topic, queue_id)
            found = queues.units(topic, queue_id, start, queues.max_offset(topic, queue_id))
            units[(topic, queue_id)] = {start + i: unit for i, unit in enumerate(found)}
    return units
