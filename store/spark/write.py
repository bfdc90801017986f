"""Batch writes to the ``mqctl`` Spark source: write options, row validation, staging files
under ``STORE/spark-staging/``, and the driver's publish of staged rows on commit, in chunks
that each hold the store's write lock for about :data:`PUBLISH_TARGET_S`."""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from store.client.properties import build_properties
from store.errors import (
    BadInputError,
    InvalidPropertyError,
    MessageTooLargeError,
    OperationError,
    TopicNotFoundError,
    UsageError,
)
from store.fsutil import open_private
from store.log.messagestore import Store
from store.log.record import Draft
from store.names import validate_topic
from store.spark.kafka import to_store_batch
from store.spark.options import check_options, open_store, parse_bool, parse_shape, store_option
from store.spark.staging import OWNER_FILE, STAGING_DIR, remove_job_dirs, sweep_staging, write_owner

# Publishing takes the store's write lock once per chunk, never for a whole job: a chunk is
# sized so that one Store.put lasts about PUBLISH_TARGET_S, so a concurrent `mqctl send`
# waits at most about that long (plus its own put).
PUBLISH_FIRST = 1024                 # messages in the first chunk; later ones adapt
PUBLISH_MIN = 64
PUBLISH_MESSAGES = 8192              # never more than this many messages per chunk...
PUBLISH_BYTES = 4 * 1024 * 1024      # ...or bytes of body
PUBLISH_TARGET_S = 0.02
WRITE_OPTIONS = ("store", "path", "topic", "flush", "create", "shape")


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
    create: bool = False
    shape: str = "mqctl"          # kafka: Kafka's sink columns (store.spark.kafka)

    @classmethod
    def parse(cls, options: Mapping[str, str], allowed: Sequence[str] = WRITE_OPTIONS,
              what: str = "write") -> WriteOptions:
        check_options(options, allowed, what)
        topic = (options.get("topic") or "").strip() or None
        if topic is not None:
            if "," in topic or topic == "*":
                raise UsageError("write takes one topic; route rows with a 'topic' column instead")
            validate_topic(topic)
        flush = (options.get("flush") or "async").lower()
        if flush not in ("sync", "async"):
            raise UsageError(f"flush must be sync or async, not {flush!r}")
        return cls(store_option(options), topic, flush == "sync",
                   parse_bool(options, "create", False), parse_shape(options))


class RowRules:
    """What the store will accept, read once per task: size limit and topic shapes."""

    def __init__(self, store: Store) -> None:
        self.max_size = store.settings.max_message_size
        self.default_queues = store.settings.default_queues
        self.auto_create = store.settings.auto_create_topics
        self.store = store
        self.topics: dict[str, Any] = {}   # looked up one at a time, as rows name them
        self._checked: set[str] = set()

    def topic(self, name: Any, where: str) -> str:
        if not isinstance(name, str) or not name:
            raise BadInputError(f"{where}: topic is null or empty")
        if name not in self._checked:
            validate_topic(name)
            if self._find(name) is None and not self.auto_create:
                raise TopicNotFoundError(f"topic {name!r} does not exist and this store does not "
                                         f"create topics on send")
            self._checked.add(name)
        return name

    def _find(self, name: str) -> Any:
        if name not in self.topics:
            self.topics[name] = self.store.find_topic(name)
        return self.topics[name]

    def queue(self, topic: str, qid: Any, skey: Any, where: str) -> int:
        cfg = self._find(topic)
        queues = cfg.queues if cfg else self.default_queues
        if qid is None:
            if cfg is not None and cfg.order and not skey:   # (an empty key is no key)
                raise BadInputError(f"{where}: topic {topic!r} is ordered: give shardingKey or queueId")
            return -1
        if skey:
            raise BadInputError(f"{where}: give shardingKey or queueId, not both")
        if not 0 <= qid < queues:
            raise BadInputError(f"{where}: queueId {qid} does not exist (topic {topic!r} has "
                                f"queues 0-{queues - 1})")
        return int(qid)


