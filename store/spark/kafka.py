"""The Kafka shape of the ``mqctl`` source (``.option("shape", "kafka")``): the columns of
Spark's Kafka source, so that a Kafka job runs against a store by changing its format name.

=================  ==========================================  ==========================
Kafka column       from the store (read)                       to the store (write)
=================  ==========================================  ==========================
``key``            the ``KEYS`` property (null without keys)   ``KEYS`` (and sharding key)
``value``          the body                                    the body
``topic``          the topic                                   the topic (or the option)
``partition``      the queue id                                the queue id
``offset``         the queue offset                            ignored
``timestamp``      the born (producer's) timestamp             ignored
``timestampType``  0 (Kafka's CreateTime)                      ignored
``headers``        the user properties (values as UTF-8)       user properties
=================  ==========================================  ==========================

The key is also the sharding key of a row without a partition, as Kafka's key picks the
partition when none is given. Tags have no Kafka column (filter with the ``tags`` option).
"""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
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

KAFKA_SCHEMA: StructType = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])
KAFKA_COLUMNS: tuple[str, ...] = tuple(KAFKA_SCHEMA.fieldNames())
# The store's column each Kafka column is made of (timestampType is a constant).
NATIVE = {"key": "keys", "value": "body", "topic": "topic", "partition": "queueId",
          "offset": "queueOffset", "timestamp": "bornTimestamp", "headers": "properties"}
CREATE_TIME = 0
# Kafka's sink columns and the store's columns they are written as.
WRITE_AS = {"value": "body", "key": "keys", "topic": "topic", "partition": "queueId",
            "headers": "properties"}
WRITE_IGNORED = ("offset", "timestamp", "timestampType")
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def native_names(names: Sequence[str]) -> list[str]:
    """The store's columns a read of these Kafka columns needs (at least one: the row count)."""
    out = list(dict.fromkeys(NATIVE[n] for n in names if n in NATIVE))
    return out or ["queueOffset"]


def kafka_arrays(names: Sequence[str], native: dict[str, pa.Array], rows: int) -> list[pa.Array]:
    """The Kafka columns ``names`` of one batch from its store columns."""
    out = []
    for name in names:
        if name == "key":
            keys = native["keys"]
            joined = pc.binary_join(keys, " ")
            empty = pc.equal(pc.list_value_length(keys), 0)
            out.append(pc.if_else(empty, pa.scalar(None, pa.string()), joined).cast(pa.binary()))
        elif name == "headers":
            offsets, pairs = _rebased(native["properties"])
            entries = pa.StructArray.from_arrays([pairs.field(0), pairs.field(1).cast(pa.binary())],
                                                 fields=list(_HEADER))
            out.append(pa.ListArray.from_arrays(offsets, entries, pa.list_(_HEADER)))
        elif name == "timestampType":
            out.append(pa.array([CREATE_TIME] * rows, pa.int32()))
        else:
            out.append(native[NATIVE[name]])
    return out


def write_schema(schema: StructType) -> StructType:
    """A Kafka-shaped DataFrame's schema as the store's columns, for the write checks (a
    column Kafka's sink does not take is left as it is, and refused there)."""
    fields = []
    for f in schema.fields:
        if f.name in WRITE_IGNORED:
            continue
        if f.name == "key":
            fields.append(StructField("keys", StringType()))
            fields.append(StructField("shardingKey", StringType()))
        elif f.name == "headers":
            fields.append(StructField("properties", MapType(StringType(), StringType())))
        elif f.name == "value":
            fields.append(StructField("body", BinaryType() if isinstance(f.dataType, BinaryType) else f.dataType))
        else:
            fields.append(StructField(WRITE_AS.get(f.name, f.name), f.dataType))
    return StructType(fields)


def check_kafka_write(schema: StructType) -> None:
    """Refuse Kafka columns of types Kafka's sink refuses too."""
    from store.errors import UsageError
    types = {f.name: f.dataType for f in schema.fields}
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise UsageError(f"column {name!r} must be string or binary (as for Kafka), "
                             f"not {types[name].simpleString()}")
    # (nullability aside: Spark SQL's named_struct gives a key that cannot be null)
    if "headers" in types and types["headers"].simpleString() != KAFKA_SCHEMA["headers"].dataType.simpleString():
        raise UsageError("column 'headers' must be array<struct<key:string,value:binary>> (as for Kafka)")


def _rebased(arr: pa.Array) -> tuple[pa.Array, pa.StructArray]:
    """A list (or map) array's offsets from 0 and the struct entries they index: a slice's
    offsets point into its parent's entries. A null list becomes an empty one."""
    offsets = arr.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, first), arr.values.slice(first, last - first)


def to_store_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A Kafka-shaped Arrow batch as the store's write columns."""
    arrays, names = [], []
    for name, arr in zip(batch.schema.names, batch.columns):
        if name in WRITE_IGNORED:
            continue
        if name == "key":
            text = arr.cast(pa.string())
            if "partition" in batch.schema.names:   # as in Kafka, a row's partition wins over its key
                partition = batch.column(batch.schema.names.index("partition"))
                shard = pc.if_else(pc.is_null(partition), text, pa.scalar(None, pa.string()))
            else:
                shard = text
            # a key is the message's keys as the Kafka shape's read joins them (space separated):
            # each word (commas separate too) is one key, checked as Producer.send checks keys
            arrays += [pc.split_pattern_regex(text, r"[\s,]+"), shard]
            names += ["keys", "shardingKey"]
        elif name == "headers":
            offsets, pairs = _rebased(arr)
            valid = pc.is_valid(pairs.field(1))   # as Kafka's own headers allow: a null value is no property
            kept = pc.cumulative_sum(valid.cast(pa.int32())) if len(valid) else pa.array([], pa.int32())
            before = pa.concat_arrays([pa.array([0], pa.int32()), kept.cast(pa.int32())])
            offsets = pc.take(before, offsets.cast(pa.int32()))
            items = pc.filter(pairs.field(1), valid).cast(pa.string())
            arrays.append(pa.MapArray.from_arrays(offsets, pc.filter(pairs.field(0), valid), items))
            names.append("properties")
        else:
            arrays.append(arr)
            names.append(WRITE_AS.get(name, name))
    return pa.RecordBatch.from_arrays(arrays, names=names)
