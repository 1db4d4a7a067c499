"""Proves the Spark + Delta set-up works: a real SparkSession, a real Delta table."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality

pytestmark = pytest.mark.spark


def test_delta_table_round_trips_and_merges(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "t")
    schema = "id long, topic string, body binary"
    written = spark.createDataFrame([(1, "a", b"x"), (2, "b", b"y")], schema)
    written.write.format("delta").save(path)

    assert_df_equality(spark.read.format("delta").load(path), written, ignore_row_order=True)

    from delta.tables import DeltaTable

    updates = spark.createDataFrame([(2, "B", b"yy"), (3, "c", b"z")], schema)
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(updates.alias("u"), "t.id = u.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected = spark.createDataFrame([(1, "a", b"x"), (2, "B", b"yy"), (3, "c", b"z")], schema)
    assert_df_equality(spark.read.format("delta").load(path), expected, ignore_row_order=True)
    history = DeltaTable.forPath(spark, path).history().select("operation").collect()
    assert [row.operation for row in history][:2] == ["MERGE", "WRITE"]


def test_delta_sql_extension_is_active(spark) -> None:  # type: ignore[no-untyped-def]
    assert "DeltaSparkSessionExtension" in spark.conf.get("spark.sql.extensions")
