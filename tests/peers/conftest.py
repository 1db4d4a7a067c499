"""Fixtures for the peers smoke tests: bench/peers on the import path, the official client.

The peers' modules are scripts beside each other in ``bench/peers`` (not a package), so the
directory goes on ``sys.path`` once, as ``python bench/peers/run.py`` has it. The official
``rocketmq-python-client`` is imported with HOME in a temp dir (it logs under ``~/logs``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))


@pytest.fixture(scope="session")
def rocketmq() -> ModuleType:
    """The official client package, imported as the harness imports it (HOME in a temp dir)."""
    from produce import import_client

    return import_client()
