"""Helpers of the replication tests (a module of its own: ``conftest`` names clash across
test folders)."""

from __future__ import annotations

import socket

SEGMENT_BYTES = 65536  # small segments: the stream crosses files
SEGMENT = f"store.segment_size_bytes={SEGMENT_BYTES}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
