"""Reading the ``mqctl`` Spark source: read options and offsets, the per-queue partitions
(:class:`QueueSlice`), the Arrow column plan, and the batch and streaming readers."""
from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from store.errors import DataError, UsageError, notice
from store.log.arraycolumns import VecColumns
from store.log.columns import Columns
from store.log.messagestore import Store
from store.log.record import FAST_CRC, PROP_TAGS, PROP_UNIQ_KEY, Message, tags_code
from store.spark.arrowcols import build_columns
from store.spark.kafka import KAFKA_COLUMNS, KAFKA_SCHEMA, kafka_arrays, native_names
from store.spark.options import (
    QueueRange,
    ReadOptions,
    data_lost,
    plan_ranges,
    split_slices,
)
from store.spark.schema import COLUMNS, SCHEMA
from store.spark.streamplan import batch_ranges, initial, latest, next_end

ARROW_BATCH_ROWS = 10_000            # Spark's own spark.sql.execution.arrow.maxRecordsPerBatch
PULL_COUNT = 4096
PULL_BYTES = 16 * 1024 * 1024


# -- reading ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueSlice(QueueRange, InputPartition):
    """Messages ``[start, end)`` of one queue: one Spark partition."""

    store: str = ""
    tags: tuple[str, ...] | None = None
    fail_on_data_loss: bool = True


def _native_arrow_schema() -> pa.Schema:
    return to_arrow_schema(SCHEMA, timezone="UTC")


def _column(name: str, msgs: Sequence[Message], typ: pa.DataType) -> pa.Array:
    if name == "topic":
        return pa.array([m.topic for m in msgs], typ)
    if name == "queueId":
        return pa.array([m.queue_id for m in msgs], typ)
    if name == "queueOffset":
        return pa.array([m.queue_offset for m in msgs], typ)
    if name == "msgId":
        return pa.array([m.properties.get(PROP_UNIQ_KEY) or m.msg_id for m in msgs], typ)
    if name == "keys":
        return pa.array([m.keys for m in msgs], typ)
    if name == "tags":
        return pa.array([m.properties.get(PROP_TAGS) for m in msgs], typ)
    if name == "properties":
        return pa.array([list(m.user_properties.items()) for m in msgs], typ)
    if name == "body":
        return pa.array([m.body for m in msgs], typ)
    if name == "bornTimestamp":
        return pa.array([m.born_timestamp * 1000 for m in msgs], typ)
    if name == "storeTimestamp":
        return pa.array([m.store_timestamp * 1000 for m in msgs], typ)
    raise UsageError(f"unknown column {name!r}")


class ColumnPlan:
    """The columns a reader must return: the native schema, or the user's subset of it
    (in any order, cast to the user's types where Arrow can cast); with ``shape`` kafka,
    Kafka's columns (:mod:`store.spark.kafka`), made from the store's columns read."""

    def __init__(self, schema: StructType, shape: str = "mqctl") -> None:
        have_columns = KAFKA_COLUMNS if shape == "kafka" else COLUMNS
        unknown = [n for n in schema.fieldNames() if n not in have_columns]
        if unknown:
            raise UsageError(f"unknown column(s) {', '.join(unknown)}: the mqctl source"
                             f"{' with shape kafka' if shape == 'kafka' else ''} has {', '.join(have_columns)}")
        self.kafka = schema.fieldNames() if shape == "kafka" else None
        self.names = native_names(self.kafka) if self.kafka is not None else schema.fieldNames()
        self.target = to_arrow_schema(schema, timezone="UTC")
        native = _native_arrow_schema()
        self.native = [native.field(n).type for n in self.names]
        produced = (to_arrow_schema(KAFKA_SCHEMA, timezone="UTC") if self.kafka is not None else native)
        for name, want in zip(schema.fieldNames(), self.target.types):
            have = produced.field(name).type
            if have != want:
                try:
                    pa.array([], have).cast(want)
                except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
                    raise UsageError(f"column {name!r} cannot be read as {want}: {exc}") from exc

    def batch(self, msgs: Sequence[Message]) -> pa.RecordBatch:
        return self._assemble([_column(name, msgs, have) for name, have in zip(self.names, self.native)])

    def bulk_batch(self, cols: Columns | VecColumns, topic: str, queue_id: int) -> pa.RecordBatch:
        built = build_columns(cols, topic, queue_id, self.names)
        return self._assemble([built[name] for name in self.names])

    def _assemble(self, arrays: list[pa.Array]) -> pa.RecordBatch:
        names = self.names
        if self.kafka is not None:
            arrays = kafka_arrays(self.kafka, dict(zip(self.names, arrays)), len(arrays[0]))
            names = self.kafka
        out = []
        for name, arr, want in zip(names, arrays, self.target.types):
            if arr.type != want:
                try:
                    arr = arr.cast(want)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise DataError(f"column {name!r} cannot be read as {want}: {exc}") from exc
            out.append(arr)
        return pa.RecordBatch.from_arrays(out, schema=self.target)


def _damaged(part: QueueSlice, damaged: list[tuple[int, str]]) -> DataError:
    qoff, why = damaged[0]
    return DataError(f"damaged message {part.topic}/{part.queue_id}@{qoff} in store "
                     f"{part.store}: {why} (run: mqctl store check)")


@functools.cache
def say_crc_is_slow() -> None:
    """Once per worker process: this executor checks CRCs with zlib's function, because it has
    no ``isal`` (``register(spark, ship_code=True)`` ships pure-Python code only: a compiled
    package cannot be imported from the archive)."""
    if not FAST_CRC and os.environ.get("MQCTL_PURE_ZLIB", "") in ("", "0"):
        notice(f"no isal on {socket.gethostname()}: the Python reader checks CRCs with zlib, "
               f"about 4x slower (pip install isal there, or read with the JVM reader)")


