"""Spark data source ``mqctl``: topics of a store as DataFrames, batch and streaming.

Usage (PySpark >= 4.2 and pyarrow are an optional extra: ``pip install 'mqctl[spark]'``)::

    from store.spark import register
    register(spark)
    df = spark.read.format("mqctl").option("store", DIR).option("topic", "orders").load()
    df.write.format("mqctl").mode("append").option("store", DIR).option("topic", "copy").save()

Columns (:data:`SCHEMA`): ``topic`` string, ``queueId`` int, ``queueOffset`` bigint, ``msgId``
string (the unique key, as ``consume --json`` prints it), ``keys`` array<string>, ``tags``
string, ``properties`` map<string,string> (user properties only), ``body`` binary,
``bornTimestamp`` and ``storeTimestamp`` timestamps. ``keys`` is an array because the store
keeps a list of keys and ``consume --json`` prints a list; ``write`` accepts either form.

Reading (``read`` and ``readStream``) goes through :meth:`Store.pull`: one Spark partition per
(topic, queue), rows handed to Spark as Arrow record batches. A record that fails its CRC
raises :class:`~store.errors.DataError`; nothing damaged is ever returned.

Options (keys are case-insensitive; every value is a string):

==========================  =========================================================
``store`` (or ``load(p)``)   the store directory (required)
``topic``                    ``*`` (every user topic; the default for reads) or a comma
                             list; for writes one topic (else a ``topic`` column)
``startingOffsets``          ``earliest`` | ``latest`` | JSON ``{"T":{"0":5}}`` | a time
                             (13-digit ms, 10-digit s, ISO-8601; no offset means UTC).
                             Batch default ``earliest``; stream default ``latest``.
``endingOffsets``            batch only: ``latest`` (default) | ``earliest`` | JSON | time
``tags``                     tag filter ``A || B`` (``*`` = all)
``maxMessagesPerTrigger``    stream only: cap on messages per micro-batch
``flush``                    write only: ``async`` (default) or ``sync`` (fsync)
``sinkId``                   writeStream only: the idempotency ledger's name (default:
                             the query id in ``checkpointLocation/metadata``)
==========================  =========================================================

In offset JSON, ``-2`` means earliest and ``-1`` latest; a queue it does not name starts at
its earliest offset (``startingOffsets``) or ends at its latest (``endingOffsets``). A time
resolves per queue with :meth:`Store.search_offset`: the first message stored at or after it.

Writing (``write`` and ``writeStream``, append only): columns ``body`` (string or binary),
optional ``keys`` (comma-separated string or array), ``tags``, ``shardingKey``, ``queueId``,
``properties`` (map), ``topic`` (when no ``topic`` option) and ``bornTimestamp``; the other
columns of :data:`SCHEMA` are ignored, so a DataFrame read from one store can be written to
another. Each task validates its rows and stages them under ``STORE/spark-staging/<job>/``
(directories 0700, files 0600); nothing is visible until the job commits, when the driver
publishes the staged rows with :meth:`Store.put` while holding the store's write lock (so the
batch lands contiguously and other writers wait). A failed job's ``abort`` removes the staging.

A streaming sink commits each micro-batch exactly once, keyed by (sink id, batch id), with a
ledger ``STORE/spark-sinks/<sinkId>.json``: before publishing batch N it records
``publishing: N``, after publishing ``lastBatchId: N``. Batch ids at or below ``lastBatchId``
are skipped. Each message of a streamed batch gets a deterministic unique key (a digest of the
sink id, the batch id, the message's content and its occurrence number among identical
messages of the batch), so when Spark replays batch N after a crash *during* its publish
(the ledger still says ``publishing: N``), the messages already stored are found through the
key index and skipped. The replayed batch must hold the same messages, which Spark guarantees
for deterministic queries over replayable sources such as this one.

This module must never import ``mqctl``: the store is usable without the CLI.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
    DataSourceStreamReader, InputPartition, WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType, BinaryType, ByteType, DataType, IntegerType, LongType, MapType, ShortType,
    StringType, StructField, StructType, TimestampNTZType, TimestampType,
)

from .arrowcols import build_columns
from .broker import Store
from .bulk import Columns, pull_columns
from .vecread import VecColumns, pull_vector
from .errors import (
    BadInputError, DataError, MessageTooLargeError, TopicNotFoundError, UsageError,
)
from .fsutil import atomic_write_json, ensure_dir, open_private, read_json_with_bak
from .names import is_system_topic, validate_any_topic, validate_topic
from .record import (
    PROP_KEYS, PROP_SHARDING_KEY, PROP_TAGS, PROP_UNIQ_KEY, Draft, Message, check_property,
    tags_code,
)

FORMAT_NAME = "mqctl"

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

ARROW_BATCH_ROWS = 10_000            # Spark's own spark.sql.execution.arrow.maxRecordsPerBatch
PULL_COUNT = 4096
PULL_BYTES = 16 * 1024 * 1024
PUBLISH_MESSAGES = 8192              # one Store.put per chunk (as `mqctl send` batches)
PUBLISH_BYTES = 4 * 1024 * 1024
STAGING_DIR = "spark-staging"
SINKS_DIR = "spark-sinks"
SINK_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")

# The Spark session settings of the reference recipe (local mode, quiet, small and fast).
SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
# Only for local masters: a cluster keeps Spark's defaults (sized for many cores).
LOCAL_CONF: dict[str, str] = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}


# -- registration and sessions ----------------------------------------------------------------

def register(spark: Any, ship_code: bool = False) -> None:
    """Make ``format("mqctl")`` available to ``spark`` (one registration per session).

    Executors import this module by name, so the ``store`` package must be importable there:
    installed in the workers' Python (``PYSPARK_PYTHON``), or, with ``ship_code``, zipped and
    sent with ``SparkContext.addPyFile`` (pyarrow must still be installed on the workers).
    """
    if ship_code:
        spark.sparkContext.addPyFile(_zip_store_package())
    spark.dataSource.register(MqctlDataSource)


def _zip_store_package() -> str:
    import tempfile
    import zipfile
    pkg = Path(__file__).resolve().parent
    fd, path = tempfile.mkstemp(prefix="mqctl-store-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(pkg.glob("*.py")):
            zf.write(f, f"store/{f.name}")
    return path


def prepare_environment(local: bool = True) -> None:
    """Environment the Spark launcher reads, unless already set: workers run this
    interpreter (so they can import ``store``); a local session binds to loopback. A cluster
    whose workers run another interpreter sets ``PYSPARK_PYTHON`` itself."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session_conf(master: str = "local[2]", log_level: str = "ERROR",
                 extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings :func:`local_session` uses, for callers that build sessions themselves."""
    conf = {"spark.master": master, "spark.app.name": "mqctl", **SESSION_CONF,
            **(LOCAL_CONF if master.startswith("local") else {}), "spark.log.level": log_level}
    conf.update(extra or {})
    return conf


def local_session(master: str = "local[2]", log_level: str = "ERROR",
                  extra: Mapping[str, str] | None = None) -> Any:
    """A SparkSession configured by the reference recipe, with the data source registered."""
    from pyspark.sql import SparkSession
    prepare_environment(local=master.startswith("local"))
    builder = SparkSession.builder
    for key, value in session_conf(master, log_level, extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


# -- option parsing ---------------------------------------------------------------------------

@dataclass(frozen=True)
class OffsetSpec:
    """One side of a range: ``earliest``, ``latest``, a time (``ts`` ms) or per-queue JSON."""

    kind: str                                         # earliest | latest | time | json
    ts: int = 0
    per_queue: tuple[tuple[str, int, int], ...] = ()  # (topic, queue, offset or -1/-2)

    def resolve(self, store: Store, topic: str, queue_id: int, default: str) -> int:
        lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        kind = self.kind
        if kind == "json":
            named = {(t, q): o for t, q, o in self.per_queue}.get((topic, queue_id))
            if named is None:
                kind = default
            elif named == -2:
                kind = "earliest"
            elif named == -1:
                kind = "latest"
            else:
                return min(max(named, lo), hi)
        if kind == "earliest":
            return lo
        if kind == "latest":
            return hi
        return store.search_offset(topic, queue_id, self.ts)


def check_named_queues(spec: OffsetSpec, selected: Mapping[str, int], option: str) -> None:
    """Offset JSON may only name queues that the read covers."""
    for topic, qid, _ in spec.per_queue:
        if topic not in selected:
            raise UsageError(f"{option} names topic {topic!r}, which this read does not cover "
                             f"(option topic)")
        if qid >= selected[topic]:
            raise UsageError(f"{option} names queue {topic}/{qid}, but {topic!r} has queues "
                             f"0-{selected[topic] - 1}")


def parse_offsets(text: str | None, default: str, option: str) -> OffsetSpec:
    """``earliest`` | ``latest`` | JSON ``{"T": {"0": 5}}`` | a time."""
    if text is None or not text.strip():
        return OffsetSpec(default)
    s = text.strip()
    if s.lower() in ("earliest", "latest"):
        return OffsetSpec(s.lower())
    if s.startswith("{"):
        return OffsetSpec("json", per_queue=_parse_offset_json(s, option))
    return OffsetSpec("time", ts=parse_time_ms(s, option))


def _parse_offset_json(text: str, option: str) -> tuple[tuple[str, int, int], ...]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise UsageError(f'{option}: expected {{"TOPIC": {{"QUEUE": OFFSET}}}}')
    out = []
    for topic, queues in obj.items():
        validate_any_topic(topic)
        if not isinstance(queues, dict):
            raise UsageError(f"{option}: the value for topic {topic!r} must be an object")
        for qid, off in queues.items():
            if not str(qid).isdigit() or not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise UsageError(f"{option}: {topic}/{qid}: queue ids are digits and offsets "
                                 f"integers >= 0 (-2 earliest, -1 latest)")
            out.append((topic, int(qid), off))
    return tuple(sorted(out))


def parse_time_ms(text: str, option: str = "time") -> int:
    """13-digit ms or 10-digit s since the epoch, or ISO-8601 (no offset means UTC)."""
    s = text.strip()
    if s.isascii() and s.isdigit() and len(s) in (10, 13):
        return int(s) * (1000 if len(s) == 10 else 1)
    try:
        dt = datetime.fromisoformat(s.upper())
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not earliest, latest, offset JSON or a time "
                         f"(1732183200123, 1732183200, 2026-11-21T10:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def parse_tags(text: str | None) -> tuple[str, ...] | None:
    """``'A || B'`` → ``('A', 'B')``; ``*`` or nothing → None (every message)."""
    if text is None:
        return None
    parts = tuple(sorted({p.strip() for p in text.split("||") if p.strip()}))
    return None if not parts or "*" in parts else parts


@dataclass(frozen=True)
class ReadOptions:
    store: str
    topics: str
    starting: OffsetSpec
    ending: OffsetSpec
    tags: tuple[str, ...] | None
    max_per_trigger: int | None

    @classmethod
    def parse(cls, options: Mapping[str, str], stream: bool) -> "ReadOptions":
        if stream and options.get("endingoffsets"):
            raise UsageError("endingOffsets applies to batch reads only (a stream never ends)")
        limit = options.get("maxmessagespertrigger")
        if limit is not None and (not limit.strip().isdigit() or int(limit) < 1):
            raise UsageError(f"maxMessagesPerTrigger must be a positive integer, not {limit!r}")
        if not stream and limit is not None:
            raise UsageError("maxMessagesPerTrigger applies to readStream only")
        return cls(store=store_option(options),
                   topics=(options.get("topic") or "*").strip(),
                   starting=parse_offsets(options.get("startingoffsets"),
                                          "latest" if stream else "earliest", "startingOffsets"),
                   ending=parse_offsets(options.get("endingoffsets"), "latest", "endingOffsets"),
                   tags=parse_tags(options.get("tags")),
                   max_per_trigger=int(limit) if limit is not None else None)


def store_option(options: Mapping[str, str]) -> str:
    root = options.get("store") or options.get("path")
    if not root:
        raise UsageError('the mqctl data source needs .option("store", DIR) (or load(DIR))')
    return os.path.abspath(Path(root).expanduser())


def select_topics(store: Store, spec: str, must_exist: bool) -> list[tuple[str, int]]:
    """(topic, queue count) for ``spec``: ``*`` = every user topic, else a comma list."""
    topics = store.topics()
    wanted: set[str] = set()
    for name in (p.strip() for p in spec.split(",")):
        if not name:
            continue
        if name == "*":
            wanted.update(t for t in topics if not is_system_topic(t))
            continue
        validate_any_topic(name)
        if name in topics:
            wanted.add(name)
        elif must_exist:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
    return [(t, topics[t].queues) for t in sorted(wanted)]


# -- reading ----------------------------------------------------------------------------------

@dataclass
class QueueSlice(InputPartition):
    """Messages ``[start, end)`` of one queue: one Spark partition."""

    store: str
    topic: str
    queue_id: int
    start: int
    end: int
    tags: tuple[str, ...] | None = None


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
    (in any order, cast to the user's types where Arrow can cast)."""

    def __init__(self, schema: StructType) -> None:
        unknown = [n for n in schema.fieldNames() if n not in COLUMNS]
        if unknown:
            raise UsageError(f"unknown column(s) {', '.join(unknown)}: the mqctl source has "
                             f"{', '.join(COLUMNS)}")
        self.names = schema.fieldNames()
        self.target = to_arrow_schema(schema, timezone="UTC")
        native = _native_arrow_schema()
        self.native = [native.field(n).type for n in self.names]
        for name, have, want in zip(self.names, self.native, self.target.types):
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
        out = []
        for name, arr, want in zip(self.names, arrays, self.target.types):
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


