"""Bulk reads: a run of one queue's records, checked and cut into columns, with no
:class:`~store.log.record.Message` built per record.

Readers that want many messages and few of their fields (``consume`` writing raw bodies, the
Spark source building Arrow columns) pay for a Message per record more than for the read.
:func:`pull_columns` reads a run of consume-queue entries, fetches their records with one
``pread`` when they sit close together, and checks each as :func:`store.log.record.decode` does
(record CRC property, which covers body and BODYCRC; own commit-log offset, queue id, queue
offset, topic, field lengths), then hands out parallel lists: queue offset, body, born and store
timestamps, raw properties (without the record CRC), optionally the commit-log offsets.

A record that fails a check is never returned: it is listed in ``damaged`` and skipped. The loop's
common case runs in C when the package was built with it (``nativecheck.c``); the Python loop
here, the definition of the checks (layout: ``format.py``), takes every record the C loop hands back.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from itertools import islice

from store.log import format as F
from store.log.entrysearch import find_record
from store.log.queueends import reader_end
from store.log.record import Message, RecordError, crc32
from store.log.spans import GAP_PER_READ, fetch_span

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

    from store.log.commitlog import CommitLog
    from store.log.consumequeue import ConsumeQueue
    from store.log.engine import Engine

# What a bulk read needs of a record header (views of format.py's field table).
_HEAD = F.header_view("TOTALSIZE..QUEUEID QUEUEOFFSET PHYSICALOFFSET BORNTIMESTAMP STORETIMESTAMP "
                      "RECONSUMETIMES BODYLENGTH").unpack_from
# What every record's check needs of it (a third of the cost of all ten: no big ints for the
# timestamps); BORNTIMESTAMP . STORETIMESTAMP . RECONSUMETIMES only for records handed out.
_CHECK = F.header_view("TOTALSIZE MAGICCODE QUEUEID QUEUEOFFSET PHYSICALOFFSET BODYLENGTH").unpack_from
_TIMES = F.header_view("BORNTIMESTAMP STORETIMESTAMP RECONSUMETIMES").unpack_from

_CRC_TRAILER, _MASK = F.CRC_PROPERTY_REVERSED, F.CRC_MASK

_native: Callable[..., tuple[int, int]] | None = None
try:   # the check loop in C, when the package was built with it (pyproject.toml) from this source
    from store.log import nativecheck
    if nativecheck.INTERFACE == F.NATIVE_INTERFACE:   # (else a build of an older source: `pip install -e .` again)
        _native = nativecheck.check_run
except ImportError:
    pass
# Reads check records in C: then no run is checked as arrays (numpy's import costs more).
NATIVE = _native is not None


@dataclass(slots=True, eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Columns:
    """Messages of one queue as parallel lists: entry ``i`` of every list is the message at
    queue offset ``offsets[i]``. ``props`` are the raw ``name 0x01 value 0x02`` bytes.
    ``phys`` (commit-log offsets) and ``reconsume`` (reconsume times) are filled only when
    asked for (``with_phys``, and not ``bodies_only``). ``bodies`` are ``bytes`` except from
    :func:`~store.log.sharedread.pull_many` without ``full`` (views there)."""

    offsets: list[int]
    bodies: list[bytes | memoryview]
    born: list[int]
    stored: list[int]
    props: list[bytes]
    phys: list[int]
    next_offset: int
    max_offset: int
    damaged: list[tuple[int, str]] = field(default_factory=list)
    reconsume: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, more: Columns) -> None:
        """Append ``more``, the same queue's run read right after this one (with the same flags)."""
        self.offsets += more.offsets
        self.bodies += more.bodies
        self.born += more.born
        self.stored += more.stored
        self.props += more.props
        self.phys += more.phys
        self.reconsume += more.reconsume
        self.damaged += more.damaged
        self.next_offset = more.next_offset
        self.max_offset = more.max_offset


