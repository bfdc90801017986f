"""Rebuilding one consume queue from the commit log's records, and cutting off its tail
entries that no record claims: the two repairs of a queue, for a whole-store recovery
(``recovery.py``) and for the repair of one queue found cut short (``queueends.py``); and
filling the holes a full recovery finds (:func:`fill_holes`). All run under the store's
write lock; the queue's files are written only through its owner
(:class:`~store.log.consumequeue.ConsumeQueue`).
"""
from __future__ import annotations

from pathlib import Path

from store.flock import list_dir
from store.fsutil import not_rewritable
from store.layout import Layout
from store.log import format as F
from store.log.arrays import layouts
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue, queue_dirs
from store.log.entrysearch import points_home

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

    from store.log.topics import TopicConfig


class QueueRebuild:
    """One consume queue during recovery. Entries already right are checked against reads of
    4096 entries at a time; missing ones at the end are appended in runs, one write per run,
    instead of a few system calls per record (a million-record rebuild took minutes)."""

    RUN = 4096

    def __init__(self, q: ConsumeQueue) -> None:
        self.q = q
        q.drop_partial_entry()
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

    def put_many(self, qoffs: Any, phys: Any, size: Any, tags: Any) -> int:
        """:meth:`put` for a run of one window (numpy arrays, in log order): entries already
        right are compared as arrays, and a run that continues the queue is packed at once."""
        np = layouts().np
        n, k0 = len(qoffs), int(qoffs[0])
        if n > 1 and not bool((np.diff(qoffs) == 1).all()):
            return sum(map(self.put, qoffs.tolist(), phys.tolist(), size.tolist(), tags.tolist()))
        written = 0
        below = min(max(self.end - k0, 0), n) if not self.run else 0
        if below:
            have = entries_array(self.q, k0, below)
            same = np.zeros(below, bool)
            m = min(len(have), below)
            same[:m] = (have["phys"][:m] == phys[:m]) & (have["size"][:m] == size[:m]) & (have["tags"][:m] == tags[:m])
            for i in np.flatnonzero(~same).tolist():
                written += self.put(k0 + i, int(phys[i]), int(size[i]), int(tags[i]))
        rest = slice(below, n)
        if below < n and k0 + below == (self.run_first + len(self.run) // F.CQ_ENTRY_SIZE if self.run else self.end):
            ent = np.empty(n - below, layouts().cq)
            ent["phys"], ent["size"], ent["tags"] = phys[rest], size[rest], tags[rest]
            if not self.run:
                self.run_first = k0 + below
            self.run += ent.tobytes()
            if len(self.run) >= self.RUN * F.CQ_ENTRY_SIZE:
                self.flush()
            return written + n - below
        return written + sum(map(self.put, qoffs[rest].tolist(), phys[rest].tolist(), size[rest].tolist(),
                                 tags[rest].tolist()))

    def flush(self) -> None:
        if self.run:
            self.q.append(self.run_first, bytes(self.run))
            self.end = max(self.end, self.run_first + len(self.run) // F.CQ_ENTRY_SIZE)
            self.run.clear()
            self.win = []
        self.q.close()


def entry_place(q: ConsumeQueue, k: int) -> tuple[Path, int]:
    """The file of ``q`` that holds entry ``k``, and the entry's byte offset in it."""
    byte = k * F.CQ_ENTRY_SIZE
    return q.segment_path(byte - byte % q.segment_bytes), byte % q.segment_bytes


def entries_array(q: ConsumeQueue, k: int, n: int) -> Any:
    """Entries ``[k, k + n)`` of ``q`` as a numpy array (fewer at its end)."""
    L = layouts()
    parts, got = [], 0
    while got < n:
        raw = q.read_raw(k + got, n - got)
        if not raw:
            break
        parts.append(raw)
        got += len(raw) // F.CQ_ENTRY_SIZE
    return L.np.frombuffer(b"".join(parts), L.cq)


# How far past the commit log's end the records a power cut took can reach: a log never grows
# by a TiB between two flushes. An entry pointing further (or out of log order) is bytes put in
# the queue by hand or by a fault: the queue's damage (``store check`` names its file), not
# records the log lost.
_LOST_REACH = 1 << 40


def fill_holes(q: ConsumeQueue, filler: Callable[[int], tuple[int, int]]) -> list[tuple[int, Path, int]]:
    """Fill every hole of ``q`` that a valid entry follows (a slot no entry was written to: its
    record is damaged or gone) with the entry ``(*filler(phys), 0)``, ``phys`` being the next
    valid entry's record. Each segment is read once, in one read, and looked at as an array
    unless a hole is pending. Returns each slot filled: (queue offset, its file, its byte offset
    in the file); the queue is closed."""
    holes: list[int] = []
    filled: list[tuple[int, Path, int]] = []
    for sbase in q.segments():
        first = sbase // F.CQ_ENTRY_SIZE
        data = q.read_raw(first, q.segment_entries)
        if not holes and not _has_holes(data):
            continue
        for j, (phys, size, _tags) in enumerate(F.CQ_ENTRY.iter_unpack(data)):
            if phys < 0 or size <= 0:
                holes.append(first + j)
            elif holes:
                entry = F.CQ_ENTRY.pack(*filler(phys), 0)
                for k in holes:
                    q.write_entry(k, entry)
                filled += [(k, *entry_place(q, k)) for k in holes]
                holes = []
    q.close()
    return filled


def _has_holes(data: bytes) -> bool:
    """Whether any consume-queue entry in ``data`` is a hole (:func:`fill_holes`)."""
    ent = layouts().np.frombuffer(data, layouts().cq)
    return bool(((ent["phys"] < 0) | (ent["size"] <= 0)).any())


def past_end(q: ConsumeQueue, end: int) -> tuple[int, int]:
    """``(entries, reach)``: how many of ``q``'s last entries point at records that reach past
    ``end`` (the commit log's end as found: records a power cut or a cut file took after the
    entries were written), and how far the furthest reaches (0 when none does). Reads the
    tail backwards: one entry when no entry does (zeroed entries, and entries no lost record
    can have — past ``_LOST_REACH``, or out of log order — are passed over)."""
    n = reach = 0
    off, lo = q.max_offset(), q.min_offset()
    below = end + _LOST_REACH   # (records of entries read so far start at or past it)
    while off > lo:
        e = q.entry(off - 1)
        if e is not None:
            if e[0] + e[1] <= end:
                break
            if e[0] + e[1] <= below:   # (else bytes that are no entry of a lost record: passed over)
                n, reach, below = n + 1, max(reach, e[0] + e[1]), e[0]
        off -= 1
    return n, reach


def trim_queue(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, valid_end: int,
               damaged_from: int | None = None) -> int:
    """Cut ``q``'s torn entry and its tail entries that do not point at their own record
    below ``valid_end``; how many entries went. An entry pointing at ``[damaged_from,
    valid_end)`` (acknowledged records recovery found damaged and left in place) stays: its
    message is lost, readers skip it, and its queue offset is never given to another."""
    q.drop_partial_entry()
    m = q.max_offset()
    keep = m
    while keep > 0:
        # The tail must point at its own record: after a power cut it may be zeros, or
        # an older entry that a later recovery had replaced.
        e = q.entry(keep - 1)
        if e is not None and e[1] > 0 and e[0] + e[1] <= valid_end and (
                (damaged_from is not None and e[0] >= damaged_from)
                or points_home(log, topic, queue_id, keep - 1, e)):
            break
        keep -= 1
    if keep < m:
        q.truncate_to(keep)
    return m - keep


def rebuild_queue(log: CommitLog, topics: dict[str, TopicConfig], q: ConsumeQueue, topic: str, queue_id: int,
                  start: int, end: int) -> tuple[int, int]:
    """Give ``q`` an entry for every record of ``topic``/``queue_id`` in ``[start, end)`` of the
    log (``start`` a record boundary, ``end`` the checkpoint's written end), then cut its tail
    entries that no record there claims. Returns (entries written, entries cut)."""
    from store.log import recordscan  # (recovery has it loaded; a reader's repair only here)
    qr = QueueRebuild(q)
    written = 0
    for w in recordscan.scan(log, start):
        for t, qid, run in recordscan.queue_runs(w, topics):
            if t == topic and qid == queue_id:
                run = run[w.phys[run] < end]
                if len(run):
                    written += qr.put_many(w.queue_offset[run], w.phys[run], w.size[run], w.tag_code[run])
        if w.end >= end:
            break
    qr.flush()
    return written, trim_queue(log, q, topic, queue_id, end)


def end_in_log(log: CommitLog, topics: dict[str, TopicConfig], topic: str, queue_id: int, start: int,
               end: int) -> int:
    """One past the highest queue offset of the records of ``topic``/``queue_id`` in ``[start,
    end)`` of the log (0: none): where :func:`rebuild_queue` over that range would end the
    queue, read without writing it (a process that cannot write)."""
    from store.log import recordscan
    last = -1
    for w in recordscan.scan(log, start):
        for t, qid, run in recordscan.queue_runs(w, topics):
            if t == topic and qid == queue_id:
                run = run[w.phys[run] < end]
                if len(run):
                    last = max(last, int(w.queue_offset[run].max()))
        if w.end >= end:
            break
    return last + 1


def unrewritable_queue_file(layout: Layout) -> tuple[Path, str] | None:
    """The first consume-queue file recovery could not rewrite (see ``fsutil.not_rewritable``),
    and why; None when it can rewrite them all. Asked before recovery drops anything, so that
    a repair that cannot finish leaves the store as it found it."""
    for topic, qid in queue_dirs(layout):
        directory = layout.queue_dir(topic, qid)
        for name in sorted(list_dir(directory)):
            if F.is_segment_name(name):
                why = not_rewritable(directory / name)
                if why is not None:
                    return directory / name, why
    return None
