"""Streaming writes to the ``mqctl`` Spark source, exactly once per micro-batch: the sink id,
the ledger ``STORE/spark-sinks/<sinkId>.json``, deterministic message keys and the stream
writer. Staging and publishing are :mod:`store.spark.write`'s.

Exactly once: each message of micro-batch N gets a deterministic unique key, a digest of
(sink id, N, its partition, its position in the partition, its content). The batch is
published in chunks (:func:`store.spark.write.publish`); after each chunk the ledger records
``done`` (messages published so far, in partition order) and ``digest`` (a running digest of
their keys). A replay of N after a crash mid-publish recomputes the keys: when the first
``done`` keys give the recorded digest (the replay holds the same rows in the same order,
as Spark guarantees for a deterministic query over a replayable source) they are skipped
without touching the store, then the key index is asked only about the chunk that may have
been stored after the last ledger update (a chunk is stored whole or not at all). Only when
the digests differ (the replay is not the same batch) is every message looked up.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from store.errors import UsageError
from store.errors import warn as say_warning
from store.fsutil import atomic_write_json, ensure_dir, read_json_with_bak
from store.layout import SPARK_SINKS
from store.log.messagestore import Store
from store.log.record import PROP_UNIQ_KEY, Draft
from store.spark.staging import STAGING_DIR, owner_identity, sweep_staging
from store.spark.write import (
    StagedPart,
    WriteOptions,
    check_staged,
    open_target,
    precheck,
    publish,
    remove_staging,
    staged_drafts,
    write_staged,
)

SINKS_DIR = SPARK_SINKS
SINK_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


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


def content_digest(d: Draft) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (d.topic, str(d.queue_id), d.sharding_key or "",
                 json.dumps(sorted(d.properties.items()), ensure_ascii=False)):
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    h.update(d.body)
    return h.digest()


def message_key(sink_id: str, batch_id: int, partition: int, ordinal: int, d: Draft) -> str:
    """The deterministic unique key of the ``ordinal``-th message of ``partition`` of a batch:
    a replay of the same batch gives every message the same key. Needs no memory of other
    messages, so a commit's memory does not grow with the batch."""
    h = hashlib.blake2b(f"{sink_id}\x00{batch_id}\x00{partition}\x00{ordinal}\x00".encode(),
                        digest_size=16)
    h.update(content_digest(d))
    return h.hexdigest().upper()


class SinkLedger:
    """``STORE/spark-sinks/<sinkId>.json``: the last batch published and the one being
    published. Read and written under the store's write lock."""

    def __init__(self, store: Store, sink_id: str) -> None:
        self.path = store.layout.spark_sink(sink_id)

    def load(self) -> dict[str, Any]:
        obj = read_json_with_bak(self.path, default={})
        return obj if isinstance(obj, dict) else {}

    def save(self, state: dict[str, Any], sync: bool = True) -> None:
        ensure_dir(self.path.parent)
        atomic_write_json(self.path, state, sync=sync)


def keyed_drafts(root: Path, parts: Sequence[Optional[StagedPart]], sink_id: str,
                 batch_id: int) -> Iterator[Draft]:
    """The staged drafts of a batch, in partition order, each with its deterministic key.
    ``parts[i]`` is partition ``i``'s commit message (None for an empty slot)."""
    for index, part in enumerate(parts):
        if part is None or part.path is None:
            continue
        for ordinal, d in enumerate(staged_drafts(root, [part])):
            d.properties = {PROP_UNIQ_KEY: message_key(sink_id, batch_id, index, ordinal, d),
                            **d.properties}
            yield d


def _stored(store: Store, d: Draft) -> bool:
    key = d.properties[PROP_UNIQ_KEY]
    return any(m.topic == d.topic for m in store.find_all(key, limit=4))


class _Progress:
    """``done`` and the running key digest of a batch being published, saved to the ledger
    after each chunk."""

    def __init__(self, ledger: SinkLedger, state: dict[str, Any], batch_id: int,
                 sync: bool = True) -> None:
        self.sync = sync
        self.ledger = ledger
        self.state = state
        self.batch_id = batch_id
        self.done = 0
        self.hash = hashlib.blake2b(digest_size=16)

    def add(self, d: Draft) -> None:
        self.hash.update(d.properties[PROP_UNIQ_KEY].encode())
        self.done += 1

    def digest(self) -> str:
        return self.hash.copy().hexdigest()

    def save(self, sync: bool = True) -> None:
        self.ledger.save({**self.state, "publishing": self.batch_id, "done": self.done,
                          "digest": self.digest()}, sync=sync)

    def on_chunk(self, chunk: list[Draft]) -> None:
        for d in chunk:
            self.add(d)
        # fsync'd only when the messages are (flush=sync): the record of progress is then
        # never more durable than what it describes
        self.save(self.sync)


