"""The DataFrame contract of the ``mqctl`` Spark source, shared by its read and write sides:
the columns (:data:`SCHEMA`) and the ``store`` option that names the store directory."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from store.log.broker import Store

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

from store.errors import UsageError

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


def check_options(options: Mapping[str, str], allowed: Sequence[str], what: str) -> None:
    """Refuse an option this source does not know (a typo would otherwise be ignored),
    naming the valid ones. ``allowed`` holds lower-case keys, as Spark hands them over."""
    unknown = sorted(k for k in options if k.lower() not in allowed)
    if unknown:
        names = ", ".join(_SPELLING.get(k, k) for k in allowed if k != "path")
        raise UsageError(f"unknown option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)} for {what} with mqctl; "
                         f"valid: {names}")


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None or not value.strip():
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise UsageError(f"option {_SPELLING.get(key, key)} must be true or false, not {value!r}")


# How the documentation spells each (case-insensitive) option.
_SPELLING = {
    "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "maxmessagespertrigger": "maxMessagesPerTrigger", "waitfortopic": "waitForTopic",
    "minpartitions": "minPartitions",
    "sinkid": "sinkId", "checkpointlocation": "checkpointLocation",
}


def open_store(root: str, create: bool, recover: bool = True) -> "Store":
    """Open the store a read or write names: a missing store is a
    :class:`~store.errors.StoreNotFoundError` (exit 3 in the CLI) unless ``create``."""
    from store.errors import StoreNotFoundError
    from store.log.broker import Store
    try:
        opened: Store = Store.open(root, create=create, recover=recover)
        return opened
    except StoreNotFoundError as exc:
        raise StoreNotFoundError(f"{exc.message.split(' (create one')[0]}: give "
                                 f'.option("create", "true") to create it') from None
