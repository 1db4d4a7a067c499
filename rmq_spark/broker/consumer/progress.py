"""PURE: one consumer group's progress in one queue (POP semantics, seed 004's offset rule).

Owns the state of each queue offset the group has looked at: ``committed`` (every offset
below it is acknowledged or filtered out: the offset persisted as consumerOffset.json), the
offsets above it that are done (acknowledged out of order), and those in flight (delivered,
with their attempt and invisible deadline). Every offset in ``[committed, frontier)`` is
either done or in flight, so the committed offset never passes a message nobody
acknowledged. An in-flight message whose deadline passed is deliverable again with
``attempt + 1``. No I/O, no clock: callers pass ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

__all__ = ["InFlight", "QueueProgress"]


@dataclass(slots=True)
class InFlight:
    """A message handed out (or to hand out again): its latest delivery."""

    attempt: int  # delivery attempt of the latest delivery; 0 = never delivered yet
    deadline_ms: int  # invisible until then; <= now: deliverable again
    physical_offset: int
    message_group: str | None = None
    client_id: str = ""
    auto_renew: bool = False


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
        """In-flight offsets whose deadline passed, lowest first."""
        return sorted(o for o, f in self.in_flight.items() if f.deadline_ms <= now_ms)

    def blocked_groups(self, now_ms: int) -> set[str]:
        """Message groups with a message still invisible (FIFO: nothing later of them goes)."""
        return {
            f.message_group
            for f in self.in_flight.values()
            if f.message_group is not None and f.deadline_ms > now_ms
        }

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a message still in flight, if any."""
        return min((f.deadline_ms for f in self.in_flight.values()), default=None)

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
        """``offset`` is acknowledged (or filtered out, or moved to the DLQ)."""
        self.in_flight.pop(offset, None)
        if offset >= self.committed:
            self.done.add(offset)
        while self.committed in self.done:
            self.done.remove(self.committed)
            self.committed += 1

    # --- persistence -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """What survives a restart beside the committed offset: offsets done above it, and
        the attempts already made of each message in flight."""
        return {
            "done": sorted(self.done),
            "attempts": {str(o): f.attempt for o, f in sorted(self.in_flight.items())},
        }

    @classmethod
    def restore(cls, committed: int, extra: Mapping[str, object] | None) -> QueueProgress:
        """Progress after a restart: messages in flight then are deliverable at once, each
        with the attempts it already had; offsets acknowledged above ``committed`` stay done."""
        progress = cls(committed)
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
