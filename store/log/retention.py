"""Retention: delete the oldest commit-log segments nobody needs any more (``store clean``).

RocketMQ deletes a commit-log file when it is older than ``fileReservedTime`` (72 h by default,
judged by the file's last-modified time) and only ever from the oldest end; consumers that had
not read it yet lose those messages. Here a segment is deleted only when all of these hold:

1. it is not the last (active) segment, and every older segment is deleted too (the log stays
   one contiguous run, so ``min_offset`` is simply the first segment's base);
2. its file was last modified more than the retention ago (default 72 h);
3. every reader has moved past it, unless ``force``:

   * every clustering group: for each queue of each topic it has offsets in, the record at its
     committed offset (the next to consume) lies in a later segment. A queue of such a topic
     with no committed offset counts as "from the first stored message" (conservative);
   * every broadcast client (``offsets/<clientId>/<group>/offsets.json``), the same way;
   * the delay scheduler (``config/delayOffset.json``): parked retries and delayed messages
     that are not delivered yet;
   * unresolved transactions: the live half copies of every PREPARED transaction (none live
     when its newest copy is damaged: then its newest sound one, which the check reads). Records
     that finish a half copy (op records, the committed message) are always written after that copy,
     so keeping every segment from the oldest live copy on keeps everything a check or a manual
     ``tx commit`` needs. Parked transactions (DISCARDED after ``max_checks``, with a copy in
     ``TRANS_CHECK_MAX_TIME_TOPIC``, resolved by nobody since) are unresolved too: ``tx commit``
     makes the committed message from the newest half copy, and the parked copy and DISCARD op
     come after it, so the log is kept from that copy on until one resolves them. If reading
     the transactions fails, the floor falls back to the record at the check service's
     committed half offset (``tx/CID_RMQ_SYS_TRANS.json``), or to the first half copy when
     anything is parked, which is conservative.

   Committed offsets below a queue's first stored message (already removed) do not hold
   anything back. ``force`` ignores rule 3: what is older than the retention goes, and the
   plan lists whose unread messages went with it.

Before any segment goes, the offset commits of exactly-once stages that the offsets table has
not absorbed yet (``offsetcommits.py``: a stage killed between its once-a-second absorbs) are
absorbed into it, durably, the log synced first: those commits live only as records in the
log, and deleting them would move the group's offsets back.

Then the derived files that only point into deleted segments go too:

* consume-queue segments whose entries all point below the new commit-log minimum (never a
  queue's last segment, oldest first, stopping at the first one that must stay);
* key-index files whose ``endPhyOffset`` is below it (never the last index file).

Crash safety: files are unlinked oldest first (commit log, then consume queues, then index),
each kind by its owner (``CommitLog.remove_segments``, ``ConsumeQueue.remove_segments``,
``KeyIndex.remove_files``), each directory fsynced after its deletions (a failed fsync is
warned about). A crash at any step leaves a log that is a
contiguous suffix and derived files that may still point below its start; every reader already
copes with that (``Store.min_offset`` skips consume-queue entries below the log's minimum,
index hits are verified against the record, recovery starts from the first segment), so the
store opens and the next ``store clean`` finishes the job. Everything runs under the store's
write lock, so no batch is appended meanwhile (appends only touch the last segment anyway).
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from store.errors import StoreError
from store.log import format as F
from store.log import logstart
from store.names import CHECK_MAX_TOPIC, HALF_TOPIC, SCHEDULE_TOPIC

if TYPE_CHECKING:
    from store.log.messagestore import Store

DEFAULT_RETENTION_MS = 72 * 3_600_000


@dataclass(frozen=True)
class Need:
    """A reader that still needs the log from ``commitlog_offset`` on."""

    who: str                 # "group G", "broadcast client C of group G", "delay scheduler", "transaction X"
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    # What frees it, in words: each kind of reader has its own (a group is consumed or reset; a
    # transaction resolved; the delay scheduler's messages go when they are due).
    remedy: str

    def to_json(self) -> dict[str, Any]:
        return {"who": self.who, "topic": self.topic, "queueId": self.queue_id,
                "queueOffset": self.queue_offset, "commitLogOffset": self.commitlog_offset}

    def describe(self) -> str:
        return f"{self.who} ({self.topic}/{self.queue_id} from offset {self.queue_offset})"


@dataclass(frozen=True)
class FileAction:
    kind: str                # "commitlog" | "consumequeue" | "index"
    path: Path
    bytes: int
    mtime_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "mtime": self.mtime_ms}


@dataclass
class CleanPlan:
    now_ms: int
    retention_ms: int
    force: bool
    old_min_offset: int
    new_min_offset: int
    commitlog: list[FileAction] = field(default_factory=list)
    consumequeue: list[FileAction] = field(default_factory=list)
    index: list[FileAction] = field(default_factory=list)
    held: list[Need] = field(default_factory=list)        # needs that kept old segments (no force)
    held_files: int = 0                                    # segments old enough but kept for them
    held_bytes: int = 0
    overridden: list[Need] = field(default_factory=list)  # with force: needs whose data goes anyway

    @property
    def files(self) -> list[FileAction]:
        return self.commitlog + self.consumequeue + self.index

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"retentionMs": self.retention_ms, "force": self.force,
                "oldMinOffset": self.old_min_offset, "minOffset": self.new_min_offset,
                "commitlogSegments": len(self.commitlog), "consumeQueueFiles": len(self.consumequeue),
                "indexFiles": len(self.index), "bytes": self.bytes,
                "heldBack": [n.to_json() for n in self.held], "heldBackSegments": self.held_files,
                "heldBackBytes": self.held_bytes, "overridden": [n.to_json() for n in self.overridden]}


# -- who needs what -------------------------------------------------------------------------------

_DELAY_REMEDY = "its delayed messages move on when they are due, while a consumer or `mqctl` runs"
_TX_REMEDY = "resolve it with `mqctl tx commit|rollback`"


def _queue_need(store: Store, who: str, topic: str, qid: int, offset: int | None,
                remedy: str) -> Need | None:
    """What a reader at ``offset`` (None: from the first stored message) of one queue needs."""
    lo, hi = store.min_offset(topic, qid), store.max_offset(topic, qid)
    off = lo if offset is None or offset < lo else offset
    if off >= hi:
        return None
    e = store.queue(topic, qid).entry(off)
    if e is None:
        return None
    return Need(who, topic, qid, off, e[0], remedy)


def _offset_table_needs(store: Store, who: str, offsets: dict[tuple[str, int], int],
                        topics: dict[str, Any], remedy: Callable[[str], str]) -> list[Need]:
    """The needs of one reader's offset table; ``remedy(topic)``: what frees a topic's queues."""
    needs = []
    for topic in sorted({t for t, _ in offsets}):
        cfg = topics.get(topic)
        if cfg is None:
            continue  # offsets of a deleted topic: nobody can read it any more
        for q in range(cfg.queues):
            off = offsets.get((topic, q))
            n = _queue_need(store, who, topic, q, off if off is not None and off >= 0 else None, remedy(topic))
            if n is not None:
                needs.append(n)
    return needs


def _reset_remedy(group: str) -> Callable[[str], str]:
    return lambda topic: f"consume it, or move it on with `mqctl offsets reset -g {group} --topic {topic} ...`"


def _delete_remedy(group: str, client: str) -> Callable[[str], str]:
    return lambda _topic: (f"consume it, or remove a dead client's offsets with "
                           f"`mqctl offsets delete -g {group} --client-id {client}`")


def consumer_needs(store: Store) -> list[Need]:
    """Every reader's position, as the commit-log offset it will read next."""
    from store.log.broadcastoffsets import BroadcastOffsetStore, broadcast_offset_files
    topics = store.topics()
    needs: list[Need] = []
    cluster = store.offsets
    for group in cluster.groups():
        needs += _offset_table_needs(store, f"group {group}", cluster.read_group(group), topics,
                                     _reset_remedy(group))
    for cid, group in broadcast_offset_files(store.layout):
        table = BroadcastOffsetStore(store.layout, cid, group, warn=store.warn).load()
        needs += _offset_table_needs(store, f"broadcast client {cid} of group {group}", table, topics,
                                     _delete_remedy(group, cid))
    needs += _schedule_needs(store, topics)
    needs += transaction_needs(store)
    return needs


