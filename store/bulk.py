"""Bulk reads: a run of one queue's records, checked and cut into columns, with no
:class:`~store.record.Message` built per record.

Readers that want many messages and few of their fields (``consume`` writing raw bodies, the
Spark source building Arrow columns) pay for a Message per record more than for the read
itself. :func:`pull_columns` reads a run of consume-queue entries, fetches the records they
point at with one ``pread`` when they sit close together, and checks every record as
:func:`store.record.decode` does (record CRC property, the record's own commit-log offset,
queue id, queue offset and topic, field lengths). (The body CRC is implied: the record CRC
covers the body and BODYCRC alike.) It then hands out parallel lists:
queue offset, body, born and store timestamps, and the raw properties (without the record
CRC property), optionally also the commit-log offsets.

A record that fails a check is never returned: it is listed in ``damaged`` and skipped. The
record layout is the one ``format.py`` describes.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import format as F
from .record import RecordError, crc32

if TYPE_CHECKING:
    from .broker import Store
    from .commitlog import CommitLog

# TOTALSIZE MAGIC BODYCRC QUEUEID . QUEUEOFFSET PHYSICALOFFSET . BORNTIMESTAMP . STORETIMESTAMP
# ... BODYLENGTH: what a bulk read needs of a record header (format.py).
_HEAD_FMT = ">iIIi4xqq4xq8xq20xi"
_HEAD = struct.Struct(_HEAD_FMT).unpack_from
assert struct.calcsize(_HEAD_FMT) == F.RECORD_HEADER_SIZE

_CRC_TRAILER = b"\x02%010d\x01#23CRC__"   # the record CRC property reversed, digits in order
_MASK = 0x7FFFFFFF


@dataclass(slots=True)
class Columns:
    """Messages of one queue as parallel lists: entry ``i`` of every list is the message at
    queue offset ``offsets[i]``. ``props`` are the raw ``name 0x01 value 0x02`` bytes.
    ``phys`` (commit-log offsets) is filled only when asked for."""

    offsets: list[int]
    bodies: list[bytes]
    born: list[int]
    stored: list[int]
    props: list[bytes]
    phys: list[int]
    next_offset: int
    max_offset: int
    damaged: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)


def fetch_span(log: "CommitLog", entries: list[tuple[int, int, int]],
               max_bytes: int) -> tuple[list[tuple[int, int, int]], int, bytes]:
    """The records of a run of one queue's consume-queue entries, with one ``pread``:
    ``(entries, lo, span)``, ``span`` starting at commit-log offset ``lo``.

    A queue's records lie in log order, interleaved with other queues' records. The run is
    cut before the first entry outside the first record's segment (a record never spans segments, and the
    caller's next pull starts there). When the records are too sparse for one read (over
    four times their own size and over ``max_bytes``), the span is empty and the caller reads
    each record on its own. The span is ``bytes``, not a memoryview: slicing and comparing
    small pieces of bytes is cheaper than through a view."""
    # A queue's entries are in log order, so the first and last bound the run; a damaged
    # entry breaks that, and the caller reads a record outside the span on its own.
    lo, hi = entries[0][0], entries[-1][0] + entries[-1][1]
    seg_end = log.segment_of(lo) + log.segment_size
    if hi > seg_end or hi <= lo:
        cut = 1   # keep the prefix in the first record's segment
        while cut < len(entries) and lo <= entries[cut][0] and entries[cut][0] + entries[cut][1] <= seg_end:
            cut += 1
        entries = entries[:cut]
        hi = max(e[0] + e[1] for e in entries)
    if hi - lo <= max_bytes or hi - lo <= sum(e[1] for e in entries) * 4:
        return entries, lo, log.read_bytes(lo, hi - lo)
    return entries, lo, b""


def _why(span: bytes, start: int, end: int, phys: int, qoff: int, queue_id: int,
         topic_field: bytes) -> str:
    """Why the record at ``span[start:end]`` failed the fast check, in decode()'s order."""
    total, magic, _bcrc, qid, rqoff, rphys, _b, _s, blen = _HEAD(span, start)
    t = start + F.RECORD_HEADER_SIZE + blen
    p = t + len(topic_field) + 2
    if total != end - start or magic != F.MAGIC_V1 or rphys != phys:
        return "record does not match its consume-queue entry"
    if span[end - F.CRC_PROPERTY_SIZE:end] != (_CRC_TRAILER % (crc32(span[start:end - F.CRC_PROPERTY_SIZE]) & _MASK))[::-1]:
        return "record CRC mismatch"
    if rqoff != qoff or qid != queue_id or blen < 0 or p > end or span[t:p - 2] != topic_field:
        return "record does not match its consume-queue entry"
    return "field lengths do not add up to TOTALSIZE"


