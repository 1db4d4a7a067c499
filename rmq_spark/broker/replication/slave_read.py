"""PURE: the ``suggestWhichBrokerId`` a remoting pull is answered with (RocketMQ's
``PullMessageProcessor`` with ``slaveReadEnable``; docs/REPLICATION.md).

Without ``slave_read_enable`` every pull is told to come back to the master (brokerId 0).
With it, a pull whose last record lies further behind the log's end than RocketMQ's
``accessMessageInMemoryMaxRatio`` (40 %) of the machine's memory, i.e. one that reads from
disk rather than the page cache, is told to read from the slave (brokerId 1, RocketMQ's
``whichBrokerWhenConsumeSlowly``); any other is told the master. The 4.x client then pulls
that broker of the pair while it is in the route (and the master when the slave is not).
"""

from __future__ import annotations

import os

from rmq_spark.store.layout import PHYSICAL_OFFSET_POSITION

__all__ = ["MASTER_ID", "SLOW_CONSUMER_BROKER_ID", "in_memory_bytes", "suggest_broker_id"]

MASTER_ID = 0
SLOW_CONSUMER_BROKER_ID = 1  # RocketMQ's whichBrokerWhenConsumeSlowly
_IN_MEMORY_RATIO = 0.40  # RocketMQ's accessMessageInMemoryMaxRatio


def in_memory_bytes() -> int:
    """How far behind the log's end a read is still served from memory (40 % of RAM)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return int(total * _IN_MEMORY_RATIO)


def suggest_broker_id(
    slave_read: bool, records: list[bytes], log_end: int, memory_bytes: int
) -> int:
    """The brokerId a pull that returned ``records`` (stored bytes) should use next."""
    if not slave_read or not records:
        return MASTER_ID
    last = records[-1]
    pulled = int.from_bytes(last[PHYSICAL_OFFSET_POSITION : PHYSICAL_OFFSET_POSITION + 8], "big")
    return SLOW_CONSUMER_BROKER_ID if log_end - pulled > memory_bytes else MASTER_ID
