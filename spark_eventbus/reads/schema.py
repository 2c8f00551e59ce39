"""The reader's output schema (driver and executor). Apart from the decoder: Spark's planner
processes ask a data source for its schema (``DataSource.schema()``) without reading a row, and
this module loads neither NumPy nor pyarrow's compute functions, which the decoder needs
(~0.3 CPU seconds in each such process)."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def output_schema(value_schema: StructType | None = None, *, fields_binary: bool = False
                  ) -> StructType:
    """``stream, id, timestamp, fields, delivery_count`` (+ ``value, error`` with a schema)."""
    value_type: DataType = BinaryType() if fields_binary else StringType()
    schema = StructType([
        StructField("stream", StringType(), False),
        StructField("id", StringType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("fields", MapType(StringType(), value_type, True), False),
        StructField("delivery_count", IntegerType(), True),
    ])
    if value_schema is not None:
        schema = schema.add("value", value_schema, True).add("error", StringType(), True)
    return schema
