"""PURE: what a ``PULL_MESSAGE`` answers, as RocketMQ's ``DefaultMessageStore.getMessage``.

Owns the status table of REMOTING_PROTOCOL.md 5.1 (``offset_verdict``: an offset outside the
queue, an empty queue, the end of the queue), the batch a pull gets (``select``: units from
the requested offset, the ConsumeQueue tags code first, then the full filter on the record,
at most ``PULL_BATCH_MAX`` messages and ``PULL_BYTES_MAX`` bytes, at least one message, at
most ``scan_limit`` units looked at), and the ``PullSysFlag`` bits. The body of a SUCCESS is
the selected records concatenated byte for byte as stored. Knows nothing of sockets or the
store: the caller passes the queue's bounds, its units and a record loader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq_spark.store.consume_queue import CqUnit

__all__ = [
    "FLAG_COMMIT_OFFSET",
    "FLAG_LITE_PULL",
    "FLAG_SUBSCRIPTION",
    "FLAG_SUSPEND",
    "PULL_BATCH_MAX",
    "PULL_BYTES_MAX",
    "PULL_NOT_FOUND",
    "PULL_OFFSET_MOVED",
    "PULL_RETRY_IMMEDIATELY",
    "Selected",
    "Verdict",
    "offset_verdict",
    "scan_limit",
    "select",
]

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_LITE_PULL = 0x10

SUCCESS = 0
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21

PULL_BATCH_MAX = 32  # maxTransferCountOnMessageInMemory: whatever maxMsgNums asks
PULL_BYTES_MAX = 256 * 1024  # maxTransferBytesOnMessageInMemory
_FILTER_SCAN_BYTES = 16_000  # maxFilterMessageSize, in ConsumeQueue bytes
_UNIT_BYTES = 20


def scan_limit(max_msg_nums: int) -> int:
    """Units one pull may look at (filtered-out ones included): RocketMQ's
    ``max(16000, maxMsgNums * 20)`` ConsumeQueue bytes, ``maxMsgNums`` capped first."""
    wanted = max(1, min(max_msg_nums, PULL_BATCH_MAX))
    return max(_FILTER_SCAN_BYTES, wanted * _UNIT_BYTES) // _UNIT_BYTES


@dataclass(frozen=True, slots=True)
class Verdict:
    """A pull answered without reading: response code, next offset, status name (remark)."""

    code: int
    next_offset: int
    status: str


def offset_verdict(offset: int, low: int, high: int) -> Verdict | None:
    """The answer for ``offset`` in a queue holding ``[low, high)``, or None: read from it.
    RocketMQ's quirk is kept: an offset past the end of a queue whose min offset is 0 moves
    back to 0, not to the end."""
    if high == 0:
        code = PULL_NOT_FOUND if offset == 0 else PULL_OFFSET_MOVED
        return Verdict(code, 0, "NO_MESSAGE_IN_QUEUE")
    if offset < low:
        return Verdict(PULL_OFFSET_MOVED, low, "OFFSET_TOO_SMALL")
    if offset == high:
        return Verdict(PULL_NOT_FOUND, offset, "OFFSET_OVERFLOW_ONE")
    if offset > high:
        return Verdict(PULL_OFFSET_MOVED, 0 if low == 0 else high, "OFFSET_OVERFLOW_BADLY")
    return None


@dataclass(frozen=True, slots=True)
class Selected:
    """What a read found: the records (stored bytes), the next offset and the answer."""

    records: list[bytes]
    next_offset: int

    @property
    def code(self) -> int:
        return SUCCESS if self.records else PULL_RETRY_IMMEDIATELY

    @property
    def status(self) -> str:
        return "FOUND" if self.records else "NO_MATCHED_MESSAGE"

    @property
    def body(self) -> bytes:
        return b"".join(self.records)


Loader = Callable[[CqUnit], bytes | None]
"""The stored bytes of a unit's record, or None when it is gone (or not the full filter's)."""


def select(
    offset: int,
    units: Sequence[CqUnit],
    max_msg_nums: int,
    tags_match: Callable[[int], bool],
    load: Loader,
) -> Selected:
    """The batch starting at queue offset ``offset``, ``units`` read from there (at most
    ``scan_limit``). ``load`` applies the full filter: None skips the unit. The next offset
    is the first unit not looked at."""
    wanted = max(1, min(max_msg_nums, PULL_BATCH_MAX))
    records: list[bytes] = []
    size = 0
    looked = 0
    for unit in units:
        if len(records) >= wanted:
            break
        if not unit.names_record or not tags_match(unit.tags_code):
            looked += 1
            continue
        if records and size + unit.size > PULL_BYTES_MAX:
            break
        looked += 1
        raw = load(unit)
        if raw is None:
            continue
        records.append(raw)
        size += len(raw)
    return Selected(records, offset + looked)
