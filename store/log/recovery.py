"""Recovery: make the derived files (consume queues, key index) agree with the commit log.

Runs under the write lock, from :func:`checkpoint_locked` when the checkpoint says a
writer died mid-batch or the machine restarted, and from ``mqctl store recover`` (``full``).

1. Choose where to start: the checkpoint's written end (a writer died), its synced end (the
   machine restarted: the page cache may have lost anything later), or the first segment
   (``full``, or no readable checkpoint).
2. Scan records from there, checking every CRC. Each valid record gets its consume-queue entry
   (idempotently: an entry already right is left alone) and its index keys.
3. An invalid record with no valid record anywhere after it is a torn tail: the log is cut
   back to the last valid record. An invalid record *followed* by valid ones is corruption:
   it is reported, never served, and the scan resumes at the next valid record.
4. Consume-queue entries that point past the recovered end are dropped; so is a torn
   (partial) entry; index entries past it are fenced off via the header.
5. The checkpoint is moved to the recovered end.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from store.errors import StoreIOError
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.consumequeue import ConsumeQueue
from store.log.positions import clamp_to_queue_ends
from store.log.record import PROP_KEYS, PROP_UNIQ_KEY, Message, RecordError, decode, entry_tags_code
from store.log.topics import TopicConfig

if TYPE_CHECKING:
    from store.log.engine import Engine


@dataclass
class RecoveryReport:
    start: int = 0
    end: int = 0
    records: int = 0
    cq_entries_written: int = 0
    truncated_bytes: int = 0
    cq_entries_dropped: int = 0
    damage: list[tuple[str, int, str]] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "start": self.start, "end": self.end, "records": self.records,
                "cqEntriesWritten": self.cq_entries_written, "truncatedBytes": self.truncated_bytes,
                "cqEntriesDropped": self.cq_entries_dropped,
                "damage": [{"file": f, "offset": o, "reason": r} for f, o, r in self.damage]}


def find_next_valid(engine: "Engine", after: int) -> int | None:
    """The offset of the first valid record strictly after ``after``, searching by magic."""
    log = engine.commitlog
    magic = F.MAGIC_V1.to_bytes(4, "big")
    for base in log.segments():
        if base + log.segment_size <= after:
            continue
        path = log.segment_path(base)
        data = path.read_bytes()
        pos = max(after + 1 - base, 0)
        while True:
            i = data.find(magic, pos + 4)
            if i < 0:
                break
            cand = i - 4
            try:
                m = decode(data, cand, len(data))
                if m.commitlog_offset == base + cand:
                    return base + cand
            except RecordError:
                pass
            pos = cand + 1
    return None


@dataclass
class _Plan:
    start: int          # where the scan (re-dispatch) begins
    reason: str
    rebooted: bool      # the machine restarted: unsynced data may be gone from any file
    cut_from: int       # after a restart, the first invalid record at or past this ends the log
    checkpoint: ckpt.Checkpoint | None = None   # as recovery found it


def _plan(engine: "Engine", full: bool) -> _Plan:
    cp = ckpt.read(engine.layout.checkpoint)
    end = engine.commitlog.end()
    lo = engine.commitlog.min_offset()
    if full:
        rebooted = cp is not None and cp.boot_id != engine.writer.boot_id
        return _Plan(lo, "full rebuild requested", rebooted, cp.synced_end if cp and rebooted else end, cp)
    if cp is None:
        # No readable checkpoint (torn, or a store of an unknown version): every derived file
        # is checked as after a restart, but an invalid record is damage to report and step
        # over, never a reason to cut the log (nothing says where its durable end is).
        return _Plan(lo, "no readable checkpoint", True, end, cp)
    if cp.boot_id != engine.writer.boot_id:
        # Consume queues and the index are durable only below ``derived end``; the log only
        # below ``synced end``. Everything after may have been lost in any order.
        start, reason = cp.derived_end, "the machine restarted since the last write"
        plan = _Plan(start, reason, True, cp.synced_end, cp)
    else:
        plan = _Plan(cp.written_end, "a writer stopped in the middle of a batch", False, end, cp)
    if plan.start > end:
        # The log is shorter than the checkpoint says (a torn or truncated tail). ``end`` may
        # then fall inside a record: scanning from it would keep the torn bytes and append
        # after them. The base of the segment holding ``end`` is a record boundary.
        plan.start = engine.commitlog.segment_of(end)
        plan.reason += "; the commit log is shorter than the checkpoint"
    plan.start = max(lo, plan.start)
    return plan


def _check_index(engine: "Engine", plan: _Plan, full: bool, rep: "RecoveryReport") -> None:
    """Drop key-index files that cannot be trusted, and every later one, and move the scan
    back to the first dropped file's offset so the records it covered are indexed again.
    After a restart, every file written since the last derived flush is read whole (entries
    or slots lost in the cut); otherwise the header and sizes are checked."""
    idx = engine.index
    for leftover in idx.dir.glob(".*.tmp"):   # a file being made when its writer died
        try:
            leftover.unlink()
        except OSError:
            pass
    if full:
        return
    files = idx.files()
    derived = plan.checkpoint.derived_end if plan.checkpoint is not None else 0
    for i, base in enumerate(files):
        thorough = False
        if plan.rebooted:
            try:
                thorough = i == len(files) - 1 or idx.header(base)[3] >= derived
            except (OSError, ValueError):
                thorough = True
        why = idx.problem(base, thorough=thorough)
        if why is None:
            continue
        idx.close()
        for later in files[i:]:
            try:
                idx.path(later).unlink()
            except FileNotFoundError:
                pass
        rep.damage.append((str(idx.path(base)), 0, f"key index {why}: rebuilt from the commit log"))
        lo = engine.commitlog.min_offset()
        if max(base, lo) < plan.start:
            plan.start = max(base, lo)
            plan.reason += "; a key-index file had to be rebuilt"
        return


def recover(engine: "Engine", full: bool = False, progress: Callable[[int], None] | None = None) -> RecoveryReport:
    """Repair the store (write lock held). Returns what was done."""
    engine.heal_topics_locked()   # records are dispatched only to topics that exist
    plan = _plan(engine, full)
    rep = RecoveryReport(reason=plan.reason)
    _check_index(engine, plan, full, rep)
    rep.start = plan.start
    rep.reason = plan.reason
    engine.index.repair()   # slots a killed writer left pointing past the index's count
    if full:
        _drop_index(engine)  # rebuilt below from every record: damage in it is not trusted
    topics = engine.topics()
    log = engine.commitlog
    start = plan.start
    valid_end = start
    last_ts = 0
    index_items: list[tuple[str, int]] = []
    queues: dict[tuple[str, int], _QueueRebuild] = {}
    pos = start
    while True:
        resumed = False
        for off, msg, err in log.scan(pos):
            if err is not None:
                if plan.rebooted and off >= plan.cut_from:
                    break   # lost in the power cut: nothing after it was ever durable
                nxt = find_next_valid(engine, off)
                if nxt is None:
                    break  # torn tail
                rep.damage.append((str(log.segment_path(log.segment_of(off))), off - log.segment_of(off), err.reason))
                pos, resumed = nxt, True
                break
            assert msg is not None
            rep.records += 1
            valid_end = off + msg.size
            last_ts = max(last_ts, msg.store_timestamp)
            rep.cq_entries_written += _dispatch(engine, topics, msg, index_items, queues)
            if len(index_items) >= 8192:
                engine.index.add(index_items, last_ts)
                index_items.clear()
            if progress is not None:
                progress(msg.size)
        if not resumed:
            break
    for qr in queues.values():
        qr.flush()
    if index_items:
        engine.index.add(index_items, last_ts)
    rep.truncated_bytes = _truncate_log(engine, valid_end)
    rep.cq_entries_dropped = _trim_queues(engine, valid_end)
    if full or rep.damage:
        _fill_queue_holes(engine, rep)
    fence_index(engine, valid_end)
    _clamp_topics(engine, valid_end)
    if plan.rebooted or rep.cq_entries_dropped or rep.truncated_bytes:
        _clamp_consumers(engine)
    rep.end = valid_end
    cp = plan.checkpoint or ckpt.Checkpoint()
    last_ts = max(cp.last_store_ts, last_ts)
    ckpt.write(engine.layout.checkpoint, ckpt.Checkpoint(
        valid_end, last_ts, min(cp.synced_end, valid_end), engine.writer.boot_id,
        min(cp.derived_end, valid_end), cp.derived_at))
    if plan.rebooted or full:
        # What survived the restart, and what recovery rebuilt, is made durable now, so the
        # next restart starts here (and nothing below ``valid_end`` is re-dispatched again).
        engine.durability.flush_durable(valid_end)
        ckpt.write(engine.layout.checkpoint, ckpt.Checkpoint(
            valid_end, last_ts, valid_end, engine.writer.boot_id, valid_end, int(time.time())))
    return rep


def _clamp_topics(engine: "Engine", valid_end: int) -> None:
    """A topic created after records that a crash then took away recorded a creation offset
    past the log's end; the next records of that topic land below it, and recovery would skip
    them as older than their topic. Such offsets come back to the end."""
    for t in engine.topics().values():
        if t.created_offset > valid_end:
            engine.topic_table.save(replace(t, created_offset=valid_end))


def _clamp_consumers(engine: "Engine") -> None:
    """Reader positions past a queue's end (the queue lost unsynced messages that readers had
    already read) come back to the end, so the messages that take those offsets next are
    delivered. Warned about, never silent (``positions.py``)."""
    topics = engine.topics()

    def queue_end(topic: str, queue_id: int) -> int:
        cfg = topics.get(topic)
        if cfg is None or queue_id >= cfg.queues:
            return -1
        return engine.queues.max_offset(topic, queue_id)

    clamp_to_queue_ends(engine.layout, queue_end, engine.warn)


def _dispatch(engine: "Engine", topics: dict[str, TopicConfig], msg: Message, index_items: list[tuple[str, int]],
              queues: dict[tuple[str, int], "_QueueRebuild"]) -> int:
    """Give one recovered record its consume-queue entry and index keys. Returns 1 when a
    consume-queue entry had to be written."""
    tx = msg.sysflag & F.TX_MASK
    if tx != F.TX_ROLLBACK:
        uk = msg.properties.get(PROP_UNIQ_KEY)
        if uk:
            index_items.append(("#" + uk, msg.commitlog_offset))
        for k in (msg.properties.get(PROP_KEYS) or "").split(" "):
            if k:
                index_items.append((f"{msg.topic}#{k}", msg.commitlog_offset))
    cfg = topics.get(msg.topic)
    if tx not in (F.TX_NOT, F.TX_COMMIT) or cfg is None or msg.commitlog_offset < cfg.created_offset:
        return 0
    if msg.queue_id >= cfg.queues:
        return 0
    key = (msg.topic, msg.queue_id)
    qr = queues.get(key)
    if qr is None:
        qr = queues[key] = _QueueRebuild(engine.queues.queue(msg.topic, msg.queue_id))
    return qr.put(msg.queue_offset, msg.commitlog_offset, msg.size, entry_tags_code(msg.topic, msg.properties))


class _QueueRebuild:
    """One consume queue during recovery. Entries already right are checked against reads of
    4096 entries at a time; missing ones at the end are appended in runs, one write per run,
    instead of a few system calls per record (a million-record rebuild took minutes)."""

    RUN = 4096

    def __init__(self, q: ConsumeQueue) -> None:
        self.q = q
        _fix_partial_entry(q)
        self.end = q.max_offset()
        self.run_first = -1
        self.run = bytearray()
        self.win_first = 0
        self.win: list[tuple[int, int, int]] = []

    def put(self, qoff: int, phys: int, size: int, tags: int) -> int:
        entry = F.CQ_ENTRY.pack(phys, size, tags)
        if self.run:
            if qoff == self.run_first + len(self.run) // F.CQ_ENTRY_SIZE:
                self.run += entry
                if len(self.run) >= self.RUN * F.CQ_ENTRY_SIZE:
                    self.flush()
                return 1
            self.flush()
        if qoff < self.end:
            i = qoff - self.win_first
            if not 0 <= i < len(self.win):
                self.win_first, self.win = qoff, self.q.read_entries(qoff, self.RUN)
                i = 0
            if i < len(self.win) and self.win[i] == (phys, size, tags):
                return 0
            self.q.append(qoff, entry)   # a wrong or missing entry in the middle: fixed in place
            self.win = []
            return 1
        if qoff == self.end:
            self.run_first = qoff
            self.run += entry
            return 1
        self.q.append(qoff, entry)       # a gap before it: written where it belongs
        self.end = qoff + 1
        return 1

    def flush(self) -> None:
        if self.run:
            self.q.append(self.run_first, bytes(self.run))
            self.end = max(self.end, self.run_first + len(self.run) // F.CQ_ENTRY_SIZE)
            self.run.clear()
            self.win = []
        self.q.close()


def _fix_partial_entry(q: ConsumeQueue) -> None:
    segs = q.segments()
    if segs:
        path = q.segment_path(segs[-1])
        size = os.stat(path).st_size
        if size % F.CQ_ENTRY_SIZE:
            os.truncate(path, size - size % F.CQ_ENTRY_SIZE)


def _truncate_log(engine: "Engine", valid_end: int) -> int:
    """Cut the log at ``valid_end``: later segments go, the segment holding it is shortened."""
    log = engine.commitlog
    cut = 0
    last = log.segment_of(valid_end)
    for base in log.segments():
        path = log.segment_path(base)
        size = os.stat(path).st_size
        if base > last:
            cut += size
            path.unlink()
        elif base == last and size > valid_end - base:
            cut += size - (valid_end - base)
            os.truncate(path, valid_end - base)
    log.close()
    return cut


def _trim_queues(engine: "Engine", valid_end: int) -> int:
    dropped = 0
    root = engine.layout.consumequeue_dir
    try:
        topics = os.listdir(root)
    except FileNotFoundError:
        return 0
    for topic in topics:
        try:
            qids = [int(x) for x in os.listdir(root / topic) if x.isascii() and x.isdigit()]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for qid in qids:
            q = engine.queues.queue(topic, qid)
            _fix_partial_entry(q)
            m = q.max_offset()
            keep = m
            while keep > 0:
                # The tail must point at its own record: after a power cut it may be zeros, or
                # an older entry that a later recovery had replaced.
                e = q.entry(keep - 1)
                if e is not None and e[0] + e[1] <= valid_end and _points_home(engine, topic, qid, keep - 1, e):
                    break
                keep -= 1
            if keep < m:
                q.truncate_to(keep)
                dropped += m - keep
    return dropped


def _points_home(engine: "Engine", topic: str, queue_id: int, qoff: int, entry: tuple[int, int, int]) -> bool:
    try:
        m = engine.commitlog.read(entry[0], entry[1])
    except (RecordError, OSError):
        return False
    return m.topic == topic and m.queue_id == queue_id and m.queue_offset == qoff


def fence_index(engine: "Engine", valid_end: int) -> None:
    """Make the index forget offsets at or past ``valid_end``: files that begin there are
    removed, and an older file's end offset is moved back so those offsets get re-indexed."""
    idx = engine.index
    idx.truncate_after(valid_end)
    for base in idx.files():
        hdr = list(idx.header(base))
        if hdr[3] >= valid_end:
            hdr[3] = valid_end - 1
            with open(idx.path(base), "r+b") as fh:
                fh.write(F.INDEX_HEADER.pack(*hdr))


