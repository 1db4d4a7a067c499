"""Messages of every kind a ConsumeQueue unit is derived from differently: the property
test of the dispatch rule and the byte-level test of the broker's units against the reput's
``consume_queue`` table put them. ``tests/`` is on ``sys.path``.
"""

from __future__ import annotations

import zlib

from rmq_spark.broker.transactions.records import DISCARD_TOPIC, op_request
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)
from rmq_spark.store.message import LOCALHOST
from rmq_spark.store.put import PutRequest

__all__ = ["every_kind", "raw_properties"]


def raw_properties(properties: dict[str, str], tags: str | None) -> str:
    """A stored properties string, verbatim: values the put path's checks would refuse are
    what another writer (Apache RocketMQ, an old client) may have left in a store."""
    if tags is not None:
        properties = {**properties, "TAGS": tags}
    return "".join(f"{key}\x01{value}\x02" for key, value in properties.items())


DELAYS = ("3", "0", "-1", "99", " 3 ", "+2", "abc", "9" * 12)
"""DELAY values of schedule records: in and out of the levels, and ones Java cannot parse."""
TIMERS = (
    {"TIMER_OUT_MS": "1700000000000"},
    {"TIMER_DELIVER_MS": " 1700000000001 "},
    {"TIMER_OUT_MS": "x", "TIMER_DELIVER_MS": "7"},
    {"TIMER_OUT_MS": str(1 << 63)},
)


def every_kind() -> list[PutRequest]:
    """One message of each kind, so that every run covers them all."""
    schedule = {"REAL_TOPIC": "orders", "REAL_QID": "0"}
    timer = {"REAL_TOPIC": "orders"}
    # A transaction's records as the broker writes them (broker/transactions/records.py): the
    # half and its discard copy (tx bits NOT: units in their own system queues), the committed
    # copy (COMMIT: a unit in the real queue) and the op marker.
    half = raw_properties(
        {"REAL_TOPIC": "orders", "REAL_QID": "1", "TRAN_MSG": "true", "PGROUP": "orders"}, "T"
    )
    return [
        PutRequest(RMQ_SYS_TRANS_HALF_TOPIC, b"half", raw_properties=half),
        PutRequest("orders", b"half", queue_id=1, raw_properties=half, sys_flag=0x8),
        PutRequest(DISCARD_TOPIC, b"half", raw_properties=half),
        op_request(0, LOCALHOST),
        PutRequest("orders", b"n", tags="TagA"),
        PutRequest("orders", b"n", queue_id=1),  # no tags
        PutRequest("%RETRY%group", b"r", tags="TagA", reconsume_times=2),
        PutRequest("%DLQ%group", b"d", tags="TagB", reconsume_times=16),
        PutRequest("orders", zlib.compress(b"z" * 300), tags="Z", sys_flag=0x1),
        PutRequest("orders", b"h", tags="half", sys_flag=0x4),
        PutRequest("orders", b"c", tags="commit", sys_flag=0x8),
        PutRequest("orders", b"b", tags="rollback", sys_flag=0xC),
        PutRequest("orders", b"t", raw_properties="TAGS\x01a\x02TAGS\x01b\x02"),
        *(
            PutRequest(RMQ_SYS_SCHEDULE_TOPIC, b"s", raw_properties=raw_properties(props, "T"))
            for props in (schedule | {"DELAY": delay} for delay in DELAYS)
        ),
        *(
            PutRequest(RMQ_SYS_WHEEL_TIMER_TOPIC, b"w", raw_properties=raw_properties(props, "W"))
            for props in (timer | values for values in TIMERS)
        ),
    ]
