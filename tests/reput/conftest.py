"""Fixtures of the reput tests: a DataFrame with the source's schema from ``reput_rows`` dicts."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

# Python workers (the rocketmq source's reader) must run this interpreter; the session builder
# does not set spark.pyspark.python yet (reported to the lead).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture
def make_source_rows(spark) -> Callable[[Sequence[dict[str, Any]]], Any]:
    from rmq_spark.spark.schema import spark_schema

    schema = spark_schema()

    def build(rows: Sequence[dict[str, Any]]) -> Any:
        return spark.createDataFrame(
            [tuple(row[field.name] for field in schema.fields) for row in rows], schema
        )

    return build