def _why(span: bytes, start: int, end: int, phys: int, qoff: int, queue_id: int,
         topic_field: bytes) -> str:
    """Why the record at ``span[start:end]`` failed the fast check, in decode()'s order."""
    total, magic, _bcrc, qid, rqoff, rphys, _b, _s, _r, blen = _HEAD(span, start)
    t = start + F.RECORD_HEADER_SIZE + blen
    p = t + len(topic_field) + 2
    if total != end - start or magic != F.MAGIC_V1 or rphys != phys:
        return "record does not match its consume-queue entry"
    body_end = end - F.CRC_PROPERTY_SIZE
    if span[body_end:end] != (_CRC_TRAILER % (crc32(span[start:body_end]) & _MASK))[::-1]:
        return "record CRC mismatch"
    if rqoff != qoff or qid != queue_id or blen < 0 or p > end or span[t:p - 2] != topic_field:
        return "record does not match its consume-queue entry"
    return "field lengths do not add up to TOTALSIZE"


def pull_columns(engine: Engine, topic: str, queue_id: int, offset: int, max_count: int = 256,
                 max_bytes: int = 4 * 1024 * 1024, with_phys: bool = False,
                 bodies_only: bool = False, views: bool = False) -> Columns:
    """Up to ``max_count`` messages of one queue from ``offset``, stopping after the record that
    reaches ``max_bytes``; ``next_offset`` is where the next pull starts. ``bodies_only``
    leaves ``born``, ``stored`` and ``props`` empty (``consume`` writing raw bodies); with
    ``views`` too, big bodies may come as views into the read's buffers (see :func:`cut_span`)."""
    q = engine.queues.queue(topic, queue_id)
    # (this handle's first look at a queue sees to its end: its file cut short?)
    max_off = q.max_offset() if q.end_checked else reader_end(engine, topic, queue_id, q)
    out = Columns([], [], [], [], [], [], offset, max_off)
    if offset >= max_off:
        return out
    # A dense run big enough for numpy is checked as arrays (bodies only, or every column
    # with ``phys``); anything else, and anything unusual, by the exact loop below, which
    # names each damaged record.
    if not NATIVE and bodies_only != with_phys and min(max_count, max_off - offset) >= _VECTOR_MIN_RUN and (
            "numpy" in sys.modules or max_off - offset >= VECTOR_MIN_BACKLOG):
        if _vector_run(engine, q, topic, queue_id, offset, min(max_count, max_off - offset), max_bytes, out,
                       with_phys, views):
            return out
    entries = q.read_entries(offset, min(max_count, max_off - offset))
    log = engine.commitlog
    if not entries:
        why = q.invalid_at(offset)
        if why is not None:
            out.next_offset = offset + 1
            _from_log(log, q, topic, queue_id, offset, why, out, bodies_only, with_phys)
        return out
    entries, lo, span = fetch_span(log, entries, max_bytes, NATIVE)
    check_run(log, q, topic, queue_id, offset, entries, lo, span, max_bytes, out, bodies_only, with_phys,
              views)
    return out


