"""The engine: every part of an open store, held in one object below the front door.

:class:`Engine` holds the commit log, the queue table (consume queues, the segments a writer
keeps open, min/max offsets), the key index, the checkpoint, the topic table, the clustering
groups' offset table, the layout and settings, the write lock, the writer's per-process state
(:class:`WriterState`) and its fsyncs (:class:`~store.log.flush.Durability`). The write batch,
the body framing, the bulk reads, recovery and check take an ``Engine``; nothing here imports
them, and nothing below the front door (``messagestore.py``'s
:class:`~store.log.messagestore.Store`) imports the front door.

Each file kind keeps its one owner module (``commitlog.py``, ``consumequeue.py``,
``index.py``, ``checkpoint.py``, ``topics.py``, ``offsets.py``); this module only ties them
together, and orders the steps of a topic's creation, update and deletion.
"""
from __future__ import annotations

import _thread
import os
import time
from dataclasses import dataclass, field, replace

from store import names
from store.errors import StoreError, TopicExistsError, TopicNotFoundError, UsageError, topic_not_created
from store.failpoints import failpoint
from store.layout import Layout
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue, remove_queues
from store.log.flush import Durability
from store.log.record import Draft, UniqKeyGenerator, java_hash
from store.log.settings import StoreSettings
from store.log.topics import TopicConfig, TopicTable
from store.log.writelock import WriteLock

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable

    from store.log.entrysearch import LogTail
    from store.log.index import KeyIndex
    from store.log.offsets import ClusterOffsetStore

# Consume queues whose last segment a writing handle keeps open between batches.
MAX_OPEN_TAILS = 64

# System topics created on demand, with their queue counts (RocketMQ's numbers).
SYSTEM_TOPIC_QUEUES = {
    names.SCHEDULE_TOPIC: F.SCHEDULE_QUEUES,   # one queue per delay level, and one of free delays
    names.HALF_TOPIC: 1,
    names.OP_HALF_TOPIC: 1,
    names.CHECK_MAX_TOPIC: 1,
    names.OFFSET_COMMIT_TOPIC: 1,
    names.DELAY_PROGRESS_TOPIC: 1,
}


