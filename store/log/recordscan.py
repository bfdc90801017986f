"""One sequential pass over the commit log in big windows: every record checked (as
:func:`~store.log.record.decode` checks it: lengths, its own offset, the record CRC) and
reduced to the few fields that ``store check`` and ``store recover`` compare the derived
files against (taken by ``recordfields.py``); no :class:`~store.log.record.Message` is built.

Memory is bounded by one window (``WINDOW`` bytes, plus room for the largest record) and
the records of one window; nothing is kept from one window to the next. A record that fails
a check is reported as damage (its segment, its offset in it, why) and the scan resumes at
the next record start (:func:`resume_at`). A segment other than the last must end with its
BLANK trailer; one that does not lost its tail (reported, and the scan moves on to the next
segment). A ``live`` scan (``store check`` beside writers) stops at a record that runs past
the end of the log instead: a writer may be adding it now (:func:`tail_damage` looks again,
and when it is damage with records after it, :func:`resume_after` says where to go on).
Record layout: ``format.py``.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from store.log import format as F
from store.log import recordfields
from store.log.arrays import layouts
from store.log.commitlog import CommitLog, past_trailer, written_length
from store.log.record import RecordError, crc32, decode

if TYPE_CHECKING:
    from store.log.topics import TopicConfig

WINDOW = 4 * 1024 * 1024
_SLACK = 64 * 1024
_MAX_SIZE = F.MAX_RECORD_SIZE
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_MAGIC = F.MAGIC_V1.to_bytes(4, "big")
_OFF_MAGIC = F.OFF_MAGIC
_MIN_SIZE = F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE
_CRC_HEAD8 = int.from_bytes(F.CRC_PROPERTY_HEAD[:8], "little")


@dataclass
class Window:
    """The valid records of one window, in log order, as parallel columns (numpy arrays, no
    object per record), and the damage found among them."""

    phys: Any = None          # int64 arrays, one value per record
    size: Any = None
    queue_id: Any = None
    queue_offset: Any = None
    sysflag: Any = None
    store_ts: Any = None
    tag_code: Any = None
    topic_id: Any = None      # index into ``topics``
    topics: list[str] = field(default_factory=list)
    key_hash: Any = None      # index keys, flattened: each key's hash and its record's offset
    key_phys: Any = None
    damage: list[tuple[str, int, str]] = field(default_factory=list)   # (segment, offset in it, why)
    damage_at: list[int] = field(default_factory=list)                 # each damage's log offset
    # (a sealed segment's last window) bytes past its BLANK trailer, no record's: (its file,
    # where the trailer ends in it, how many; ``commitlog.past_trailer``)
    past_trailer: tuple[str, int, int] | None = None
    end: int = 0       # the log offset this window's scan reached
    cut: bool = False  # (a live scan) it stopped at ``end``, a record that runs past the log's end
    bytes: int = 0     # bytes of log read for it

    def __len__(self) -> int:
        return 0 if self.phys is None else len(self.phys)


def scan(log: CommitLog, start: int, progress: Callable[[int], None] | None = None,
         live: bool = False) -> Iterator[Window]:
    """Every record from ``start`` (a record boundary) to the end of the log, a window at a time
    (``live``: the last record, when it runs past the end, ends the scan with ``cut``)."""
    segs = log.segments()
    topics: dict[bytes, str] = {}
    for n, base in enumerate(segs):
        seg_end = base + log.segment_size
        if seg_end <= start:
            continue
        path = log.segment_path(base)
        last = n + 1 == len(segs)
        if not last and segs[n + 1] != seg_end:
            w = Window(end=base)
            # (reported where the missing bytes begin: the known damage a recover records is them)
            w.damage.append((str(path), log.segment_size, f"next segment is {segs[n + 1]}, expected {seg_end}"))
            w.damage_at.append(seg_end)
            yield w
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            yield from _segment(fd, str(path), (base, seg_end), max(start - base, 0), last and live, last, topics,
                                progress)
        finally:
            os.close(fd)


def _segment(fd: int, path: str, span: tuple[int, int], pos: int, may_cut: bool, last: bool,
             topics: dict[bytes, str], progress: Callable[[int], None] | None) -> Iterator[Window]:
    base, seg_end = span
    size = written_length(fd, path)   # (zeros a sync writer wrote ahead: no records)
    resync = False
    started = pos
    want = WINDOW + _SLACK
    while pos < size:
        buf = os.pread(fd, min(want, size - pos), pos)   # (not the zeros past ``size``)
        limit = min(len(buf), WINDOW)
        w = Window()
        if resync:   # the previous window ended inside damage: find the next record start
            nxt = resume_at(buf, -1, base + pos)
            if nxt is None:
                pos += limit
                continue
            i, resync = nxt, False
        else:
            i = 0
        more = pos + len(buf) < size
        i, trailer, resync = _records(buf, i, limit, base + pos, path, base, w, topics, more or may_cut)
        if may_cut and not more and i < limit and not trailer and not resync:
            w.bytes, w.end, w.cut = i, base + pos + i, True   # the record at i runs past the end
            if progress is not None:
                progress(pos + i - started)
            yield w
            return
        if i == 0 and not trailer and not resync and not w.damage:
            want = _I32(buf, 0)[0] + _SLACK   # a record bigger than a window: read it whole
            continue
        want = WINDOW + _SLACK
        w.bytes = i
        pos += i
        w.end = base + pos
        if trailer:
            w.end = seg_end   # (a scan that resumes there goes on in the next segment)
            stray = 0 if last else past_trailer(fd, pos + F.END_FILE_MIN_BLANK, seg_end - base, size)
            if stray:
                w.past_trailer = (path, pos + F.END_FILE_MIN_BLANK, stray)
            if progress is not None:
                progress(size - started)
            yield w
            return
        if progress is not None:
            progress(min(pos, size) - started)
            started = min(pos, size)
        yield w
    if not last:
        w = Window(end=seg_end)   # (the scan goes on in the next segment)
        w.damage.append((path, size, "segment ends without its end-of-segment trailer (its tail was lost)"))
        w.damage_at.append(base + size)
        yield w


def _records(buf: bytes, i: int, limit: int, wbase: int, path: str, base: int, w: Window,
             topics: dict[bytes, str], more: bool) -> tuple[int, bool, bool]:
    """Records starting in ``buf[i:limit]`` into ``w`` (``more``: the segment goes on past
    ``buf``). Returns (where the next window starts, relative to ``buf``; a BLANK trailer
    ended the segment; the window ended inside damage)."""
    cols: list[tuple[Any, ...]] = []
    marks = _magic_runs(buf)   # (once per window: the walk resumes after damage with them)
    while i < limit:
        starts, stop = _chain(buf, i, limit, marks)
        good, blank = _verify(buf, starts, wbase, cols)
        if good < len(starts):
            i = int(starts[good])
            if blank:
                _columns(w, cols, topics)
                return i, True, False
        else:
            i = stop
            if i >= limit:
                break
            if _blank_at(buf, i):
                _columns(w, cols, topics)
                return i, True, False
            if more and _continues(buf, i):
                break   # the next record ends past this read: the next window starts with it
        # damaged at i: named, then the scan resumes at the next record start
        w.damage.append((path, wbase + i - base, _reason(buf, i, wbase)))
        w.damage_at.append(wbase + i)
        nxt = resume_at(buf, i, wbase)
        if nxt is None:
            _columns(w, cols, topics)
            return max(limit, i + 1), False, True
        i = nxt
    _columns(w, cols, topics)
    return i, False, False


def tail_damage(log: CommitLog, at: int) -> tuple[str, int, str] | None:
    """The damage a live scan's ``cut`` at ``at`` is, as :func:`scan` would report it (its
    segment, its offset in it, why), read now: None when a whole record (or the segment's
    BLANK trailer) stands there by now, or the log was cut back to ``at`` (recovered)."""
    base = log.segment_of(at)
    path = log.segment_path(base)
    try:
        with open(path, "rb") as fh:
            fh.seek(at - base)
            buf = fh.read(_MAX_SIZE)
            # (zeros a sync writer wrote ahead are no part of a record)
            buf = buf[:max(0, written_length(fh.fileno(), path) - (at - base))]
    except FileNotFoundError:
        return None
    if not buf or _blank_at(buf, 0):
        return None
    try:
        if decode(buf, 0, len(buf)).commitlog_offset == at:
            return None
    except RecordError:
        pass
    return str(path), at - base, _reason(buf, 0, at)


def resume_after(log: CommitLog, at: int) -> int | None:
    """Where a scan goes on after the damaged record at ``at`` that a live scan stopped at
    (:func:`tail_damage` found it damaged, not cut: its TOTALSIZE runs past the end while
    records follow): the next record start, as :func:`resume_at` finds it for every scan and
    reader, looked for a window at a time to the end of its segment, else the next segment;
    None when nothing follows (a torn tail)."""
    base = log.segment_of(at)
    segs = log.segments()
    try:
        with open(log.segment_path(base), "rb") as fh:
            pos, first = at - base, True
            while True:
                fh.seek(pos)
                buf = fh.read(WINDOW + _SLACK)
                if len(buf) < F.RECORD_FIXED_SIZE:
                    break
                nxt = resume_at(buf, 0 if first else -1, base + pos)
                if nxt is not None:
                    return base + pos + nxt
                pos, first = pos + max(len(buf) - _SLACK, 1), False   # (a header across windows: seen in the next)
    except FileNotFoundError:
        pass
    later = [b for b in segs if b > base]
    return later[0] if later else None


def _continues(buf: bytes, i: int) -> bool:
    """The record at ``i`` may be whole in the file though not in ``buf``."""
    if len(buf) - i < 8:
        return True
    total: int = _I32(buf, i)[0]
    return _MIN_SIZE <= total <= _MAX_SIZE and i + total > len(buf)


def _blank_at(buf: bytes, i: int) -> bool:
    return len(buf) - i >= 8 and _I32(buf, i + 4)[0] & 0xFFFFFFFF == F.BLANK_MAGIC


def _magic_runs(buf: bytes) -> tuple[Any, Any, Any, Any]:
    """The places in ``buf`` where a record's magic stands (as record starts), the ends their
    TOTALSIZE gives, whether each such record is plausible and whole, and the places where a
    run of such records that each end where the next begins is broken (:func:`_chain`)."""
    np = layouts().np
    n = len(buf)
    if n < 8:   # (no room for a magic: a torn tail of a few bytes, which the walk names)
        none = np.zeros(0, np.int64)
        return none, none, np.zeros(0, bool), none
    b = np.frombuffer(buf, np.uint8)
    c = np.flatnonzero(b[4:n - 3] == _MAGIC[0])
    c = c[(b[c + 5] == _MAGIC[1]) & (b[c + 6] == _MAGIC[2]) & (b[c + 7] == _MAGIC[3])]
    tot = np.lib.stride_tricks.sliding_window_view(b, 4)[c].view(">i4").reshape(len(c)).astype(np.int64)
    ends = c + tot
    whole = (tot >= _MIN_SIZE) & (ends <= n)
    linked = np.zeros(len(c), bool)
    linked[:-1] = ends[:-1] == c[1:]
    breaks = np.flatnonzero(~(whole & linked))   # a run through j ends at the first break >= j
    return c, ends, whole, breaks


def _chain(buf: bytes, i: int, limit: int, marks: tuple[Any, Any, Any, Any]) -> tuple[Any, int]:
    """Record starts from ``i`` by their TOTALSIZE while each is plausible and whole: the
    array of starts and where the walk stopped. The walk is taken in runs over the places
    where the magic stands (``marks``, :func:`_magic_runs`): a run of such places that each
    end where the next begins is the walk itself; elsewhere (a record with a damaged magic,
    magic bytes inside a body) it goes a record at a time."""
    np = layouts().np
    n = len(buf)
    c, ends, whole, breaks = marks
    parts: list[Any] = []
    unpack = _I32
    while i < limit and n - i >= 8:
        k = int(np.searchsorted(c, i))
        if k < len(c) and c[k] == i:
            e = int(breaks[np.searchsorted(breaks, k)])
            run = c[k:e + 1]
            cut = int(np.searchsorted(run, limit))
            if cut < len(run):        # the walk passes the limit inside this run
                parts.append(run[:cut])
                i = int(run[cut])
                break
            if not whole[e]:          # the walk stops at this record
                parts.append(run[:-1])
                i = int(c[e])
                break
            parts.append(run)
            i = int(ends[e])
            continue
        total = unpack(buf, i)[0]
        if total < _MIN_SIZE or i + total > n:
            break
        parts.append(np.array([i], np.int64))
        i += total
    starts = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return starts.astype(np.int64, copy=False), i


def _reason(buf: bytes, i: int, wbase: int) -> str:
    try:
        m = decode(buf, i, len(buf))
    except RecordError as exc:
        return exc.reason
    return f"record claims offset {m.commitlog_offset}" if m.commitlog_offset != wbase + i else "damaged record"


def _verify(buf: bytes, starts: Any, wbase: int, cols: list[tuple[Any, ...]]) -> tuple[int, bool]:
    """Check the records at ``starts`` as arrays (as ``decode`` does); the leading run that
    passes goes into ``cols``. Returns (how many passed, the next is a BLANK trailer)."""
    L = layouts()
    np = L.np
    n = len(starts)
    if not n:
        return 0, False
    b = np.frombuffer(buf, np.uint8)
    rows = np.lib.stride_tricks.sliding_window_view   # rows gathered with no index matrix
    head = rows(b, F.RECORD_HEADER_SIZE)[starts].view(L.head).reshape(n)
    total = head["total"].astype(np.int64)
    ends = starts + total
    blen = head["blen"].astype(np.int64)
    t = starts + F.RECORD_HEADER_SIZE + blen
    ok = (head["magic"] == F.MAGIC_V1) & (head["phys"] == wbase + starts) & (blen >= 0) & (t + 3 <= ends)
    t = np.where(ok, t, starts)
    p = t + 1 + b[t].astype(np.int64) + 2
    crc_at = ends - F.CRC_PROPERTY_SIZE
    ok &= p <= crc_at
    p = np.where(ok, p, starts + 2)
    ok &= p + ((b[p - 2].astype(np.int64) << 8) | b[p - 1]) == ends
    at = np.where(ok, crc_at, starts)
    ok &= _crc_property_ok(np, b, at)
    bad = np.flatnonzero(~ok)
    good = int(bad[0]) if len(bad) else n
    blank = good < n and int(head["magic"][good]) == F.BLANK_MAGIC
    if good:
        # one C call per record (a comprehension slices without making slice objects)
        got = np.array([crc32(buf[a:e]) for a, e in zip(starts[:good].tolist(), crc_at[:good].tolist())], np.int64)
        digits = rows(b, 10)[crc_at[:good] + len(F.CRC_PROPERTY_HEAD)].astype(np.int64)
        want = np.einsum("ij,j->i", digits, L.pow10) - 48 * int(L.pow10.sum())
        crc_bad = np.flatnonzero((got & F.CRC_MASK) != want)
        if len(crc_bad):
            good, blank = int(crc_bad[0]), False
    if good:
        cols.append((head[:good], starts[:good], total[:good], t[:good], p[:good], crc_at[:good], buf, wbase))
    return good, blank


def _crc_property_ok(np: Any, b: Any, at: Any) -> Any:
    """Whether a record CRC property (``__CRC32#`` 0x01, ten decimal digits, 0x02) stands at
    each of ``at``: three 8-byte words each (the head; 0x01 and digits 0-6; digits 3-9 and
    0x02), a byte is a digit when its high nibble is 3 and its low nibble plus 6 stays a
    nibble (no carry out of any byte: the bytes are checked all at once)."""
    u = np.uint64
    w = np.lib.stride_tricks.sliding_window_view(b, 8)
    n = len(at)
    head, lo, hi = (w[at + k].view("<u8").reshape(n) for k in (0, 8, 12))
    ok = head == u(_CRC_HEAD8)
    ok &= (lo & u(0xF0F0F0F0F0F0F0FF)) == u(0x3030303030303001)
    ok &= ((lo & u(0x0F0F0F0F0F0F0F00)) + u(0x0606060606060600)) & u(0xF0F0F0F0F0F0F000) == 0
    ok &= (hi & u(0xFFF0F0F0F0F0F0F0)) == u(0x0230303030303030)
    ok &= ((hi & u(0x000F0F0F0F0F0F0F)) + u(0x0006060606060606)) & u(0x00F0F0F0F0F0F0F0) == 0
    return ok


def _columns(w: Window, cols: list[tuple[Any, ...]], topics: dict[bytes, str]) -> None:
    """The checked runs of a window into its columns: header fields, topic ids, tag codes
    and index keys."""
    np = layouts().np
    if not cols:
        return
    ids: dict[str, int] = {}
    parts: list[list[Any]] = [[] for _ in range(10)]
    for head, starts, total, t, p, crc_at, buf, wbase in cols:
        tid = recordfields.topic_ids(buf, t, p, topics, ids)
        phys = wbase + starts
        sysflag = head["sysflag"].astype(np.int64)
        rollback = (sysflag & F.TX_MASK) == F.TX_ROLLBACK
        tags, kh, kp = recordfields.keys(buf, p, crc_at, phys, rollback, tid, list(ids))
        for col, v in zip(parts, (phys, total, head["qid"].astype(np.int64), head["qoff"].astype(np.int64),
                                  sysflag, head["stored"].astype(np.int64), tags, tid, kh, kp)):
            col.append(v)
    cat = np.concatenate
    (w.phys, w.size, w.queue_id, w.queue_offset, w.sysflag, w.store_ts, w.tag_code, w.topic_id,
     w.key_hash, w.key_phys) = (cat(c) for c in parts)
    w.topics = list(ids)


def _looks_like_start(data: bytes, cand: int, wbase: int) -> bool:
    """A record header begins at ``cand``: its magic, and its own offset in PHYSICALOFFSET
    (12 bytes that body data does not reproduce by chance), whatever the rest holds."""
    if cand < 0 or cand + F.OFF_PHYSICAL_OFFSET + 8 > len(data):
        return False
    return (data[cand + _OFF_MAGIC:cand + _OFF_MAGIC + 4] == _MAGIC
            and _I64(data, cand + F.OFF_PHYSICAL_OFFSET)[0] == wbase + cand)


def resume_at(data: bytes, pos: int, wbase: int) -> int | None:
    """Where to resume after the damaged record at ``pos`` of ``data`` (log offset ``wbase``
    at ``data[0]``), so that each damaged record is reported at its own offset: the next
    record start after ``pos`` — a valid record, or one whose header is intact (magic and
    offset) though its body or properties are damaged — or, when the damaged record's own
    header is intact and ends before that, its end."""
    cand = None
    i = data.find(_MAGIC, pos + 5)
    while i >= 0:
        c = i - 4
        if _looks_like_start(data, c, wbase):
            cand = c
            break
        try:
            if decode(data, c, len(data)).commitlog_offset == wbase + c:
                cand = c
                break
        except RecordError:
            pass
        i = data.find(_MAGIC, i + 1)
    if _looks_like_start(data, pos, wbase):
        total: int = _I32(data, pos)[0]
        if F.RECORD_FIXED_SIZE <= total and pos + total < len(data) and (cand is None or pos + total < cand):
            return pos + total
    return cand


def queue_runs(w: Window, topics: dict[str, TopicConfig]) -> Iterator[tuple[str, int, Any]]:
    """The records of ``w`` that get a consume-queue entry (not a prepared or rolled-back
    half; a topic that exists, created at or before the record; a queue it has), as
    ``(topic, queue id, indexes into w)`` per queue, each in log order."""
    np = layouts().np
    if not len(w):
        return
    tx = w.sysflag & F.TX_MASK
    sel = (tx == F.TX_NOT) | (tx == F.TX_COMMIT)
    for tid, name in enumerate(w.topics):
        cfg = topics.get(name)
        if cfg is None:
            sel &= w.topic_id != tid
        else:
            sel &= (w.topic_id != tid) | ((w.phys >= cfg.created_offset) & (w.queue_id < cfg.queues))
    idx = np.flatnonzero(sel)
    if not len(idx):
        return
    qid = w.queue_id[idx]
    if len(w.topics) <= 256 and 0 <= int(qid.min()) and int(qid.max()) < 256:
        # (a 16-bit key sorts by radix, several times faster than a 64-bit one)
        order = idx[np.argsort((w.topic_id[idx] * 256 + qid).astype(np.uint16), kind="stable")]
    else:
        order = idx[np.argsort(w.topic_id[idx] * (1 << 20) + qid, kind="stable")]
    key = w.topic_id[order] * (1 << 20) + w.queue_id[order]
    for run in np.split(order, np.flatnonzero(np.diff(key)) + 1):
        yield w.topics[int(w.topic_id[run[0]])], int(w.queue_id[run[0]]), run
