"""The DataFrame contract of the ``mqctl`` Spark source, shared by its read and write sides:
the columns (:data:`SCHEMA`). The options are :mod:`store.spark.options`'."""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA_DDL = (
    "topic STRING, queueId INT, queueOffset BIGINT, msgId STRING, keys ARRAY<STRING>, "
    "tags STRING, properties MAP<STRING,STRING>, body BINARY, bornTimestamp TIMESTAMP, "
    "storeTimestamp TIMESTAMP"
)
SCHEMA: StructType = StructType([
    StructField("topic", StringType()), StructField("queueId", IntegerType()),
    StructField("queueOffset", LongType()), StructField("msgId", StringType()),
    StructField("keys", ArrayType(StringType())), StructField("tags", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("body", BinaryType()), StructField("bornTimestamp", TimestampType()),
    StructField("storeTimestamp", TimestampType()),
])
COLUMNS: tuple[str, ...] = tuple(SCHEMA.fieldNames())
