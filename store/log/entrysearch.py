"""Find a consume-queue entry's record in the commit log when the entry itself cannot be
trusted.

A consume-queue entry is derived from the log (``consumequeue.py``): when one is invalid
(zeros, a negative size) or points at bytes that are not its record (a flipped bit in its
offset or size), the record is usually intact. Readers then search the log instead of
skipping the message: a queue's records lie in log order, so the record of entry ``n`` starts
at or after the end of entry ``n - 1``'s record and before entry ``n + 1``'s, and it names its
own topic, queue and queue offset. Neighbours are trusted only once their records check out.

The outcome is one of three: the record (delivered as if its entry had been right); None
when the search crossed damaged bytes of the log (the record itself is gone: readers skip it
with a warning, as any damaged record); or :class:`CorruptionError` when the log is intact
over the whole range and holds no such record (nothing to deliver and nothing to skip over
safely: the queue stops there until ``mqctl store recover`` rebuilds it).

:func:`first_unlisted` looks the other way: for a record of a queue past the queue's end
(its file cut short), in one pass over a range of the log; :class:`LogTail` does the same
over a short range without numpy, for many queues at once.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from store.errors import CorruptionError
from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue
from store.log.record import PROP_UNIQ_KEY, Message, RecordError, decode

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.topics import TopicConfig

_MAGIC = F.MAGIC_V1.to_bytes(4, "big")
_NEIGHBOURS = 64            # entries looked at on each side for one that checks out
_WINDOW = 8 * 1024 * 1024   # bytes of log searched per read
_SLACK = F.MAX_RECORD_SIZE   # read past a window so its last record is whole
_HEAD = F.header_view("TOTALSIZE..SYSFLAG")
_I32 = struct.Struct(">i").unpack_from
_MIN_SIZE = F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE
_TAIL_WINDOW = 64 * 1024   # read_tail's reads: a record bigger than what is left of one is skipped


def points_home(log: CommitLog, topic: str, queue_id: int, qoff: int, entry: tuple[int, int, int] | None) -> bool:
    """Whether ``entry`` (entry ``qoff`` of ``topic``/``queue_id``) points at its own record."""
    if entry is None:
        return False
    try:
        m = log.read(entry[0], entry[1])
    except (RecordError, OSError):
        return False
    return m.topic == topic and m.queue_id == queue_id and m.queue_offset == qoff


def search_bounds(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, qoff: int) -> tuple[int, int]:
    """``[lo, hi)``: the log range where the record of entry ``qoff`` must start."""
    lo, hi = log.min_offset(), log.end()
    for k in range(qoff - 1, max(q.min_offset(), qoff - _NEIGHBOURS) - 1, -1):
        e = q.entry(k)
        if points_home(log, topic, queue_id, k, e):
            assert e is not None
            lo = e[0] + e[1]
            break
    top = min(q.max_offset(), qoff + 1 + _NEIGHBOURS)
    for k in range(qoff + 1, top):
        e = q.entry(k)
        if points_home(log, topic, queue_id, k, e):
            assert e is not None
            hi = e[0]
            break
    return lo, hi


def find_record(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, qoff: int) -> Message | None:
    """The intact record of entry ``qoff`` of ``topic``/``queue_id``, found in the log; None
    when damaged log bytes lie where it must be; CorruptionError when it is nowhere."""
    lo, hi = search_bounds(log, q, topic, queue_id, qoff)
    damaged = False
    pos = lo
    while pos < hi:
        base = log.segment_of(pos)
        seg_end = base + log.segment_size
        limit = min(hi, seg_end, pos + _WINDOW) - pos
        try:
            buf = log.read_bytes(pos, limit + _SLACK)
        except OSError:
            buf = b""
        if not buf:
            damaged = True   # a segment missing or cut short: its records are gone
            pos = seg_end
            continue
        i = 0
        while i < limit:
            try:
                m = decode(buf, i, len(buf))
                if m.commitlog_offset != pos + i:
                    raise RecordError("record claims another offset")
            except RecordError as exc:
                if exc.reason == "blank trailer":
                    i = seg_end - pos
                    break
                damaged = True
                j = buf.find(_MAGIC, i + 5)
                i = j - 4 if j >= 0 else max(limit, i + 1)
                continue
            if m.topic == topic and m.queue_id == queue_id:
                if m.queue_offset == qoff:
                    return m
                if m.queue_offset > qoff:
                    _gone(log, damaged, qoff, topic, queue_id, pos + i)
                    return None
            i += m.size
        pos += i
    _gone(log, damaged, qoff, topic, queue_id, hi)
    return None


def _gone(log: CommitLog, damaged: bool, qoff: int, topic: str, queue_id: int, where: int) -> None:
    """Nothing found: fine (a damaged record, skipped) when the search crossed damage; else
    raise, naming where the record should have been."""
    if damaged:
        return None
    base = log.segment_of(where)
    raise CorruptionError(str(log.segment_path(base)), where - base,
                          f"consume-queue entry {qoff} of {topic}/{queue_id} is damaged and the commit log "
                          f"holds no record for it (run: mqctl store recover)")


def records_with_uniq_key(log: CommitLog, uniq_key: str) -> list[int]:
    """Offsets of the records carrying unique key ``uniq_key``, newest first, by reading the
    whole log: for lookups while the key index is fenced off (an interrupted rebuild on a
    store this process cannot repair). Stops at the first damaged record."""
    out = []
    for off, m, _err in log.scan(log.min_offset()):
        if m is None:
            break
        if m.properties.get(PROP_UNIQ_KEY) == uniq_key:
            out.append(off)
    return out[::-1]


def first_unlisted(log: CommitLog, topics: dict[str, TopicConfig], topic: str, queue_id: int, qoff: int,
                   start: int, end: int) -> tuple[int, int] | None:
    """The first record of ``topic``/``queue_id`` with a queue offset of at least ``qoff``
    that starts in ``[start, end)`` (``start`` a record boundary), as ``(its commit-log
    offset, its queue offset)``; None when there is none. Records are checked as by
    ``store check`` (``recordscan.py``); damaged ones are passed over."""
    from store.log import recordscan  # (numpy with it: only a queue found suspect gets here)
    for w in recordscan.scan(log, start):
        for t, q, run in recordscan.queue_runs(w, topics):
            if t == topic and q == queue_id:
                hit = run[(w.queue_offset[run] >= qoff) & (w.phys[run] < end)]
                if len(hit):
                    return int(w.phys[hit[0]]), int(w.queue_offset[hit[0]])
        if w.end >= end:
            break
    return None



@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class LogTail:
    """The records of a short range ``[start, end)`` of the log as their headers show them
    (:func:`read_tail`): ``(offset, size, queue id, queue offset, topic)`` of each one that
    gets a consume-queue entry. ``whole``: the walk reached ``end`` (a record that cannot be
    read ends it early). Shared by the queues a handle looks at (``queueends.py``)."""

    start: int
    end: int
    heads: list[tuple[int, int, int, int, bytes]]
    whole: bool

    def first_unlisted(self, log: CommitLog, topic: str, queue_id: int, qoff: int,
                       start: int) -> tuple[int, int] | None:
        """:func:`first_unlisted` from ``start`` (within this range), each candidate record
        read and checked in full."""
        name = topic.encode()
        for phys, size, qid, qo, t in self.heads:
            if phys >= start and qid == queue_id and qo >= qoff and t == name:
                try:
                    m = log.read(phys, size)
                except (RecordError, OSError):
                    continue
                if m.topic == topic and m.queue_id == queue_id and m.queue_offset == qo:
                    return phys, qo
        return None


def read_tail(log: CommitLog, start: int, end: int, max_records: int = 1 << 62) -> LogTail:
    """The headers of the records in ``[start, end)`` (``start`` a record boundary), without
    numpy, at most ``max_records`` of them (then not ``whole``). Read a window at a time from a
    record boundary; a record running past its window is skipped to its end, its topic read on
    its own: a range of big records costs a few small reads a record, not its bytes."""
    heads: list[tuple[int, int, int, int, bytes]] = []
    pos, seen, window = start, 0, _TAIL_WINDOW
    while pos < end:
        if seen >= max_records:
            return LogTail(start, end, heads, False)
        base = log.segment_of(pos)
        stop = min(end, base + log.segment_size)
        buf = log.read_bytes(pos, min(stop - pos, window))
        if len(buf) >= 8 and int.from_bytes(buf[4:8], "big") == F.BLANK_MAGIC:
            pos = base + log.segment_size   # (a BLANK trailer: the segment ends)
            continue
        if len(buf) < F.RECORD_HEADER_SIZE:
            return LogTail(start, end, heads, False)   # (the range ends inside a header)
        i = 0
        while i + F.RECORD_HEADER_SIZE <= len(buf) and seen < max_records:
            total, magic, _crc, qid, _flag, qo, _phys, sysflag = _HEAD.unpack_from(buf, i)
            if magic == F.BLANK_MAGIC:
                break
            t = i + F.RECORD_HEADER_SIZE + _I32(buf, i + F.RECORD_HEADER_SIZE - 4)[0]
            if magic != F.MAGIC_V1 or total < _MIN_SIZE or not i < t < i + total or pos + i + total > stop:
                return LogTail(start, end, heads, False)
            if sysflag & F.TX_MASK in (F.TX_NOT, F.TX_COMMIT):
                name = buf[t:t + 1 + buf[t]] if t < len(buf) else b""
                if len(name) != 1 + (name[0] if name else 0) or t - i + len(name) > total:
                    name = log.read_bytes(pos + t, min(256, i + total - t))   # (past the window)
                    if not name or len(name) < 1 + name[0]:
                        return LogTail(start, end, heads, False)
                heads.append((pos + i, total, qid, qo, bytes(name[1:1 + name[0]])))
            seen += 1
            i += total
        # the next window from the first record not walked (a BLANK trailer's, at most): a
        # small one after a record that ran past this one (big records: headers, not bodies)
        window = _TAIL_WINDOW if i <= len(buf) else 4096
        pos += i
    return LogTail(start, end, heads, pos == end)
