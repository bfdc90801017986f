"""The store façade: open a store directory, create topics, put and pull messages.

There is no broker process: every ``mqctl`` process opens the directory with :meth:`Store.open`
and they coordinate through it. Writers serialise on one exclusive portalocker lock on
``STORE/lock``, taken once per batch (never per message); inside it every kind of put goes
through one :class:`~store.log.writebatch.WriteBatch`, which

1. checks the checkpoint against the commit log's real end and recovers if a previous writer
   died mid-batch or the machine restarted (``recovery.py``),
2. assigns each message its queue and dense queue offset and the store timestamp,
3. appends the records (one ``pwrite`` per segment), then the consume-queue entries, then the
   key-index entries, and
4. moves the checkpoint past the batch (or, on any failure, cuts every file back).

Readers take no lock: they read consume-queue entries, then the records those point at, and
check every record's CRC before handing it out.

Failpoints (``failpoints.py``): ``put-after-log``, ``put-after-cq``, ``put-after-index`` inside
a batch (``writebatch.py``); ``sync-before-fsync`` in :meth:`Store.sync_log`, before a batch is
made durable.

Around it: ``settings.py`` (:class:`StoreSettings`, ``store.json``), ``results.py`` (what puts
and pulls return), ``writebatch.py`` (placement, commit and undo of a batch) and
``bodywrite.py`` (the framing of :meth:`Store.put_bodies`' raw bodies).
"""
from __future__ import annotations

import os
import random
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from store import names
from store.errors import (
    BadInputError,
    CorruptionError,
    DataError,
    MessageNotFoundError,
    MessageTooLargeError,
    OperationError,
    StoreError,
    StoreIOError,
    StoreNotFoundError,
    TopicExistsError,
    TopicNotFoundError,
    UsageError,
    io_error,
)
from store.failpoints import failpoint
from store.flock import lock_exclusive, unlock
from store.fsutil import (
    atomic_write_json,
    ensure_dir,
    fdatasync_path,
    read_json_with_bak,
    segment_bases,
    sync_dir_if_changed,
)
from store.layout import Layout
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import indexfence, topicdelete
from store.log.bodywrite import Body, frame_bodies
from store.log.bulk import fetch_span, pull_columns
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue, remove_queues
from store.log.entrysearch import find_record, records_with_uniq_key
from store.log.index import KeyIndex
from store.log.record import (
    PROP_UNIQ_KEY,
    Draft,
    Message,
    RecordError,
    UniqKeyGenerator,
    decode,
    decode_offset_msg_id,
    has_separator,
    java_hash,
)
from store.log.results import BatchResult, BodiesResult, PullResult, PutResult
from store.log.settings import StoreSettings
from store.log.topics import TopicConfig, TopicTable
from store.log.writebatch import WriteBatch

__all__ = ["SYSTEM_TOPIC_QUEUES", "Store", "open_store"]

# Consume queues whose last segment a writing handle keeps open between batches.
MAX_OPEN_TAILS = 64

# How often --flush sync writers move the durable point of the consume queues and index
# themselves (Store.sync_log); async writers move it by volume or age (writebatch.py).
DERIVED_FLUSH_INTERVAL_S = 2.0

# System topics created on demand, with their queue counts (RocketMQ's numbers).
SYSTEM_TOPIC_QUEUES = {
    names.SCHEDULE_TOPIC: 19,   # levels 1..18 in queues 0..17; queue 18 holds free durations
    names.HALF_TOPIC: 1,
    names.OP_HALF_TOPIC: 1,
    names.CHECK_MAX_TOPIC: 1,
}


def _default_warn(msg: str) -> None:
    sys.stderr.write(f"mqctl: warning: {msg}\n")


