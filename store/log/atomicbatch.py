"""Atomic batches: the records one write batch appends are in the log whole or not at all,
whatever stops the write (a ``kill -9`` between or inside its ``pwrite`` calls, a power cut
that kept a prefix of it). The rule, and the one place each part of it is applied.

The rule (SYSFLAG bits of ``format.py``): every record of a batch of several records carries
``ATOMIC_BATCH``; its last record carries ``ATOMIC_END`` as well. A record without
``ATOMIC_BATCH`` (a single send's), or one with ``ATOMIC_END``, closes whatever was open
before it (batches are written whole, one at a time, under the write lock). A run of
``ATOMIC_BATCH`` records at the log's tail without its end record was never finished: recovery
cuts it (:func:`open_batch`, ``recovery.py``), at its first record, and nothing before it, even
when that record is in an earlier segment than the scan began in (:func:`open_before`); the next
writer in any process recovers first (``preflight.py``: the checkpoint's written end
differs from the log's end). A batch with its end record is never cut, nor one whose end is
missing below what the checkpoint says was acknowledged (its synced end; on the same boot
its written end): that is damage to a finished batch, which loses the damaged or cut
records only (``recovery.py``).

Batches of several records: a producer's (``Store.put_bodies``: ``send_many``, ``mqctl send``'s
batches; ``Store.put`` of several drafts), an exactly-once stage's outputs with its offset commit
last (``offsetcommits.py``), the delay scheduler's deliveries with its progress record last
(``positions.DelayProgress``). A single record needs no flag: its CRC makes it whole or
invalid. What a record *is* (an offset commit, the scheduler's progress) is told by its topic,
never by these flags: a user's message that ends a batch is only a message.

Readers never see part of a batch in normal operation: consume-queue entries and index keys
are written after the whole batch is in the log (``writebatch.py``).
"""
from __future__ import annotations

from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from store.log.commitlog import CommitLog
    from store.log.logappend import LogAppender

INSIDE = F.ATOMIC_BATCH                 # every record of a batch of several
END = F.ATOMIC_BATCH | F.ATOMIC_END     # its last
MASK = F.ATOMIC_BATCH | F.ATOMIC_END    # the bits that are the batch's, never a draft's own


def marks(n: int) -> list[int]:
    """The flags of each record of a batch of ``n`` drafts (``n`` > 0) that must be atomic."""
    return [INSIDE] * (n - 1) + [END]


def end_framed(app: LogAppender, at: int) -> None:
    """Make the record placed last at ``at`` (framed with ``INSIDE``, ending at ``app.pos``) the
    batch's end record, before the batch is written: its SYSFLAG gains ``ATOMIC_END`` and its
    record CRC property is corrected. The producer's framing builds every record of a batch
    from one header template (``framing.py``); this costs the same for any batch size and path
    (a dozen interpreter steps: ~2 us here, beside ~80 us for a batch of 2 small bodies)."""
    size = app.pos - at
    ch = app.chunks[-1]
    buf: Any
    if ch.parts is None:
        buf, i = ch.data, at - ch.base - ch.start
    else:
        buf = ch.parts[-1]
        i = len(buf) - size
    if i < 0 or type(buf) is not bytearray:   # (the record in parts: head, body, the rest)
        head, j = _locate(app, at + _END_BYTE, 1)
        head[j] |= _END_BIT
        buf, i = _locate(app, at + size - F.CRC_PROPERTY_SIZE, F.CRC_PROPERTY_SIZE)
        i -= size - F.CRC_PROPERTY_SIZE
    else:
        buf[i + _END_BYTE] |= _END_BIT
    # The record CRC covers the ``size - 20`` bytes before its property; a CRC is affine, so
    # setting the bit changes it by a constant that depends only on that length.
    prop = i + size - F.CRC_PROPERTY_SIZE
    digits = prop + _DIGITS
    crc = int(buf[digits:digits + 10][::-1]) ^ (_DELTAS.get(size) or _flip_delta(size))
    buf[prop:prop + F.CRC_PROPERTY_SIZE] = (F.CRC_PROPERTY_REVERSED % crc)[::-1]