def _resume(store: Store, drafts: Iterator[Draft], progress: _Progress, done: int,
            digest: str) -> Iterator[Draft] | None:
    """Skip what an interrupted publish of this batch stored; None when the replay is not
    the batch the ledger describes (then every message must be looked up)."""
    for d in drafts:
        if progress.done >= done:
            if progress.digest() != digest:
                return None
            return _skip_stored_run(store, d, drafts, progress)
        progress.add(d)
    if progress.done < done or progress.digest() != digest:
        return None
    return iter(())


def _skip_stored_run(store: Store, first: Draft, rest: Iterator[Draft],
                     progress: _Progress) -> Iterator[Draft]:
    """After the recorded prefix: the chunk stored just before the crash (if any) is skipped
    by asking the key index about its messages until one is missing."""
    d: Draft | None = first
    while d is not None and _stored(store, d):
        progress.add(d)
        d = next(rest, None)
    if d is None:
        return iter(())

    def chain(head: Draft) -> Iterator[Draft]:
        yield head
        yield from rest
    return chain(d)


def commit_stream_batch(opts: WriteOptions, sink_id: str, batch_id: int,
                        messages: Sequence[Optional[WriterCommitMessage]],
                        warn: Callable[[str], None] | None = None) -> int:
    """Publish one micro-batch exactly once; returns how many messages were stored now.
    ``parts[i]`` is the commit message of partition ``i`` (None for an empty slot)."""
    root = Path(opts.store)
    parts = [p if isinstance(p, StagedPart) else None for p in messages]
    if not any(p is not None and p.path is not None for p in parts):
        return 0
    with open_target(opts) as store:
        check_staged(root, parts)
        with store.write_lock():
            ledger = SinkLedger(store, sink_id)
            state = ledger.load()
            last = state.get("lastBatchId")
            if isinstance(last, int) and batch_id <= last:
                return 0
            base = {k: v for k, v in state.items() if k not in ("publishing", "done", "digest")}
            replay = state.get("publishing") == batch_id
            done, digest = state.get("done"), state.get("digest")
            progress = _Progress(ledger, base, batch_id, opts.sync)
            if not replay:
                progress.save()
        precheck(store, root, parts)
        drafts: Iterator[Draft] = keyed_drafts(root, parts, sink_id, batch_id)
        if replay:
            resumed = None
            if isinstance(done, int) and isinstance(digest, str):
                resumed = _resume(store, drafts, progress, done, digest)
            if resumed is None:
                (warn or say_warning)(f"sink {sink_id}: replay of batch {batch_id} differs from "
                                f"the interrupted publish; looking up every message")
                progress = _Progress(ledger, base, batch_id, opts.sync)
                drafts = (d for d in keyed_drafts(root, parts, sink_id, batch_id)
                          if not _stored(store, d))
            else:
                drafts = resumed
        n = publish(store, drafts, opts.sync, progress.on_chunk)
        with store.write_lock():
            ledger.save({**base, "lastBatchId": batch_id, "publishing": None})
        return n


def batch_stage_dir(sink_id: str, batch_id: int | None) -> str:
    """The staging directory of one micro-batch: named from the sink and the batch, so the
    fresh writer instance that commits or aborts it knows it without the tasks' messages."""
    return f"{STAGING_DIR}/s-{sink_id}-{batch_id if batch_id is not None else 'x'}"


def _current_batch_id() -> int | None:
    from pyspark import TaskContext
    tc = TaskContext.get()
    value = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    return int(value) if value is not None and str(value).isdigit() else None


def _stage_dirs(parts: Sequence[Optional[WriterCommitMessage]]) -> list[str]:
    return [str(Path(p.path).parent) for p in parts if isinstance(p, StagedPart) and p.path]


class MqctlStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write. Spark creates one writer per query for the tasks and a fresh one for
    each commit, so everything commit needs travels in the messages or in the names."""

    def __init__(self, opts: WriteOptions, sink_id: str) -> None:
        self.opts = opts
        self.sink_id = sink_id
        sweep_staging(Path(opts.store))
        # Taken here, in the driver's planner: the tasks record the driver (not their
        # executor) as the owner of the batch's staging directory.
        self.owner = owner_identity()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        rel = batch_stage_dir(self.sink_id, _current_batch_id())
        return write_staged(iterator, self.opts, rel, create_dir=True, owner=self.owner)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        try:
            commit_stream_batch(self.opts, self.sink_id, batchId, messages)
        finally:
            remove_staging(Path(self.opts.store),
                           [batch_stage_dir(self.sink_id, batchId), *_stage_dirs(messages)])

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        remove_staging(Path(self.opts.store),
                       [batch_stage_dir(self.sink_id, batchId), *_stage_dirs(messages)])