class QueueTable:
    """The consume queues of one store handle, opened on first use, and the last segments a
    writer keeps open between batches (at most ``MAX_OPEN_TAILS``, least recently used
    closed), so a writer to thousands of queues stays within its descriptor limit."""

    def __init__(self, layout: Layout, segment_entries: int, commitlog: CommitLog) -> None:
        self.layout = layout
        self.segment_entries = segment_entries
        self.commitlog = commitlog
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._tails: dict[tuple[str, int], None] = {}   # oldest first
        # min_offset's answers that hold while both listings' stamps do (see there)
        self._mins: dict[tuple[str, int], tuple[tuple[object, object], int]] = {}

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = ConsumeQueue(self.layout.queue_dir(topic, queue_id), self.segment_entries)
            self._queues[key] = q
        return q

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.queue(topic, queue_id).max_offset()

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first offset whose record is still in the commit log (retention aware)."""
        q = self.queue(topic, queue_id)
        lo = q.min_offset()
        cl_min = self.commitlog.min_offset()
        # A reader asks every turn (has retention passed it?). The answer is the queue's first
        # segment while that segment's first entry is valid and its record is in the log; it
        # stays so until a segment of the queue or of the log is removed or written anew,
        # which changes their directories (the listings' stamps).
        stamps = (q.listing_stamp(), self.commitlog.listing_stamp())
        if None not in stamps and self._mins.get((topic, queue_id)) == (stamps, lo):
            return lo
        hi = q.max_offset()
        first = q.entry(lo) if lo < hi else None
        if first is None or first[0] >= cl_min:
            if first is not None:
                self._mins[(topic, queue_id)] = (stamps, lo)
            return lo
        while lo < hi:  # first entry whose record is still present
            mid = (lo + hi) // 2
            e = q.entry(mid)
            if e is not None and e[0] >= cl_min:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def messages(self, topic: str, queues: int) -> int:
        """Messages stored in queues ``0..queues-1`` of ``topic``. A queue without segment
        files holds none: one ``listdir``, no queue opened (``topic list`` of 10,000 topics)."""
        total = 0
        for q, qdir in enumerate(self.layout.queue_dir_names(topic, queues)):
            try:
                names_ = os.listdir(qdir)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if any(map(F.is_segment_name, names_)):
                total += self.max_offset(topic, q) - self.min_offset(topic, q)
        return total

    def append(self, topic: str, queue_id: int, first: int, entries: bytes | bytearray,
               checked: bool = False) -> list[tuple[str, int]]:
        """Append a batch's consume-queue entries (write lock held), keeping the queue's
        segment open for the next batch. The undo list of :meth:`ConsumeQueue.append`
        (``checked`` as there)."""
        key = (topic, queue_id)
        undo = self.queue(topic, queue_id).append(first, entries, keep=True, checked=checked)
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

    def forget_topic(self, topic: str) -> None:
        """Close and forget the queues of a topic whose files are being removed."""
        for key in [k for k in self._queues if k[0] == topic]:
            self._queues.pop(key).close()
            self._tails.pop(key, None)
            self._mins.pop(key, None)

    def close(self) -> None:
        for q in self._queues.values():
            q.close()


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class WriterState:
    """What a writing handle carries from batch to batch (used under the write lock): the
    next round-robin queue per topic, the unique-key generator, this process's pid and boot
    id, the range of its last batch (what ``sync_log`` needs when the caller makes a batch
    durable itself, after the write lock is released), and how many bodies it framed."""

    round_robin: dict[str, int] = field(default_factory=dict)
    uniq_keys: UniqKeyGenerator = field(default_factory=UniqKeyGenerator)
    boot_id: bytes = field(default_factory=ckpt.current_boot_id)
    pid: int = field(default_factory=lambda: os.getpid() & 0x7FFFFFFF)
    last_write: tuple[int, int] = (0, 0)
    sent: int = 0   # bodies framed by this handle (``framing.py`` frames big batches as arrays past a count)

    def select_queue(self, topic: TopicConfig, draft: Draft) -> int:
        return self.queue_for(topic, draft.queue_id, draft.sharding_key)

    def queue_for(self, topic: TopicConfig, queue_id: int, sharding_key: str | None) -> int:
        """:meth:`select_queue` of a draft's two routing fields (a single send has no draft)."""
        if queue_id >= 0:
            if queue_id >= topic.queues:
                raise UsageError(f"queue {queue_id} does not exist: topic {topic.name!r} "
                                 f"has queues 0-{topic.queues - 1}")
            return queue_id
        if sharding_key:   # (an empty key is no key)
            # Documented, stable: |Java String.hashCode(key)| mod queue count (RocketMQ's
            # SelectMessageQueueByHash), so producers in any language agree.
            return abs(java_hash(sharding_key)) % topic.queues
        if topic.order:
            raise topic.unrouted()
        return self.round_robin_start(topic, 1) % topic.queues

    def round_robin_start(self, topic: TopicConfig, n: int) -> int:
        """Where ``n`` round-robin messages to ``topic`` start (mod its queue count); the next
        ones start after them. A process's first starts at a random queue, as RocketMQ's
        producer does (``os.urandom``: ``random`` costs ~2 ms to import, in every sender)."""
        start = self.round_robin.get(topic.name)
        if start is None:
            start = int.from_bytes(os.urandom(2), "big") % topic.queues
        self.round_robin[topic.name] = start + n
        return start


