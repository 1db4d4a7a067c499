"""Fixtures of the delay tests (helpers live in ``delay_world.py``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from delay_world import DelayWorld, make_world

# The rocketmq source runs in Spark's Python workers: they must use this interpreter (the
# venv with numpy, pyarrow, rmq_spark), not whatever `python3` is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[DelayWorld]:
    made = make_world(tmp_path / "store")
    try:
        yield made
    finally:
        made.broker.close()
