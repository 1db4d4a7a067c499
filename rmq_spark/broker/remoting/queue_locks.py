"""PURE: orderly consumers' queue locks, as RocketMQ's ``RebalanceLockManager``.

A (group, topic, broker name, queue id) is locked by one client id at a time. A lock is
granted when the queue is free, when its holder's lock expired (``LOCK_EXPIRY_MS`` since it
last locked: ``rocketmq.broker.rebalance.lockMaxLiveTime``), or to its holder again (which
renews it). Unlock frees only the caller's own locks. Who the caller is (a client id bound to
its connection) is the handler's check, not this module's. Used from the event loop only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["LOCKS_PER_REQUEST_MAX", "LOCK_EXPIRY_MS", "QueueKey", "QueueLocks"]

LOCK_EXPIRY_MS = 60_000
LOCKS_PER_REQUEST_MAX = 1024  # queues in one LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body

QueueKey = tuple[str, str, int]  # topic, broker name, queue id


@dataclass(slots=True)
class _Lock:
    client_id: str
    locked_ms: int


@dataclass
class QueueLocks:
    """group -> queue -> its lock."""

    _locks: dict[str, dict[QueueKey, _Lock]] = field(default_factory=dict)

    def try_lock(
        self, group: str, client_id: str, queues: Iterable[QueueKey], now_ms: int
    ) -> list[QueueKey]:
        """Lock what can be locked for ``client_id``; returns the queues it now holds."""
        table = self._locks.setdefault(group, {})
        held = []
        for queue in queues:
            lock = table.get(queue)
            if lock is None or lock.client_id == client_id or self._expired(lock, now_ms):
                table[queue] = _Lock(client_id, now_ms)
                held.append(queue)
        return held

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> int:
        """Free the queues ``client_id`` holds among ``queues``; returns how many."""
        table = self._locks.get(group, {})
        freed = 0
        for queue in queues:
            lock = table.get(queue)
            if lock is not None and lock.client_id == client_id:
                del table[queue]
                freed += 1
        if not table:
            self._locks.pop(group, None)
        return freed

    def holder(self, group: str, queue: QueueKey, now_ms: int) -> str | None:
        lock = self._locks.get(group, {}).get(queue)
        return None if lock is None or self._expired(lock, now_ms) else lock.client_id

    def drop_client(self, client_id: str) -> None:
        """A client's connection closed: its locks go (RocketMQ lets them expire; freeing at
        once lets the next owner start sooner)."""
        for group in list(self._locks):
            table = self._locks[group]
            for queue in [q for q, lock in table.items() if lock.client_id == client_id]:
                del table[queue]
            if not table:
                del self._locks[group]

    @staticmethod
    def _expired(lock: _Lock, now_ms: int) -> bool:
        return now_ms - lock.locked_ms > LOCK_EXPIRY_MS
