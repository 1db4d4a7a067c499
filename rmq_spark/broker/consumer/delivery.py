"""PURE: the delivery state machine of one consumer group in one queue (POP semantics).

Owns the state and every transition of it (h11's rule: one file, no I/O, no clock, no lock;
callers pass ``now_ms`` and the facts they read, and perform the effects returned).

**State** (``QueueProgress``): ``committed`` (every offset below it is acknowledged, filtered
out or safely copied elsewhere: the offset persisted as consumerOffset.json), the offsets above
it that are done (acknowledged out of order), and those in flight (``InFlight``: delivered, or
to deliver again, with their attempt and invisible deadline). Every offset in
``[committed, frontier)`` is done or in flight, so the committed offset never passes a message
nobody acknowledged.

**Transitions**: ``restore`` (load after a restart), ``clamp`` (retention), ``take`` (a new
queue offset), ``offer`` (pop and expire: deliver, hold, drop, or hand off), ``ack``,
``change_invisible`` (a nack or a renewal), ``renew`` (auto-renewed deliveries of live
clients), ``release`` (a client said goodbye), ``settle`` (a hand-off's copy stored or not).

**Effects**, returned as values: ``Deliver`` (hand this record out) and ``HandOff`` (store a
retry or DLQ copy of it). A handed-off message stays in flight, invisible to every pop and
to every receipt handle, until ``settle`` says whether its copy is stored: only a stored copy
finishes the offset, so the committed offset (and what a crash leaves persisted) never passes
a message whose copy is not yet stored.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

__all__ = [
    "Ask",
    "CopyKind",
    "Deliver",
    "HandOff",
    "InFlight",
    "Message",
    "Outcome",
    "QueueProgress",
    "RENEW_MS",
    "ack",
    "change_invisible",
    "current",
    "offer",
    "release",
    "renew",
    "restore",
    "settle",
    "take",
]

RENEW_MS = 60_000  # invisible time of an auto-renewed delivery (the proxy's default)


@dataclass(slots=True)
class InFlight:
    """A message handed out (or to hand out again): its latest delivery."""

    attempt: int  # delivery attempt of the latest delivery; 0 = never delivered yet
    deadline_ms: int  # invisible until then; <= now: deliverable again
    physical_offset: int
    message_group: str | None = None
    client_id: str = ""
    auto_renew: bool = False
    handing_off: bool = False  # a retry or DLQ copy of it is being stored


class QueueProgress:
    """Progress of one (group, topic, queue). Not thread-safe: the owner locks."""

    __slots__ = ("committed", "done", "frontier", "in_flight")

    def __init__(self, committed: int) -> None:
        self.committed = committed
        self.frontier = committed
        self.done: set[int] = set()
        self.in_flight: dict[int, InFlight] = {}

    # --- reading -----------------------------------------------------------------------------

    def deliverable(self, now_ms: int) -> list[int]:
        """In-flight offsets whose deadline passed and not being handed off, lowest first."""
        return sorted(
            o for o, f in self.in_flight.items() if f.deadline_ms <= now_ms and not f.handing_off
        )

    def blocked_groups(self, now_ms: int) -> set[str]:
        """Message groups with a message still invisible or being handed off (FIFO: nothing
        later of them goes)."""
        return {
            f.message_group
            for f in self.in_flight.values()
            if f.message_group is not None and (f.deadline_ms > now_ms or f.handing_off)
        }

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a message still in flight (not being handed off)."""
        deadlines = (f.deadline_ms for f in self.in_flight.values() if not f.handing_off)
        return min(deadlines, default=None)

    def matches(self, offset: int, attempt: int) -> InFlight | None:
        """The in-flight entry of ``offset`` if its latest delivery is ``attempt``."""
        entry = self.in_flight.get(offset)
        return entry if entry is not None and entry.attempt == attempt else None

    def entries_in_order(self) -> Iterator[tuple[int, InFlight]]:
        for offset in sorted(self.in_flight):
            yield offset, self.in_flight[offset]

    # --- changing ----------------------------------------------------------------------------

    def clamp(self, min_offset: int) -> None:
        """Forget offsets below ``min_offset`` (deleted from the store by retention)."""
        if self.committed >= min_offset:
            return
        self.committed = min_offset
        self.frontier = max(self.frontier, min_offset)
        self.done = {o for o in self.done if o >= min_offset}
        self.in_flight = {o: f for o, f in self.in_flight.items() if o >= min_offset}

    def take_new(self, offset: int) -> None:
        """``offset`` (== frontier) is being looked at for the first time."""
        assert offset == self.frontier, (offset, self.frontier)
        self.frontier += 1

    def deliver(self, offset: int, entry: InFlight) -> None:
        self.in_flight[offset] = entry

    def finish(self, offset: int) -> None:
        """``offset`` is acknowledged (or filtered out, or its copy is stored)."""
        self.in_flight.pop(offset, None)
        if offset >= self.committed:
            self.done.add(offset)
        while self.committed in self.done:
            self.done.remove(self.committed)
            self.committed += 1

    # --- persistence -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """What survives a restart beside the committed offset: offsets done above it, and
        the attempts already made of each message in flight (handed off ones included: their
        copy may not be stored)."""
        return {
            "done": sorted(self.done),
            "attempts": {str(o): f.attempt for o, f in sorted(self.in_flight.items())},
        }

    @classmethod
    def restore(cls, committed: int, extra: Mapping[str, object] | None) -> QueueProgress:
        return restore(committed, extra)


def restore(committed: int, extra: Mapping[str, object] | None) -> QueueProgress:
    """Load: progress after a restart. Messages in flight then are deliverable at once, each
    with the attempts it already had; offsets acknowledged above ``committed`` stay done."""
    progress = QueueProgress(committed)
    if not extra:
        return progress
    done = extra.get("done", [])
    attempts = extra.get("attempts", {})
    assert isinstance(done, list) and isinstance(attempts, dict)
    ahead = {int(o) for o in done if int(o) >= committed}
    redo = {int(o): int(a) for o, a in attempts.items() if int(o) >= committed}
    progress.frontier = max([committed, *(o + 1 for o in ahead), *(o + 1 for o in redo)])
    progress.done = ahead
    for offset in range(committed, progress.frontier):
        if offset not in ahead:
            # Looked at before the restart but neither done nor known in flight (the
            # snapshot predates it): deliver again, as a first attempt if unknown.
            progress.in_flight[offset] = InFlight(redo.get(offset, 0), 0, -1)
    while progress.committed in progress.done:
        progress.done.remove(progress.committed)
        progress.committed += 1
    return progress


# --- pop ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """What a pop asks, as far as the machine decides on it."""

    invisible_ms: int
    retry_max_times: int
    fifo: bool = False
    auto_renew: bool = False
    client_id: str = ""
    copies: bool = True  # a message that came back or ran out of attempts is handed off


@dataclass(slots=True)
class Message:
    """The facts of a stored record that the machine decides on (the caller read them)."""

    physical_offset: int
    matches: bool  # the pop's filter matches its tags and properties
    message_group: str | None = None  # its SHARDING_KEY (FIFO groups only)
    prior: int = 0  # the group's earlier attempts (its own %RETRY% copy's reconsume times)


class CopyKind(enum.Enum):
    RETRY = "retry"  # %RETRY%<group>, delayed
    DLQ = "dlq"  # %DLQ%<group>: out of attempts


@dataclass(slots=True)
class Deliver:
    """Effect: hand the record out as delivery ``attempt``, invisible for ``invisible_ms``."""

    offset: int
    attempt: int
    invisible_ms: int


@dataclass(slots=True)
class HandOff:
    """Effect: store a ``kind`` copy (reconsume times ``tried``), then ``settle``."""

    kind: CopyKind
    offset: int
    attempt: int  # the entry's attempt, which ``settle`` matches
    tried: int


class Outcome(enum.Enum):
    DONE = "done"  # filtered out or gone from the store: finished
    HELD = "held"  # FIFO: an earlier message of its group is invisible


def take(progress: QueueProgress, physical_offset: int, candidate: bool) -> bool:
    """Look at the next new queue offset (the frontier); True when it is a candidate to
    ``offer`` (names a record and its tags code may match), else it is done at once."""
    offset = progress.frontier
    progress.take_new(offset)
    if not candidate:
        progress.finish(offset)
        return False
    progress.deliver(offset, InFlight(0, 0, physical_offset))
    return True


def offer(
    progress: QueueProgress,
    offset: int,
    message: Message | None,
    ask: Ask,
    blocked: set[str],
    now_ms: int,
) -> Deliver | HandOff | Outcome:
    """Pop (and expire) the deliverable message at ``offset``: drop it when filtered out or
    gone (``message`` None), hold it behind its FIFO group (``blocked``, updated), hand it off
    when it came back unacknowledged (non-FIFO) or ran out of attempts, else deliver it."""
    entry = progress.in_flight[offset]
    if message is None or not message.matches:
        progress.finish(offset)
        return Outcome.DONE
    entry.physical_offset = message.physical_offset
    group = message.message_group if ask.fifo else None
    entry.message_group = group
    if group is not None and group in blocked:
        return Outcome.HELD
    tried = message.prior + entry.attempt
    exhausted = tried >= ask.retry_max_times + 1
    if ask.copies and ((entry.attempt > 0 and group is None) or exhausted):
        # RocketMQ's non-orderly consumers retry through %RETRY%<group> (or the DLQ once out
        # of attempts); a FIFO group's message goes to the DLQ only, and its group waits.
        if group is not None:
            blocked.add(group)
        entry.handing_off = True
        kind = CopyKind.DLQ if exhausted else CopyKind.RETRY
        return HandOff(kind, offset, entry.attempt, tried)
    invisible_ms = RENEW_MS if ask.auto_renew else ask.invisible_ms
    attempt = entry.attempt + 1
    progress.deliver(
        offset,
        InFlight(
            attempt,
            now_ms + invisible_ms,
            message.physical_offset,
            group,
            ask.client_id,
            ask.auto_renew,
        ),
    )
    return Deliver(offset, attempt, invisible_ms)


def settle(progress: QueueProgress, hand_off: HandOff, stored: bool) -> bool:
    """A hand-off's copy is stored (the offset is done) or not (deliverable again, so the
    next pop tries again). False when the progress moved on meanwhile (a reset)."""
    entry = progress.matches(hand_off.offset, hand_off.attempt)
    if entry is None or not entry.handing_off:
        return False
    if stored:
        progress.finish(hand_off.offset)
    else:
        entry.handing_off = False
    return True


# --- ack, nack, renew ----------------------------------------------------------------------------


def current(progress: QueueProgress, offset: int, attempt: int) -> InFlight | None:
    """The entry of the delivery ``(offset, attempt)`` while it is the latest one and not
    being handed off (the copy replaces that delivery: its handle is stale)."""
    entry = progress.matches(offset, attempt)
    return None if entry is None or entry.handing_off else entry


def ack(progress: QueueProgress, offset: int, attempt: int) -> bool:
    """Acknowledge the delivery; False when it is not current."""
    if current(progress, offset, attempt) is None:
        return False
    progress.finish(offset)
    return True


def change_invisible(
    progress: QueueProgress, offset: int, attempt: int, now_ms: int, invisible_ms: int
) -> bool:
    """The delivery becomes visible again ``invisible_ms`` from now (0: a nack); the client
    decides from now on, auto-renewal ends. False when it is not current."""
    entry = current(progress, offset, attempt)
    if entry is None:
        return False
    entry.deadline_ms = now_ms + invisible_ms
    entry.auto_renew = False
    return True


def renew(progress: QueueProgress, now_ms: int, alive: Callable[[str], bool]) -> None:
    """Auto-renewed deliveries stay invisible while their client is ``alive`` (the proxy
    renews them until acknowledged)."""
    for entry in progress.in_flight.values():
        if entry.auto_renew and entry.deadline_ms <= now_ms and entry.attempt > 0:
            if alive(entry.client_id):
                entry.deadline_ms = now_ms + RENEW_MS


def release(progress: QueueProgress, client_id: str, deadline_ms: int) -> int:
    """A client said goodbye: its auto-renewed deliveries come back by ``deadline_ms``."""
    released = 0
    for entry in progress.in_flight.values():
        if entry.client_id == client_id and entry.auto_renew:
            entry.auto_renew = False
            entry.deadline_ms = min(entry.deadline_ms, deadline_ms)
            released += 1
    return released