# How a write's errors name its columns (store.client.rules.PYTHON_NAMES spells the rest).
COLUMN_NAMES = {"sharding_key": "shardingKey"}


def _row_properties(tags: Any, keys: Any, props: Any, skey: Any, where: str) -> list[tuple[str, str]]:
    """A row's stored properties, built and checked as ``Producer.send`` builds them
    (:func:`store.client.properties.build_properties`: the same rules and words), the error
    (``BadInputError``) naming the row. ``keys`` is an array or a comma-separated string; ``props`` a map."""
    if isinstance(keys, str):
        keys = [k.strip() for k in keys.split(",")]
    if props is not None and not isinstance(props, dict):
        props = dict(props)     # (Arrow's map: a list of pairs)
    try:
        built = build_properties(tags=tags or None, keys=keys, properties=props, sharding_key=skey,
                                 arg_names=COLUMN_NAMES)
    except InvalidPropertyError as exc:   # a bad row of input, as a bad line of send --input json
        raise BadInputError(f"{where}: {exc.message}") from None
    except MessageTooLargeError as exc:
        raise MessageTooLargeError(f"{where}: {exc.message}") from None
    return list(built.items())


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
        values: list[Any] = arr.to_pylist()
        return values

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
        p = _row_properties(tags[i], keys[i], props[i], skey, row)
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


def write_staged(rows: Iterator[pa.RecordBatch], opts: WriteOptions, stage_rel: str,
                 create_dir: bool = True, owner: dict[str, Any] | None = None) -> StagedPart:
    """Validate a task's rows and stage them as one private Arrow file; on any failure remove
    what this task wrote (``abort`` never sees a failed task's files).

    With ``create_dir`` False (batch jobs, whose driver creates the job directory) a task
    whose job directory is gone (the job was aborted, or swept) stages nothing and fails, so
    a task that outlives its job's ``abort()`` cannot leave files behind."""
    root = Path(opts.store)
    with Store.open(root, recover=False) as store:
        rules = RowRules(store)
    part, attempt = _task_ids()
    stage_dir = root / stage_rel
    final = stage_dir / f"part-{part:05d}-{attempt}-{uuid.uuid4().hex[:8]}.arrow"
    tmp = final.with_name(final.name + ".tmp")
    owner_file = stage_dir / OWNER_FILE
    count = 0
    writer = None
    fh = None
    try:
        for batch in rows:
            if opts.shape == "kafka":
                batch = to_store_batch(batch)
            staged = stage_batch(batch, opts.topic, rules, count, part)
            if staged.num_rows == 0:
                continue
            if writer is None:
                if create_dir:
                    write_owner(stage_dir, owner)
                elif not owner_file.exists():
                    raise _job_gone(stage_rel)
                fh = os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")
                writer = pa.ipc.new_stream(fh, STAGE_SCHEMA)
            writer.write_batch(staged)
            count += staged.num_rows
        if writer is None:
            return StagedPart(None, 0)
        writer.close()
        writer = None
        if fh is not None:
            fh.close()
        fh = None
        try:
            os.replace(tmp, final)
        except FileNotFoundError:
            if create_dir or owner_file.exists():
                raise
            raise _job_gone(stage_rel) from None
        if not create_dir and not owner_file.exists():    # aborted while this task was staging
            _unlink_quietly(final)
            remove_job_dirs(root, [stage_rel])
            raise _job_gone(stage_rel)
        return StagedPart(str(final.relative_to(root)), count)
    finally:
        if writer is not None:
            writer.close()
        if fh is not None:
            fh.close()
            _unlink_quietly(tmp)


def _job_gone(stage_rel: str) -> OperationError:
    return OperationError(f"staging directory {stage_rel} is gone: the write job was aborted "
                          f"(or its staging swept) while this task ran")