class Engine:
    """The parts of one open store (see the module docstring)."""

    def __init__(self, layout: Layout, settings: StoreSettings, warn: Callable[[str], None]) -> None:
        self.layout = layout
        self.settings = settings
        self.warn = warn
        self.commitlog = CommitLog(layout.commitlog_dir, settings.commitlog_segment_size)
        # The key index is made on first use: a reader never looks a key up, and its module
        # (with array, bisect) is about a millisecond of every consumer's start.
        self._index: KeyIndex | None = None
        self._index_lock = _thread.allocate_lock()   # (the offset table's too)
        self._offsets: ClusterOffsetStore | None = None   # made on first use, as the index
        self.topic_table = TopicTable(layout, warn=warn)
        self.queues = QueueTable(layout, settings.cq_segment_entries, self.commitlog)
        self.write_lock = WriteLock(layout.root, layout.write_lock)
        self.writer = WriterState()
        # What this handle has made durable itself, and its fsyncs.
        self.hints = ckpt.Hints()
        self.durability = Durability(layout, self.commitlog, lambda: self.index, self.hints, warn)
        self.checkpoint_file = ckpt.CheckpointFile(layout.checkpoint)   # the writer's, under the lock
        # Told of each user topic a send creates (auto-creation), so a command line can say so.
        self.on_topic_created: Callable[[TopicConfig], None] | None = None
        # Whether this handle looks once at each queue's end before using it and at the key
        # index before its first lookup, and repairs one cut short (``queueends.py``,
        # ``indexends.py``): one that recovers at open (not one opened to change nothing:
        # ``store check``, ``top``). ``index_checked``: it looked at the index.
        self.check_ends = False
        self.index_checked = False
        self.log_tail: LogTail | None = None   # the end of the log as those looks read it
        # the checkpoint as the last of those looks read it, by its (ino, size, mtime, ctime)
        self.ends_checkpoint: tuple[tuple[int, int, int, int], ckpt.Checkpoint | None] | None = None

    def forget_log_tail(self) -> None:
        """Have the next look at a queue's end read the log's tail again (it may have changed)."""
        self.log_tail = None

    def close(self) -> None:
        self.durability.finish_flush()
        if self.hints.synced:
            self._record_synced()
        self.commitlog.close()
        if self._index is not None:
            self._index.close()
        self.checkpoint_file.close()
        self.queues.close()
        self.write_lock.close()

    @property
    def index(self) -> KeyIndex:
        """The key index, made on first use (once, whichever thread asks first)."""
        idx = self._index
        if idx is None:
            from store.log.index import KeyIndex
            with self._index_lock:
                if self._index is None:
                    self._index = KeyIndex(self.layout.index_dir)
                idx = self._index
        return idx

    @index.setter
    def index(self, idx: KeyIndex) -> None:   # (tests give a handle smaller index files)
        self._index = idx

    @property
    def offsets(self) -> ClusterOffsetStore:
        """The clustering groups' offset table (``offsets.py``, its one owner), made on first
        use and kept: one per handle, its threads' commits serialized by it. What it keeps
        between calls is looked at against the files at each use (other processes' commits,
        resets and deletions are seen), or is its own: the damage it warned of (said once
        per handle), the names it validated, its own last write."""
        table = self._offsets
        if table is None:
            from store.log.offsets import ClusterOffsetStore
            with self._index_lock:
                if self._offsets is None:
                    self._offsets = ClusterOffsetStore(self.layout, self.warn)
                table = self._offsets
        return table

    # -- topics (``topics.py`` owns their files) ---------------------------------------------
    def topics(self) -> dict[str, TopicConfig]:
        """Every topic (a listing: for commands that show or walk them all)."""
        return self.topic_table.all()

    def find_topic(self, name: str) -> TopicConfig | None:
        """One topic's config, reading only its file."""
        return self.topic_table.get(name)

    def topic(self, name: str) -> TopicConfig:
        t = self.topic_table.get(name)
        if t is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        return t

    def queue_count(self, name: str) -> int:
        """How many queues a topic has; 0 when it does not exist."""
        t = self.topic_table.get(name)
        return 0 if t is None else t.queues

    def first_entry(self, topic: str, queue_ids: list[int]) -> int | None:
        """The lowest commit-log offset the oldest entries of these queues point at: the
        creation offset of a topic rebuilt from its queues."""
        found = []
        for q in queue_ids:
            cq = self.queues.queue(topic, q)
            e = cq.entry(cq.min_offset())
            if e is not None:
                found.append(e[0])
        return min(found) if found else None

    def heal_topics_locked(self) -> None:
        """Restore every damaged or lost topic file and finish interrupted deletions (write
        lock held; recovery)."""
        for name in self.topic_table.heal(self.first_entry, self.commitlog.end()):
            self.warn(f"finishing the deletion of topic {name!r} (interrupted)")
            self.delete_topic_locked(name)
        why = self.topic_table.view.refresh()
        if why is not None:
            self.warn(f"{self.layout.topics_json} (the topics' RocketMQ view) {why}; rewritten")

    def migrate_topics_locked(self) -> None:
        if self.topic_table.legacy():
            self.topic_table.migrate(self.first_entry, self.commitlog.end())

    def sync_topics_locked(self) -> None:
        """Migrate a legacy topic table, else rewrite the topics' view if it is stale."""
        if self.topic_table.legacy():
            self.migrate_topics_locked()
        elif self.topic_table.view.stale():
            self.topic_table.view.write()

    def create_topic_locked(self, name: str, queues: int, order: bool) -> tuple[TopicConfig, bool]:
        """Create a topic (write lock held); returns (config, created). Exists with another
        shape: ``TopicExistsError``."""
        self.migrate_topics_locked()
        cur = self.topic_table.get(name) or self._restore_locked(name)
        if cur is not None:
            if cur.queues != queues or cur.order != order:
                raise TopicExistsError(
                    f"topic {name!r} exists with {cur.queues} queue{'' if cur.queues == 1 else 's'}"
                    f"{' (ordered)' if cur.order else ', not ordered' if order else ''}")
            return cur, False
        # queue files of no topic (an older version's killed `topic delete`) are not this one's
        remove_queues(self.layout.topic_cq_dir(name))
        cfg = TopicConfig(name, queues, order, int(time.time() * 1000), self.commitlog.end())
        try:
            self.topic_table.save(cfg)
        except StoreError:
            # nothing half-made stays: queue directories alone would be healed into a topic,
            # and a config without them (its mirror) is a damaged topic
            try:
                self.topic_table.discard_new(name)
                remove_queues(self.layout.topic_cq_dir(name))
            except (OSError, StoreError):
                pass   # the error being raised is the one to report
            raise
        return cfg, True

    def update_topic_locked(self, name: str, queues: int, named: str = "queues") -> tuple[TopicConfig, bool]:
        """Give a topic ``queues`` queues (write lock held); returns (config, changed). Fewer
        queues than today are refused: their messages would become unreachable (the error
        names the count as the caller spells it, ``named``: ``--queues`` for the command line)."""
        self.migrate_topics_locked()
        cur = self.topic_table.get(name) or self._restore_locked(name)
        if cur is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        if queues < cur.queues:
            raise UsageError(f"topic {name!r} has {cur.queues} queues: queues cannot be removed "
                             f"(their messages would be lost to consumers); {named} must be at least {cur.queues}")
        if queues == cur.queues:
            return cur, False
        cfg = replace(cur, queues=queues)
        self.topic_table.save(cfg)
        return cfg, True

    def delete_topic_locked(self, name: str) -> None:
        """Forget a topic in an order whose every prefix recovery can finish: its config is
        marked as being deleted, its queues and offsets go, then its config.

        Failpoints: ``topic-delete-after-mark``, ``-after-queues``, ``-after-offsets``."""
        self.migrate_topics_locked()
        cur = self.topic_table.get(name)
        if cur is not None:
            self.topic_table.mark_deleting(cur)
        elif not self.topic_table.is_deleting(name):
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        failpoint("topic-delete-after-mark")
        self.queues.forget_topic(name)
        remove_queues(self.layout.topic_cq_dir(name))   # raises, leaving the mark, if it cannot
        failpoint("topic-delete-after-queues")
        self.offsets.delete_topic(name, durable_end=self.durability.sync_written())
        failpoint("topic-delete-after-offsets")
        self.topic_table.remove(name)

    def _restore_locked(self, name: str) -> TopicConfig | None:
        """A topic whose config is lost but whose queues remain is restored from them, never
        created anew with other settings; a deletion a crash interrupted is finished first
        (write lock held)."""
        if self.topic_table.is_deleting(name):
            self.warn(f"finishing the deletion of topic {name!r} (interrupted)")
            self.delete_topic_locked(name)
            return None
        cfg = self.topic_table.rebuild(name, self.first_entry, self.commitlog.end())
        if cfg is not None:
            self.warn(f"topic {name!r} had lost its config; restored from what is beside its queues "
                      f"({cfg.queues} queue(s){', ordered' if cfg.order else ''})")
            self.topic_table.save(cfg)
        return cfg

    def ensure_topic_locked(self, name: str, queue_id: int = -1) -> TopicConfig:
        """The topic's config, creating it on first send (write lock held). ``queue_id`` (an
        explicit queue the caller will use) is checked *before* the topic is created, so a
        refused send leaves no topic behind."""
        t = self.topic_table.get_trusted(name)
        if t is not None:
            return t
        self.migrate_topics_locked()
        t = self.topic_table.get_trusted(name)
        if t is None:
            t = self._restore_locked(name)   # from its copy or its queues, saved; None: no trace
        if t is not None:
            return t
        if name in SYSTEM_TOPIC_QUEUES:
            queues = SYSTEM_TOPIC_QUEUES[name]
        elif names.is_system_topic(name):  # %RETRY%G and %DLQ%G: one queue each, as RocketMQ
            queues = 1
        elif not self.settings.auto_create_topics:
            raise topic_not_created(name)
        else:
            queues = self.settings.default_queues
        if queue_id >= queues:
            raise UsageError(f"queue {queue_id} does not exist: topic {name!r} would be created "
                             f"with queues 0-{queues - 1}")
        cfg, created = self.create_topic_locked(name, queues, False)
        if created and self.on_topic_created is not None and not names.is_system_topic(name):
            self.on_topic_created(cfg)
        return cfg

    def _record_synced(self) -> None:
        """Put the durable end this handle reached into the checkpoint: batches carry the
        previous sync's end (a ``--flush sync`` writer syncs after the lock is released), so
        without this the last batch's sync would never be recorded, and a log later found
        cut below it could not be told from a torn tail (``store check``)."""
        try:
            with self.write_lock:
                cp = self.checkpoint_file.read()
                if cp is None or cp.boot_id != self.writer.boot_id:
                    return
                new = cp
                if cp.synced_end < self.hints.synced <= cp.written_end:
                    new = replace(new, synced_end=self.hints.synced)
                if cp.derived_end < self.hints.derived <= new.synced_end:
                    new = replace(new, derived_end=self.hints.derived, derived_at=self.hints.derived_at)
                if new != cp:
                    self.checkpoint_file.write(new)
        except StoreError:
            pass   # best effort: the checkpoint stays a lower bound
