"""Recovery: make the derived files (consume queues, key index) agree with the commit log.

Runs under the write lock, from :meth:`Store._checkpoint_locked` when the checkpoint says a
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from . import checkpoint as ckpt
from . import format as F
from .consumequeue import ConsumeQueue
from .record import PROP_KEYS, PROP_UNIQ_KEY, Message, RecordError, decode, java_hash

if TYPE_CHECKING:
    from .broker import Store


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

    def to_json(self) -> dict:
        return {"reason": self.reason, "start": self.start, "end": self.end, "records": self.records,
                "cqEntriesWritten": self.cq_entries_written, "truncatedBytes": self.truncated_bytes,
                "cqEntriesDropped": self.cq_entries_dropped,
                "damage": [{"file": f, "offset": o, "reason": r} for f, o, r in self.damage]}


def find_next_valid(store: "Store", after: int) -> int | None:
    """The offset of the first valid record strictly after ``after``, searching by magic."""
    log = store.commitlog
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


def _start_offset(store: "Store", full: bool) -> tuple[int, str]:
    cp = ckpt.read(store.layout.checkpoint)
    end = store.commitlog.end()
    lo = store.commitlog.min_offset()
    if full:
        return lo, "full rebuild requested"
    if cp is None:
        return lo, "no readable checkpoint"
    if cp.boot_id != store._boot_id:
        start, reason = min(cp.synced_end, cp.written_end), "the machine restarted since the last write"
    else:
        start, reason = cp.written_end, "a writer stopped in the middle of a batch"
    if start > end:
        # The log is shorter than the checkpoint says (a torn or truncated tail). ``end`` may
        # then fall inside a record: scanning from it would keep the torn bytes and append
        # after them. The base of the segment holding ``end`` is a record boundary.
        start = store.commitlog.segment_of(end)
        reason += "; the commit log is shorter than the checkpoint"
    return max(lo, start), reason


def recover(store: "Store", full: bool = False, progress: Callable[[int], None] | None = None) -> RecoveryReport:
    """Repair the store (write lock held). Returns what was done."""
    start, reason = _start_offset(store, full)
    rep = RecoveryReport(start=start, reason=reason)
    store.index.repair()   # slots a killed writer left pointing past the index's count
    if full:
        _drop_index(store)  # rebuilt below from every record: damage in it is not trusted
    topics = store.topics()
    log = store.commitlog
    valid_end = start
    last_ts = 0
    index_items: list[tuple[str, int]] = []
    queues: dict[tuple[str, int], _QueueRebuild] = {}
    pos = start
    while True:
        resumed = False
        for off, msg, err in log.scan(pos):
            if err is not None:
                nxt = find_next_valid(store, off)
                if nxt is None:
                    break  # torn tail
                rep.damage.append((str(log.segment_path(log.segment_of(off))), off - log.segment_of(off), err.reason))
                pos, resumed = nxt, True
                break
            assert msg is not None
            rep.records += 1
            valid_end = off + msg.size
            last_ts = max(last_ts, msg.store_timestamp)
            rep.cq_entries_written += _dispatch(store, topics, msg, index_items, queues)
            if len(index_items) >= 8192:
                store.index.add(index_items, last_ts)
                index_items.clear()
            if progress is not None:
                progress(msg.size)
        if not resumed:
            break
    for qr in queues.values():
        qr.flush()
    if index_items:
        store.index.add(index_items, last_ts)
    rep.truncated_bytes = _truncate_log(store, valid_end)
    rep.cq_entries_dropped = _trim_queues(store, valid_end)
    if full or rep.damage:
        _fill_queue_holes(store, rep)
    fence_index(store, valid_end)
    rep.end = valid_end
    cp = ckpt.read(store.layout.checkpoint) or ckpt.Checkpoint()
    synced = cp.synced_end
    if cp.boot_id != store._boot_id or full:
        os.sync()  # what survived a restart is durable now; make our rebuild durable too
        synced = valid_end
    ckpt.write(store.layout.checkpoint, ckpt.Checkpoint(
        valid_end, max(cp.last_store_ts, last_ts), min(synced, valid_end), store._boot_id))
    return rep


def _dispatch(store: "Store", topics: dict, msg: Message, index_items: list[tuple[str, int]],
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
        qr = queues[key] = _QueueRebuild(store.queue(msg.topic, msg.queue_id))
    if msg.topic == "SCHEDULE_TOPIC_XXXX":
        tags = int(msg.properties.get("TIMER_DELIVER_MS", "0") or 0)
    else:
        tags = java_hash(msg.tags) if msg.tags else 0
    return qr.put(msg.queue_offset, msg.commitlog_offset, msg.size, tags)


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
            if i < len(self.win) and self.win[i][0] == phys and self.win[i][1] == size:
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


def _truncate_log(store: "Store", valid_end: int) -> int:
    """Cut the log at ``valid_end``: later segments go, the segment holding it is shortened."""
    log = store.commitlog
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


def _trim_queues(store: "Store", valid_end: int) -> int:
    dropped = 0
    root = store.layout.consumequeue_dir
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
            q = store.queue(topic, qid)
            _fix_partial_entry(q)
            m = q.max_offset()
            keep = m
            while keep > 0:
                e = q.entry(keep - 1)
                if e is not None and e[0] + e[1] <= valid_end:
                    break
                keep -= 1
            if keep < m:
                q.truncate_to(keep)
                dropped += m - keep
    return dropped


def fence_index(store: "Store", valid_end: int) -> None:
    """Make the index forget offsets at or past ``valid_end``: files that begin there are
    removed, and an older file's end offset is moved back so those offsets get re-indexed."""
    idx = store.index
    idx.truncate_after(valid_end)
    for base in idx.files():
        hdr = list(idx.header(base))
        if hdr[3] >= valid_end:
            hdr[3] = valid_end - 1
            with open(idx.path(base), "r+b") as fh:
                fh.write(F.INDEX_HEADER.pack(*hdr))


def _drop_index(store: "Store") -> None:
    """Remove every key-index file (a full recovery re-adds every record's keys)."""
    idx = store.index
    for base in idx.files():
        try:
            idx.path(base).unlink()
        except FileNotFoundError:
            pass


def _damaged_regions(store: "Store", rep: RecoveryReport) -> list[tuple[int, int]]:
    """``(start, end)`` commit-log ranges of the damaged records the scan stepped over."""
    regions = []
    log = store.commitlog
    for file, off, _reason in rep.damage:
        name = os.path.basename(file)
        if not (len(name) == 20 and name.isascii() and name.isdigit()) or os.path.dirname(file) != str(log.dir):
            continue
        start = int(name) + off
        nxt = find_next_valid(store, start)
        regions.append((start, nxt if nxt is not None else start + 1))
    return sorted(regions)


def _fill_queue_holes(store: "Store", rep: RecoveryReport) -> None:
    """Give every consume-queue slot that no valid record claims (a zero-filled hole left by
    writing a later entry past the end: its record is damaged, or gone) an entry pointing at
    the damaged range before the next valid entry's record. Readers then skip that offset as
    damaged instead of stopping at the hole for ever (a zero entry reads as the queue's end).
    Each filled slot is reported in ``rep.damage``."""
    regions = _damaged_regions(store, rep)
    starts = [r[0] for r in regions]
    root = store.layout.consumequeue_dir
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
            q = store.queue(topic, qid)
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
