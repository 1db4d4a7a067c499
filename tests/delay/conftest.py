"""Fixtures of the delay tests (helpers live in ``delay_world.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from delay_world import DelayWorld, make_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[DelayWorld]:
    made = make_world(tmp_path / "store")
    try:
        yield made
    finally:
        made.broker.close()