def _schedule_needs(store: Store, topics: dict[str, Any]) -> list[Need]:
    cfg = topics.get(SCHEDULE_TOPIC)
    if cfg is None:
        return []
    # (read by its owner: the file's crc, its .bak, the progress past it)
    from store.log.positions import load_delay_progress
    table = load_delay_progress(store.layout, store.warn)["offsetTable"]
    offsets: dict[tuple[str, int], int] = {}
    for q in range(cfg.queues):
        v = table.get(str(q))
        offsets[(SCHEDULE_TOPIC, q)] = v if isinstance(v, int) and v >= 0 else 0
    return _offset_table_needs(store, "delay scheduler", offsets, topics, lambda _t: _DELAY_REMEDY)


def transaction_needs(store: Store) -> list[Need]:
    """The live half copies of unresolved transactions, and the newest half copy of each
    parked one (see the module docstring)."""
    if not store.has_topic(HALF_TOPIC):
        return []
    from store.log.positions import load_tx_progress
    from store.tx import check as txcheck
    from store.tx import transaction as tx
    try:
        needs = []
        for p in txcheck.pending(store):
            view = tx.load(store, p.tx_id)
            # (none live: its newest copy is damaged, and the sound one before is what is checked)
            for h in view.live() or [view.latest]:
                needs.append(Need(f"transaction {p.tx_id}", HALF_TOPIC, 0, h.queue_offset, h.commitlog_offset,
                                  _TX_REMEDY))
        for p in txcheck.parked(store):
            needs.append(Need(f"parked transaction {p.tx_id}", HALF_TOPIC, 0, p.half.queue_offset,
                              p.half.commitlog_offset, _TX_REMEDY))
        return needs
    except (StoreError, OSError, ValueError) as exc:
        store.warn(f"could not read the unresolved transactions ({exc}); keeping the log from the "
                   f"check service's position")
        half: int | None
        half, _op = load_tx_progress(store.layout, store.warn)
        if store.has_topic(CHECK_MAX_TOPIC):
            lo, hi = store.min_offset(CHECK_MAX_TOPIC, 0), store.max_offset(CHECK_MAX_TOPIC, 0)
            half = None if hi > lo else half   # parked ones lie below it: from the first half copy
        n = _queue_need(store, "transaction check service", HALF_TOPIC, 0, half, _TX_REMEDY)
        return [] if n is None else [n]