def _drop_index(engine: "Engine") -> None:
    """Remove every key-index file (a full recovery re-adds every record's keys)."""
    idx = engine.index
    for base in idx.files():
        try:
            idx.path(base).unlink()
        except FileNotFoundError:
            pass


def _damaged_regions(engine: "Engine", rep: RecoveryReport) -> list[tuple[int, int]]:
    """``(start, end)`` commit-log ranges of the damaged records the scan stepped over."""
    regions = []
    log = engine.commitlog
    for file, off, _reason in rep.damage:
        name = os.path.basename(file)
        if not (len(name) == 20 and name.isascii() and name.isdigit()) or os.path.dirname(file) != str(log.dir):
            continue
        start = int(name) + off
        nxt = find_next_valid(engine, start)
        regions.append((start, nxt if nxt is not None else start + 1))
    return sorted(regions)


def _fill_queue_holes(engine: "Engine", rep: RecoveryReport) -> None:
    """Give every consume-queue slot that no valid record claims (a zero-filled hole left by
    writing a later entry past the end: its record is damaged, or gone) an entry pointing at
    the damaged range before the next valid entry's record. Readers then skip that offset as
    damaged instead of stopping at the hole for ever (a zero entry reads as the queue's end).
    Each filled slot is reported in ``rep.damage``."""
    regions = _damaged_regions(engine, rep)
    starts = [r[0] for r in regions]
    root = engine.layout.consumequeue_dir
    try:
        topics = sorted(os.listdir(root))
    except FileNotFoundError:
        return
    import bisect
    for topic in topics:
        try:
            qids = sorted(int(x) for x in os.listdir(root / topic) if x.isascii() and x.isdigit())
        except (FileNotFoundError, NotADirectoryError):
            continue
        for qid in qids:
            q = engine.queues.queue(topic, qid)
            holes: list[tuple[int, int]] = []   # (segment base, entry index) awaiting a fill
            for sbase in q.segments():
                path = q.segment_path(sbase)
                data = path.read_bytes()
                data = data[: len(data) - len(data) % F.CQ_ENTRY_SIZE]
                for j, (phys, size, _tags) in enumerate(F.CQ_ENTRY.iter_unpack(data)):
                    if phys < 0 or size <= 0:
                        holes.append((sbase, j))
                        continue
                    if not holes:
                        continue
                    i = bisect.bisect_left(starts, phys) - 1
                    filler = (regions[i][0], regions[i][1] - regions[i][0]) if i >= 0 else (0, 1)
                    entry = F.CQ_ENTRY.pack(filler[0], filler[1], 0)
                    for hbase, hj in holes:
                        hpath = q.segment_path(hbase)
                        with open(hpath, "r+b") as fh:
                            fh.seek(hj * F.CQ_ENTRY_SIZE)
                            fh.write(entry)
                        rep.damage.append((str(hpath), hj * F.CQ_ENTRY_SIZE,
                                           f"entry {(hbase + hj * F.CQ_ENTRY_SIZE) // F.CQ_ENTRY_SIZE} has no "
                                           f"valid record (damaged or removed); readers skip it"))
                    holes.clear()
            q.close()


