"""Client-side message ids in the RocketMQ 5 client layout (the RocketMQ 5 clients' MessageIdCodec).

Owns ``MessageIdGenerator`` for producers that are not the official client (our ``Producer``
and the embedded broker): 34 upper-case hex characters, ``01`` ‖ MAC (6 bytes) ‖ pid (2) ‖
seconds since 2021-01-01 UTC (4) ‖ process-wide sequence (4); the MAC field holds a random
per-process node id so that ids never repeat the official client's in the same process.
Does not own UNIQ_KEY storage (``service.py`` stores whatever id the producer sent).
"""

from __future__ import annotations

import itertools
import os
import secrets

from rmq_spark.clock import Clock, SystemClock

__all__ = ["MessageIdGenerator"]

_EPOCH_2021_MS = 1_609_459_200_000
_VERSION = b"\x01"
_SEQUENCE = itertools.count()  # process-wide, like the client's AtomicInteger
# The official client puts this machine's MAC and the pid in the same fields and counts from
# 0 too, so an official producer in this process would repeat our ids exactly (and the
# broker would store one of the two messages once). Our node field is a random 48-bit value
# per process instead, with the multicast bit set as RFC 4122 marks non-hardware node ids.
_NODE = secrets.randbits(48) | 0x010000000000


class MessageIdGenerator:
    """Makes unique message ids like ``0102FC00000001 20DB 0B146215 00000000`` (no spaces).

    The sequence is shared by every generator in the process (as in the official client):
    two generators created in the same second must not hand out the same id, since the
    broker stores a repeated id once. Thread-safe: ``itertools.count`` is atomic under the GIL.

    Parameters
    ----------
    clock
        Source of the seconds field.
    mac, pid
        Fixed parts; default to a random per-process node id (never the MAC the official
        client uses) and ``os.getpid()``.
    """

    def __init__(
        self, clock: Clock | None = None, *, mac: int | None = None, pid: int | None = None
    ) -> None:
        self._clock = clock or SystemClock()
        mac = _NODE if mac is None else mac
        pid = os.getpid() if pid is None else pid
        self._prefix = (
            _VERSION + (mac & 0xFFFFFFFFFFFF).to_bytes(6, "big") + (pid & 0xFFFF).to_bytes(2, "big")
        )

    def next_id(self) -> str:
        """A new id; ids in one process never repeat (the sequence wraps after 2**32)."""
        seconds = max(0, (self._clock.now_ms() - _EPOCH_2021_MS) // 1000) & 0xFFFFFFFF
        sequence = next(_SEQUENCE) & 0xFFFFFFFF
        return (
            (self._prefix + seconds.to_bytes(4, "big") + sequence.to_bytes(4, "big")).hex().upper()
        )
