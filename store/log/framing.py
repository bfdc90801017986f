"""The producer's fast path: the framing of raw bodies behind :meth:`Store.put_bodies`.

:func:`frame_bodies` turns many bodies for one topic, sharing their properties, into
commit-log records, consume-queue entries and key-index hashes, framed into a
:class:`~store.log.writebatch.WriteBatch` (its appender's buffers and queue runs; the batch
commits them). It owns only how a batch is framed quickly (precomputed header parts, unique keys
built from a table, CRCs continued or combined instead of recomputed); the record layout itself
lives in ``format.py`` and the general encoder in ``record.py``.

Five ways, all writing the same bytes (tests/log/test_framing.py): a long-running
sender's big batches of bodies under 512 B are framed as arrays (``arrayframing.py``,
numpy: headers, consume-queue entries, CRC properties and key hashes for the whole batch; per
record only its two CRC calls and its place in one join); other bodies under 2 KiB (16 KiB
with ISA-L's CRC), in batches of 16 or more that fit in the segment, by C iterations into parts
written as they are (:func:`_frame_small`, pwritev); otherwise per-record loops, into one buffer per segment; a
batch of only big bodies (``_WRITE_FROM_BODIES``) is written from the bodies where they lie,
each between its header and trailer (pwritev, no copy). One write per segment. The loops are
measured hot loops: unrolled on purpose, everything in locals. Where the package was built with
``nativecheck.c``, every batch is framed by its ``frame_run`` instead: the per-record loops in
C, these loops its definition and the fallback where it is not built.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, count, repeat
from operator import attrgetter

from store.errors import UsageError
from store.log import format as F
from store.log import record as _record
from store.log.arrayframing import frame_arrays, use_arrays
from store.log.crccombine import combiner as _combiner
from store.log.crccombine import crc32_combine as _crc32_combine
from store.log.record import FAST_CRC as _FAST_CRC
from store.log.record import (
    KEYS_PER_MS,
    PROP_KEYS,
    PROP_TAGS,
    Body,
    Draft,
    check_properties_size,
    counter_hex,
    java_hash,
    tags_code,
)
from store.log.record import crc32 as _crc32
from store.log.results import BatchResult

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from store.log.engine import Engine
    from store.log.topics import TopicConfig
    from store.log.writebatch import WriteBatch


# The record header in three parts for the producer's fast path: the fields that vary, then
# SYSFLAG .. PREPARED TX OFFSET (48 bytes, the same for a whole batch), then BODYLENGTH.
_HEAD_PACK = F.header_view("TOTALSIZE..PHYSICALOFFSET BODYLENGTH", raw="SYSFLAG..PREPAREDTXOFFSET").pack
_HEAD_CONST, _CRC_MASK = F.header_view("SYSFLAG..PREPAREDTXOFFSET", first="SYSFLAG"), F.CRC_MASK
# A record's properties here: UNIQ_KEY first, a sharding key's next, then the batch's own.
_UNIQ_FIELD = _record.PROP_UNIQ_KEY.encode() + F.NAME_VALUE_SEP_B
_SHARDING_FIELD = F.PROPERTY_SEP_B + _record.PROP_SHARDING_KEY.encode() + F.NAME_VALUE_SEP_B

# From this body size on a record is copied into the batch buffer in parts (head, body, rest)
# rather than joined first; with zlib's CRC (or ISA-L's, from _COMBINE_FROM) its record CRC is
# combined from the body's instead of a second pass. (With per-message sharding keys, big
# bodies are written from the body objects themselves, pwritev.)
_BIG_BODY = 2048
# From this body size on (every body of a batch) a batch is written from the bodies themselves,
# never copied into the batch buffer: a copy of each byte saved, for an iovec per part.
_WRITE_FROM_BODIES = 32768


# From this body size on (with ISA-L's CRC; always with zlib's) the record CRC is combined
# from the body's CRC instead of a second pass over the body.
_COMBINE_FROM = 16384
# ... with ISA-L's CRC only once a handle has framed this many messages: the second pass over
# a 64 KiB body just CRC'd (in the cache) costs ~1.1 µs against ~0.5 µs for a combine through
# ctypes, whose loading costs ~4 ms of CPU (measured): a process that sends 100 MB of 64 KiB
# messages spends less without it.
_COMBINE_AFTER = 8192
# Below this body size a batch is framed by C iterations (_frame_small; across a segment's end,
# by the joining loop): the join copies a body once, as the big loop's buffer does, and with
# ISA-L's CRC the second pass costs less than the big loop's Python steps per record (4 KiB
# bodies: ~15 % less CPU for a piped send, measured). With zlib's slow CRC the big loop's
# combine wins from _BIG_BODY.
_JOIN_BELOW = _COMBINE_FROM if _FAST_CRC else _BIG_BODY


# The loops below in C (``nativecheck.frame_run``), where the package was built with it: the
# same bytes (tests/log/test_framing_native.py), without the interpreter's steps per record, and
# each big body read once (its record CRC combined). 64 KiB lines piped to ``mqctl send``:
# framing ~10.5 -> ~6 us a record (~160 -> ~90 ms of CPU per GB, measured), most of what is left
# the body's CRC; a hundred 100-byte bodies ~2.5x less CPU than ``_frame_small`` (below).
_frame_native: Any = None
try:
    from store.log import nativecheck
    if nativecheck.INTERFACE == F.NATIVE_INTERFACE:   # (else a build of an older source: `pip install -e .` again)
        _frame_native = nativecheck.frame_run
except ImportError:
    pass
# From this many bodies on a batch is framed by :func:`_frame_small`; fewer (a single send
# among them) go record by record: _frame_small's set-up costs more than the loop it saves
# below ~16 records (measured: one 100-byte body 11.9 vs 8.5 us, 8 bodies 36.9 vs 35.0).
_SMALL_FROM = 16

def _frame_small(batch: WriteBatch, topic: str, bodies: Sequence[Body], qids: list[int], stride: int,
                 first_counter: int, pos: int, room_end: int, fixed: int, magic: int, const48: bytes,
                 mid: bytes, tail: bytes, tags: int, nxt: list[int], cqb: list[Any],
                 key_crc0: int) -> tuple[list[bytes], int, list[int], list[int], list[int]] | None:
    """Frame a batch of small bodies with the per-record steps as C iterations (``map``,
    ``zip``, ``accumulate``: list building, struct packing, CRCs) instead of a Python loop;
    the records come out as parts to be written as they are (pwritev), not copied together:
    ~10 % less per record at the hundred-message batches of ``--flush sync`` and at big
    batches of 1 KiB bodies. ``qids`` are round robin over ``stride`` queues, or (``stride``
    0) all one queue, as :func:`_queue_ids_for` makes them without sharding keys. Returns
    ``(records and their CRC properties, in order; the end of the last; queue offsets,
    commit-log offsets, unique-key index hashes)``, or None (nothing changed) when the batch
    would cross the segment's end."""
    n = len(bodies)
    blens = list(map(len, bodies))
    totals = [fixed + b for b in blens]
    physs = list(accumulate(totals, initial=pos))
    end = physs.pop()
    if end > room_end:
        return None
    M = _CRC_MASK
    lead = qids[:stride] if stride else qids[:1]   # each queue's first record, in order
    for q in lead:
        if nxt[q] < 0:
            run = batch.queue_run(topic, q)
            nxt[q], cqb[q] = run.next, run.entries
    if stride:
        counters = {q: count(nxt[q]) for q in lead}
        offs = list(map(next, map(counters.__getitem__, qids)))
        for q in lead:
            nxt[q] = next(counters[q])
    else:
        q = qids[0]
        offs = list(range(nxt[q], nxt[q] + n))
        nxt[q] += n
    hx = counter_hex(first_counter, n)
    heads = map(_HEAD_PACK, totals, repeat(magic), [c & M for c in map(_crc32, bodies)], qids, repeat(0),
                offs, physs, repeat(const48), blens)
    join = b"".join
    recs = list(map(join, zip(heads, bodies, repeat(mid), hx, repeat(tail))))
    trailer = F.CRC_PROPERTY_REVERSED
    parts: list[bytes] = [b""] * (2 * n)
    parts[0::2] = recs
    parts[1::2] = [(trailer % (c & M))[::-1] for c in map(_crc32, recs)]
    cqs = list(map(F.CQ_ENTRY.pack, physs, totals, repeat(tags)))
    if stride:
        for k, q in enumerate(lead):   # queue q's records are k, k + stride, ...
            cqb[q] += join(cqs[k::stride])
    else:
        cqb[qids[0]] += join(cqs)
    hashes = [c & M for c in map(_crc32, hx, repeat(key_crc0))]
    return parts, end, offs, physs, hashes