def check_staged(root: Path, parts: Sequence[Optional[StagedPart]]) -> None:
    """Every staged file a commit is about to publish exists (a sweep cannot have taken it)."""
    for p in parts:
        if p is not None and p.path is not None and not (root / p.path).is_file():
            raise OperationError(f"staged file {p.path} is missing: was the staging swept "
                                 f"while the job ran? Nothing of this job was published")


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


def precheck(store: Store, root: Path, parts: Sequence[Optional[StagedPart]]) -> None:
    """Before anything is published: every staged row still fits the topics as they are now
    (a topic could have been created meanwhile), so the publish fails only on I/O or on a
    topic changed while it runs (Store.put checks each chunk again)."""
    topics: dict[str, Any] = {}
    for batch in iter_staged(root, [p for p in parts if p is not None]):
        cols = batch.select(["topic", "queueId", "shardingKey"]).to_pydict()
        for topic, qid, skey in zip(cols["topic"], cols["queueId"], cols["shardingKey"]):
            if topic not in topics:
                topics[topic] = store.find_topic(topic)
            cfg = topics[topic]
            if cfg is None:
                if not store.settings.auto_create_topics:
                    raise TopicNotFoundError(f"topic {topic!r} does not exist and this store does "
                                             f"not create topics on send")
                continue
            if qid >= cfg.queues:
                raise UsageError(f"queue {qid} does not exist: topic {topic!r} has queues "
                                 f"0-{cfg.queues - 1}")
            if cfg.order and qid < 0 and not skey:
                raise UsageError(f"topic {topic!r} is ordered: give shardingKey or queueId")


def publish(store: Store, drafts: Iterable[Draft], sync: bool,
            on_chunk: Callable[[list[Draft]], None] | None = None) -> int:
    """Store drafts in chunks, one :meth:`Store.put` (and one hold of the write lock) each,
    sized so that a put lasts about :data:`PUBLISH_TARGET_S`; the next chunk is built while
    the lock is free, so other writers get their turn. ``on_chunk`` runs after each chunk is
    stored. Returns the count stored."""
    n = 0
    size = PUBLISH_FIRST
    it = iter(drafts)
    while True:
        chunk: list[Draft] = []
        nbytes = 0
        for d in it:
            chunk.append(d)
            nbytes += len(d.body)
            if len(chunk) >= size or nbytes >= PUBLISH_BYTES:
                break
        if not chunk:
            return n
        t0 = time.perf_counter()
        n += len(store.put(chunk, sync=sync))
        took = time.perf_counter() - t0
        if on_chunk is not None:
            on_chunk(chunk)
        size = max(PUBLISH_MIN, min(PUBLISH_MESSAGES, int(len(chunk) * PUBLISH_TARGET_S / max(took, 1e-4))))
        time.sleep(0)          # let a writer blocked on the lock take it


def remove_staging(root: Path, rel_dirs: Iterable[str]) -> None:
    remove_job_dirs(root, rel_dirs)


def open_target(opts: WriteOptions) -> Store:
    """The store a write goes to: it must exist unless the ``create`` option says otherwise."""
    return open_store(opts.store, opts.create)


class MqctlWriter(DataSourceArrowWriter):
    """Batch write: the driver makes the job's staging directory, tasks stage into it, the
    driver publishes in :meth:`commit` (in chunks) and removes the directory."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.stage_rel = f"{STAGING_DIR}/{uuid.uuid4().hex}"
        root = Path(opts.store)
        sweep_staging(root)
        write_owner(root / self.stage_rel)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return write_staged(iterator, self.opts, self.stage_rel, create_dir=False)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        root = Path(self.opts.store)
        parts = [m for m in messages if isinstance(m, StagedPart)]
        try:
            with open_target(self.opts) as store:
                check_staged(root, parts)
                precheck(store, root, parts)
                publish(store, staged_drafts(root, parts), self.opts.sync)
        finally:
            remove_staging(root, [self.stage_rel])

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        remove_staging(Path(self.opts.store), [self.stage_rel])
