"""The output schema of the ``rocketmq`` source, as a Spark ``StructType`` and as Arrow.

Owns the column names, types, nullability and order (documented in docs/SOURCE.md) and the
names of the transaction types. The Arrow form must equal what Spark derives from the Spark
form (``to_arrow_schema(..., timezone="UTC")``), because Spark rejects record batches whose
schema differs; a unit test checks that. Does not own decoding (``columnar.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ARROW_SCHEMA",
    "COLUMN_NAMES",
    "SCHEMA_DDL",
    "TRANSACTION_TYPE_NAMES",
    "arrow_schema_for",
    "spark_schema",
]

_VALUE_FIELD = pa.field("value", pa.string(), nullable=False)

# (name, Arrow type, nullable). Order is the public column order; append only.
_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("topic", pa.string(), False),
    ("queue_id", pa.int32(), False),
    ("queue_offset", pa.int64(), False),
    ("physical_offset", pa.int64(), False),
    ("total_size", pa.int32(), False),
    ("body", pa.binary(), True),  # null when includeBody=false
    ("tags", pa.string(), True),
    ("keys", pa.list_(pa.field("element", pa.string(), nullable=False)), False),
    ("properties", pa.map_(pa.field("key", pa.string(), False), _VALUE_FIELD), False),
    ("msg_id", pa.string(), False),
    ("uniq_key", pa.string(), True),
    ("born_timestamp", pa.timestamp("us", tz="UTC"), False),
    ("born_host", pa.string(), False),
    ("store_timestamp", pa.timestamp("us", tz="UTC"), False),
    ("store_host", pa.string(), False),
    ("sys_flag", pa.int32(), False),
    ("flag", pa.int32(), False),
    ("reconsume_times", pa.int32(), False),
    ("prepared_transaction_offset", pa.int64(), False),
    ("body_crc", pa.int32(), False),
    ("transaction_type", pa.string(), False),
    ("delay_level", pa.int32(), True),
)

COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _COLUMNS)
"""Column names in output order."""

ARROW_SCHEMA: pa.Schema = pa.schema(
    [pa.field(name, dtype, nullable=nullable) for name, dtype, nullable in _COLUMNS]
)
"""The Arrow schema of every record batch ``read()`` yields."""

SCHEMA_DDL = (
    "topic string not null, queue_id int not null, queue_offset bigint not null, "
    "physical_offset bigint not null, total_size int not null, body binary, tags string, "
    "keys array<string not null> not null, properties map<string, string not null> not null, "
    "msg_id string not null, uniq_key string, born_timestamp timestamp not null, "
    "born_host string not null, store_timestamp timestamp not null, store_host string not null, "
    "sys_flag int not null, flag int not null, reconsume_times int not null, "
    "prepared_transaction_offset bigint not null, body_crc int not null, "
    "transaction_type string not null, delay_level int"
)
"""The same schema as a DDL string (for docs and ``spark.read.schema``)."""

TRANSACTION_TYPE_NAMES: tuple[str, ...] = ("NOT", "PREPARED", "COMMIT", "ROLLBACK")
"""``transaction_type`` values, indexed by ``(sys_flag & 0xC) >> 2`` (FORMAT.md 2.1)."""


def spark_schema() -> StructType:
    """The source's output schema as a Spark ``StructType``.

    Returns
    -------
    pyspark.sql.types.StructType
        Twenty-two columns; see docs/SOURCE.md for each one's meaning.
    """
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DataType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    def spark_type(dtype: pa.DataType) -> DataType:
        if pa.types.is_string(dtype):
            return StringType()
        if pa.types.is_int32(dtype):
            return IntegerType()
        if pa.types.is_int64(dtype):
            return LongType()
        if pa.types.is_binary(dtype):
            return BinaryType()
        if pa.types.is_timestamp(dtype):
            return TimestampType()
        if pa.types.is_list(dtype):
            return ArrayType(spark_type(dtype.value_type), containsNull=False)
        if pa.types.is_map(dtype):
            return MapType(
                spark_type(dtype.key_type), spark_type(dtype.item_type), valueContainsNull=False
            )
        raise AssertionError(f"no Spark type for {dtype}")

    return StructType(
        [StructField(name, spark_type(dtype), nullable) for name, dtype, nullable in _COLUMNS]
    )


def arrow_schema_for(schema: StructType) -> pa.Schema:
    """The Arrow schema to produce for a query schema: ours, or a subset the user gave.

    ``spark.read.format("rocketmq").schema("physical_offset long, topic string")`` reads only
    those columns (Spark's Python data sources do not prune columns by themselves).

    Raises
    ------
    SourceError
        A column the source does not have, or a different type; the message lists ours.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmq_spark.errors import SourceError

    ours = {field.name: field for field in spark_schema().fields}
    if not schema.fields:
        raise SourceError("a schema for the rocketmq source needs at least one column")
    for field in schema.fields:
        mine = ours.get(field.name)
        if mine is None:
            raise SourceError(
                f"column {field.name!r} is not a column of the rocketmq source; its columns "
                f"are: {SCHEMA_DDL}"
            )
        if field.dataType.simpleString() != mine.dataType.simpleString():
            raise SourceError(
                f"column {field.name!r} has type {field.dataType.simpleString()} in the given "
                f"schema but {mine.dataType.simpleString()} in the rocketmq source"
            )
    return to_arrow_schema(schema, timezone="UTC")