def checkpoint_locked(engine: "Engine") -> ckpt.Checkpoint:
    """The checkpoint, after making sure it matches the log (write lock held): a writer that
    died mid-batch, or a machine restart, is recovered from first."""
    cp = engine.checkpoint_file.read()
    if cp is None or cp.written_end != engine.commitlog.end() or cp.boot_id != engine.writer.boot_id:
        recover(engine)
        cp = engine.checkpoint_file.read()
        assert cp is not None
    return cp


def recover_if_dirty(engine: "Engine") -> None:
    """Recover at open when the checkpoint says a writer died or the machine restarted; a
    store that cannot be written is read as it is (consume queues only point at whole
    records)."""
    cp = ckpt.read(engine.layout.checkpoint)
    try:
        end = engine.commitlog.end()
    except OSError:
        return
    if cp is not None and cp.written_end == end and cp.boot_id == engine.writer.boot_id:
        return
    if cp is None and end == 0 and not engine.index.files() and not any(engine.layout.consumequeue_dir.glob("*/*/*")):
        return   # a new store: nothing written yet, nothing to check
    try:
        with engine.write_lock:
            checkpoint_locked(engine)
    except StoreIOError as exc:
        engine.warn(f"store needs recovery but cannot be written ({exc}); reading what is complete")