class Store:
    def __init__(self, root: Path, settings: StoreSettings, warn: Callable[[str], None]) -> None:
        self.root = root
        self.layout = Layout(root)
        self.settings = settings
        self.warn = warn
        self.commitlog = CommitLog(self.layout.commitlog_dir, settings.commitlog_segment_size)
        self.index = KeyIndex(self.layout.index_dir)
        self.topic_table = TopicTable(self.layout.topics_json, warn=warn)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        # The queues this handle appended to most recently, oldest first: each keeps its last
        # segment open for the next batch (ConsumeQueue.write_end), at most MAX_OPEN_TAILS.
        self._tails: dict[tuple[str, int], None] = {}
        self._write_lock = _WriteLock(root, self.layout.write_lock)
        # Under the write lock, for the batch encoders (this class and ``bodywrite.py``):
        # the next round-robin queue per topic, the unique-key generator, the producer pid.
        self.round_robin: dict[str, int] = {}
        self.uniq_keys = UniqKeyGenerator()
        self.boot_id = ckpt.current_boot_id()
        self.pid = os.getpid() & 0x7FFFFFFF
        # (start, end) of this handle's last batch: what sync_log needs
        # when the caller makes a batch durable itself, after the write lock is released.
        self.last_write: tuple[int, int] = (0, 0)
        # What this handle has made durable itself (checkpoint.Hints).
        self.hints = ckpt.Hints()
        self.checkpoint_file = ckpt.CheckpointFile(self.layout.checkpoint)   # the writer's, under the lock
        self._derived_flushed = time.monotonic()
        self._flusher: threading.Thread | None = None

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | Path, *, create: bool = False, settings: StoreSettings | None = None,
             warn: Callable[[str], None] = _default_warn, recover: bool = True) -> "Store":
        """Open the store at ``root``; with ``create`` make it first if it does not exist.

        A store that was left dirty (a writer died mid-batch, or the machine restarted) is
        recovered here, under the write lock, before anything is read."""
        root = Path(root).expanduser()
        layout = Layout(root)
        if not layout.store_json.exists():
            if not create:
                if root.exists() and any(root.iterdir()):
                    raise StoreNotFoundError(f"{root} is not an mqctl store (no store.json)")
                raise StoreNotFoundError(f"no store at {root} (create one with: mqctl init)")
            cls._initialise(root, settings or StoreSettings())
        cls._check_owner(root)
        try:
            obj = read_json_with_bak(layout.store_json, warn=warn)
            st = StoreSettings.from_json(obj)
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{layout.store_json}: {exc}") from exc
        opened = cls(root, st, warn)
        if recover:
            opened.recover_if_dirty()
        return opened

    @staticmethod
    def _check_owner(root: Path) -> None:
        st = os.stat(root)
        if st.st_uid != os.getuid():
            raise OperationError(
                f"store {root} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): refusing to use it")

    @staticmethod
    def _initialise(root: Path, settings: StoreSettings) -> None:
        settings.validate(strict=False)
        if root.exists() and not root.is_dir():
            raise UsageError(f"{root} exists and is not a directory")
        if root.exists() and any(p.name != "store.json" for p in root.iterdir()):
            raise UsageError(f"{root} is not empty and is not an mqctl store")
        ensure_dir(root)
        layout = Layout(root)
        for d in (layout.commitlog_dir, layout.consumequeue_dir, layout.index_dir, layout.config_dir):
            ensure_dir(d)
        # store.json is written once; its .bak copy is the fallback a damaged one names
        atomic_write_json(layout.store_json.with_name("store.json.bak"), settings.to_json(), keep_bak=False)
        atomic_write_json(layout.store_json, settings.to_json(), keep_bak=False)

    def close_queues(self) -> None:
        """Drop the cached descriptors of every consume queue (after files were removed)."""
        for q in self._queues.values():
            q.close()

    def close(self) -> None:
        if self.hints.synced:
            self._record_synced()
        self.commitlog.close()
        self.index.close()
        self.checkpoint_file.close()
        for q in self._queues.values():
            q.close()
        self._write_lock.close()

    def _record_synced(self) -> None:
        """Put the durable end this handle reached into the checkpoint: batches carry the
        previous sync's end (a ``--flush sync`` writer syncs after the lock is released), so
        without this the last batch's sync would never be recorded, and a log later found
        cut below it could not be told from a torn tail (``store check``)."""
        try:
            with self.write_lock():
                cp = self.checkpoint_file.read()
                if (cp is not None and cp.boot_id == self.boot_id
                        and cp.synced_end < self.hints.synced <= cp.written_end):
                    self.checkpoint_file.write(replace(cp, synced_end=self.hints.synced))
        except StoreError:
            pass   # best effort: the checkpoint stays a lower bound

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the write lock --------------------------------------------------------------------
    def write_lock(self) -> "_WriteLock":
        """The store's exclusive write lock (held for one batch; re-entrant per handle):
        ``with store.write_lock(): ...``."""
        return self._write_lock

    # -- topics ----------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicConfig]:
        return self.topic_table.load()

    def topic(self, name: str) -> TopicConfig:
        t = self.topics().get(name)
        if t is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        return t

    def has_topic(self, name: str) -> bool:
        return name in self.topics()

    def create_topic(self, name: str, queues: int | None = None, order: bool = False,
                     *, system: bool = False) -> tuple[TopicConfig, bool]:
        """Create a topic; returns (config, created). Exists with another shape → exit 4."""
        (names.validate_any_topic if system else names.validate_topic)(name)
        queues = self.settings.default_queues if queues is None else queues
        if not 1 <= queues <= 1024:
            raise UsageError(f"--queues must be between 1 and 1024, got {queues}")
        with self.write_lock():
            return self._create_topic_locked(name, queues, order)

    def _create_topic_locked(self, name: str, queues: int, order: bool) -> tuple[TopicConfig, bool]:
        topics = dict(self.topic_table.load())
        cur = topics.get(name)
        if cur is not None:
            if cur.queues != queues or cur.order != order:
                raise TopicExistsError(
                    f"topic {name!r} exists with {cur.queues} queue{'' if cur.queues == 1 else 's'}"
                    f"{' (ordered)' if cur.order else ''}")
            return cur, False
        cfg = TopicConfig(name, queues, order, int(time.time() * 1000), self.commitlog.end())
        # queue files of no topic (an older version's killed `topic delete`) are not this one's
        remove_queues(self.layout.topic_cq_dir(name))
        topics[name] = cfg
        self.topic_table.save(topics)
        return cfg, True

    def delete_topic(self, name: str) -> None:
        """Forget a topic: its config, consume queues and offsets. Records stay in the commit
        log until retention removes their segment (as RocketMQ)."""
        from store.client.offsets import ClusterOffsetStore
        with self.write_lock():
            cfg = self.topic_table.load().get(name)
            if cfg is None:
                raise TopicNotFoundError(f"topic {name!r} does not exist")
            for key in [k for k in self._queues if k[0] == name]:
                self._queues.pop(key).close()
            topicdelete.delete_topic(self.layout, self.topic_table, cfg, ClusterOffsetStore(self.layout).delete_topic)

    def ensure_topic_locked(self, name: str, queue_id: int = -1) -> TopicConfig:
        """The topic's config, creating it on first send. ``queue_id`` (an explicit queue the
        caller will use) is checked *before* the topic is created, so a refused send leaves
        no topic behind."""
        t = self.topic_table.load().get(name)
        if t is not None:
            return t
        if name in SYSTEM_TOPIC_QUEUES:
            queues = SYSTEM_TOPIC_QUEUES[name]
        elif names.is_system_topic(name):  # %RETRY%G and %DLQ%G: one queue each, as RocketMQ
            queues = 1
        elif not self.settings.auto_create_topics:
            raise TopicNotFoundError(
                f"topic {name!r} does not exist and this store does not create topics on send "
                f"(create it with: mqctl topic create {name})")
        else:
            queues = self.settings.default_queues
        if queue_id >= queues:
            raise UsageError(f"queue {queue_id} does not exist: topic {name!r} would be created "
                             f"with queues 0-{queues - 1}")
        return self._create_topic_locked(name, queues, False)[0]

    # -- queues ----------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = ConsumeQueue(self.layout.queue_dir(topic, queue_id), self.settings.cq_segment_entries)
            self._queues[key] = q
        return q

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.queue(topic, queue_id).max_offset()

    def append_entries(self, topic: str, queue_id: int, first: int,
                       entries: bytes | bytearray) -> list[tuple[str, int]]:
        """Append a batch's consume-queue entries (write lock held): the queue keeps its
        segment open for the next batch, the least recently used beyond ``MAX_OPEN_TAILS``
        closes theirs (a writer to thousands of queues stays within its descriptor limit).
        The undo list of :meth:`ConsumeQueue.append`."""
        key = (topic, queue_id)
        undo = self.queue(topic, queue_id).append(first, entries, keep=True)
        tails = self._tails
        if key in tails:
            del tails[key]   # to the end: most recently used
        elif len(tails) >= MAX_OPEN_TAILS:
            old = next(iter(tails))
            del tails[old]
            q = self._queues.get(old)
            if q is not None:
                q.drop_tail()
        tails[key] = None
        return undo

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first offset whose record is still in the commit log (retention aware)."""
        q = self.queue(topic, queue_id)
        lo, hi = q.min_offset(), q.max_offset()
        cl_min = self.commitlog.min_offset()
        first = q.entry(lo) if lo < hi else None
        if first is None or first[0] >= cl_min:
            return lo
        while lo < hi:  # first entry whose record is still present
            mid = (lo + hi) // 2
            e = q.entry(mid)
            if e is not None and e[0] >= cl_min:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- writing ---------------------------------------------------------------------------
    def select_queue(self, topic: TopicConfig, draft: Draft) -> int:
        if draft.queue_id >= 0:
            if draft.queue_id >= topic.queues:
                raise UsageError(f"queue {draft.queue_id} does not exist: topic {topic.name!r} "
                                 f"has queues 0-{topic.queues - 1}")
            return draft.queue_id
        if draft.sharding_key is not None:
            # Documented, stable: |Java String.hashCode(key)| mod queue count (RocketMQ's
            # SelectMessageQueueByHash), so producers in any language agree.
            return abs(java_hash(draft.sharding_key)) % topic.queues
        if topic.order:
            raise UsageError(f"topic {topic.name!r} is ordered: give a sharding key (-s) or a queue (-q)")
        n = self.round_robin.get(topic.name)
        if n is None:
            n = random.randrange(topic.queues)
        self.round_robin[topic.name] = n + 1
        return n % topic.queues

    def put(self, drafts: list[Draft], *, sync: bool = False) -> list[PutResult]:
        """Store a batch under one lock. All or nothing: on an error nothing is visible."""
        if not drafts:
            return []
        max_size = self.settings.max_message_size
        for d in drafts:
            if len(d.body) > max_size:
                raise MessageTooLargeError(
                    f"message body of {len(d.body)} bytes exceeds the store's limit of {max_size} bytes")
        with self.write_lock():
            batch = WriteBatch(self, sync)
            results = batch.put_drafts(drafts)
            batch.commit()
        if self.hints.flush_due:
            self._flush_in_background()
        return results

    def put_bodies(self, topic: str, bodies: Sequence[Body], *, properties: dict[str, str] | None = None,
                   queue_id: int = -1, sharding_keys: list[str | None] | None = None,
                   sync: bool = False) -> BatchResult:
        """The producer's fast path: many bodies for one topic sharing their properties.

        Same records and guarantees as :meth:`put`; ``sharding_keys`` gives each body its own
        key (``None`` entries fall back to ``queue_id`` or round robin). A body may be any
        bytes-like object (a memoryview of a read buffer is copied once, into the batch)."""
        if not bodies:
            return BatchResult(topic, [], [], [], 0)
        max_size = self.settings.max_message_size
        longest = max(map(len, bodies))
        if longest > max_size:
            raise MessageTooLargeError(
                f"message body of {longest} bytes exceeds the store's limit of {max_size} bytes")
        if sharding_keys is not None and len(sharding_keys) != len(bodies):
            raise ValueError("put_bodies: one sharding key (or None) per body")
        props = dict(properties or {})
        if PROP_UNIQ_KEY in props:
            raise UsageError("a batch cannot share one unique key")
        if any(has_separator(x) for kv in props.items() for x in kv) or (
                sharding_keys is not None and any(k is not None and has_separator(k) for k in sharding_keys)):
            raise BadInputError("a property name or value (tags, keys, sharding key included) "
                                "contains the control characters \\x01 or \\x02")
        with self.write_lock():
            batch = WriteBatch(self, sync)
            result = frame_bodies(batch, topic, bodies, props, queue_id, sharding_keys)
            batch.commit()
        if self.hints.flush_due:
            self._flush_in_background()
        return result

    def sync_log(self, start: int, end: int) -> None:
        """Make the commit log durable below ``end`` (``fdatasync``): the ``--flush sync``
        acknowledgement.

        For a writer that wants ``--flush sync`` without holding the write lock through the
        fsync: it writes its batch without ``sync``, then calls this with :attr:`last_write`
        and acknowledges the batch only when it returns.

        Durability is a prefix: every segment from the store's last known durable point is
        synced, not only ``[start, end)``. Otherwise another writer's unsynced records in an
        earlier segment could be lost in a power cut while this batch survives, leaving a hole
        in the log below an acknowledged record. A segment's name was made durable when it
        was created (by the writer that created it). Every
        ``DERIVED_FLUSH_INTERVAL_S`` the consume queues and key index are synced too, which
        bounds how far back recovery re-dispatches after a power cut."""
        failpoint("sync-before-fsync")
        try:
            # The checkpoint's durable point matters only below what this handle synced itself
            # (a group-committing sender's next range starts where its last one ended).
            cp = ckpt.read(self.layout.checkpoint) if self.hints.synced < start else None
            self.sync_prefix(start, end, cp)
            if time.monotonic() - self._derived_flushed >= DERIVED_FLUSH_INTERVAL_S:
                self._sync_derived(end, cp if cp is not None else ckpt.read(self.layout.checkpoint))
        except OSError as exc:
            raise io_error(exc, f"sync commit log {start}-{end}") from exc

    def sync_written(self) -> None:
        """Make the commit log durable up to its current end (a prefix, see :meth:`sync_log`).

        For a writer that is about to make a *decision* durable which depends on records it
        wrote with ``--flush async``: a consumer committing the offset of a message it sent
        back to the retry topic, the delay scheduler or the transaction check service moving
        their progress past what they re-stored. Without it, a power cut could keep the
        progress and lose the copy: the message would be gone."""
        try:
            end = self.commitlog.end()
            self.sync_prefix(end, end, ckpt.read(self.layout.checkpoint))
        except OSError as exc:
            raise io_error(exc, "sync the commit log") from exc

    def flush_durable(self, end: int | None = None) -> None:
        """Make everything written below ``end`` (default: the log's end) durable: the commit
        log as a prefix, then the consume queues and key index that point into it. A power cut
        after this loses nothing below ``end``, and the recovery after it starts there."""
        try:
            cp = ckpt.read(self.layout.checkpoint)
            if end is None:
                end = cp.written_end if cp is not None else self.commitlog.end()
            self.sync_prefix(end, end, cp)
            self._sync_derived(end, cp)
        except OSError as exc:
            raise io_error(exc, "sync the store") from exc
        self.hints.flush_due = False

    def _flush_in_background(self) -> None:
        """An async writer's periodic flush (RocketMQ's FlushRealTimeService), in a daemon
        thread so that the writer never waits for the disk: at most one at a time per
        handle; one cut short by the process exiting simply did not move the durable point."""
        self.hints.flush_due = False
        t = self._flusher
        if t is not None and t.is_alive():
            return
        self._flusher = threading.Thread(target=self._flush_quietly, name="mqctl-flush", daemon=True)
        self._flusher.start()

    def _flush_quietly(self) -> None:
        try:
            self.flush_durable()
        except StoreError as exc:   # nothing was promised: the next flush tries again
            self.warn(f"background flush failed: {exc}")

    def sync_prefix(self, start: int, end: int, cp: ckpt.Checkpoint | None) -> None:
        log = self.commitlog
        known = max(self.hints.synced, cp.synced_end if cp is not None else 0)
        frm = min(start, known)
        if log.segment_of(frm) != log.segment_of(max(end - 1, frm)):
            # more than one segment: none below the oldest one retention left (a segment that
            # is gone needs nothing either way: datasync skips it; this only skips the walk)
            frm = max(frm, log.min_offset())
        base = log.segment_of(frm)
        while base < end:
            log.datasync(base)
            base += log.segment_size
        if end > self.hints.synced:
            self.hints.synced = end

    def _sync_derived(self, end: int, cp: ckpt.Checkpoint | None) -> None:
        """Sync the consume-queue segments and index files written since the last derived
        flush, then claim ``end`` (at most the checkpoint's written end: entries below it were
        written before that checkpoint was) as durable for them."""
        claim = min(end, cp.written_end) if cp is not None else 0
        since_s = cp.derived_at if cp is not None else 0
        since_end = cp.derived_end if cp is not None else 0
        started = int(time.time())
        root = self.layout.consumequeue_dir
        try:
            topic_dirs = os.listdir(root)
        except FileNotFoundError:
            topic_dirs = []
        # Directory entries too (new queues and segments are not synced when made): a
        # directory whose mtime moved since the last flush is fsynced, after its files.
        changed_dirs: list[Path] = []
        for topic in topic_dirs:
            try:
                qdirs = os.listdir(root / topic)
            except (FileNotFoundError, NotADirectoryError):
                continue
            changed_dirs.append(root / topic)
            for q in qdirs:
                qdir = root / topic / q
                changed_dirs.append(qdir)
                for i, base in enumerate(reversed(segment_bases(qdir))):
                    path = qdir / F.segment_name(base)
                    if i > 0 and since_s:
                        try:
                            if os.stat(path).st_mtime < since_s - 2:
                                break   # older segments were complete at the last flush
                        except FileNotFoundError:
                            continue
                    fdatasync_path(path)
        for d in reversed(changed_dirs):   # children before parents
            sync_dir_if_changed(d, since_s)
        sync_dir_if_changed(root, since_s)
        self.index.sync_files(since_end, since_s)
        if claim > self.hints.derived:
            self.hints.derived, self.hints.derived_at = claim, started
        self._derived_flushed = time.monotonic()

    def checkpoint_locked(self) -> ckpt.Checkpoint:
        """The checkpoint, after making sure it matches the log (write lock held)."""
        cp = self.checkpoint_file.read()
        if cp is None or cp.written_end != self.commitlog.end() or cp.boot_id != self.boot_id:
            from store.log.recovery import recover
            recover(self)
            cp = self.checkpoint_file.read()
            assert cp is not None
        return cp

    def ensure_recovered(self) -> None:
        """Recover now if a writer died mid-batch since this handle was opened.

        Call it inside ``with store.write_lock():`` before reads that decide what to write
        (``transaction.py``): consume queues and the key index then cover every record in the
        log, including the last records of a writer that was killed after this handle was
        opened, which the index would otherwise not show until the next ``put``."""
        with self.write_lock():
            self.checkpoint_locked()

    def recover_if_dirty(self) -> None:
        cp = ckpt.read(self.layout.checkpoint)
        try:
            end = self.commitlog.end()
        except OSError:
            return
        # what a killed `store recover` or `topic delete` left half done (recovery finishes it)
        unfinished = indexfence.rebuilding(self.index) or bool(topicdelete.pending(self.layout))
        if cp is not None and cp.written_end == end and cp.boot_id == self.boot_id and not unfinished:
            return
        if cp is None and end == 0 and not self.index.files() and not any(self.layout.consumequeue_dir.glob("*/*/*")):
            return   # a new store: nothing written yet, nothing to check
        try:
            with self.write_lock():
                if unfinished:
                    from store.log.recovery import recover
                    recover(self)
                self.checkpoint_locked()
        except StoreIOError as exc:
            # A read-only store can still be read: consume queues only point at whole records.
            self.warn(f"store needs recovery but cannot be written ({exc}); reading what is complete")

    # -- reading ---------------------------------------------------------------------------
    def get(self, commitlog_offset: int, size: int | None = None) -> Message:
        try:
            return self.commitlog.read(commitlog_offset, size)
        except RecordError as exc:
            raise MessageNotFoundError(
                f"no valid message at commit-log offset {commitlog_offset}: {exc.reason}") from exc
        except OSError as exc:
            raise io_error(exc, f"read commit log at {commitlog_offset}") from exc

    def pull(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
             tag_codes: frozenset[int] | None = None, tags: frozenset[str] | None = None,
             max_bytes: int = 4 * 1024 * 1024) -> PullResult:
        """Up to ``max_count`` messages of one queue from ``offset``.

        Tag filtering is done on the consume queue's tag code first and then exactly on the
        record (hash collisions removed), as RocketMQ's broker and client do together. A
        record that fails its CRC is never returned: it is listed in ``damaged`` and skipped.
        """
        q = self.queue(topic, queue_id)
        max_off = q.max_offset()
        if offset >= max_off:
            return PullResult([], offset, max_off)
        entries = q.read_entries(offset, min(max_count, max_off - offset))
        if not entries:
            why = q.invalid_at(offset)
            if why is None:
                return PullResult([], offset, max_off)
            # A bad entry: its record is looked for in the log (store/log/entrysearch.py)
            found = find_record(self.commitlog, q, topic, queue_id, offset)
            if found is None:
                return PullResult([], offset + 1, max_off, [(offset, why)])
            keep = tags is None or found.tags in tags
            return PullResult([found] if keep else [], offset + 1, max_off)
        msgs: list[Message] = []
        damaged: list[tuple[int, str]] = []
        entries, lo, data = fetch_span(self.commitlog, entries, max_bytes)
        span = memoryview(data)   # decode() reads a view in place
        span_len = len(span)
        nxt = offset
        total_bytes = 0
        qoff = offset - 1
        for phys, size, tcode in entries:
            qoff += 1
            nxt = qoff + 1
            if tag_codes is not None and tcode not in tag_codes:
                continue
            try:
                start = phys - lo
                if 0 <= start and start + size <= span_len:
                    m = decode(span, start, start + size)
                    if m.commitlog_offset != phys:
                        raise RecordError("record offset does not match its consume-queue entry")
                else:
                    m = self.commitlog.read(phys, size)
                if m.queue_offset != qoff or m.queue_id != queue_id or m.topic != topic:
                    raise RecordError("record does not match its consume-queue entry")
            except RecordError as exc:
                found = find_record(self.commitlog, q, topic, queue_id, qoff)
                if found is None:
                    damaged.append((qoff, f"commit-log offset {phys}: {exc.reason}"))
                    continue
                m = found
            if tags is not None and m.tags not in tags:
                continue
            msgs.append(m)
            total_bytes += size
            if total_bytes >= max_bytes:
                break
        return PullResult(msgs, nxt, max_off, damaged)

    def pull_bodies(self, topic: str, queue_id: int, offset: int, max_count: int = 256,
                    max_bytes: int = 4 * 1024 * 1024, views: bool = False) -> BodiesResult:
        """Only the bodies of up to ``max_count`` messages of one queue from ``offset``, for
        readers that need nothing else (``consume`` writing raw bodies, no tag filter).

        Every record gets the same checks as in :meth:`pull` (see :mod:`store.log.bulk`), but no
        :class:`Message` is built: about three times cheaper per message. ``views``: bodies of
        1 KiB and more may come as memoryviews into the read's buffer instead of copies (for
        a caller that writes them out and lets go)."""
        c = pull_columns(self, topic, queue_id, offset, max_count, max_bytes, bodies_only=True, views=views)
        return BodiesResult(c.bodies, c.offsets, c.next_offset, c.max_offset, c.damaged)

    def iter_queue(self, topic: str, queue_id: int, start: int, end: int | None = None,
                   batch: int = 256) -> Iterator[Message]:
        """Every message of a queue in ``[start, end)`` (damaged records are skipped with a
        warning)."""
        end = self.max_offset(topic, queue_id) if end is None else end
        off = max(start, self.min_offset(topic, queue_id))
        while off < end:
            res = self.pull(topic, queue_id, off, min(batch, end - off))
            for qoff, why in res.damaged:
                self.warn(f"skipping damaged message {topic}/{queue_id}@{qoff}: {why}")
            yield from res.messages
            if res.next_offset <= off:
                break
            off = res.next_offset

    def find(self, msg_id: str, strict: bool = False) -> Message:
        """A message by offset id or by unique key (offset id first, as mqadmin).

        ``MessageNotFoundError`` when no stored message has it (or ``msg_id`` is not 32 hex
        digits). A damaged record is never served; with ``strict`` (a person asking for this
        message: ``mqctl msg show``) it is not passed off as missing either, but raised as
        ``CorruptionError``."""
        msg_id = msg_id.strip()
        if len(msg_id) != 32 or any(c not in "0123456789abcdefABCDEF" for c in msg_id):
            # exit 3 like any id the store does not have, saying what an id looks like
            raise MessageNotFoundError(f"no message with id {msg_id!r} (a message id is 32 hex digits: "
                                       "an offset id or a unique key)")
        damage: list[tuple[int, str]] = []
        off = decode_offset_msg_id(msg_id)
        if off is not None:
            m = self._read_live(off, damage)
            if m is not None and m.msg_id == msg_id.upper():
                return m
        index_damage: list[str] = []
        if indexfence.rebuilding(self.index):   # a rebuild was cut short: its files may lack the key
            hits = records_with_uniq_key(self.commitlog, msg_id)
        else:
            hits = self.index.lookup("#" + msg_id, limit=64, damaged=index_damage)
        for phys in hits:
            m = self._read_live(phys, damage)
            if m is not None and m.uniq_key == msg_id:
                return m
        if damage and strict:
            raise self._damage_error(*damage[0])
        if index_damage and strict:
            raise _index_damage_error(index_damage[0])
        raise MessageNotFoundError(f"no message with id {msg_id!r}")

    def find_all(self, uniq_key: str, limit: int = 64) -> list[Message]:
        """Every stored copy carrying a unique key (retries and DLQ copies keep it)."""
        out = []
        for phys in self.index.lookup("#" + uniq_key, limit=limit):
            try:
                m = self.commitlog.read(phys)
            except (RecordError, OSError):
                continue
            if m.uniq_key == uniq_key:
                out.append(m)
        return sorted(out, key=lambda m: m.commitlog_offset)

    def query_key(self, topic: str, key: str, limit: int = 64, strict: bool = False) -> list[Message]:
        """Messages of ``topic`` whose KEYS contain ``key``, newest first, via the index.
        Damaged records are skipped; with ``strict`` (``mqctl msg query``) the first one the
        index leads to raises ``CorruptionError`` instead."""
        out = []
        damage: list[tuple[int, str]] = []
        index_damage: list[str] = []
        for phys in self.index.lookup(f"{topic}#{key}", limit=limit * 4, damaged=index_damage):
            m = self._read_live(phys, damage)
            if m is not None and m.topic == topic and key in m.keys:
                out.append(m)
                if len(out) >= limit:
                    break
        if damage and strict:
            raise self._damage_error(*damage[0])
        if index_damage and strict and not out:
            raise _index_damage_error(index_damage[0])
        return out

    def _read_live(self, phys: int, damage: list[tuple[int, str]]) -> Message | None:
        """The record at ``phys``; None when it is not there (cleaned away, past the end) or
        damaged — damage inside the live log is noted in ``damage``."""
        try:
            return self.commitlog.read(phys)
        except (RecordError, OSError) as exc:
            # damage: a record starts here (its magic code says so) inside the live log, and
            # does not check out; anything else (an offset id that points between records,
            # a segment cleaned away) is simply not there
            if not self.commitlog.min_offset() <= phys < self.commitlog.end():
                return None
            try:
                head = self.commitlog.read_bytes(phys, 8)
            except OSError:
                return None
            if len(head) == 8 and int.from_bytes(head[4:], "big") in (F.MAGIC_V1, F.MAGIC_V2):
                damage.append((phys, str(exc)))
            return None

    def _damage_error(self, phys: int, why: str) -> CorruptionError:
        path = self.commitlog.segment_path(self.commitlog.segment_of(phys))
        return CorruptionError(str(path), phys - self.commitlog.segment_of(phys),
                               f"damaged message: {why} (run: mqctl store check)")

    def store_timestamp_at(self, phys: int) -> int:
        raw = self.commitlog.read_bytes(phys + F.OFF_STORE_TIMESTAMP, 8)
        return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1

    def search_offset(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """First offset whose message was stored at or after ``ts_ms`` (RocketMQ's LOWER
        boundary); the max offset when every message is older."""
        q = self.queue(topic, queue_id)
        lo, hi = self.min_offset(topic, queue_id), q.max_offset()
        while lo < hi:
            mid = (lo + hi) // 2
            e = q.entry(mid)
            if e is None or self.store_timestamp_at(e[0]) >= ts_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        e = self.queue(topic, queue_id).last_entry()
        if e is None:
            return None
        ts = self.store_timestamp_at(e[0])
        return ts if ts >= 0 else None

    def queue_ids(self, topic: str) -> list[int]:
        return list(range(self.topic(topic).queues))


def _index_damage_error(path: str) -> CorruptionError:
    return CorruptionError(path, 0, "key index file is shorter than its header says: it cannot answer "
                           "(run: mqctl store recover)")


class _WriteLock:
    """The store's exclusive write lock, re-entrant per Store handle: an exclusive flock on
    the store directory itself, then an exclusive flock on ``STORE/lock`` (the lock
    portalocker takes on POSIX; ``flock.lock_exclusive`` takes it without importing
    portalocker, which costs 25-80 ms of every command's start-up).

    The directory lock is what cannot be defeated by deleting ``STORE/lock`` while a writer
    holds it (a second writer would create a new file and lock that one); the file lock is
    kept so that writers of earlier versions, which take only it, still exclude and are
    excluded. Both are always taken in this order, so two writers cannot deadlock."""

    def __init__(self, root: Path, lock_file: Path) -> None:
        self.root = root
        self.lock_file = lock_file
        self.depth = 0
        self._dir_fd: int | None = None
        self._fh: Any = None
        self._dir_locked = False

    def __enter__(self) -> None:
        if self.depth == 0:
            import fcntl
            if self._dir_fd is None:
                try:
                    self._dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError as exc:
                    raise io_error(exc, f"open {self.root}") from exc
            dir_fd = self._dir_fd
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX)
                dir_locked = True
            except OSError:   # a file system without flock on directories: the file lock alone
                dir_locked = False
            try:
                if self._fh is None:
                    try:
                        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    except OSError as exc:
                        raise io_error(exc, f"open {self.lock_file}") from exc
                    self._fh = os.fdopen(fd, "r+b")
                lock_exclusive(self._fh)
            except BaseException:
                if dir_locked:
                    fcntl.flock(dir_fd, fcntl.LOCK_UN)
                raise
            self._dir_locked = dir_locked
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth == 0:
            import fcntl
            unlock(self._fh)
            if self._dir_locked and self._dir_fd is not None:
                fcntl.flock(self._dir_fd, fcntl.LOCK_UN)
                self._dir_locked = False

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def open_store(root: str | Path, *, create: bool = False, **kw: Any) -> Store:
    return Store.open(root, create=create, **kw)