def frame_bodies(batch: WriteBatch, topic: str, bodies: Sequence[Body], props: dict[str, str], queue_id: int,
                 sharding_keys: list[str | None] | None) -> BatchResult:
    """Frame ``bodies`` for one topic, sharing ``props``, into ``batch`` (placed, queued and
    indexed: the caller commits it). Each run of ``KEYS_PER_MS`` bodies is framed on its own:
    its unique keys share one millisecond (the counter has 16 bits)."""
    n = len(bodies)
    if n <= KEYS_PER_MS:
        return _frame_run(batch, topic, bodies, props, queue_id, sharding_keys)
    runs = [_frame_run(batch, topic, bodies[i:i + KEYS_PER_MS], props, queue_id,
                       None if sharding_keys is None else sharding_keys[i:i + KEYS_PER_MS])
            for i in range(0, n, KEYS_PER_MS)]
    first = runs[0]
    return BatchResult(topic, [q for r in runs for q in r.queue_ids], [o for r in runs for o in r.queue_offsets],
                       [p for r in runs for p in r.commitlog_offsets], first.store_timestamp, first.uk_head,
                       first.uk_first, tuple((r.uk_head, r.uk_first) for r in runs[1:]))


def _frame_run(batch: WriteBatch, topic: str, bodies: Sequence[Body], props: dict[str, str], queue_id: int,
               sharding_keys: list[str | None] | None) -> BatchResult:
    """:func:`frame_bodies` for at most ``KEYS_PER_MS`` bodies."""
    # The producer's hot loop: everything that is the same for the whole batch is built
    # once, so each record costs one header pack, one join and two CRCs (one pass over a
    # big body plus a CRC combine), one CQ entry and one index hash.
    engine = batch.engine
    now, store_ts = batch.now, batch.store_ts
    cfg = batch.topic(topic, queue_id)
    qids = _queue_ids_for(engine, cfg, len(bodies), queue_id, sharding_keys)
    topic_b = topic.encode()
    tail_topic = bytes((len(topic_b),)) + topic_b
    static = _record.encode_properties(props)
    tags = tags_code(props.get(PROP_TAGS))
    key_items = [F.key_of(topic, k).encode() for k in (props.get(PROP_KEYS) or "").split(" ") if k]
    nxt = [-1] * cfg.queues
    cqb: list[Any] = [None] * cfg.queues   # the batch's entries of each queue it touches
    app = batch.app
    seg = engine.commitlog.segment_size
    pos = app.pos
    room_end = pos - pos % seg + seg - F.END_FILE_MIN_BLANK
    chunk = app.start_chunk()
    offs: list[int] = []
    physs: list[int] = []
    hashes: list[int] = []
    M = _CRC_MASK
    # TOTALSIZE magic BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET, then 48 bytes that
    # are the same for every record of the batch, then BODYLENGTH (format.py).
    pack = _HEAD_PACK
    const48 = _HEAD_CONST.pack(batch.sysflag, now, F.LOOPBACK_IP, engine.writer.pid, store_ts, F.LOOPBACK_IP,
                               F.STORE_PORT, 0, 0)
    pack_cq = F.CQ_ENTRY.pack
    crc32 = _crc32
    # Big bodies are not joined into a record (a copy): the record CRC continues over the
    # parts; with zlib's slow CRC, CRC(head + body) comes from CRC(body) by a combine.
    big = max(map(len, bodies)) >= _JOIN_BELOW
    combine = _crc32_combine() if big and not _FAST_CRC else None
    magic = F.MAGIC_V1
    counter = first_counter = (engine.writer.uniq_keys.counter + 1) & 0xFFFF
    counter -= 1
    # Within a batch every unique key shares host, pid, random and time: only the 16-bit
    # counter changes, so the key is a precomputed head plus 4 hex digits from a table,
    # and its index hash continues the CRC of the head.
    uk = engine.writer.uniq_keys
    uk_head_s = f"{uk.prefix}{(uk.reserve(now, len(bodies)) - uk.month_start_ms) & 0xFFFFFFFF:08X}"
    uk_head = uk_head_s.encode()
    key_crc0 = crc32(F.uniq_key_of(uk_head_s).encode())
    pb_tail = F.PROPERTY_SEP_B + static
    pb_len0 = len(_UNIQ_FIELD) + len(uk_head) + 4 + len(pb_tail)   # properties w/o CRC
    check_properties_size(pb_len0 + max((len(_SHARDING_FIELD) + len(k.encode()) for k in sharding_keys or ()
                                         if k is not None), default=0))   # (the batch's longest)
    mid0 = tail_topic + (pb_len0 + F.CRC_PROPERTY_SIZE).to_bytes(2, "big") + _UNIQ_FIELD + uk_head
    fixed0 = F.RECORD_FIXED_SIZE + len(topic_b) + pb_len0 + F.CRC_PROPERTY_SIZE
    tails: list[bytes] | None = None
    if sharding_keys is not None:
        tails = [pb_tail if k is None else _SHARDING_FIELD + k.encode() + pb_tail
                 for k in sharding_keys]
    tail, mid, fixed = pb_tail, mid0, fixed0
    parts: list[Any] | None = None
    framed = None
    if tails is None and _frame_native is None and use_arrays(engine.writer, bodies):
        framed = frame_arrays(batch, topic, bodies, qids, first_counter, pos, room_end, fixed,
                              magic, const48, mid, tail, tags, nxt, cqb, key_crc0,
                              _COMBINE_FROM if _FAST_CRC else _BIG_BODY)
    if framed is not None:
        # The whole batch framed as arrays (below): no per-record Python loop.
        data, offs, physs, hashes = framed
        n = len(bodies)
        chunk += data
        pos += len(data)
        counter = (first_counter + n - 1) & 0xFFFF
        bodies = ()
    elif _frame_native is not None:
        # Every batch, where the C loop is built: the loops below (the Python definition), in
        # C. Bodies of _WRITE_FROM_BODIES or more are written from themselves (pwritev), the
        # rest of the records copied between them; C stops at a segment's end, rolled here.
        # Measured per batch of 100-byte bodies (framing only, 2 cores under load ~15): 2
        # bodies 33-41 us against 45-48 us for the Python loops, 100 bodies 126-180 against
        # 310-347 us; 1,000 bodies of 100-400 B 0.9-1.7 us a body against 2.2-2.7 us as
        # arrays. One body costs the same either way (~35 us, the batch's set-up).
        n = len(bodies)
        for q in dict.fromkeys(qids):   # (each queue's run begun in the order of first use)
            if nxt[q] < 0:
                run = batch.queue_run(topic, q)
                nxt[q], cqb[q] = run.next, run.entries
        out = app.start_parts()
        uk_field = _UNIQ_FIELD + uk_head
        i = 0
        while True:
            i, pos, need = _frame_native(bodies, i, qids, tails, tail, tail_topic, uk_field, first_counter, key_crc0,
                                         const48, pos, room_end, nxt, cqb, tags, offs, physs, hashes, out,
                                         _WRITE_FROM_BODIES)
            if i == n:
                break
            app.pos = pos
            pos = app.place(need)
            out = app.start_parts()
            room_end = pos + seg - F.END_FILE_MIN_BLANK
        counter = (first_counter + n - 1) & 0xFFFF
        bodies = ()
    elif tails is None and not big and len(bodies) >= _SMALL_FROM and (small := _frame_small(
            batch, topic, bodies, qids, cfg.queues if queue_id < 0 else 0, first_counter, pos, room_end, fixed,
            magic, const48, mid, tail, tags, nxt, cqb, key_crc0)) is not None:
        # The common case: small bodies, no per-message properties, the batch within the
        # segment. Framed by C iterations (below), written as the records' parts (pwritev).
        recs, end, offs, physs, hashes = small
        app.start_parts().extend(recs)
        n = len(bodies)
        pos = end
        counter = (first_counter + n - 1) & 0xFFFF
        bodies = ()
    elif tails is None and not big:
        # The same across a segment's end: record by record.
        n = len(bodies)
        hx = counter_hex(first_counter, n)
        join = b"".join
        offs_append, physs_append = offs.append, physs.append
        trailer = F.CRC_PROPERTY_REVERSED
        for body, qid, h4 in zip(bodies, qids, hx):
            qoff = nxt[qid]
            if qoff < 0:
                run = batch.queue_run(topic, qid)
                qoff, cqb[qid] = run.next, run.entries
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
    elif tails is None:
        # Big bodies: each record is copied once, straight into the batch buffer (one pwrite
        # per batch, no per-record parts), with as few Python operations per record as
        # possible. The body is CRC'd once for BODYCRC; the record CRC continues over it
        # (a second pass, cheap with ISA-L) or, for the biggest bodies, is combined from the
        # body's CRC without touching the body again (zlib's crc32_combine_op).
        n = len(bodies)
        hx = counter_hex(first_counter, n)
        offs_append, physs_append = offs.append, physs.append
        trailer = F.CRC_PROPERTY_REVERSED
        # with zlib's slow CRC, every big body's record CRC is combined
        cfrom = _COMBINE_FROM if _FAST_CRC else _BIG_BODY
        comb = (_combiner() if max(map(len, bodies)) >= cfrom
                and (not _FAST_CRC or engine.writer.sent >= _COMBINE_AFTER) else None)
        ops: dict[int, int] = {}
        # The biggest bodies are not copied at all: the batch is written from them where
        # they lie (a read buffer's views, say), header and trailer around each (pwritev).
        from_bodies = min(map(len, bodies)) >= _WRITE_FROM_BODIES
        if from_bodies:
            out = app.start_parts()
        else:
            chunk = app.start_chunk()
        cq_add: list[Any] = [None] * len(cqb)
        for body, qid, h4 in zip(bodies, qids, hx):
            qoff = nxt[qid]
            if qoff < 0:
                run = batch.queue_run(topic, qid)
                qoff, cqb[qid] = run.next, run.entries
                cq_add[qid] = run.entries.extend
            nxt[qid] = qoff + 1
            blen = len(body)
            total = fixed + blen
            if pos + total > room_end:
                app.pos = pos
                pos = app.place(total)
                if from_bodies:
                    out = app.start_parts()
                else:
                    chunk = app.start_chunk()
                room_end = pos + seg - F.END_FILE_MIN_BLANK
            bcrc = crc32(body)
            head = pack(total, magic, bcrc & M, qid, 0, qoff, pos, const48, blen)
            after = mid + h4 + tail
            if comb is not None and blen >= cfrom:
                op = ops.get(blen)
                if op is None:
                    op = ops[blen] = comb[0](blen)
                c = crc32(after, comb[1](crc32(head), bcrc, op)) & M
            else:
                c = crc32(after, crc32(body, crc32(head))) & M
            if from_bodies:
                out += (head, body, after + (trailer % c)[::-1])
            else:
                chunk += head
                chunk += body
                chunk += after
                chunk += (trailer % c)[::-1]
            cq_add[qid](pack_cq(pos, total, tags))
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
            run = batch.queue_run(topic, qid)
            qoff, cqb[qid] = run.next, run.entries
        nxt[qid] = qoff + 1
        counter = (counter + 1) & 0xFFFF
        h4 = b"%04X" % counter
        blen = len(body)
        if tails is not None:
            tail = tails[i]
            extra = len(tail) - len(pb_tail)
            if extra:
                plen = (pb_len0 + extra + F.CRC_PROPERTY_SIZE).to_bytes(2, "big")
                mid = tail_topic + plen + mid0[len(tail_topic) + 2:]
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
            crc_prop = (F.CRC_PROPERTY_REVERSED % (crc32(rec) & M))[::-1]
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
            crc_prop = (F.CRC_PROPERTY_REVERSED % (crc32(after, hc) & M))[::-1]
            if parts is None:
                parts = app.start_parts()
            parts.extend((head, body, after + crc_prop))
        cqb[qid] += pack_cq(pos, total, tags)
        hashes.append(crc32(h4, key_crc0) & M)
        offs.append(qoff)
        physs.append(pos)
        pos += total
    app.pos = pos
    engine.writer.uniq_keys.counter = counter
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
    batch.index_hashes(*index)
    batch.last_at = physs[-1]
    return BatchResult(topic, qids, offs, physs, store_ts, uk_head_s, first_counter)


