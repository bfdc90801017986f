"""The store façade: open a store directory, create topics, put and pull messages.

There is no broker process: every ``mqctl`` process opens the directory with :meth:`Store.open`
and they coordinate through it. Writers serialise on the store's write lock (``writelock.py``),
taken once per batch (never per message); inside it every kind of put goes through one
:class:`~store.log.writebatch.WriteBatch`, which

1. checks the checkpoint against the commit log's real end and recovers if a previous writer
   died mid-batch or the machine restarted (``recovery.py``),
2. assigns each message its queue and dense queue offset and the store timestamp,
3. appends the records (one ``pwrite`` per segment), then the consume-queue entries, then the
   key-index entries, and
4. moves the checkpoint past the batch (or, on any failure, cuts every file back).

Readers take no lock: they read consume-queue entries, then the records those point at, and
check every record's CRC before handing it out; each queue's end is looked at once (``queueends.py``).

Failpoints (``failpoints.py``): ``put-after-log``, ``put-after-cq``, ``put-after-index`` inside a batch
(``writebatch.py``); ``sync-before-fsync`` in :meth:`Store.sync_log`, before a batch is made durable.

Around it: ``settings.py`` (``store.json``'s fields), ``results.py`` (what puts and pulls return),
``writebatch.py`` and ``framing.py`` (a batch's placement, commit and undo; raw bodies' framing).
"""
from __future__ import annotations

import os
from pathlib import Path

from store import names
from store.errors import (
    BadInputError,
    CorruptionError,
    MessageTooLargeError,
    OperationError,
    StoreIOError,
    StoreNotFoundError,
    UsageError,
)
from store.errors import warn as say_warning
from store.fsutil import check_dir_path
from store.layout import Layout
from store.log import format as F
from store.log import settings as settings_file
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue
from store.log.engine import SYSTEM_TOPIC_QUEUES, Engine
from store.log.preflight import checkpoint_locked, claim_new_store, recover_if_dirty, unfinished_creation
from store.log.queueends import logged_end, queue_end
from store.log.record import PROP_UNIQ_KEY, Body, Draft, Message, UniqKeyGenerator, has_property_separator
from store.log.settings import StoreSettings
from store.log.topics import TopicConfig
from store.log.writelock import WriteLock

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Iterator, Sequence

    from store.log.arraycolumns import VecColumns
    from store.log.check import CheckReport
    from store.log.columns import Columns
    from store.log.index import KeyIndex
    from store.log.offsetcommits import BatchEnd
    from store.log.offsets import ClusterOffsetStore
    from store.log.recovery import RecoveryReport
    from store.log.results import BatchResult, BodiesResult, PullResult, PutResult

__all__ = ["SYSTEM_TOPIC_QUEUES", "Store", "open_store"]


