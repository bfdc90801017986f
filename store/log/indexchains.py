"""The slot chains of a key-index file (layout: ``format.py``; the files are owned by
``index.py``, which alone calls this): whether every entry is reachable from its slot, and
which entries a lookup of their own key reaches. Pure functions over a whole file's bytes,
as arrays: a thorough look at a full file (a million entries) is a few array passes, where a
loop over its entries took a third of a second.
"""
from __future__ import annotations

from typing import Any

from store.log import format as F
from store.log.arrays import layouts


def _entries(np: Any, data: bytes, table_end: int, count: int) -> Any:
    """Entries 1 .. count-1 (entry 0 is unused) as a structured array."""
    dt = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])
    return np.frombuffer(data, dt, count - 1, table_end + F.INDEX_ENTRY_SIZE)


def problem(data: bytes, table_end: int, count: int, begin_phys: int) -> str | None:
    """Why the slots and entries of a file (``data``, whose header and size were found sound)
    cannot be trusted, or None: a slot past the entries; an entry that is zero (lost to a
    power cut), chains forward, or points before the file begins; an entry no slot chain
    reaches (a lookup would silently miss it). The first problem in file order."""
    np = layouts().np
    table = np.frombuffer(data, ">i4", (table_end - F.INDEX_HEADER_SIZE) // 4, F.INDEX_HEADER_SIZE).astype(np.int64)
    bad = np.flatnonzero((table < 0) | (table >= count))
    if len(bad):
        sl = int(bad[0])
        return f"slot {sl} points at entry {int(table[sl])}, past the {count} entries"
    ent = _entries(np, data, table_end, count)
    h, phys, td, prev = (ent[f].astype(np.int64) for f in ("hash", "phys", "tdiff", "prev"))
    i = np.arange(1, count, dtype=np.int64)
    zero = (h == 0) & (phys == 0) & (prev == 0) & (td == 0)
    forward = (prev < 0) | (prev >= i)
    before = phys < begin_phys   # (past end_phys is allowed: recovery fences the end back)
    first = np.flatnonzero(zero | forward | before)
    if len(first):
        j = int(first[0])
        if zero[j]:
            return f"entry {j + 1} is zero (lost)"
        if forward[j]:
            return f"entry {j + 1} chains forward to entry {int(prev[j])}"
        return f"entry {j + 1} points at offset {int(phys[j])}, before the file begins ({begin_phys})"
    reached = np.zeros(count, bool)
    reached[table] = True
    reached[prev] = True
    missing = np.flatnonzero(~reached[1:])
    if len(missing):
        return f"entry {int(missing[0]) + 1} is reached by no slot chain (lookups would miss it)"
    return None


def reachable(data: bytes, table_end: int, slots: int) -> tuple[Any, Any]:
    """The entries of a file (sound by :func:`problem`) that a lookup of their own key reaches:
    on the chain of their key's slot. The chains are followed for all slots at once, a link
    per step. Returns ``(commit-log offsets, key hashes)`` as int64 arrays, ordered by offset
    (entries are appended in log order, so this sort has little to do)."""
    np = layouts().np
    count = F.INDEX_HEADER.unpack_from(data, 0)[5]
    table = np.frombuffer(data, ">i4", slots, F.INDEX_HEADER_SIZE).astype(np.int32)
    ent = _entries(np, data, table_end, count)
    prev = np.zeros(count, np.int32)   # (counts fit 32 bits: memory is what bounds a check)
    prev[1:] = ent["prev"]
    label = np.full(count, -1, np.int32)
    heads = np.flatnonzero((table > 0) & (table < count)).astype(np.int32)
    front = table[heads]
    label[front] = heads
    for _ in range(count):
        if not len(front):
            break
        nxt = prev[front]
        ok = (nxt > 0) & (nxt < front)
        nxt, lab = nxt[ok], label[front[ok]]
        new = label[nxt] < 0
        label[nxt[new]] = lab[new]
        front = nxt[new]
    del prev, front
    got = np.flatnonzero(label[1:] >= 0)         # entry numbers - 1
    h = ent["hash"][got].astype(np.int64)
    keep = h % slots == label[got + 1]
    got, h = got[keep], h[keep]
    del label
    phys = ent["phys"][got].astype(np.int64)
    order = np.argsort(phys, kind="stable")
    return phys[order], h[order]