def read_slice(part: QueueSlice, plan: ColumnPlan) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one queue slice; a damaged record raises :class:`DataError`."""
    store = Store.open(part.store, recover=False)
    try:
        off = max(part.start, store.min_offset(part.topic, part.queue_id))
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
    """The untagged read: one vectorised pull per Arrow batch (``vecread.py``), or the exact
    per-record one (``bulk.py``) for a run it declines; columns built by ``arrowcols.py``."""
    with_phys = "msgId" in plan.names
    while off < part.end:
        count = min(ARROW_BATCH_ROWS, part.end - off)
        cols: Columns | VecColumns | None = pull_vector(store, part.topic, part.queue_id, off, count, PULL_BYTES)
        if cols is None:   # anything unusual in this run: the exact, per-record path
            cols = pull_columns(store, part.topic, part.queue_id, off, count, PULL_BYTES, with_phys)
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


class MqctlReader(DataSourceReader):
    """Batch read: one partition per (topic, queue), in topic then queue order."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.plan = ColumnPlan(schema)

    def partitions(self) -> list[InputPartition]:
        o = self.opts
        with Store.open(o.store) as store:
            selected = select_topics(store, o.topics, must_exist=True)
            check_named_queues(o.starting, dict(selected), "startingOffsets")
            check_named_queues(o.ending, dict(selected), "endingOffsets")
            out: list[InputPartition] = []
            for topic, queues in selected:
                for q in range(queues):
                    start = o.starting.resolve(store, topic, q, "earliest")
                    end = o.ending.resolve(store, topic, q, "latest")
                    out.append(QueueSlice(o.store, topic, q, start, max(start, end), o.tags))
            return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.plan)


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, qid = key.rpartition("/")
    return topic, int(qid)