class Store:
    """An open store: the one front door to the engine (``engine.py``) for every client."""

    def __init__(self, root: Path, settings: StoreSettings, warn: Callable[[str], None]) -> None:
        self.root = root
        self.engine = Engine(Layout(root), settings, warn)
        self.layout: Layout = self.engine.layout
        self.warn = warn

    # The parts clients read through the front door: the engine's own.
    @property
    def settings(self) -> StoreSettings:
        return self.engine.settings

    @settings.setter
    def settings(self, value: StoreSettings) -> None:
        self.engine.settings = value

    @property
    def on_topic_created(self) -> Callable[[TopicConfig], None] | None:
        """Told of each user topic a send creates (auto-creation), so a command line can say so."""
        return self.engine.on_topic_created

    @on_topic_created.setter
    def on_topic_created(self, hook: Callable[[TopicConfig], None] | None) -> None:
        self.engine.on_topic_created = hook

    @property
    def commitlog(self) -> CommitLog:
        return self.engine.commitlog

    @property
    def index(self) -> KeyIndex:
        return self.engine.index

    @property
    def offsets(self) -> ClusterOffsetStore:
        """The clustering groups' offset table, this handle's one (``Engine.offsets``)."""
        return self.engine.offsets

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | Path, *, create: bool = False, settings: StoreSettings | None = None,
             warn: Callable[[str], None] = say_warning, recover: bool = True,
             rebuild_settings: bool = False) -> Store:
        """Open the store at ``root``; with ``create`` make it first if it does not exist.

        A store that was left dirty (a writer died mid-batch, or the machine restarted) is
        recovered here, under the write lock, before anything is read. ``rebuild_settings``
        (``store recover``): a ``store.json`` lost with its ``.bak`` is rebuilt (``settings.load``)."""
        root = Path(root).expanduser()
        layout = Layout(root)
        check_dir_path(root, "a store directory")
        if not layout.store_json.exists() and not settings_file.restore_from_bak(layout, warn, write=recover):
            if not create:
                if root.exists() and any(root.iterdir()):
                    if unfinished_creation(layout):   # (a full disk, a kill -9 while it was made)
                        raise StoreNotFoundError(f"{root} is a store whose creation did not finish "
                                                 "(no store.json): make it again with: mqctl init")
                    raise StoreNotFoundError(f"{root} is not an mqctl store (no store.json)")
                raise StoreNotFoundError(f"no store at {root} (create one with: mqctl init)")
            cls._initialise(root, settings or StoreSettings())
        cls._check_owner(root)
        settings = settings_file.load(layout, warn, rebuild=rebuild_settings)
        opened = cls(root, settings, warn)
        # (the commit log's segment names against store.json's size: its listing is the one
        # the open reads next anyway)
        agreed = settings_file.agreeing(layout, settings, opened.engine.commitlog, warn, rebuild=rebuild_settings)
        if agreed is not settings:
            opened.close()
            opened = cls(root, agreed, warn)
        if recover:
            recover_if_dirty(opened.engine)
            opened._migrate_topics()
        return opened

    def _migrate_topics(self) -> None:
        """The first writer moves a legacy ``topics.json`` to one file per topic (a process
        that cannot write reads it), or rewrites the topics' view if it missed a change."""
        table = self.engine.topic_table
        try:
            if table.legacy() or table.view.stale():
                with self.engine.write_lock:
                    self.engine.sync_topics_locked()
        except StoreIOError as exc:
            if table.legacy():   # (a stale view just waits for a writer)
                self.warn(f"topics are kept in the legacy {table.layout.topics_json.name}; cannot migrate them ({exc})")

    @staticmethod
    def _check_owner(root: Path) -> None:
        st = os.stat(root)
        if st.st_uid != os.getuid():
            raise OperationError(
                f"store {root} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): refusing to use it")

    @staticmethod
    def _initialise(root: Path, settings: StoreSettings) -> None:
        settings.validate(strict=False)
        layout = Layout(root)
        # (False: two processes making the store at once, the other one made it)
        claim_new_store(layout, lambda: settings_file.write_new(layout, settings))

    def close_queues(self) -> None:
        """Drop the cached descriptors of every consume queue (after files were removed)."""
        self.engine.queues.close()

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the write lock and the writer's state ---------------------------------------------
    def write_lock(self) -> WriteLock:
        """The store's exclusive write lock (held for one batch; re-entrant per handle):
        ``with store.write_lock(): ...``."""
        return self.engine.write_lock

    @property
    def uniq_keys(self) -> UniqKeyGenerator:
        """This handle's unique-key generator (the ids its messages get)."""
        return self.engine.writer.uniq_keys

    @property
    def boot_id(self) -> bytes:
        """The machine's boot id as this handle saw it (a checkpoint with another one was
        written before a restart)."""
        return self.engine.writer.boot_id

    @property
    def last_write(self) -> tuple[int, int]:
        """The commit-log range of this handle's last batch (for :meth:`sync_log`)."""
        return self.engine.writer.last_write

    # -- topics ----------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicConfig]:
        return self.engine.topics()

    def topic(self, name: str) -> TopicConfig:
        return self.engine.topic(name)

    def find_topic(self, name: str) -> TopicConfig | None:
        """One topic's config, or None; reads only that topic's file (``topics()`` lists all)."""
        return self.engine.find_topic(name)

    def has_topic(self, name: str) -> bool:
        return self.engine.find_topic(name) is not None

    def topic_holds(self, m: Message) -> bool:
        """Whether the stored message ``m`` is still its topic's: the topic exists and was
        created before it (not a message of a topic deleted since, whose records stay in the
        log until retention; ``TopicConfig.holds``)."""
        cfg = self.engine.find_topic(m.topic)
        return cfg is not None and cfg.holds(m.commitlog_offset, m.queue_id)

    def create_topic(self, name: str, queues: int | None = None, order: bool = False,
                     *, system: bool = False) -> tuple[TopicConfig, bool]:
        """Create a topic; returns (config, created). ``TopicExistsError`` when it exists with
        another queue count or order."""
        (names.validate_any_topic if system else names.validate_topic)(name)
        queues = self.settings.default_queues if queues is None else queues
        _check_queue_count(queues)
        with self.engine.write_lock:
            return self.engine.create_topic_locked(name, queues, order)

    def update_topic(self, name: str, queues: int, *, named: str = "queues") -> tuple[TopicConfig, bool]:
        """Add queues to a topic; returns (config, changed). Fewer queues: ``UsageError``, naming
        ``named``. Sharding keys route by the new count from then on; consumers pick the queues up at
        once (``config/topics.epoch`` changes)."""
        names.validate_any_topic(name)
        _check_queue_count(queues)
        with self.engine.write_lock:
            return self.engine.update_topic_locked(name, queues, named)

    def delete_topic(self, name: str) -> None:
        """Forget a topic: its config, consume queues and offsets. Records stay in the commit
        log until retention removes their segment (as RocketMQ)."""
        with self.engine.write_lock:
            self.engine.delete_topic_locked(name)

    def ensure_topic_locked(self, name: str, queue_id: int = -1) -> TopicConfig:
        """The topic's config, creating it on first send (write lock held)."""
        return self.engine.ensure_topic_locked(name, queue_id)

    # -- queues ----------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self.engine.queues.queue(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return queue_end(self.engine, topic, queue_id)

    def logged_max_offset(self, topic: str, queue_id: int) -> int:
        """:meth:`max_offset`, or where a repair would end a queue cut short that this process
        cannot repair (``queueends.logged_end``): what a group's lag counts to."""
        return logged_end(self.engine, topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first offset whose record is still in the commit log (retention aware)."""
        return self.engine.queues.min_offset(topic, queue_id)

    def messages(self, topic: str, queues: int) -> int:
        """How many messages the first ``queues`` queues of ``topic`` hold (retention aware)."""
        return self.engine.queues.messages(topic, queues)

    def queue_ids(self, topic: str) -> list[int]:
        return list(range(self.topic(topic).queues))

    # -- writing ---------------------------------------------------------------------------
    def select_queue(self, topic: TopicConfig, draft: Draft) -> int:
        """The queue a draft goes to: its own, its sharding key's, or the next round-robin."""
        return self.engine.writer.select_queue(topic, draft)

    def put(self, drafts: list[Draft], *, sync: bool = False, commit: BatchEnd | None = None,
            fence: Callable[[], None] | None = None) -> list[PutResult]:
        """Store a batch under one lock, all or nothing, across crashes too (several drafts,
        or any with ``commit``: ``atomicbatch.py``). With ``commit`` it ends in that offset
        commit (``offsetcommits.py``); ``fence`` runs first, locked."""
        # (the bodies only: a batch's end record is the store's own, never a user's body)
        self.check_bodies(max((len(d.body) for d in drafts), default=0), {}, ())
        from store.log import offsetcommits, writebatch  # (by the first write: a reader never loads them)
        if commit is not None:
            drafts = offsetcommits.seal(drafts, commit)
        if not drafts:
            return []
        with self.engine.write_lock:
            if fence is not None:
                fence()
            batch = writebatch.WriteBatch(self.engine, sync, atomic=commit is not None or len(drafts) > 1)
            results = batch.put_drafts(drafts)
            batch.commit()
        if self.engine.hints.flush_due:
            self.engine.durability.flush_in_background()
        return results

    def check_bodies(self, longest: int, props: dict[str, str], sharding_keys: Iterable[str | None]) -> None:
        """Refuse a body over the store's limit, and separators in properties or sharding keys."""
        max_size = self.settings.max_message_size
        if longest > max_size:
            raise MessageTooLargeError(f"message body of {longest} bytes exceeds the store's limit of {max_size} bytes")
        if (props and any(has_property_separator(x) for kv in props.items() for x in kv)) or any(
                k is not None and has_property_separator(k) for k in sharding_keys):
            raise BadInputError("a property name or value (tags, keys, sharding key included) "
                                "contains the control characters \\x01 or \\x02")

    def put_bodies(self, topic: str, bodies: Sequence[Body], *, properties: dict[str, str] | None = None,
                   queue_id: int = -1, sharding_keys: list[str | None] | None = None,
                   sync: bool = False) -> BatchResult:
        """The producer's fast path: many bodies for one topic sharing their properties.

        Same records and guarantees as :meth:`put`; ``sharding_keys`` gives each body its own
        key (``None`` entries fall back to ``queue_id`` or round robin). A body may be any
        bytes-like object (a memoryview of a read buffer is copied once, into the batch)."""
        from store.log import framing, results, writebatch  # (as in put)
        if not bodies:
            return results.BatchResult(topic, [], [], [], 0)
        if sharding_keys is not None and len(sharding_keys) != len(bodies):
            raise UsageError(f"put_bodies: one sharding key (or None) per body: {len(sharding_keys)} keys "
                             f"for {len(bodies)} bodies")
        bodies = framing.byte_views(bodies)   # (the CLI's views; arrays, wider or 2-D views anywhere)
        props = dict(properties or {})
        if PROP_UNIQ_KEY in props:
            raise UsageError("a batch cannot share one unique key")
        self.check_bodies(max(map(len, bodies)), props, sharding_keys or ())
        with self.engine.write_lock:
            batch = writebatch.WriteBatch(self.engine, sync, atomic=len(bodies) > 1)
            result = framing.frame_bodies(batch, topic, bodies, props, queue_id, sharding_keys)
            batch.commit()
        if self.engine.hints.flush_due:
            self.engine.durability.flush_in_background()
        return result

    # -- durability (``flush.py``) ---------------------------------------------------------
    def sync_log(self, start: int, end: int) -> None:
        """Make the commit log durable below ``end``: the ``--flush sync`` acknowledgement of
        a batch written without ``sync`` (see :meth:`Durability.sync_log`)."""
        self.engine.durability.sync_log(start, end)

    def sync_written(self) -> int:
        """Make the commit log durable up to its current end (returned), before a decision
        that depends on records written with ``--flush async`` is made durable."""
        return self.engine.durability.sync_written()

    def flush_durable(self, end: int | None = None) -> None:
        """Make everything written below ``end`` durable: log, consume queues, key index."""
        self.engine.durability.flush_durable(end)

    # -- recovery and check ----------------------------------------------------------------
    def ensure_recovered(self) -> None:
        """Recover now if a writer died mid-batch since this handle was opened.

        Call it before reads that decide what to write (``transaction.py``): consume queues and
        the key index then cover every record in the log, including the last records of a
        writer that was killed after this handle was opened."""
        with self.engine.write_lock:
            checkpoint_locked(self.engine)

    def recover(self, full: bool = False, progress: Callable[[int], None] | None = None) -> RecoveryReport:
        """Repair the store under the write lock (``full``: rebuild every derived file from
        the log, as ``mqctl store recover``)."""
        if full:
            settings_file.put_back(self.layout, self.warn)   # (readers meanwhile used the readable copy)
            self._migrate_topics()
        offsets, queue_count = self.engine.offsets, self.engine.queue_count
        with self.engine.write_lock:
            from store.log.recovery import recover
            if full:   # an offset table recovery cannot read would stop it half way
                offsets.reset_lost(self.min_offset, queue_count)
            rep = recover(self.engine, full=full, progress=progress, accept_loss=full)
        offsets.reset_lost(self.min_offset, queue_count)
        return rep

    def check(self, progress: Callable[[int], None] | None = None) -> CheckReport:
        """Verify every record, consume-queue entry and index entry; writes nothing."""
        from store.log.check import check_store
        return check_store(self.engine, progress=progress)

    # -- reading ---------------------------------------------------------------------------
    def get(self, commitlog_offset: int, size: int | None = None) -> Message:
        from store.log import reads
        return reads.get(self.engine, commitlog_offset, size)

    def pull(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
             tag_codes: frozenset[int] | None = None, tags: frozenset[str] | None = None,
             max_bytes: int = 4 * 1024 * 1024) -> PullResult:
        """Up to ``max_count`` messages of one queue from ``offset`` (``reads.pull``)."""
        from store.log import reads
        return reads.pull(self.engine, topic, queue_id, offset, max_count, tag_codes, tags, max_bytes)

    def pull_bodies(self, topic: str, queue_id: int, offset: int, max_count: int = 256,
                    max_bytes: int = 4 * 1024 * 1024, views: bool = False) -> BodiesResult:
        """Only the bodies of up to ``max_count`` messages of one queue from ``offset``, for
        readers that need nothing else (``consume`` writing raw bodies, no tag filter).

        Every record gets the same checks as in :meth:`pull` (see :mod:`store.log.columns`), but no
        :class:`Message` is built: about three times cheaper per message. ``views``: big bodies
        may come as memoryviews into the read's buffer instead of copies (for a caller that
        writes them out and lets go): those of records of 2 KiB and more, and on the array path
        every body of a run whose bodies average 1 KiB or more (``store/log/columns.py``)."""
        from store.log.columns import pull_columns
        from store.log.results import BodiesResult
        c = pull_columns(self.engine, topic, queue_id, offset, max_count, max_bytes, bodies_only=True, views=views)
        return BodiesResult(c.bodies, c.offsets, c.next_offset, c.max_offset, c.damaged)

    def pull_columns(self, topic: str, queue_id: int, offset: int, max_count: int = 256, max_bytes: int = 4 << 20,
                     with_phys: bool = False, bodies_only: bool = False, views: bool = False) -> Columns:
        """A run of one queue as checked columns (``columns.pull_columns``; no result object)."""
        from store.log.columns import pull_columns
        return pull_columns(self.engine, topic, queue_id, offset, max_count, max_bytes, with_phys, bodies_only, views)

    def pull_records(self, topic: str, queue_id: int, offset: int, max_count: int = 256,
                     max_bytes: int = 4 * 1024 * 1024) -> Columns:
        """A run of one queue as columns with every field a Message needs (``bulk``)."""
        from store.log.columns import pull_records
        return pull_records(self.engine, topic, queue_id, offset, max_count, max_bytes)

    def pull_many(self, topic: str, requests: list[tuple[int, int, int, int]],
                  full: bool = False) -> dict[int, Columns]:
        """Runs of several queues of one topic, one read of the log per window (``bulk``)."""
        from store.log.sharedread import pull_many
        return pull_many(self.engine, topic, requests, full)

    def pull_vector(self, topic: str, queue_id: int, offset: int, max_count: int,
                    max_bytes: int) -> VecColumns | None:
        """A run of one queue decoded as arrays (numpy, pyarrow: the Spark source), or None
        when anything in it is unusual (``arraycolumns.py``; then :meth:`pull_columns`)."""
        from store.log.arraycolumns import pull_vector
        return pull_vector(self.engine, topic, queue_id, offset, max_count, max_bytes)

    def iter_queue(self, topic: str, queue_id: int, start: int, end: int | None = None,
                   batch: int = 256) -> Iterator[Message]:
        """Every message of a queue in ``[start, end)`` (damaged records skipped with a warning)."""
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
        """A message by offset id or by unique key (``reads.find``)."""
        from store.log import reads
        return reads.find(self.engine, msg_id, strict)

    def find_all(self, uniq_key: str, limit: int = 64) -> list[Message]:
        """Every stored copy carrying a unique key (retries and DLQ copies keep it)."""
        from store.log import reads
        return reads.find_all(self.engine, uniq_key, limit)

    def query_key(self, topic: str, key: str, limit: int = 64, strict: bool = False, *,
                  damaged: list[CorruptionError] | None = None) -> list[Message]:
        """Messages of ``topic`` whose KEYS contain ``key``, newest first; damaged records are
        skipped, each named in ``damaged`` when it is given (``reads.query_key``); ``strict``:
        the first one raises instead."""
        from store.log import reads
        found = damaged if damaged is not None else [] if strict else None
        out = reads.query_key(self.engine, topic, key, limit, found)
        if strict and found:
            raise found[0]
        return out

    def store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The store time of a queue's message, from a record that checks out (``reads.store_time``)."""
        from store.log import reads
        return reads.store_time(self.engine, topic, queue_id, offset)

    def search_offset(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """First offset whose message was stored at or after ``ts_ms``."""
        from store.log import reads
        return reads.search_offset(self.engine, topic, queue_id, ts_ms)

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        from store.log import reads
        return reads.last_store_timestamp(self.engine, topic, queue_id)


def _check_queue_count(queues: int) -> None:
    if not 1 <= queues <= F.MAX_QUEUES:   # (the CLI checks its flag first)
        raise UsageError(f"queues must be between 1 and {F.MAX_QUEUES}, got {queues}")


def open_store(root: str | Path, *, create: bool = False, **kw: Any) -> Store:
    return Store.open(root, create=create, **kw)