def _size(path: Path) -> int:
    st = _stat(path)
    return st.st_size if st is not None else 0


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


# -- planning ------------------------------------------------------------------------------------

def plan_clean(store: Store, retention_ms: int = DEFAULT_RETENTION_MS, force: bool = False,
               now_ms: int | None = None) -> CleanPlan:
    """What :func:`clean` would delete now. Reads only."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    log = store.commitlog
    segs = log.segments()
    old_min = segs[0] if segs else 0
    plan = CleanPlan(now, retention_ms, force, old_min, old_min)
    # Rules 1 and 2: the old-enough prefix, never the last segment.
    old: list[tuple[int, int, FileAction]] = []  # (base, next base, action)
    for i, base in enumerate(segs[:-1]):
        st = _stat(log.segment_path(base))
        if st is None:
            continue
        mtime = st.st_mtime_ns // 1_000_000
        if mtime > now - retention_ms:
            break
        old.append((base, segs[i + 1], FileAction("commitlog", log.segment_path(base), st.st_size, mtime)))
    if old:
        _plan_segments(store, plan, old, force)
    # Derived files are judged against the new minimum even when no segment goes now: that
    # finishes the job of a clean that was interrupted after its commit-log deletions.
    if plan.new_min_offset > 0:
        plan.consumequeue = _cq_files(store, plan.new_min_offset)
        plan.index = _index_files(store, plan.new_min_offset)
    return plan


def _plan_segments(store: Store, plan: CleanPlan, old: list[tuple[int, int, FileAction]], force: bool) -> None:
    # Rule 3: a segment may go when every need lies in a later segment.
    needs = consumer_needs(store)
    floor = min((n.commitlog_offset for n in needs), default=None)
    chosen = []
    for base, nxt, action in old:
        if not force and floor is not None and nxt > floor:
            break
        chosen.append((base, nxt, action))
    plan.commitlog = [a for _, _, a in chosen]
    cut = chosen[-1][1] if chosen else plan.old_min_offset
    plan.new_min_offset = cut
    if force:
        plan.overridden = _lowest_per_reader([n for n in needs if n.commitlog_offset < cut])
    else:
        kept = old[len(chosen):]
        plan.held_files = len(kept)
        plan.held_bytes = sum(a.bytes for _, _, a in kept)
        if kept:
            plan.held = _lowest_per_reader([n for n in needs if n.commitlog_offset < kept[-1][1]])


def _lowest_per_reader(needs: Iterable[Need]) -> list[Need]:
    """The lowest need of each (reader, topic), lowest first: one line per culprit."""
    best: dict[tuple[str, str], Need] = {}
    for n in needs:
        k = (n.who, n.topic)
        if k not in best or n.commitlog_offset < best[k].commitlog_offset:
            best[k] = n
    return sorted(best.values(), key=lambda n: (n.commitlog_offset, n.who, n.topic))


def _cq_files(store: Store, new_min: int) -> list[FileAction]:
    from store.log.consumequeue import ConsumeQueue, queue_dirs
    out = []
    for topic, qid in queue_dirs(store.layout):
        q = ConsumeQueue(store.layout.queue_dir(topic, qid), store.settings.cq_segment_entries)
        try:
            bases = q.segments()
            # The last segment with entries stays, and so does anything after it (an empty
            # file a failed batch left): max_offset is read from them.
            while bases and _size(q.segment_path(bases[-1])) == 0:
                bases.pop()
            for base in bases[:-1]:
                path = q.segment_path(base)
                st = _stat(path)
                if st is None:
                    continue
                n = st.st_size // F.CQ_ENTRY_SIZE
                last = q.read_entries((base // F.CQ_ENTRY_SIZE) + n - 1, 1) if n else []
                if n and (not last or last[0][0] >= new_min):
                    break  # an entry still points into the log (or is unreadable): keep
                out.append(FileAction("consumequeue", path, st.st_size, st.st_mtime_ns // 1_000_000))
        finally:
            q.close()
    return out


def _index_files(store: Store, new_min: int) -> list[FileAction]:
    out = []
    idx = store.index
    files = idx.files()
    for base in files[:-1]:
        path = idx.path(base)
        try:
            _b, _e, _bp, end_phys, _slots, _count = idx.header(base)
        except (OSError, struct.error):  # a short or unreadable header: leave it
            break
        if end_phys >= new_min:
            break
        st = _stat(path)
        if st is not None:
            out.append(FileAction("index", path, st.st_size, st.st_mtime_ns // 1_000_000))
    return out


# -- deleting --------------------------------------------------------------------------------------

def _absorb_commits(store: Store) -> None:
    """Take every offset commit of exactly-once stages into the offsets table, durably,
    before segments go. Until the table absorbs them, those commits live only as records in
    the log (``offsetcommits.py``: a stage killed before its once-a-second absorb); deleting
    their segment would move the group's offsets back. A killed stage's records may not be
    on disk yet (``--flush async``): the log is synced to its end first, since a table
    must never hold an offset whose outputs a power cut could take back. The write lock is
    held, so no new commit record is written between this and the deletions."""
    store.offsets.absorb(store.sync_written(), sync=True)


def clean(store: Store, retention_ms: int = DEFAULT_RETENTION_MS, force: bool = False,
          dry_run: bool = False, now_ms: int | None = None,
          progress: Callable[[int], None] | None = None,
          on_delete: Callable[[FileAction], None] | None = None) -> CleanPlan:
    """Plan and (unless ``dry_run``) delete, under the store's write lock. Returns the plan."""
    with store.write_lock():
        plan = plan_clean(store, retention_ms, force, now_ms)
        if dry_run:
            return plan
        if plan.commitlog:
            _absorb_commits(store)
        from store.log.consumequeue import ConsumeQueue
        done = _reporter(on_delete, progress)
        for _d, bases, each in _by_directory(plan.commitlog, done):   # (each kind by its owner)
            # (recorded first: a segment gone below the record is never taken for one lost)
            logstart.record(store.layout, max(bases) + store.commitlog.segment_size)
            store.commitlog.remove_segments(bases, store.warn, each)
        for d, bases, each in _by_directory(plan.consumequeue, done):
            ConsumeQueue(d, store.settings.cq_segment_entries).remove_segments(bases, store.warn, each)
        for _d, bases, each in _by_directory(plan.index, done):
            store.index.remove_files(bases, store.warn, each)
        store.close_queues()
    return plan


def _reporter(on_delete: Callable[[FileAction], None] | None,
              progress: Callable[[int], None] | None) -> Callable[[FileAction], None]:
    def done(action: FileAction) -> None:
        if on_delete is not None:
            on_delete(action)
        if progress is not None:
            progress(1)
    return done


def _by_directory(actions: list[FileAction], done: Callable[[FileAction], None]
                  ) -> Iterator[tuple[Path, list[int], Callable[[str], None]]]:
    """The deletions of ``actions`` a directory at a time, in their order: (the directory, the
    bases of its files, what its owner calls after each file it deletes)."""
    by_dir: dict[Path, list[FileAction]] = {}
    for action in actions:
        by_dir.setdefault(action.path.parent, []).append(action)
    for d, group in by_dir.items():
        named = {a.path.name: a for a in group}
        yield d, [int(a.path.name) for a in group], lambda name, named=named: done(named[name])  # type: ignore[misc]