def fair_share(pending: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split ``limit`` messages across queues in proportion to what each has pending."""
    total = sum(pending.values())
    if total <= limit:
        return dict(pending)
    share = {k: limit * n // total for k, n in pending.items()}
    left = limit - sum(share.values())
    for k in sorted(pending, key=lambda k: (-(pending[k] - share[k]), k)):
        if left <= 0:
            break
        if share[k] < pending[k]:
            share[k] += 1
            left -= 1
    return share


class MqctlStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming read. Offsets are ``{"<topic>/<queue>": next offset}`` with sorted keys (Spark
    compares them as JSON text). A queue missing from the start offset (a topic or queue
    created later) is read from its earliest offset."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.plan = ColumnPlan(schema)
        self._target: dict[str, int] | None = None
        self._store: Store | None = None

    def _open(self) -> Store:
        if self._store is None:
            self._store = Store.open(self.opts.store)
        return self._store

    def _latest(self) -> dict[str, int]:
        store = self._open()
        return {queue_key(t, q): store.max_offset(t, q)
                for t, n in select_topics(store, self.opts.topics, must_exist=False)
                for q in range(n)}

    def initialOffset(self) -> dict:
        store = self._open()
        out = {}
        for t, n in select_topics(store, self.opts.topics, must_exist=False):
            for q in range(n):
                out[queue_key(t, q)] = self.opts.starting.resolve(store, t, q, "earliest")
        return dict(sorted(out.items()))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._latest()
        if self._target is not None:
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        store = self._open()
        first = {k: start[k] if k in start else store.min_offset(*split_key(k)) for k in latest}
        pending = {k: latest[k] - first[k] for k in latest if latest[k] > first[k]}
        if isinstance(limit, ReadMaxRows):
            pending = fair_share(pending, max(1, limit.max_rows))
        end = dict(start)
        for k, n in pending.items():
            if n > 0:
                end[k] = first[k] + n
        return dict(sorted(end.items()))

    def reportLatestOffset(self) -> Optional[dict]:
        return dict(sorted(self._latest().items()))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        out: list[InputPartition] = []
        for key, stop in sorted(end.items()):
            begin = start.get(key, 0)
            if stop > begin:
                topic, qid = split_key(key)
                out.append(QueueSlice(self.opts.store, topic, qid, begin, stop, self.opts.tags))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.plan)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint's offsets are the consumer position."""

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


# -- writing: options and row validation ------------------------------------------------------

WRITE_COLUMNS = ("body", "keys", "tags", "shardingKey", "queueId", "properties", "topic",
                 "bornTimestamp")
IGNORED_COLUMNS = ("queueOffset", "msgId", "storeTimestamp")
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)

