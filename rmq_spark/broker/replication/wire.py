"""The HA wire format (RocketMQ's DefaultHAService, 4.x HAService): plain TCP, no framing.

Slave -> master: 8-byte big-endian int64, the slave's max CommitLog offset ("report").
Master -> slave: 12-byte header, int64 physical offset + int32 size, then ``size`` bytes of
the CommitLog from that offset; size 0 is a heartbeat.
"""

from __future__ import annotations

import struct

__all__ = [
    "HEADER",
    "HEARTBEAT_INTERVAL_S",
    "HOUSEKEEPING_S",
    "RECONNECT_S",
    "REPORT",
    "SLAVE_FALLBEHIND_MAX",
]

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEARTBEAT_INTERVAL_S = 5.0  # haSendHeartbeatInterval: report / heartbeat when idle this long
HOUSEKEEPING_S = 20.0  # haHousekeepingInterval: a peer silent this long is dropped
RECONNECT_S = 5.0  # a slave's back-off before reconnecting (RocketMQ: 5 s)
SLAVE_FALLBEHIND_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax: beyond, SLAVE_NOT_AVAILABLE