def pull_columns(store: "Store", topic: str, queue_id: int, offset: int, max_count: int = 256,
                 max_bytes: int = 4 * 1024 * 1024, with_phys: bool = False,
                 bodies_only: bool = False) -> Columns:
    """Up to ``max_count`` messages of one queue from ``offset``, stopping after the record that
    reaches ``max_bytes``; ``next_offset`` is where the next pull starts. ``bodies_only``
    leaves ``born``, ``stored`` and ``props`` empty (``consume`` writing raw bodies)."""
    q = store.queue(topic, queue_id)
    max_off = q.max_offset()
    out = Columns([], [], [], [], [], [], offset, max_off)
    if offset >= max_off:
        return out
    entries = q.read_entries(offset, min(max_count, max_off - offset))
    if not entries:
        why = q.invalid_at(offset)
        if why is not None:
            out.next_offset = offset + 1
            out.damaged.append((offset, why))
        return out
    log = store.commitlog
    entries, lo, span = fetch_span(log, entries, max_bytes)
    span_len = len(span)
    topic_b = topic.encode()
    topic_field = bytes((len(topic_b),)) + topic_b
    tf_len = len(topic_field)
    head, magic_v1, trailer, M = _HEAD, F.MAGIC_V1, _CRC_TRAILER, _MASK
    hsize, csize, min_size = F.RECORD_HEADER_SIZE, F.CRC_PROPERTY_SIZE, F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE
    offs, bodies, born, stored, props, phys_l = out.offsets, out.bodies, out.born, out.stored, out.props, out.phys
    damaged = out.damaged
    qoff = offset - 1
    total_bytes = 0
    for phys, size, _tags in entries:
        qoff += 1
        start = phys - lo
        end = start + size
        if start < 0 or end > span_len or size < min_size:
            try:   # not in the span (another segment, or a sparse run): the general path
                m = log.read(phys, size)
                if m.queue_offset != qoff or m.queue_id != queue_id or m.topic != topic:
                    raise RecordError("record does not match its consume-queue entry")
            except RecordError as exc:
                damaged.append((qoff, f"commit-log offset {phys}: {exc.reason}"))
                continue
            body, b_ts, s_ts, raw = m.body, m.born_timestamp, m.store_timestamp, m._props_raw
        else:
            # One test for the common case; _why() names the failure. The body CRC is not
            # checked separately: the record CRC covers the body and BODYCRC alike.
            total, magic, _bcrc, qid, rqoff, rphys, b_ts, s_ts, blen = head(span, start)
            t = start + hsize + blen
            p = t + tf_len + 2
            if (total != size or magic != magic_v1 or rphys != phys or rqoff != qoff or qid != queue_id
                    or blen < 0 or p > end or span[t:p - 2] != topic_field
                    or p + ((span[p - 2] << 8) | span[p - 1]) != end
                    or span[end - csize:end] != (trailer % (crc32(span[start:end - csize]) & M))[::-1]):
                damaged.append((qoff, f"commit-log offset {phys}: "
                                      f"{_why(span, start, end, phys, qoff, queue_id, topic_field)}"))
                continue
            body = span[start + hsize:t]
            raw = span[p:end - csize] if not bodies_only else b""
        offs.append(qoff)
        bodies.append(body)
        if not bodies_only:
            born.append(b_ts)
            stored.append(s_ts)
            props.append(raw)
        if with_phys:
            phys_l.append(phys)
        total_bytes += size
        if total_bytes >= max_bytes:
            break
    out.next_offset = qoff + 1
    return out
