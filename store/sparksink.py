"""Streaming writes to the ``mqctl`` Spark source, exactly once per micro-batch: the sink id,
the ledger ``STORE/spark-sinks/<sinkId>.json``, deterministic message keys and the stream
writer. Staging and publishing are :mod:`store.sparkwrite`'s."""
from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from .broker import Store
from .errors import UsageError
from .fsutil import atomic_write_json, ensure_dir, read_json_with_bak
from .record import PROP_UNIQ_KEY, Draft
from .sparkwrite import (
    STAGING_DIR, StagedPart, WriteOptions, precheck, publish, remove_staging, staged_drafts,
    write_staged,
)

SINKS_DIR = "spark-sinks"
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