STAGE_SCHEMA = pa.schema([
    ("topic", pa.string()), ("body", pa.binary()), ("queueId", pa.int32()),
    ("shardingKey", pa.string()), ("bornTimestamp", pa.int64()),
    ("properties", pa.map_(pa.string(), pa.string())),
])


def _type_ok(name: str, dt: DataType) -> bool:
    if name == "body":
        return isinstance(dt, (StringType, BinaryType))
    if name == "keys":
        return isinstance(dt, StringType) or (isinstance(dt, ArrayType) and isinstance(dt.elementType, StringType))
    if name in ("tags", "shardingKey", "topic"):
        return isinstance(dt, StringType)
    if name == "queueId":
        return isinstance(dt, _INTEGRAL)
    if name == "properties":
        return (isinstance(dt, MapType) and isinstance(dt.keyType, StringType)
                and isinstance(dt.valueType, StringType))
    return isinstance(dt, (TimestampType, TimestampNTZType))   # bornTimestamp


def check_write_schema(schema: StructType, topic: str | None) -> None:
    """Refuse, before any task runs, a DataFrame the sink cannot store."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise UsageError("writing to mqctl needs a 'body' column (string or binary)")
    if topic is None and "topic" not in fields:
        raise UsageError('writing to mqctl needs .option("topic", T) or a \'topic\' column')
    for name, dt in fields.items():
        if name in IGNORED_COLUMNS:
            continue
        if name not in WRITE_COLUMNS:
            raise UsageError(f"column {name!r} cannot be written to mqctl; accepted: "
                             f"{', '.join(WRITE_COLUMNS)} (ignored: {', '.join(IGNORED_COLUMNS)})")
        if not _type_ok(name, dt):
            raise UsageError(f"column {name!r} has type {dt.simpleString()}, which mqctl cannot store")


@dataclass(frozen=True)
class WriteOptions:
    store: str
    topic: str | None
    sync: bool

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "WriteOptions":
        topic = (options.get("topic") or "").strip() or None
        if topic is not None:
            if "," in topic or topic == "*":
                raise UsageError("write takes one topic; route rows with a 'topic' column instead")
            validate_topic(topic)
        flush = (options.get("flush") or "async").lower()
        if flush not in ("sync", "async"):
            raise UsageError(f"flush must be sync or async, not {flush!r}")
        return cls(store_option(options), topic, flush == "sync")


class RowRules:
    """What the store will accept, read once per task: size limit and topic shapes."""

    def __init__(self, store: Store) -> None:
        self.max_size = store.settings.max_message_size
        self.default_queues = store.settings.default_queues
        self.auto_create = store.settings.auto_create_topics
        self.topics = store.topics()
        self._checked: set[str] = set()

    def topic(self, name: Any, where: str) -> str:
        if not isinstance(name, str) or not name:
            raise BadInputError(f"{where}: topic is null or empty")
        if name not in self._checked:
            validate_topic(name)
            if name not in self.topics and not self.auto_create:
                raise TopicNotFoundError(f"topic {name!r} does not exist and this store does not "
                                         f"create topics on send")
            self._checked.add(name)
        return name

    def queue(self, topic: str, qid: Any, skey: Any, where: str) -> int:
        cfg = self.topics.get(topic)
        queues = cfg.queues if cfg else self.default_queues
        if qid is None:
            if cfg is not None and cfg.order and skey is None:
                raise BadInputError(f"{where}: topic {topic!r} is ordered: give shardingKey or queueId")
            return -1
        if skey is not None:
            raise BadInputError(f"{where}: give shardingKey or queueId, not both")
        if not 0 <= qid < queues:
            raise BadInputError(f"{where}: queueId {qid} does not exist (topic {topic!r} has "
                                f"queues 0-{queues - 1})")
        return int(qid)


def _keys_prop(value: Any, where: str) -> str | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else [k for k in value if k is not None]
    if not all(isinstance(k, str) for k in items):
        raise BadInputError(f"{where}: keys must be strings")
    keys = [p for k in items for p in k.replace(",", " ").split() if p]
    return " ".join(keys) or None


def _user_props(value: Any, where: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    pairs = value.items() if isinstance(value, dict) else value
    out = []
    for k, v in pairs:
        if v is None:
            continue
        try:
            check_property(str(k), str(v))
        except BadInputError as exc:
            raise BadInputError(f"{where}: {exc.message}") from exc
        out.append((str(k), str(v)))
    return out


def stage_batch(batch: pa.RecordBatch, topic_opt: str | None, rules: RowRules,
                first_row: int, partition: int = 0) -> pa.RecordBatch:
    """Validate one input batch and turn it into the staging shape (:data:`STAGE_SCHEMA`);
    errors name the partition and the row's 0-based number within it."""
    n = batch.num_rows
    names = batch.schema.names

    def col(name: str) -> list[Any]:
        if name not in names:
            return [None] * n
        arr = batch.column(names.index(name))
        if name == "bornTimestamp":
            arr = arr.cast(pa.int64())
        return arr.to_pylist()

    topics = [topic_opt] * n if topic_opt else col("topic")
    bodies, keys, tags = col("body"), col("keys"), col("tags")
    skeys, qids, props, born = col("shardingKey"), col("queueId"), col("properties"), col("bornTimestamp")
    out: dict[str, list[Any]] = {f: [] for f in STAGE_SCHEMA.names}
    for i in range(n):
        row = f"partition {partition}, row {first_row + i}"
        topic = rules.topic(topics[i], row)
        body = bodies[i]
        if body is None:
            raise BadInputError(f"{row}: body is null")
        if isinstance(body, str):
            body = body.encode("utf-8")
        if len(body) > rules.max_size:
            raise MessageTooLargeError(f"{row}: message body of {len(body)} bytes exceeds the "
                                       f"store's limit of {rules.max_size} bytes")
        skey = skeys[i]
        p = _user_props(props[i], row)
        if tags[i]:
            p.append((PROP_TAGS, tags[i]))
        k = _keys_prop(keys[i], row)
        if k:
            p.append((PROP_KEYS, k))
        if skey is not None:
            p.append((PROP_SHARDING_KEY, skey))
        out["topic"].append(topic)
        out["body"].append(body)
        out["queueId"].append(rules.queue(topic, qids[i], skey, row))
        out["shardingKey"].append(skey)
        out["bornTimestamp"].append(born[i] // 1000 if born[i] is not None else 0)
        out["properties"].append(p)
    return pa.RecordBatch.from_pydict(out, schema=STAGE_SCHEMA)


# -- writing: staging files -------------------------------------------------------------------

@dataclass
class StagedPart(WriterCommitMessage):
    """What one task staged: a file relative to the store root (None when it had no rows)."""

    path: Optional[str]
    rows: int


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:          # called outside a Spark task (tests of the commit protocol)
        return 0, 0
    return tc.partitionId(), tc.taskAttemptId()


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write_staged(rows: Iterator[pa.RecordBatch], opts: WriteOptions, stage_rel: str) -> StagedPart:
    """Validate a task's rows and stage them as one private Arrow file; on any failure remove
    what this task wrote (``abort`` never sees a failed task's files)."""
    root = Path(opts.store)
    with Store.open(root, recover=False) as store:
        rules = RowRules(store)
    part, attempt = _task_ids()
    stage_dir = root / stage_rel
    final = stage_dir / f"part-{part:05d}-{attempt}-{uuid.uuid4().hex[:8]}.arrow"
    tmp = final.with_name(final.name + ".tmp")
    count = 0
    writer = None
    fh = None
    try:
        for batch in rows:
            staged = stage_batch(batch, opts.topic, rules, count, part)
            if staged.num_rows == 0:
                continue
            if writer is None:
                ensure_dir(stage_dir)
                fh = os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")
                writer = pa.ipc.new_stream(fh, STAGE_SCHEMA)
            writer.write_batch(staged)
            count += staged.num_rows
        if writer is None:
            return StagedPart(None, 0)
        writer.close()
        writer = None
        fh.close()
        fh = None
        os.replace(tmp, final)
        return StagedPart(str(final.relative_to(root)), count)
    finally:
        if writer is not None:
            writer.close()
        if fh is not None:
            fh.close()
            _unlink_quietly(tmp)


def iter_staged(root: Path, parts: Iterable[StagedPart]) -> Iterator[pa.RecordBatch]:
    for part in parts:
        if part.path is None:
            continue
        with pa.ipc.open_stream(pa.OSFile(str(root / part.path), "rb")) as reader:
            yield from reader


def staged_drafts(root: Path, parts: Sequence[Optional[StagedPart]]) -> Iterator[Draft]:
    """The staged rows as drafts, in partition order."""
    for batch in iter_staged(root, [p for p in parts if p is not None]):
        cols = batch.to_pydict()
        for topic, body, qid, skey, born, props in zip(
                cols["topic"], cols["body"], cols["queueId"], cols["shardingKey"],
                cols["bornTimestamp"], cols["properties"]):
            yield Draft(topic, body, dict(props), qid, skey, born_timestamp=born)


def _chunks(drafts: Iterable[Draft]) -> Iterator[list[Draft]]:
    chunk: list[Draft] = []
    size = 0
    for d in drafts:
        chunk.append(d)
        size += len(d.body)
        if len(chunk) >= PUBLISH_MESSAGES or size >= PUBLISH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def precheck(store: Store, root: Path, parts: Sequence[Optional[StagedPart]]) -> None:
    """Under the write lock, before anything is published: every staged row still fits the
    topics as they are now (a topic could have been created meanwhile), so the publish can
    fail only on I/O."""
    topics = store.topics()
    for batch in iter_staged(root, [p for p in parts if p is not None]):
        cols = batch.select(["topic", "queueId", "shardingKey"]).to_pydict()
        for topic, qid, skey in zip(cols["topic"], cols["queueId"], cols["shardingKey"]):
            cfg = topics.get(topic)
            if cfg is None:
                if not store.settings.auto_create_topics:
                    raise TopicNotFoundError(f"topic {topic!r} does not exist and this store does "
                                             f"not create topics on send")
                continue
            if qid >= cfg.queues:
                raise UsageError(f"queue {qid} does not exist: topic {topic!r} has queues "
                                 f"0-{cfg.queues - 1}")
            if cfg.order and qid < 0 and skey is None:
                raise UsageError(f"topic {topic!r} is ordered: give shardingKey or queueId")


def publish(store: Store, drafts: Iterable[Draft], sync: bool) -> int:
    """Store drafts in chunks; the caller holds the write lock. Returns the count stored."""
    n = 0
    for chunk in _chunks(drafts):
        n += len(store.put(chunk, sync=sync))
    return n


def remove_staging(root: Path, rel_dirs: Iterable[str]) -> None:
    for rel in set(rel_dirs):
        shutil.rmtree(root / rel, ignore_errors=True)
    try:
        (root / STAGING_DIR).rmdir()    # only when no other job is staging
    except OSError:
        pass


def _reject_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise UsageError("mqctl topics are append-only: use mode('append') "
                         "(or outputMode('append') for a stream)")


class MqctlWriter(DataSourceArrowWriter):
    """Batch write: tasks stage, the driver publishes in :meth:`commit`."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.stage_rel = f"{STAGING_DIR}/{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return write_staged(iterator, self.opts, self.stage_rel)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        root = Path(self.opts.store)
        parts = [m for m in messages if isinstance(m, StagedPart)]
        try:
            with Store.open(root, create=True) as store, store.write_lock():
                precheck(store, root, parts)
                publish(store, staged_drafts(root, parts), self.opts.sync)
        finally:
            remove_staging(root, [self.stage_rel])

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        remove_staging(Path(self.opts.store), [self.stage_rel])


# -- writing: streaming, exactly once per batch -----------------------------------------------

def default_sink_id(options: Mapping[str, str]) -> str:
    """``sinkId`` option, else ``q-<query id>`` from a local checkpoint's ``metadata`` file,
    else a digest of the checkpoint location."""
    given = (options.get("sinkid") or "").strip()
    if given:
        if not SINK_ID_RE.match(given):
            raise UsageError(f"sinkId {given!r}: use 1-100 characters from A-Z a-z 0-9 _ . -")
        return given
    ckpt = (options.get("checkpointlocation") or "").strip()
    if not ckpt:
        raise UsageError('writeStream to mqctl needs .option("checkpointLocation", DIR) '
                         '(or .option("sinkId", NAME))')
    local = ckpt[len("file:"):] if ckpt.startswith("file:") else ckpt
    if "://" not in local:
        try:
            qid = json.loads((Path(local).expanduser() / "metadata").read_text())["id"]
            if isinstance(qid, str) and SINK_ID_RE.match(qid):
                return f"q-{qid}"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return "c-" + hashlib.sha256(ckpt.encode()).hexdigest()[:32]


def message_key(sink_id: str, batch_id: int, d: Draft, seen: dict[str, int]) -> str:
    """A deterministic unique key: the same message of the same batch always gets the same
    key, whatever the order in which replayed tasks stage it."""
    h = hashlib.blake2b(digest_size=16)
    for part in (d.topic, str(d.queue_id), d.sharding_key or "",
                 json.dumps(sorted(d.properties.items()), ensure_ascii=False)):
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    h.update(d.body)
    content = h.hexdigest()
    n = seen.get(content, 0)
    seen[content] = n + 1
    return hashlib.blake2b(f"{sink_id}\x00{batch_id}\x00{content}\x00{n}".encode(),
                           digest_size=16).hexdigest().upper()


class SinkLedger:
    """``STORE/spark-sinks/<sinkId>.json``: the last batch published and the one being
    published. Read and written under the store's write lock."""

    def __init__(self, store: Store, sink_id: str) -> None:
        self.path = store.root / SINKS_DIR / f"{sink_id}.json"

    def load(self) -> dict[str, Any]:
        obj = read_json_with_bak(self.path, default={})
        return obj if isinstance(obj, dict) else {}

    def save(self, state: dict[str, Any]) -> None:
        ensure_dir(self.path.parent)
        atomic_write_json(self.path, state)


def keyed_drafts(store: Store, drafts: Iterable[Draft], sink_id: str, batch_id: int,
                 skip_stored: bool) -> Iterator[Draft]:
    """Drafts with their deterministic unique keys; with ``skip_stored`` (a replay of a batch
    whose publish was interrupted) those already in the store are left out."""
    seen: dict[str, int] = {}
    for d in drafts:
        key = message_key(sink_id, batch_id, d, seen)
        if skip_stored and any(m.topic == d.topic for m in store.find_all(key, limit=4)):
            continue
        d.properties = {PROP_UNIQ_KEY: key, **d.properties}
        yield d


def commit_stream_batch(opts: WriteOptions, sink_id: str, batch_id: int,
                        parts: Sequence[Optional[StagedPart]]) -> int:
    """Publish one micro-batch exactly once; returns how many messages were stored now."""
    root = Path(opts.store)
    staged = [p for p in parts if p is not None and p.path is not None]
    with Store.open(root, create=True) as store, store.write_lock():
        ledger = SinkLedger(store, sink_id)
        state = ledger.load()
        last = state.get("lastBatchId")
        if (isinstance(last, int) and batch_id <= last) or not staged:
            return 0
        replay = state.get("publishing") == batch_id
        precheck(store, root, staged)
        ledger.save({**state, "publishing": batch_id})
        n = publish(store, keyed_drafts(store, staged_drafts(root, staged), sink_id, batch_id, replay),
                    opts.sync)
        ledger.save({**state, "lastBatchId": batch_id, "publishing": None})
        return n


def _stage_dirs(parts: Sequence[Optional[WriterCommitMessage]]) -> list[str]:
    return [str(Path(p.path).parent) for p in parts if isinstance(p, StagedPart) and p.path]


class MqctlStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write. Spark creates one writer per micro-batch for the tasks and a fresh
    one for each commit, so everything commit needs travels in the messages."""

    def __init__(self, opts: WriteOptions, sink_id: str) -> None:
        self.opts = opts
        self.sink_id = sink_id
        self.stage_rel = f"{STAGING_DIR}/{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return write_staged(iterator, self.opts, self.stage_rel)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        parts = [m for m in messages if isinstance(m, StagedPart)]
        try:
            commit_stream_batch(self.opts, self.sink_id, batchId, parts)
        finally:
            remove_staging(Path(self.opts.store), _stage_dirs(parts))

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        remove_staging(Path(self.opts.store), _stage_dirs(messages))


# -- the data source --------------------------------------------------------------------------

class MqctlDataSource(DataSource):
    """``format("mqctl")`` for read, readStream, write and writeStream."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqctlReader(ReadOptions.parse(self.options, stream=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqctlStreamReader(ReadOptions.parse(self.options, stream=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> MqctlWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options)
        check_write_schema(schema, opts.topic)
        Store.open(opts.store, create=True).close()
        return MqctlWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MqctlStreamWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options)
        check_write_schema(schema, opts.topic)
        Store.open(opts.store, create=True).close()
        return MqctlStreamWriter(opts, default_sink_id(self.options))


__all__ = ["register", "local_session", "session_conf", "prepare_environment", "MqctlDataSource",
           "SCHEMA", "SCHEMA_DDL", "COLUMNS"]
