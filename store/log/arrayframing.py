"""Framing a producer's big batch of small bodies as arrays (numpy), for ``framing.py``.

Headers, consume-queue entries, record-CRC properties and unique-key index hashes for the
whole batch at once; per record only its two CRC calls and its place in one join. The bytes
are the ones ``framing.py``'s other paths write (tests/log/test_framing.py); the
record layout is ``format.py``'s.
"""
from __future__ import annotations

from collections.abc import Sequence

from store.log import format as F
from store.log.record import Body, counter_hex
from store.log.record import crc32 as _crc32

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from store.log.engine import WriterState
    from store.log.writebatch import WriteBatch

# Batches framed as arrays (numpy): only once this handle has sent enough to pay for numpy's
# import (~0.1 s), so a single `mqctl send` (or a short one) never imports it.
_ARRAYS_MIN_BATCH = 512
_ARRAYS_AFTER = 100_000       # messages framed by this handle before numpy is worth importing
# ... and only for small bodies: arrays save Python steps per record but copy each body once
# more (into one join). Per message, arrays against _frame_small (tests/bench/bench_produce.py
# sizes, 2 CPUs): 100 B 0.78 against 0.86 µs, 300 B 1.03 against 1.10, 1 KiB 1.95 against
# 1.52, 4 KiB 6.2 against 2.9.
_ARRAYS_MAX_AVG = 512
_HEX4_CRCS: list[Any] = []


def use_arrays(writer: WriterState, bodies: Sequence[Body]) -> bool:
    """Whether to frame this batch as arrays; past ``_ARRAYS_AFTER`` messages in big batches
    numpy is loaded either way: the key index builds a big batch's entries as arrays too."""
    n = len(bodies)
    writer.sent += n
    if n < _ARRAYS_MIN_BATCH:
        return False
    import sys
    if "numpy" not in sys.modules:
        if writer.sent < _ARRAYS_AFTER:
            return False
        from store.log.arrays import layouts  # (here, not on import: a small send never loads it)
        layouts()
    return sum(map(len, bodies)) < n * _ARRAYS_MAX_AVG


def _hex4_crcs() -> Any:
    """CRC of each of the 65536 four-hex-digit key counters (as an array), computed once."""
    if not _HEX4_CRCS:
        from store.log.arrays import layouts
        np = layouts().np
        _HEX4_CRCS.append(np.fromiter(map(_crc32, counter_hex(0, 65536)), np.int64, 65536))
    return _HEX4_CRCS[0]


def frame_arrays(batch: WriteBatch, topic: str, bodies: Sequence[Body], qids: list[int],
                  first_counter: int, pos: int, room_end: int, fixed: int, magic: int, const48: bytes,
                  mid: bytes, tail: bytes, tags: int, nxt: list[int], cqb: list[Any],
                  key_crc0: int, max_body: int) -> tuple[bytes, list[int], list[int], list[int]] | None:
    """Frame a whole batch at once: headers, consume-queue entries and record-CRC properties
    as arrays; per record only its CRCs (the body's, then the record's continued over head,
    body and the rest: C calls through ``map``) and its place in one ``join``. Returns
    ``(bytes of every record, queue offsets, commit-log offsets, unique-key index hashes)``, or
    None (nothing changed) when the batch does not fit in the current segment or has a body
    of ``max_body`` bytes or more (the per-record path combines such a body's CRC instead)."""
    from store.log.arrays import layouts
    L = layouts()
    np, head_t, cq_t, pow10 = L.np, L.write_head, L.cq, L.pow10
    n = len(bodies)
    blen = np.fromiter(map(len, bodies), np.int64, n)
    if int(blen.max()) >= max_body:
        return None
    total = blen + fixed
    ends = np.cumsum(total)
    if pos + int(ends[-1]) > room_end:
        return None
    phys = ends - total + pos
    hx = counter_hex(first_counter, n)
    qarr = np.fromiter(qids, np.int64, n)
    qoff = np.empty(n, np.int64)
    used = set(qids)
    queues = {q: (np.flatnonzero(qarr == q) if len(used) > 1 else None) for q in used}
    for q, idx in queues.items():
        start = nxt[q]
        if start < 0:
            run = batch.queue_run(topic, q)
            start, cqb[q] = run.next, run.entries
        if idx is None:   # the whole batch goes to one queue
            qoff[:] = np.arange(start, start + n)
            nxt[q] = start + n
        else:
            qoff[idx] = np.arange(start, start + len(idx))
            nxt[q] = start + len(idx)
    crc32 = _crc32
    M = F.CRC_MASK
    head = np.empty(n, head_t)
    head["total"] = total
    head["magic"] = magic
    head["bodycrc"] = np.fromiter(map(crc32, bodies), np.int64, n) & M
    head["qid"] = qarr
    head["flag"] = 0
    head["qoff"] = qoff
    head["phys"] = phys
    head["const"] = np.frombuffer(const48, "V48")[0]
    head["blen"] = blen
    hb = head.tobytes()
    step = F.RECORD_HEADER_SIZE
    heads = list(map(hb.__getitem__, map(slice, range(0, n * step, step), range(step, n * step + 1, step))))
    afters = [mid + h4 + tail for h4 in hx]
    rcrc = np.fromiter(map(crc32, afters, map(crc32, bodies, map(crc32, heads))), np.int64, n) & M
    trail = np.empty((n, F.CRC_PROPERTY_SIZE), np.uint8)
    trail[:, :9] = np.frombuffer(F.CRC_PROPERTY_HEAD, np.uint8)
    trail[:, 9:19] = (rcrc[:, None] // pow10) % 10 + 48    # least significant digit first
    trail[:, 19] = 2
    tb = trail.tobytes()
    step = F.CRC_PROPERTY_SIZE
    trails = list(map(tb.__getitem__, map(slice, range(0, n * step, step), range(step, n * step + 1, step))))
    parts: list[Any] = [b""] * (4 * n)
    parts[0::4] = heads
    parts[1::4] = bodies
    parts[2::4] = afters
    parts[3::4] = trails
    data = b"".join(parts)
    for q, idx in queues.items():
        cq = np.empty(n if idx is None else len(idx), cq_t)
        cq["phys"] = phys if idx is None else phys[idx]
        cq["size"] = total if idx is None else total[idx]
        cq["tags"] = tags
        cqb[q] += cq.tobytes()
    # The unique key's index hash, CRC(head + counter digits), from a table of the counters'
    # CRCs: CRC is affine in its initial value, crc(d, i) = crc(d) ^ crc(0000, i) ^ crc(0000).
    ctr = (np.arange(first_counter, first_counter + n, dtype=np.int64) & 0xFFFF)
    fold = _crc32(b"\0" * 4, key_crc0) ^ _crc32(b"\0" * 4)
    hashes = ((_hex4_crcs()[ctr] ^ fold) & M).tolist()
    return data, qoff.tolist(), phys.tolist(), hashes
