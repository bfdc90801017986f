"""One sequential pass over the commit log in big windows: every record checked (as
:func:`~store.log.record.decode` checks it: lengths, its own offset, the record CRC) and
reduced to the few fields that ``store check`` and ``store recover`` compare the derived
files against; no :class:`~store.log.record.Message` is built.

Memory is bounded by one window (``WINDOW`` bytes, plus room for the largest record) and
the records of one window; nothing is kept from one window to the next. A record that fails
a check is reported as damage (its segment, its offset in it, why) and the scan resumes at
the next record start (:func:`resume_at`). A segment other than the last must end with its
BLANK trailer; one that does not lost its tail (reported, and the scan moves on to the next
segment). Record layout: ``format.py``.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterator

from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.record import PROP_DELIVER_MS, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, RecordError, crc32, decode, java_hash
from store.names import SCHEDULE_TOPIC

WINDOW = 16 * 1024 * 1024
_SLACK = F.MAX_MESSAGE_SIZE + 65536 + 1024
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
# TOTALSIZE MAGIC . QUEUEID . QUEUEOFFSET PHYSICALOFFSET SYSFLAG . STORETIMESTAMP ... BODYLENGTH
_HEAD = struct.Struct(">iI4xi4xqqi12xq16x8xi").unpack_from
assert struct.calcsize(">iI4xi4xqqi12xq16x8xi") == F.RECORD_HEADER_SIZE
_CRC_TRAILER = b"\x02%010d\x01#23CRC__"   # the record CRC property reversed, digits in order
_MAGIC = F.MAGIC_V1.to_bytes(4, "big")
_MIN_SIZE = F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE
_TAGS = PROP_TAGS.encode() + b"\x01"
_KEYS = PROP_KEYS.encode() + b"\x01"
_UNIQ = PROP_UNIQ_KEY.encode() + b"\x01"
_DELIVER = PROP_DELIVER_MS.encode() + b"\x01"


@dataclass(slots=True)
class Rec:
    """One valid record: where it is, where it belongs, what its derived entries hold."""

    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sysflag: int
    tag_code: int
    store_ts: int
    keys: tuple[str, ...]   # index keys: "#<uniq key>", then "<topic>#<key>" for each KEYS word


@dataclass
class Window:
    """The records of one window, in log order, and the damage found among them."""

    records: list[Rec] = field(default_factory=list)
    damage: list[tuple[str, int, str]] = field(default_factory=list)   # (segment, offset in it, why)
    damage_at: list[int] = field(default_factory=list)                 # each damage's log offset
    end: int = 0       # the log offset this window's scan reached
    bytes: int = 0     # bytes of log read for it


def _prop(props: bytes, name: bytes) -> bytes | None:
    """The raw value of property ``name`` (``b"NAME\\x01"``) in ``NAME 0x01 VALUE 0x02 ...``."""
    if props.startswith(name):
        i = len(name)
    else:
        i = props.find(b"\x02" + name)
        if i < 0:
            return None
        i += len(name) + 1
    j = props.find(b"\x02", i)
    return props[i:j] if j >= 0 else props[i:]


def _topic_of(buf: bytes, t: int, cache: dict[bytes, str]) -> str:
    tb = buf[t + 1:t + 1 + buf[t]]
    name = cache.get(tb)
    if name is None:
        name = cache[tb] = tb.decode("utf-8", "replace")
    return name


def scan(log: CommitLog, start: int, progress: Callable[[int], None] | None = None) -> Iterator[Window]:
    """Every record from ``start`` (a record boundary) to the end of the log, a window at a time."""
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
            w.damage.append((str(path), 0, f"next segment is {segs[n + 1]}, expected {seg_end}"))
            w.damage_at.append(base)
            yield w
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            yield from _segment(fd, str(path), base, max(start - base, 0), last, topics, progress)
        finally:
            os.close(fd)


def _segment(fd: int, path: str, base: int, pos: int, last: bool, topics: dict[bytes, str],
             progress: Callable[[int], None] | None) -> Iterator[Window]:
    size = os.fstat(fd).st_size
    resync = False
    started = pos
    while pos < size:
        buf = os.pread(fd, WINDOW + _SLACK, pos)
        limit = min(len(buf), WINDOW)
        w = Window()
        w.bytes = limit
        if resync:   # the previous window ended inside damage: find the next record start
            nxt = resume_at(buf, -1, base + pos)
            i = nxt if nxt is not None else limit
            resync = nxt is None
        else:
            i = 0
        i, trailer, resync = _records(buf, i, limit, base + pos, path, base, w, topics, resync)
        pos += i
        w.end = base + pos
        if trailer:
            w.end = base + size
            if progress is not None:
                progress(size - started)
            yield w
            return
        if progress is not None:
            progress(min(pos, size) - started)
            started = min(pos, size)
        yield w
        if i == 0:
            break
    if not last:
        w = Window(end=base + size)
        w.damage.append((path, size, "segment ends without its end-of-segment trailer (its tail was lost)"))
        w.damage_at.append(base + size)
        yield w


def _records(buf: bytes, i: int, limit: int, wbase: int, path: str, base: int, w: Window,
             topics: dict[bytes, str], resync: bool) -> tuple[int, bool, bool]:
    """Records starting in ``buf[i:limit]`` into ``w``. Returns (where the next window starts,
    relative to ``buf``; a BLANK trailer ended the segment; the window ended inside damage)."""
    n = len(buf)
    head, hsize, csize, magic_v1 = _HEAD, F.RECORD_HEADER_SIZE, F.CRC_PROPERTY_SIZE, F.MAGIC_V1
    trailer_fmt, recs = _CRC_TRAILER, w.records
    while i < limit:
        reason = None
        if n - i < 8:
            reason = "truncated header"
        else:
            total = _I32(buf, i)[0]
            if total >= 8 and _I32(buf, i + 4)[0] & 0xFFFFFFFF == F.BLANK_MAGIC:
                return i, True, False
            if total < _MIN_SIZE or i + total > n:
                reason = "torn or impossible record size"
            else:
                end = i + total
                tot, magic, qid, qoff, phys, sysflag, store_ts, blen = head(buf, i)
                t = i + hsize + blen
                if magic != magic_v1 or phys != wbase + i or blen < 0 or t + 3 > end:
                    reason = "header"
                else:
                    p = t + 1 + buf[t] + 2
                    if p > end - csize or p + ((buf[p - 2] << 8) | buf[p - 1]) != end or \
                            buf[end - csize:end] != (trailer_fmt % (crc32(memoryview(buf)[i:end - csize])
                                                                    & 0x7FFFFFFF))[::-1]:
                        reason = "crc"
                    else:
                        topic = _topic_of(buf, t, topics)
                        props = buf[p:end - csize]
                        recs.append(_rec(phys, total, topic, qid, qoff, sysflag, store_ts, props))
                        i = end
                        continue
        # damaged: decode names what is wrong; resume at the next record start
        try:
            m = decode(buf, i, n)
            why = "record claims offset %d" % m.commitlog_offset if m.commitlog_offset != wbase + i else reason
        except RecordError as exc:
            why = exc.reason
        w.damage.append((path, wbase + i - base, str(why)))
        w.damage_at.append(wbase + i)
        nxt = resume_at(buf, i, wbase)
        if nxt is None:
            return max(limit, i + 1), False, True
        i = nxt
    return i, False, False


def _rec(phys: int, size: int, topic: str, qid: int, qoff: int, sysflag: int, store_ts: int, props: bytes) -> Rec:
    keys: tuple[str, ...] = ()
    if sysflag & F.TX_MASK != F.TX_ROLLBACK and props:
        uk = _prop(props, _UNIQ)
        ks = ["#" + uk.decode("utf-8", "replace")] if uk else []
        kw = _prop(props, _KEYS)
        if kw:
            ks += [f"{topic}#{k}" for k in kw.decode("utf-8", "replace").split(" ") if k]
        keys = tuple(ks)
    if topic == SCHEDULE_TOPIC:
        v = _prop(props, _DELIVER)
        try:
            code = int(v) if v else 0
        except ValueError:
            code = 0
    else:
        tv = _prop(props, _TAGS) if props else None
        code = java_hash(tv.decode("utf-8", "replace")) if tv else 0
    return Rec(phys, size, topic, qid, qoff, sysflag, code, store_ts, keys)


def _looks_like_start(data: bytes, cand: int, wbase: int) -> bool:
    """A record header begins at ``cand``: its magic, and its own offset in PHYSICALOFFSET
    (12 bytes that body data does not reproduce by chance), whatever the rest holds."""
    if cand < 0 or cand + F.OFF_PHYSICAL_OFFSET + 8 > len(data):
        return False
    return data[cand + 4:cand + 8] == _MAGIC and _I64(data, cand + F.OFF_PHYSICAL_OFFSET)[0] == wbase + cand


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