def check_run(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, offset: int,
              entries: list[tuple[int, int, int]], lo: int, span: bytes, max_bytes: int, out: Columns,
              bodies_only: bool, with_phys: bool, views: bool) -> None:
    """The records of ``entries`` (one queue's, from queue offset ``offset``) into ``out``, each
    checked; ``span`` holds the log from offset ``lo`` (a record outside it is read on its
    own). Stops after the record that reaches ``max_bytes``.

    With the C loop (:mod:`store.log.nativecheck`, built when the package was installed with a
    compiler) the records in ``span`` that pass are checked and appended there; every other
    record (outside the span, damaged) comes back to :func:`_check_loop`, which is the
    definition of the checks and names what is wrong."""
    topic_b = topic.encode()
    topic_field = bytes((len(topic_b),)) + topic_b
    n, max_bytes = len(entries), max(max_bytes, 1)   # max_bytes <= 0: a total of 0 ends no run
    if _native is None:
        i, _total = _check_loop(log, q, topic, queue_id, offset, entries, 0, lo, span, topic_field, max_bytes, 0,
                                out, bodies_only, with_phys, views, False)
        out.next_offset = offset + i
        return
    flags = bodies_only | with_phys << 1 | views << 2
    view = memoryview(span) if views else None
    cols = (out.offsets, out.bodies, out.born, out.stored, out.props, out.phys, out.reconsume)
    # records outside the span are read on their own there too, from the first one's segment
    seg_size = log.segment_size
    base = entries[0][0] - entries[0][0] % seg_size if n else 0
    try:
        fd = log._fd(base) if n and len(span) < entries[-1][0] + entries[-1][1] - lo else -1
    except (OSError, ValueError):
        fd = -1
    i = total = 0
    while i < n and total < max_bytes:
        i, total = _native(span, view, lo, entries, i, offset, queue_id, topic_field, max_bytes, total, flags,
                           *cols, fd, base, seg_size)
        if i < n and total < max_bytes:   # the record the C loop handed back, and what follows it
            i, total = _check_loop(log, q, topic, queue_id, offset, entries, i, lo, span, topic_field, max_bytes,
                                   total, out, bodies_only, with_phys, views, True, base if fd >= 0 else -1)
    out.next_offset = offset + i


def _check_loop(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, offset: int,
                entries: list[tuple[int, int, int]], i: int, lo: int, span: bytes, topic_field: bytes,
                max_bytes: int, total_bytes: int, out: Columns, bodies_only: bool, with_phys: bool, views: bool,
                handoff: bool, c_base: int = -1) -> tuple[int, int]:
    """:func:`check_run`'s loop from entry ``i``, with ``total_bytes`` taken so far: the index
    of the next entry and the new total. ``handoff``: return at the first record after entry
    ``i`` that lies in ``span`` or in segment ``c_base`` (the C loop takes it from there: it
    reads that segment's records outside the span itself)."""
    span_len = len(span)
    mv = memoryview(span)
    tf_len = len(topic_field)
    head, times, magic_v1, trailer, M = _CHECK, _TIMES, F.MAGIC_V1, _CRC_TRAILER, _MASK
    hsize, csize, min_size = F.RECORD_HEADER_SIZE, F.CRC_PROPERTY_SIZE, F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE
    offs, bodies, born, stored, props, phys_l = out.offsets, out.bodies, out.born, out.stored, out.props, out.phys
    reconsume = out.reconsume
    first = i
    qoff = offset + i - 1
    # A record outside the span (a sparse run: this queue's records interleaved with other
    # queues' ones, or another segment) is read on its own with one pread through a
    # descriptor looked up once per segment, then checked exactly as one in the span.
    seg_size = log.segment_size
    pread = os.pread
    fds: dict[int, int] = {}
    for phys, size, _tags in islice(entries, i, None):
        qoff += 1
        start = phys - lo
        end = start + size
        buf = span
        if start < 0 or end > span_len or size < min_size:
            buf = b""
            if size >= min_size:
                base = phys - phys % seg_size
                if handoff and base == c_base and qoff > first + offset:
                    return qoff - offset, total_bytes
                fd = fds.get(base)
                if fd is None:
                    try:
                        fd = fds[base] = log._fd(base)
                    except OSError:
                        fd = fds[base] = -1
                if fd >= 0:
                    try:
                        buf = pread(fd, size, phys - base)
                    except OSError:
                        buf = b""
            start, end = 0, size
            if len(buf) != size:
                try:   # missing, short or odd: the general path names what is wrong
                    m = log.read(phys, size)
                    if m.queue_offset != qoff or m.queue_id != queue_id or m.topic != topic:
                        raise RecordError("record does not match its consume-queue entry")
                except RecordError as exc:
                    if not _from_log(log, q, topic, queue_id, qoff, f"commit-log offset {phys}: {exc.reason}",
                                     out, bodies_only, with_phys):
                        continue
                else:
                    _put(out, m, bodies_only, with_phys)
                total_bytes += size
                if total_bytes >= max_bytes:
                    break
                continue
        elif handoff and qoff > first + offset:
            return qoff - offset, total_bytes
        # One test for the common case; _why() names the failure. The body CRC is not
        # checked separately: the record CRC covers the body and BODYCRC alike.
        total, magic, qid, rqoff, rphys, blen = head(buf, start)
        t = start + hsize + blen
        p = t + tf_len + 2
        # A big record is checked (its body, with ``views``, handed out) through a view, not a
        # copy of it; a small one is sliced (a view costs more than copying a few hundred bytes)
        cut: bytes | memoryview = buf if size < _VIEW_MIN_SIZE else mv if buf is span else memoryview(buf)
        if (total != size or magic != magic_v1 or rphys != phys or rqoff != qoff or qid != queue_id
                or blen < 0 or p > end or buf[t:p - 2] != topic_field
                or p + ((buf[p - 2] << 8) | buf[p - 1]) != end
                or buf[end - 1:end - csize - 1:-1] != trailer % (crc32(cut[start:end - csize]) & M)):
            if not _from_log(log, q, topic, queue_id, qoff, f"commit-log offset {phys}: "
                             f"{_why(buf, start, end, phys, qoff, queue_id, topic_field)}",
                             out, bodies_only, with_phys):
                continue
            total_bytes += size
            if total_bytes >= max_bytes:
                break
            continue
        offs.append(qoff)
        bodies.append(cut[start + hsize:t] if views else buf[start + hsize:t])
        if not bodies_only:
            b_ts, s_ts, r_t = times(buf, start)
            born.append(b_ts)
            stored.append(s_ts)
            props.append(buf[p:end - csize])
        if with_phys:
            phys_l.append(phys)
            if not bodies_only:
                reconsume.append(r_t)
        total_bytes += size
        if total_bytes >= max_bytes:
            break
    return qoff + 1 - offset, total_bytes


