"""One write batch: placement, framing, commit and undo for every kind of put, in one place.

Every put goes through a :class:`WriteBatch`, made under the store's write lock: a single
message, a batch of drafts (transactional half and op messages, retry and dead-letter copies,
the delay scheduler's parked and delivered messages, Spark's publish all come as drafts), or a
producer's batch of raw bodies (``framing.py`` frames those, into this batch's buffer).
The batch owns

* placement: the commit-log position of each record (rolling to a new segment, with the
  segment's BLANK trailer, through :class:`~store.log.logappend.LogAppender`) and the dense
  queue offsets of each (topic, queue) it touches, starting at the queue's end;
* framing into one buffer per segment (the records' bytes; the layout is ``format.py``'s);
* atomicity across crashes, for a batch of several records (``atomicbatch.py``): each record
  framed with the flag ``ATOMIC_BATCH``, the last made the batch's end just before the write,
  so recovery cuts the batch whole if the write is cut short (one ``pwrite`` can be: pieces
  of a big batch, a kill inside the call, a power cut keeping part of it);
* the commit, in crash-safe order: one ``pwrite`` per segment of the commit log (``fdatasync``
  first for ``--flush sync``), then the consume-queue entries (one append per queue), then the
  key-index entries, then the checkpoint past the batch;
* the undo when any step fails: every file is cut back to where the batch started, the key
  index fenced, so nothing of the batch is visible.

It writes no file format of its own: the bytes are those of ``commitlog.py``,
``consumequeue.py``, ``index.py`` and ``checkpoint.py``, whose modules describe them.

Failpoints (``failpoints.py``): ``put-after-log``, ``put-after-cq``, ``put-after-index``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from store.errors import BadInputError, StoreError, io_error
from store.failpoints import failpoint
from store.log import atomicbatch
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.consumequeue import cut_back
from store.log.flush import DERIVED_FLUSH_INTERVAL_S
from store.log.index import key_hash
from store.log.logappend import LogAppender
from store.log.preflight import checkpoint_locked
from store.log.record import (
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    Draft,
    check_properties_size,
    encode,
    record_size,
    tags_code,
)
from store.log.results import PutResult

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.engine import Engine
    from store.log.topics import TopicConfig

# How far an async writer lets the durable point fall behind before it moves it itself
# (Durability.flush_durable, in a background thread): by volume, or by age.
ASYNC_FLUSH_BYTES = 64 * 1024 * 1024
# (by age: RocketMQ's flushCommitLogThoroughInterval, the longest its async flush leaves a
# write unsynced however small)
ASYNC_FLUSH_INTERVAL_S = 10.0
# ... by volume only once the oldest write the flush would cover is this old (RocketMQ's async
# flush interval): a burst is not fsynced under its own writes. On this kind of virtual
# machine an fsync of 64 MiB running beside the writes made a 100 MB burst of 64 KiB messages
# cost 2-4x the CPU in half the runs (5 in 10, against 1 in 10 without it; measured).
ASYNC_FLUSH_MIN_AGE_S = 0.5
_monotonic = time.monotonic
_NV, _PS = F.NAME_VALUE_SEP, F.PROPERTY_SEP
_uniq_key_of, _key_of = F.uniq_key_of, F.key_of


@dataclass(slots=True)
class QueueRun:
    """What a batch adds to one queue: packed consume-queue entries from offset ``first``."""

    first: int
    entries: bytearray = field(default_factory=bytearray)

    @property
    def next(self) -> int:
        """The queue offset the next entry gets."""
        return self.first + len(self.entries) // F.CQ_ENTRY_SIZE


class WriteBatch:
    """One batch of puts; make it, add records, :meth:`commit` — all under the write lock.

    Until :meth:`commit` nothing is written: a batch abandoned after an error (a refused
    property, a record too large) leaves the store as it was. ``atomic``: the batch is whole
    or gone after a crash too (its records flagged: ``atomicbatch.py``); the caller asks for it
    when it puts several records (one record is whole or invalid by its CRC)."""

    def __init__(self, engine: Engine, sync: bool, atomic: bool = False) -> None:
        self.engine = engine
        self.sync = sync
        # The SYSFLAG bits every record of the batch is framed with, and where the last record
        # placed begins (commit() makes it the batch's end).
        self.sysflag = atomicbatch.INSIDE if atomic else 0
        self.last_at = -1
        # The checkpoint, checked against the log's real end (recovering first if a writer
        # died mid-batch): the batch starts at its written end.
        engine.commitlog.checked = None   # (only what this batch's own look finds)
        self.cp = checkpoint_locked(engine)
        self.now = int(time.time() * 1000)
        # Store timestamps never go backwards, even when the clock does.
        self.store_ts = max(self.now, self.cp.last_store_ts)
        # (the write descriptor checkpoint_locked found linked, under this same lock hold)
        checked, engine.commitlog.checked = engine.commitlog.checked, None
        self.app = LogAppender(engine.commitlog, self.cp.written_end, checked)
        self.app.prealloc = sync   # (zeros written ahead: each sync's fdatasync then overwrites)
        self._topics: dict[str, TopicConfig] = {}
        self.queues: dict[tuple[str, int], QueueRun] = {}
        self._index_hashes: list[int] = []
        self._index_physs: list[int] = []

    # -- placement ---------------------------------------------------------------------------
    def topic(self, name: str, queue_id: int = -1) -> TopicConfig:
        """The topic's config, created on first send (see :meth:`Engine.ensure_topic_locked`)."""
        cfg = self._topics.get(name)
        if cfg is None:
            cfg = self._topics[name] = self.engine.ensure_topic_locked(name, queue_id)
        return cfg

    def queue_run(self, topic: str, queue_id: int) -> QueueRun:
        """What this batch adds to ``(topic, queue_id)``: its entries start at the queue's end.
        A framer that appends packed entries to ``entries`` moves ``next`` past them."""
        run = self.queues.get((topic, queue_id))
        if run is None:
            q = self.engine.queues.queue(topic, queue_id)
            first = q.write_end()
            if not q.end_checked:   # this handle's first batch to it, or its file shrank: cut short?
                from store.log.queueends import check_locked
                check_locked(self.engine, topic, queue_id, q)
                first = q.write_end()
            run = self.queues[(topic, queue_id)] = QueueRun(first)
        return run

    def add_entry(self, topic: str, queue_id: int, phys: int, size: int, tags_code: int) -> int:
        """Dispatch one record to a queue; its queue offset."""
        run = self.queue_run(topic, queue_id)
        qoff = run.next
        run.entries += F.CQ_ENTRY.pack(phys, size, tags_code)
        return qoff

    def index(self, key: str, phys: int) -> None:
        """Index ``key`` (``topic#key`` or ``#uniqkey``) for the record at ``phys``."""
        self._index_hashes.append(key_hash(key))
        self._index_physs.append(phys)

    def index_message(self, topic: str, uniq: str, keys: str | None, phys: int) -> None:
        """Index the record at ``phys`` by its unique key and by each of its ``KEYS``
        (space separated), as ``mqctl msg query`` looks them up."""
        self.index(_uniq_key_of(uniq), phys)
        if keys:
            for k in keys.split(" "):
                if k:
                    self.index(_key_of(topic, k), phys)

    def index_hashes(self, hashes: list[int], physs: list[int]) -> None:
        """Index keys given as their key hashes (``index.key_hash``), ``physs`` ascending.

        One list for every encoder of the batch, in log order (records are placed in order):
        the index skips an offset below its end as already indexed."""
        self._index_hashes += hashes
        self._index_physs += physs

    # -- the general encoder -------------------------------------------------------------------
    def put_drafts(self, drafts: list[Draft]) -> list[PutResult]:
        """Frame drafts (any topics, any properties, transactional flags) into the batch."""
        engine = self.engine
        now, store_ts = self.now, self.store_ts
        app = self.app
        results: list[PutResult] = []
        pid = engine.writer.pid
        gen = engine.writer.uniq_keys.next
        topic_bytes: dict[str, bytes] = {}
        own, keep = self.sysflag, ~atomicbatch.MASK   # (a draft's atomic flags are the batch's)
        for d in drafts:
            cfg = self.topic(d.topic, d.queue_id)
            topic_b = topic_bytes.get(d.topic)
            if topic_b is None:
                topic_b = topic_bytes[d.topic] = d.topic.encode()
            qid = engine.writer.select_queue(cfg, d)
            # Half and rollback messages of a transaction are not dispatched to a queue.
            dispatch = (d.sysflag & F.TX_MASK) in (F.TX_NOT, F.TX_COMMIT)
            qoff = self.queue_run(d.topic, qid).next if dispatch else 0
            props = d.properties
            uniq = props.get(PROP_UNIQ_KEY)
            if not uniq:
                uniq = gen(now)
                props = {PROP_UNIQ_KEY: uniq, **props}
            props_s = "".join([f"{k}{_NV}{v}{_PS}" for k, v in props.items() if v])
            seps = props_s.count(_PS)
            if seps != props_s.count(_NV) or seps != sum(1 for v in props.values() if v):
                raise BadInputError("a property name or value (tags, keys, sharding key included) "
                                    "contains the control characters \\x01 or \\x02")
            props_b = props_s.encode()
            check_properties_size(len(props_b))
            size = record_size(len(d.body), len(topic_b), len(props_b))
            phys = app.place(size)
            app.add(encode(topic_b, d.body, props_b, qid, qoff, phys, store_ts,
                           d.born_timestamp or now, pid, d.flag, d.sysflag & keep | own,
                           d.reconsume_times, d.prepared_tx_offset))
            if dispatch:
                tags = d.tags_code if d.tags_code is not None else tags_code(props.get(PROP_TAGS))
                self.add_entry(d.topic, qid, phys, size, tags)
            if (d.sysflag & F.TX_MASK) != F.TX_ROLLBACK:
                self.index_message(d.topic, uniq, props.get(PROP_KEYS), phys)
            results.append(PutResult(d.topic, qid, qoff, phys, uniq, store_ts))
        if results:
            self.last_at = results[-1].commitlog_offset
        return results

    # -- commit and undo -----------------------------------------------------------------------
    def commit(self) -> None:
        """Write the batch: log, then consume queues, then index, then the checkpoint. Any
        failure cuts every file back (:meth:`undo`), so nothing of the batch is visible."""
        engine, app, cp = self.engine, self.app, self.cp
        if app.pos == app.start_end:
            return   # nothing placed
        if self.sysflag:
            atomicbatch.end_framed(app, self.last_at)
        app.flush()
        if self.sync:
            try:   # through the descriptor the batch was written with
                engine.durability.sync_prefix(app.start_end, app.pos, cp, app.last_fd)
            except OSError as exc:
                app.undo()
                raise io_error(exc, f"sync commit log {app.start_end}-{app.pos}") from exc
        failpoint("put-after-log")
        cut: list[tuple[str, int]] = []
        try:
            for (topic, qid), run in self.queues.items():
                if run.entries:
                    # (run.first is the queue's write_end, found in this batch)
                    cut += engine.queues.append(topic, qid, run.first, run.entries, checked=True)
            failpoint("put-after-cq")
            engine.index.add_hashes(self._index_hashes, self._index_physs, self.store_ts)
            failpoint("put-after-index")
        except StoreError:
            self.undo(cut)
            raise
        hints = engine.hints
        synced = min(max(cp.synced_end, hints.synced), app.pos)
        if hints.derived > cp.derived_end:
            derived, derived_at = hints.derived, hints.derived_at
        else:
            derived, derived_at = cp.derived_end, cp.derived_at
        engine.checkpoint_file.write(ckpt.Checkpoint(
            app.pos, self.store_ts, synced, engine.writer.boot_id, min(derived, synced), derived_at),
            checked=True)   # (read at the batch's start, under this lock hold)
        after_others = engine.writer.last_write[1] != app.start_end   # (the batch before: not this handle's)
        engine.writer.last_write = (app.start_end, app.pos)
        if not self.sync:
            now = _monotonic()
            if not hints.unflushed_since:
                # The oldest write a flush would cover may be another writer's (a sender that
                # wrote a burst and exited before it was old enough): it is at least as old as
                # the batch before this one, which the checkpoint dates (wall clock).
                before = ((self.now - cp.last_store_ts) / 1000
                          if after_others and derived < app.start_end else 0.0)
                hints.unflushed_since = now - min(max(before, 0.0), ASYNC_FLUSH_MIN_AGE_S)
            if ((app.pos - derived >= ASYNC_FLUSH_BYTES and now - hints.unflushed_since >= ASYNC_FLUSH_MIN_AGE_S)
                    or (derived < app.pos and time.time() - derived_at >= ASYNC_FLUSH_INTERVAL_S)):
                # RocketMQ's async flush runs in a broker thread; here the writer that finds the
                # durable point too far behind moves it (rarely: it bounds how much a power cut
                # can take, and how far back the recovery after one must re-dispatch)
                hints.flush_due = True
                hints.unflushed_since = 0.0   # (the next batch is the first the flush does not cover)
        elif derived < app.pos and time.time() - derived_at >= DERIVED_FLUSH_INTERVAL_S:
            # A ``--flush sync`` batch made only the log durable: its writer moves the durable
            # point of the derived files every ``DERIVED_FLUSH_INTERVAL_S`` too (as a group
            # commit's ``sync_log`` does), else the recovery after a power cut would re-dispatch
            # all it ever wrote. In the background, as an async writer's: it promises nothing
            # to the send, which is acknowledged without waiting for it.
            hints.flush_due = True

    def undo(self, cut: list[tuple[str, int]]) -> None:
        """Cut the consume-queue files in ``cut`` (path, old size), then the commit log, back
        to where the batch started, and fence the key index (best effort: called on failure)."""
        cut_back(cut)
        self.app.undo()
        # An index file may have taken part of the batch (and moved its end offset past it)
        # before the next one failed: fence it back, or the records later written at those
        # offsets would be skipped as "already indexed".
        try:
            self.engine.index.fence(self.app.start_end)
        except (OSError, StoreError):
            pass