# The byte of the record that ATOMIC_END is in (SYSFLAG is big-endian), and its bit there.
_END_BYTE = F.OFF_SYSFLAG + 3 - (F.ATOMIC_END.bit_length() - 1) // 8
_END_BIT = F.ATOMIC_END >> 8 * ((F.ATOMIC_END.bit_length() - 1) // 8)
_DIGITS = len(F.CRC_PROPERTY_HEAD)   # where the CRC's digits begin in its property
_DELTAS: dict[int, int] = {}   # record size -> how its masked record CRC changes with ATOMIC_END


def _flip_delta(size: int) -> int:
    """How the masked record CRC of a record of ``size`` bytes changes when ATOMIC_END is set:
    the CRC of that bit alone, shifted through the bytes after it up to the CRC property (the
    shift of ``v``: ``~crc32(zeros, ~v)``). One pass over zeros for each new size."""
    from store.log.record import crc32
    lead = bytes(F.OFF_SYSFLAG) + F.ATOMIC_END.to_bytes(4, "big")
    k = (crc32(lead) ^ crc32(bytes(len(lead)))) & 0xFFFFFFFF
    d = ~crc32(bytes(size - F.CRC_PROPERTY_SIZE - len(lead)), ~k & 0xFFFFFFFF) & F.CRC_MASK
    if len(_DELTAS) >= 256:
        _DELTAS.clear()
    _DELTAS[size] = d
    return d


def _locate(app: LogAppender, at: int, n: int) -> tuple[Any, int]:
    """The buffer of the batch's last chunk holding the ``n`` bytes placed at ``at``, made
    writable (a part of other bytes is replaced by a copy of its own), and where they are in it."""
    ch = app.chunks[-1]
    off = at - ch.base - ch.start
    if ch.parts is None:
        return ch.data, off
    parts = ch.parts
    i, start = len(parts), app.pos - ch.base - ch.start
    while start > off:   # (the last record's bytes are in its last few parts)
        i -= 1
        start -= len(parts[i])
    j, stop = i + 1, start + len(parts[i])
    while stop < off + n:
        stop += len(parts[j])
        j += 1
    buf = parts[i]
    if j > i + 1 or type(buf) is not bytearray:   # (a record's head or trailer: a few bytes)
        buf = bytearray(b"".join(parts[i:j]))
        parts[i:j] = [buf]
    return buf, off - start


def open_batch(sysflag: Any, phys: Any, open_at: int) -> int:
    """Recovery's tail rule: where an unfinished atomic batch begins after a run of records
    (their ``sysflag`` and ``phys`` arrays, in log order; ``open_at`` where one began before
    them, -1: none), or -1. A record outside any batch, or a batch's end record, closes what
    was open (batches are written whole, under the write lock)."""
    import numpy as np  # (recovery's arrays; not on a sender's start-up)
    atomic = (sysflag & F.ATOMIC_BATCH) != 0
    if not atomic.any() and open_at < 0:
        return -1
    stops = np.flatnonzero(~atomic | ((sysflag & F.ATOMIC_END) != 0))
    if len(stops) == 0:
        return open_at if open_at >= 0 else int(phys[0])
    k = int(stops[-1])
    return int(phys[k + 1]) if k + 1 < len(phys) else -1


class OpenBatch:
    """The atomic batch a scan's records leave open so far, fed window by window in log
    order, as :func:`open_batch` sees it (``store check``: what recovery's tail rule will cut):
    where it begins (``at``, -1: none) and the offsets of its records."""

    def __init__(self) -> None:
        self.at = -1
        self.phys: list[Any] = []

    def add(self, sysflag: Any, phys: Any) -> None:
        if phys is None or not len(phys):
            return
        was, self.at = self.at, open_batch(sysflag, phys, self.at)
        if self.at < 0:
            self.phys = []
        elif self.at == was and self.at < int(phys[0]):   # the same batch, still open
            self.phys.append(phys.copy())
        else:   # a batch opened among these records
            self.phys = [phys[phys >= self.at].copy()]

    def records_from(self, at: int) -> int:
        """How many of its records begin at ``at`` or later."""
        return sum(int((p >= at).sum()) for p in self.phys)


def open_before(log: CommitLog, start: int, known: int = 0) -> int:
    """Recovery's look back, for a scan that begins at ``start`` (a record boundary) not known
    to lie between batches: the checkpoint reached past the log's end (a segment cut or lost),
    so the scan begins at the base of the segment holding that end, and a batch may have begun
    in the segment before. Where the batch that ``start`` is inside of begins (its first record,
    for :func:`open_batch`'s ``open_at``), or -1 when the record before ``start`` closes what was
    open (or there is none). Reads the records before ``start`` in its segment, or the whole
    segment before it (``recordscan.scan``: every CRC checked), and an earlier segment only while
    all of a later one is inside the batch; never below ``known``, an offset known to lie
    between batches (the checkpoint's derived end, the log's first segment). Only recovery of
    a damaged log pays for it."""
    import numpy as np  # (recovery's arrays, as in open_batch)

    from store.log import recordscan  # (recovery has it loaded; never on a sender's path)
    upto, begin = start, -1
    for base in reversed([b for b in log.segments() if b < start]):
        if upto <= known or base != log.segment_of(upto - 1):
            break   # (a known boundary reached, or a segment missing before ``upto``)
        lo = max(base, known)
        flags, phys = [], []
        for w in recordscan.scan(log, lo):
            if len(w):
                keep = w.phys < upto
                flags.append(w.sysflag[keep])
                phys.append(w.phys[keep])
            if w.end >= upto:
                break
        f = np.concatenate(flags) if flags else np.zeros(0, np.int64)
        if not len(f):
            break
        p = np.concatenate(phys)
        at = open_batch(f, p, -1)
        if at < 0:
            return begin   # the record before ``upto`` closed what was open: a batch begins there, or none
        if at != int(p[0]):
            return at      # the batch begins after a record here that closed the one before
        begin = at         # every record here is inside the batch: it began here or earlier
        if lo > base:
            break
        upto = base
    return begin


def records_between(log: CommitLog, lo: int, hi: int) -> int:
    """How many valid records begin in ``[lo, hi)`` (``lo`` a record boundary): those of a cut
    batch that recovery's scan began after (:func:`open_before`). Only recovery pays for it."""
    from store.log import recordscan
    n = 0
    for w in recordscan.scan(log, lo) if lo < hi else ():
        n += int((w.phys < hi).sum()) if len(w) else 0
        if w.end >= hi:
            break
    return n


def cut_warning(at: int, whole: int, torn: bool, was: int, end: int, indexed: int) -> str:
    """The line recovery warns with when the unfinished batch it cut (from ``at``, in a log
    that ended at ``was``: ``whole`` intact records, and a ``torn`` last one, else no end
    record) had messages the consume queues indexed (``indexed``)."""
    after = indexed - whole - torn   # (the consume queues' entries for records the cut log has no bytes of)
    gone = (f"; the {indexed} message{'s' if indexed != 1 else ''} the consume queues had past it "
            f"{'are' if indexed != 1 else 'is'} gone" if indexed else "")
    if after > 0:
        gone += f" ({after} of them after the batch's records the log has: the log's bytes past them are gone)"
    return (f"an unfinished atomic batch at the end of the commit log was cut whole: its end record is "
            f"missing ({'the last of its records the log has is torn' if torn else 'the log ends after a whole one'}"
            f": a writer killed or a power cut inside the batch, or a cut file), and an atomic batch is "
            f"kept whole or not at all, so its {whole} intact record"
            f"{'s' if whole != 1 else ''} from offset {at} ({was - at} bytes) went with it; the log now ends "
            f"at offset {end}{gone}")