def _put(out: Columns, m: Message, bodies_only: bool, with_phys: bool) -> None:
    """One decoded record's columns into ``out``."""
    out.offsets.append(m.queue_offset)
    out.bodies.append(m.body)
    if not bodies_only:
        out.born.append(m.born_timestamp)
        out.stored.append(m.store_timestamp)
        out.props.append(m._props_raw)
    if with_phys:
        out.phys.append(m.commitlog_offset)
        if not bodies_only:
            out.reconsume.append(m.reconsume_times)


def _from_log(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, qoff: int, why: str,
              out: Columns, bodies_only: bool, with_phys: bool) -> bool:
    """Entry ``qoff`` did not lead to its record: the record found in the log instead
    (:func:`~store.log.entrysearch.find_record`) goes into ``out``; False, with ``qoff``
    listed as damaged, when the log's own bytes there are damaged."""
    m = find_record(log, q, topic, queue_id, qoff)
    if m is None:
        out.damaged.append((qoff, why))
        return False
    _put(out, m, bodies_only, with_phys)
    return True


# The vectorised check (numpy): for backlogs that pay for its import (50-85 ms CPU). Measured on a quiet
# machine (200,000 messages, 16 queues): 50,000 beat 20,000 at 8 members and 150,000 at 2 and 4.
_VECTOR_MIN_RUN = 128
_GATHER_MAX_AVG = 16384
VECTOR_MIN_BACKLOG = 50_000
def pull_records(engine: Engine, topic: str, queue_id: int, offset: int, max_count: int = 256,
                 max_bytes: int = 4 * 1024 * 1024) -> Columns:
    """Every column of up to ``max_count`` messages of one queue (``phys`` and ``reconsume``
    too): what a client's message is made of, with no :class:`~store.log.record.Message` built
    (the Python consumer), checked as :func:`pull_columns` checks them."""
    return pull_columns(engine, topic, queue_id, offset, max_count, max_bytes, with_phys=True)