def _queue_ids_for(engine: Engine, cfg: TopicConfig, n: int, queue_id: int,
                   sharding_keys: list[str | None] | None) -> list[int]:
    nq = cfg.queues
    if queue_id >= nq:
        raise UsageError(f"queue {queue_id} does not exist: topic {cfg.name!r} has queues 0-{nq - 1}")
    if sharding_keys is None:
        if queue_id >= 0:
            return [queue_id] * n
        if cfg.order:
            raise cfg.unrouted()
        start = engine.writer.round_robin_start(cfg, n)
        return [(start + i) % nq for i in range(n)]
    fallback = Draft(cfg.name, b"", queue_id=queue_id)
    return [abs(java_hash(k)) % nq if k else engine.writer.select_queue(cfg, fallback)   # "" is no key
            for k in sharding_keys]


def byte_views(bodies: Sequence[Body]) -> Sequence[Body]:
    """``bodies`` with every buffer whose ``len()`` is not its size in bytes made a flat view of
    its bytes: a memoryview of wider items (``array('i')``'s, whose ``len()`` counts items), of
    several dimensions (``len()`` counts rows), an ``array`` itself, wherever it stands in the
    list. Else its record's length field and the size check would count items or rows while
    its bytes are written (a record whose length lies, the log misframed). A strided view is
    copied (its bytes are not one run)."""
    kinds = set(map(type, bodies))
    if kinds <= _FLAT or (kinds == _VIEW and set(map(_VIEW_SHAPE, bodies)) == _FLAT_SHAPE):   # (the common cases)
        return bodies
    return [b if type(b) in _FLAT else _byte_view(b) for b in bodies]


_FLAT = {bytes, bytearray}
_VIEW = {memoryview}
_VIEW_SHAPE = attrgetter("itemsize", "ndim", "c_contiguous")
_FLAT_SHAPE = {(1, 1, True)}


def _byte_view(body: Any) -> Any:
    try:
        view = memoryview(body)
    except TypeError:   # (no buffer: refused by the framing's CRC, as before)
        return body
    if _VIEW_SHAPE(view) == (1, 1, True):
        return body
    return view.cast("B") if view.c_contiguous else view.tobytes()
