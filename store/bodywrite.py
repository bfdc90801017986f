"""The producer's fast path: the batch encoding behind :meth:`Store.put_bodies`.

:func:`put_bodies_locked` turns many bodies for one topic, sharing their properties, into
commit-log records, consume-queue entries and key-index hashes, and hands them to the store to
commit. It owns only how a batch is encoded quickly (precomputed header parts, unique keys
built from a table, CRCs continued or combined instead of recomputed); the record layout itself
lives in ``format.py`` and the general encoder in ``record.py``.

Its loops are measured hot loops: they are unrolled on purpose and keep everything they look
up in locals.
"""
from __future__ import annotations

import random
import struct
import time
import zlib
from typing import TYPE_CHECKING

from . import format as F
from .commitlog import LogAppender
from .errors import UsageError
from .record import FAST_CRC as _FAST_CRC, PROP_KEYS, PROP_TAGS, Draft, crc32 as _crc32, java_hash
from .results import BatchResult

if TYPE_CHECKING:
    from .broker import Store
    from .topics import TopicConfig

_HEX4: list[bytes] = []


def _hex4_table() -> list[bytes]:
    if not _HEX4:
        digits = [b"%02X" % i for i in range(256)]
        _HEX4.extend([a + b for a in digits for b in digits])
    return _HEX4


# The record header in three parts for the producer's fast path: the fields that vary, then
# SYSFLAG .. PREPARED TX OFFSET (48 bytes, the same for a whole batch), then BODYLENGTH.
_HEAD_PACK = struct.Struct(">iIIiiqq48si").pack
_HEAD_CONST = struct.Struct(">iqIiqIiiq")
assert struct.calcsize(">iIIiiqq48si") == F.RECORD_HEADER_SIZE and _HEAD_CONST.size == 48

# From this body size on a record is written in parts (head, body, rest) rather than joined
# first, and with zlib's CRC its record CRC is combined from the body's instead of a 2nd pass.
_BIG_BODY = 2048
_COMBINE: list = []


def _crc32_combine():
    """zlib's ``crc32_combine`` (not exposed by Python's zlib module), or None.

    ``combine(crc(A), crc(B), len(B)) == crc(A + B)``: the record CRC of a big message is
    then computed without a second pass over its body. Checked against ``zlib.crc32`` once,
    so a library that misbehaves is simply not used."""
    if not _COMBINE:
        fn = None
        try:
            import ctypes
            import ctypes.util
            lib = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
            f = lib.crc32_combine
            f.restype = ctypes.c_ulong
            f.argtypes = (ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long)
            a, b = b"mqctl" * 7, bytes(range(256)) * 9
            if f(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b):
                fn = f
        except (OSError, AttributeError, ImportError):
            fn = None
        _COMBINE.append(fn)
    return _COMBINE[0]