def _vector_run(engine: Engine, q: ConsumeQueue, topic: str, queue_id: int, offset: int, count: int,
                max_bytes: int, out: Columns, full: bool, views: bool) -> bool:
    """A run of one queue into ``out`` (its bodies, as views if ``views`` allows, see :func:`cut_span`;
    with ``full`` every column), every record checked as in :func:`pull_columns` but as arrays (one
    comparison per check over the run; the record CRC stays one call per record). False, with ``out``
    untouched, when the run is not a dense one (see :func:`fetch_span`) or anything is unusual: the
    caller's exact loop then reads it and names what is wrong. Stops after the record that reaches
    ``max_bytes`` and at the first record's segment end, as the loop."""
    from store.log.arrays import layouts  # (the array paths' only: a short consume never loads it)
    np = layouts().np
    screened = screen_run(q, offset, count, max_bytes)
    if screened is None:
        return False
    phys, size = screened
    log = engine.commitlog
    lo = int(phys[0])
    ends_abs = phys + size
    seg_end = log.segment_of(lo) + log.segment_size
    n = int(np.searchsorted(ends_abs, seg_end, side="right"))
    if n < _VECTOR_MIN_RUN:
        return False
    hi = int(ends_abs[n - 1])
    gathered = False
    if not (hi - lo <= max_bytes or hi - lo <= int(size[:n].sum()) * 4):
        m = int(np.searchsorted(ends_abs, lo + max_bytes, side="right"))   # fetch_span's prefix
        if m >= _VECTOR_MIN_RUN and int(ends_abs[m - 1]) - lo - int(size[:m].sum()) <= m * GAP_PER_READ:
            n, hi = m, int(ends_abs[m - 1])
        elif int(size[:n].sum()) <= n * _GATHER_MAX_AVG:
            gathered = True   # sparse: one read per record, the records then laid end to end
        else:
            return False       # big records: the loop reads each and copies no more
    phys, size = phys[:n], size[:n]
    if gathered:
        base = log.segment_of(lo)
        try:
            fd = log._fd(base)
            pread = os.pread
            size_l = size.tolist()
            parts = [pread(fd, k, o) for k, o in zip(size_l, (phys - base).tolist())]
        except OSError:
            return False
        if list(map(len, parts)) != size_l:
            return False
        span = b"".join(parts)
        del parts
        ends = np.cumsum(size)
        starts = ends - size
    else:
        span = log.read_bytes(lo, hi - lo)
        if len(span) != hi - lo:
            return False
        starts = phys - lo
        ends = starts + size
    checked = check_span(span, starts, ends, size, phys, offset + np.arange(n), queue_id, topic)
    if checked is None:
        return False
    cut_span(span, starts, phys, checked, 0, n, offset, out, full, views)
    return True


def screen_run(q: ConsumeQueue, offset: int, count: int, max_bytes: int) -> tuple[Any, Any] | None:
    """The commit-log offsets and sizes (numpy arrays) of up to ``count`` entries of ``q`` from
    ``offset``, cut after the record that reaches ``max_bytes``; None when the vectorised
    check cannot take them (no entries, an invalid entry or a record too small to be one,
    entries out of log order): the exact loop reads those and names what is wrong."""
    from store.log.arrays import layouts
    L = layouts()
    np, cq_t = L.np, L.cq
    raw = q.read_raw(offset, count)
    if not raw:
        return None
    ent = np.frombuffer(raw, cq_t)
    phys, size = ent["phys"].astype(np.int64), ent["size"].astype(np.int64)
    if int(size.min()) < F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE or int(phys[0]) < 0:
        return None
    k = min(len(ent), int(np.searchsorted(np.cumsum(size), max_bytes)) + 1)
    phys, size = phys[:k], size[:k]
    if k > 1 and bool((phys[1:] < (phys + size)[:-1]).any()):
        return None
    return phys, size