def read_slice(part: QueueSlice, plan: ColumnPlan) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one queue slice; a damaged record raises :class:`DataError`."""
    say_crc_is_slow()
    store = Store.open(part.store, recover=False)
    try:
        earliest = store.min_offset(part.topic, part.queue_id)
        if earliest > part.start:   # retention ran since the plan
            data_lost(part.topic, part.queue_id, part.start, earliest, part.fail_on_data_loss)
        off = max(part.start, earliest)
        if not part.tags:
            yield from _read_bulk(store, part, plan, off)
            return
        tags = frozenset(part.tags)
        codes = frozenset(tags_code(t) for t in tags)
        pending: list[Message] = []
        while off < part.end:
            res = store.pull(part.topic, part.queue_id, off, min(PULL_COUNT, part.end - off),
                             tag_codes=codes, tags=tags, max_bytes=PULL_BYTES)
            if res.damaged:
                raise _damaged(part, res.damaged)
            pending.extend(res.messages)
            if len(pending) >= ARROW_BATCH_ROWS:
                yield plan.batch(pending)
                pending = []
            if res.next_offset <= off:   # the queue is shorter than planned (topic deleted)
                break
            off = res.next_offset
        if pending:
            yield plan.batch(pending)
    finally:
        store.close()


def _read_bulk(store: Store, part: QueueSlice, plan: ColumnPlan, off: int) -> Iterator[pa.RecordBatch]:
    """The untagged read: one vectorised pull per Arrow batch (``arraycolumns.py``), or the exact
    per-record one (``columns.py``) for a run it declines; columns built by ``arrowcols.py``."""
    with_phys = "msgId" in plan.names
    while off < part.end:
        count = min(ARROW_BATCH_ROWS, part.end - off)
        cols: Columns | VecColumns | None = store.pull_vector(part.topic, part.queue_id, off, count, PULL_BYTES)
        if cols is None:   # anything unusual in this run: the exact, per-record path
            cols = store.pull_columns(part.topic, part.queue_id, off, count, PULL_BYTES, with_phys)
        if isinstance(cols, Columns) and cols.damaged:
            raise _damaged(part, cols.damaged)
        if len(cols):
            yield plan.bulk_batch(cols, part.topic, part.queue_id)
        if cols.next_offset <= off:   # the queue is shorter than planned (topic deleted)
            break
        off = cols.next_offset


def _read_partition(partition: InputPartition, plan: ColumnPlan) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, QueueSlice):
        yield from read_slice(partition, plan)


# Pushed-down predicates the Python reader serves itself: column -> the Python type of a value.
# Not tags: its per-record tag path (store.pull) costs more than the bulk read of every record
# and Spark's filter (5 M x 100 B, 1 tag in 8: 9.2 against 7.2 CPU-s for all records).
PUSHABLE = {"topic": str, "queueId": int}


class MqctlReader(DataSourceReader):
    """Batch read: one partition per (topic, queue), in topic then queue order.

    ``topic`` and ``queueId`` predicates (``=``, ``IN``) pushed down drop whole queues unread.
    PySpark offers this only with ``spark.sql.python.filterPushdown.enabled`` (``register``
    sets it)."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.plan = ColumnPlan(schema, opts.shape)
        self.pushed: dict[str, frozenset[Any]] = {}

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        rest = []
        for f in filters:
            pushed = self._values(f)
            if pushed is None:
                rest.append(f)   # Spark evaluates it
            else:
                name, values = pushed
                self.pushed[name] = self.pushed.get(name, values) & values
        return rest

    def _values(self, f: Filter) -> tuple[str, frozenset[Any]] | None:
        """The column and the values an ``=`` / ``IN`` filter on a pushable column allows;
        None: not ours."""
        if isinstance(f, EqualTo):
            values: tuple[Any, ...] = (f.value,)
        elif isinstance(f, In):
            values = tuple(v for v in f.value if v is not None)   # a null never matches
        else:
            return None
        if self.opts.shape != "mqctl" or len(f.attribute) != 1 or f.attribute[0] not in PUSHABLE:
            return None
        name = f.attribute[0]
        if not all(type(v) is PUSHABLE[name] for v in values):
            return None
        return name, frozenset(values)

    def partitions(self) -> list[InputPartition]:
        o, pushed = self.opts, self.pushed
        with Store.open(o.store) as store:
            ranges = [r for r in plan_ranges(store, o)
                      if r.topic in pushed.get("topic", (r.topic,))
                      and r.queue_id in pushed.get("queueId", (r.queue_id,))]
        return list(split_slices([QueueSlice(r.topic, r.queue_id, r.start, r.end, o.store, o.tags,
                                             o.fail_on_data_loss) for r in ranges], o.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.plan)


class MqctlStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming read; its offsets are :mod:`store.spark.streamplan`'s."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.plan = ColumnPlan(schema, opts.shape)
        self._target: dict[str, int] | None = None
        self._store: Store | None = None

    def _open(self) -> Store:
        if self._store is None:
            self._store = Store.open(self.opts.store)
        return self._store

    def initialOffset(self) -> dict[str, Any]:
        return initial(self._open(), self.opts)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = latest(self._open(), self.opts)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return next_end(self._open(), self.opts, start, self._target, rows)

    def reportLatestOffset(self) -> Optional[dict[str, Any]]:
        return latest(self._open(), self.opts)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        o = self.opts
        return [QueueSlice(r.topic, r.queue_id, r.start, r.end, o.store, o.tags, o.fail_on_data_loss)
                for r in batch_ranges(self._open(), o, start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.plan)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the checkpoint's offsets are the consumer position."""

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