def put_bodies_locked(store: Store, topic: str, bodies: list[bytes], props: dict[str, str], queue_id: int,
                      sharding_keys: list[str | None] | None, sync: bool) -> BatchResult:
    # The producer's hot loop: everything that is the same for the whole batch is built
    # once, so each record costs one header pack, one join and two CRCs (one pass over a
    # big body plus a CRC combine), one CQ entry and one index hash.
    cp = store._checkpoint_locked()
    now = int(time.time() * 1000)
    store_ts = max(now, cp.last_store_ts)
    cfg = store._ensure_topic_locked(topic, queue_id)
    qids = _queue_ids_for(store, cfg, len(bodies), queue_id, sharding_keys)
    topic_b = topic.encode()
    tail_topic = bytes((len(topic_b),)) + topic_b
    static = "".join(f"{k}\x01{v}\x02" for k, v in props.items() if v).encode()
    tags = java_hash(props[PROP_TAGS]) if props.get(PROP_TAGS) else 0
    key_items = [f"{topic}#{k}".encode() for k in (props.get(PROP_KEYS) or "").split(" ") if k]
    nxt = [-1] * cfg.queues
    cqb: list[bytearray | None] = [None] * cfg.queues
    first_off: dict[int, int] = {}
    app = LogAppender(store.commitlog, cp.written_end)
    seg = store.commitlog.segment_size
    pos = app.pos
    room_end = pos - pos % seg + seg - F.END_FILE_MIN_BLANK
    chunk = app.start_chunk()
    offs: list[int] = []
    physs: list[int] = []
    hashes: list[int] = []
    M = 0x7FFFFFFF
    # TOTALSIZE magic BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET, then 48 bytes that
    # are the same for every record of the batch, then BODYLENGTH (format.py).
    pack = _HEAD_PACK
    const48 = _HEAD_CONST.pack(0, now, F.LOOPBACK_IP, store._pid, store_ts, F.LOOPBACK_IP,
                               F.STORE_PORT, 0, 0)
    pack_cq = F.CQ_ENTRY.pack
    crc32 = _crc32
    # Big bodies are not joined into a record (a copy): the record CRC continues over the
    # parts; with zlib's slow CRC, CRC(head + body) comes from CRC(body) by a combine.
    big = max(map(len, bodies)) >= _BIG_BODY
    combine = _crc32_combine() if big and not _FAST_CRC else None
    magic = F.MAGIC_V1
    counter = first_counter = (store._uniq.counter + 1) & 0xFFFF
    counter -= 1
    # Within a batch every unique key shares host, pid, random and time: only the 16-bit
    # counter changes, so the key is a precomputed head plus 4 hex digits from a table,
    # and its index hash continues the CRC of the head.
    uk_head_s = f"{store._uniq.prefix}{(now - store._uniq.month_start_ms) & 0xFFFFFFFF:08X}"
    uk_head = uk_head_s.encode()
    key_crc0 = crc32(b"#" + uk_head)
    hex4 = _hex4_table()
    pb_tail = b"\x02" + static
    pb_len0 = len(b"UNIQ_KEY\x01") + len(uk_head) + 4 + len(pb_tail)   # properties w/o CRC
    mid0 = tail_topic + (pb_len0 + F.CRC_PROPERTY_SIZE).to_bytes(2, "big") + b"UNIQ_KEY\x01" + uk_head
    fixed0 = 91 + len(topic_b) + pb_len0 + F.CRC_PROPERTY_SIZE
    tails: list[bytes] | None = None
    if sharding_keys is not None:
        tails = [pb_tail if k is None else b"\x02__SHARDINGKEY\x01" + k.encode() + pb_tail
                 for k in sharding_keys]
    tail, mid, fixed = pb_tail, mid0, fixed0
    parts: list | None = None
    if tails is None and not big:
        # The common case, kept lean: no per-message properties, no big bodies.
        n = len(bodies)
        hx = hex4[first_counter:first_counter + n]
        while len(hx) < n:   # the counter wraps within the batch
            hx += hex4[:n - len(hx)]
        join = b"".join
        offs_append, physs_append = offs.append, physs.append
        trailer = b"\x02%010d\x01#23CRC__"   # reversed: __CRC32# 0x01 digits 0x02
        for body, qid, h4 in zip(bodies, qids, hx):
            qoff = nxt[qid]
            if qoff < 0:
                qoff = first_off[qid] = store.queue(topic, qid).max_offset()
                cqb[qid] = bytearray()
            nxt[qid] = qoff + 1
            blen = len(body)
            total = fixed + blen
            if pos + total > room_end:
                app.pos = pos
                pos = app.place(total)
                chunk = app.start_chunk()
                room_end = pos + seg - F.END_FILE_MIN_BLANK
            rec = join((pack(total, magic, crc32(body) & M, qid, 0, qoff, pos, const48, blen), body, mid, h4, tail))
            chunk += rec
            chunk += (trailer % (crc32(rec) & M))[::-1]
            cqb[qid] += pack_cq(pos, total, tags)
            offs_append(qoff)
            physs_append(pos)
            pos += total
        hashes = [crc32(h4, key_crc0) & M for h4 in hx]
        counter = (first_counter + n - 1) & 0xFFFF
        bodies = ()   # the general loop below has nothing left to do
    elif tails is None and combine is None:
        # Big bodies (and a fast CRC): written from the body objects themselves (pwritev).
        n = len(bodies)
        hx = hex4[first_counter:first_counter + n]
        while len(hx) < n:
            hx += hex4[:n - len(hx)]
        join = b"".join
        offs_append, physs_append = offs.append, physs.append
        trailer = b"\x02%010d\x01#23CRC__"
        parts = app.start_parts()
        for body, qid, h4 in zip(bodies, qids, hx):
            qoff = nxt[qid]
            if qoff < 0:
                qoff = first_off[qid] = store.queue(topic, qid).max_offset()
                cqb[qid] = bytearray()
            nxt[qid] = qoff + 1
            blen = len(body)
            total = fixed + blen
            if pos + total > room_end:
                app.pos = pos
                pos = app.place(total)
                parts = app.start_parts()
                room_end = pos + seg - F.END_FILE_MIN_BLANK
            bcrc = crc32(body)
            head = pack(total, magic, bcrc & M, qid, 0, qoff, pos, const48, blen)
            after = join((mid, h4, tail))
            c = crc32(after, crc32(body, crc32(head))) & M
            parts += (head, body, after + (trailer % c)[::-1])
            cqb[qid] += pack_cq(pos, total, tags)
            offs_append(qoff)
            physs_append(pos)
            pos += total
        hashes = [crc32(h4, key_crc0) & M for h4 in hx]
        counter = (first_counter + n - 1) & 0xFFFF
        bodies = ()
    for i, body in enumerate(bodies):
        qid = qids[i]
        qoff = nxt[qid]
        if qoff < 0:
            qoff = first_off[qid] = store.queue(topic, qid).max_offset()
            cqb[qid] = bytearray()
        nxt[qid] = qoff + 1
        counter = (counter + 1) & 0xFFFF
        h4 = hex4[counter]
        blen = len(body)
        if tails is not None:
            tail = tails[i]
            extra = len(tail) - len(pb_tail)
            if extra:
                mid = tail_topic + (pb_len0 + extra + F.CRC_PROPERTY_SIZE).to_bytes(2, "big") + mid0[len(tail_topic) + 2:]
                fixed = fixed0 + extra
            else:
                mid, fixed = mid0, fixed0
        total = fixed + blen
        if pos + total > room_end:
            app.pos = pos
            pos = app.place(total)
            chunk = app.start_chunk()
            if parts is not None:
                parts = app.start_parts()
            room_end = pos + seg - F.END_FILE_MIN_BLANK
        bcrc = crc32(body)
        head = pack(total, magic, bcrc & M, qid, 0, qoff, pos, const48, blen)
        if blen < _BIG_BODY:
            rec = b"".join((head, body, mid, h4, tail))
            crc_prop = (b"\x02%010d\x01#23CRC__" % (crc32(rec) & M))[::-1]   # __CRC32# 0x01 digits 0x02
            if parts is None:
                chunk += rec
                chunk += crc_prop
            else:
                parts += (rec, crc_prop)
        else:
            # A big body is written from the body itself (pwritev), never copied; its
            # record CRC continues over the parts (or, with zlib, is combined).
            after = b"".join((mid, h4, tail))
            hc = crc32(head)
            hc = combine(hc, bcrc, blen) if combine is not None else crc32(body, hc)
            crc_prop = (b"\x02%010d\x01#23CRC__" % (crc32(after, hc) & M))[::-1]
            if parts is None:
                parts = app.start_parts()
            parts += (head, body, after + crc_prop)
        cqb[qid] += pack_cq(pos, total, tags)
        hashes.append(crc32(h4, key_crc0) & M)
        offs.append(qoff)
        physs.append(pos)
        pos += total
    app.pos = pos
    store._uniq.counter = counter
    if key_items:
        key_hashes = [crc32(k) & M for k in key_items]
        per = 1 + len(key_hashes)
        all_hashes = [0] * (len(hashes) * per)
        all_physs = [0] * len(all_hashes)
        all_hashes[::per] = hashes
        for j, kh in enumerate(key_hashes, 1):
            all_hashes[j::per] = [kh] * len(hashes)
        for j in range(per):
            all_physs[j::per] = physs
        index = (all_hashes, all_physs)
    else:
        index = (hashes, physs)
    store._commit_batch(app, cp, store_ts, {(topic, q): (first_off[q], b) for q, b in enumerate(cqb) if b is not None},
                        [], sync, index_hashes=index)
    return BatchResult(topic, qids, offs, physs, store_ts, uk_head_s, first_counter)


def _queue_ids_for(store: Store, cfg: TopicConfig, n: int, queue_id: int,
                   sharding_keys: list[str | None] | None) -> list[int]:
    nq = cfg.queues
    if queue_id >= nq:
        raise UsageError(f"queue {queue_id} does not exist: topic {cfg.name!r} has queues 0-{nq - 1}")
    if sharding_keys is None:
        if queue_id >= 0:
            return [queue_id] * n
        if cfg.order:
            raise UsageError(f"topic {cfg.name!r} is ordered: give a sharding key (-s) or a queue (-q)")
        start = store._rr.get(cfg.name)
        if start is None:
            start = random.randrange(nq)
        store._rr[cfg.name] = start + n
        return [(start + i) % nq for i in range(n)]
    fallback = Draft(cfg.name, b"", queue_id=queue_id)
    return [abs(java_hash(k)) % nq if k is not None else store.select_queue(cfg, fallback)
            for k in sharding_keys]
