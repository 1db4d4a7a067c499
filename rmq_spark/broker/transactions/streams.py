"""The producers a check-back can ask: open Telemetry streams of producers, by topic.

Owns ``ProducerStreams`` (Telemetry registers a producer's stream with the topics its settings
declared, which the edge checked for Pub rights, and unregisters it when the stream ends) and
``StreamWriter`` (one write at a time on a stream: the settings replies and the check
commands share it). A half is only shown to a producer that declared its topic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProducerStreams", "StreamWriter"]


class StreamWriter:
    """Writes to one stream's ``context``, one at a time."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._lock = asyncio.Lock()

    async def write(self, message: Any) -> None:
        async with self._lock:
            await self._context.write(message)


@dataclass
class _Stream:
    client_id: str
    writer: StreamWriter
    topics: frozenset[str] = field(default_factory=frozenset)


class ProducerStreams:
    """Open producer streams, by key (one per stream)."""

    def __init__(self) -> None:
        self._streams: dict[int, _Stream] = {}

    def register(self, key: int, client_id: str, topics: list[str], writer: StreamWriter) -> None:
        """The stream ``key`` is a producer's that may publish to ``topics`` (full names)."""
        self._streams[key] = _Stream(client_id, writer, frozenset(topics))

    def unregister(self, key: int) -> None:
        self._streams.pop(key, None)

    def for_topic(self, topic: str) -> list[StreamWriter]:
        """The writers of every producer stream that declared ``topic``."""
        return [s.writer for s in self._streams.values() if topic in s.topics]

    def __len__(self) -> int:
        return len(self._streams)