def check_span(span: bytes, starts: Any, ends: Any, size: Any, phys: Any, qoffs: Any, qids: Any,
                topic: str) -> tuple[Any, Any, Any, Any] | None:
    """Check the records at ``span[starts[i]:ends[i]]`` (numpy arrays; ``qoffs`` and ``qids``
    what each must say) as :func:`pull_columns` does, as arrays: ``(head, body ends, property
    starts, CRC property starts)``, or None if any record fails a check."""
    from store.log.arrays import layouts, rows
    L = layouts()
    np, head_t, crc_head, pow10 = L.np, L.head, L.crc_head, L.pow10
    n = len(starts)
    buf = np.frombuffer(span, np.uint8)
    head = rows(span, starts, F.RECORD_HEADER_SIZE).view(head_t).reshape(n)
    blen = head["blen"].astype(np.int64)
    t = starts + F.RECORD_HEADER_SIZE + blen
    topic_b = topic.encode()
    topic_field = np.frombuffer(bytes((len(topic_b),)) + topic_b, np.uint8)
    p = t + len(topic_field) + 2
    crc_at = ends - F.CRC_PROPERTY_SIZE
    if not ((head["total"] == size) & (head["magic"] == F.MAGIC_V1) & (head["phys"] == phys)
            & (head["qoff"] == qoffs) & (head["qid"] == qids)
            & (blen >= 0) & (p <= crc_at)).all():
        return None
    if not (rows(span, t, len(topic_field)) == topic_field).all():
        return None
    plen = (buf[p - 2].astype(np.int64) << 8) | buf[p - 1]
    if (not (p + plen == ends).all() or not (rows(span, crc_at, 9) == crc_head).all()
            or not (buf[ends - 1] == 2).all()):
        return None
    digits = rows(span, crc_at + 9, 10).astype(np.int64) - 48
    if int(digits.min()) < 0 or int(digits.max()) > 9:
        return None
    mv = memoryview(span)
    got = np.fromiter(map(crc32, map(mv.__getitem__, map(slice, starts.tolist(), crc_at.tolist()))), np.int64, n)
    if not ((got & _MASK) == digits @ pow10).all():
        return None
    return head, t, p, crc_at


def cut_span(span: bytes, starts: Any, phys: Any, checked: tuple[Any, Any, Any, Any], a: int, b: int,
         offset: int, out: Columns, full: bool, views: bool) -> None:
    """Records ``a`` to ``b`` of a checked span (:func:`check_span`), at queue offsets from
    ``offset``, into ``out``'s columns (bodies only, unless ``full``). ``views``: bodies of
    ``_VIEW_MIN_AVG`` bytes and more on average are views into ``span``, not copies."""
    head, t, p, crc_at = checked
    n = b - a
    out.offsets = list(range(offset, offset + n))
    body_at = starts[a:b] + F.RECORD_HEADER_SIZE
    src: bytes | memoryview = span
    if views and n and int((t[a:b] - body_at).sum()) >= n * _VIEW_MIN_AVG:
        src = memoryview(span)
    out.bodies = list(map(src.__getitem__, map(slice, body_at.tolist(), t[a:b].tolist())))
    if full:
        out.props = list(map(span.__getitem__, map(slice, p[a:b].tolist(), crc_at[a:b].tolist())))
        out.born = head["born"][a:b].tolist()
        out.stored = head["stored"][a:b].tolist()
        out.reconsume = head["reconsume"][a:b].tolist()
        out.phys = phys[a:b].tolist()
    out.next_offset = offset + n


# Raw bodies this big on average are handed out as views: a view costs about what copying
# 300 bytes does, and a copy of a big body is most of what a raw consumer spends on it.
_VIEW_MIN_AVG = 1024
_VIEW_MIN_SIZE = 2048   # records this big are checked and cut through views in pull_columns
