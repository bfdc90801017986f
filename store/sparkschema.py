"""The DataFrame contract of the ``mqctl`` Spark source, shared by its read and write sides:
the columns (:data:`SCHEMA`) and the ``store`` option that names the store directory."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
    TimestampType,
)

from .errors import UsageError

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


def store_option(options: Mapping[str, str]) -> str:
    root = options.get("store") or options.get("path")
    if not root:
        raise UsageError('the mqctl data source needs .option("store", DIR) (or load(DIR))')
    return os.path.abspath(Path(root).expanduser())
