"""The slot chains of a key-index file (layout: ``format.py``; the files are owned by
``index.py``, which alone calls this): whether every entry is reachable from its slot, and
which entries a lookup of their own key reaches. Pure functions over a whole file's bytes,
as arrays: a thorough look at a full file (a million entries) is a few array passes, where a
loop over its entries took a third of a second. And :func:`keys_of_last`, a look at a file's end;
:func:`walk`, a lookup's walk along one chain, and :func:`resolve`, a killed writer's slot.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

_CHUNK = 1 << 18   # entries looked at together by problem() (bounds its memory: ~2 MiB per array)


def _entries(np: Any, data: bytes, table_end: int, first: int, end: int) -> Any:
    """Entries ``first .. end-1`` (entry 0 is unused) as a structured array (a view)."""
    dt = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])
    return np.frombuffer(data, dt, end - first, table_end + first * F.INDEX_ENTRY_SIZE)


def problem(data: bytes, table_end: int, count: int, begin_phys: int) -> str | None:
    """Why the slots and entries of a file (``data``, whose header and size were found sound)
    cannot be trusted, or None: a slot past the entries; an entry that is zero (lost to a
    power cut), chains forward, or points before the file begins; an entry no slot chain
    reaches (a lookup would silently miss it). The first problem in file order."""
    from store.log.arrays import layouts  # (a check's: a write's index never loads it)
    np = layouts().np
    table = np.frombuffer(data, ">i4", (table_end - F.INDEX_HEADER_SIZE) // 4, F.INDEX_HEADER_SIZE).astype(np.int32)
    bad = np.flatnonzero((table < 0) | (table >= count))
    if len(bad):
        sl = int(bad[0])
        return f"slot {sl} points at entry {int(table[sl])}, past the {count} entries"
    reached = np.zeros(count, bool)
    reached[table] = True
    del table
    for first in range(1, count, _CHUNK):
        end = min(count, first + _CHUNK)
        ent = _entries(np, data, table_end, first, end)
        prev = ent["prev"].astype(np.int64)
        phys = ent["phys"].astype(np.int64)
        zero = (ent["hash"] == 0) & (phys == 0) & (prev == 0) & (ent["tdiff"] == 0)
        forward = (prev < 0) | (prev >= np.arange(first, end))
        before = phys < begin_phys   # (past end_phys is allowed: recovery fences the end back)
        hit = np.flatnonzero(zero | forward | before)
        if len(hit):
            j = int(hit[0])
            if zero[j]:
                return f"entry {first + j} is zero (lost)"
            if forward[j]:
                return f"entry {first + j} chains forward to entry {int(prev[j])}"
            return f"entry {first + j} points at offset {int(phys[j])}, before the file begins ({begin_phys})"
        reached[prev] = True
    missing = np.flatnonzero(~reached[1:])
    if len(missing):
        return f"entry {int(missing[0]) + 1} is reached by no slot chain (lookups would miss it)"
    return None


def reachable(data: bytes, table_end: int, slots: int) -> tuple[Any, Any]:
    """The entries of a file (sound by :func:`problem`) that a lookup of their own key reaches:
    on the chain of their key's slot. The chains are followed for all slots at once, a link
    per step. Returns ``(commit-log offsets, key hashes)`` (int64, int32 arrays) ordered by
    offset (entries are appended in log order: usually they already are)."""
    from store.log.arrays import layouts
    np = layouts().np
    count = F.INDEX_HEADER.unpack_from(data, 0)[5]
    table = np.frombuffer(data, ">i4", slots, F.INDEX_HEADER_SIZE).astype(np.int32)
    ent = _entries(np, data, table_end, 1, count)
    prev = np.zeros(count, np.int32)   # (counts fit 32 bits: memory is what bounds a check)
    prev[1:] = ent["prev"]
    label = np.full(count, -1, np.int32)
    heads = np.flatnonzero((table > 0) & (table < count)).astype(np.int32)
    front = table[heads]
    label[front] = heads
    del table, heads
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
    reach = label[1:] >= 0
    lab = label[1:][reach]
    del label
    h = ent["hash"][reach].astype(np.int32)
    keep = h % slots == lab
    del lab
    phys = ent["phys"][reach][keep].astype(np.int64)
    h = h[keep]
    if len(phys) > 1 and not bool((phys[1:] >= phys[:-1]).all()):
        order = np.argsort(phys, kind="stable")
        phys, h = phys[order], h[order]
    return phys, h


def resolve(fd: int, table_end: int, value: int, count: int) -> int:
    """A slot value a killed writer left past ``indexCount`` (or one being written): its
    entries were written before the slot, so following their ``prevIndex`` leads back to the
    chain as it was (0: no chain, or none that leads back)."""
    seen = 0
    while value >= count and seen < 1 << 20:
        seen += 1
        raw = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + value * F.INDEX_ENTRY_SIZE)
        if len(raw) < F.INDEX_ENTRY_SIZE:
            return 0
        prev = F.INDEX_ENTRY.unpack(raw)[3]
        if prev >= value:
            return 0
        value = prev
    return value if value > 0 else 0


def walk(fd: int, table_end: int, slots: int, count: int, h: int, limit: int, out: list[int]) -> str | None:
    """A lookup of key hash ``h`` in the file open as ``fd`` (``count`` entries): the
    commit-log offsets of the entries on its slot's chain with hash ``h``, newest first, into
    ``out`` (at most ``limit`` in all). Returns why the chain cannot be trusted (it would
    answer "not found" for keys the log has), or None: what a walk sees at no extra read — a
    slot, or a slot's pending entries (a batch's, before its header), past the file's end; a
    ``prevIndex`` that does not go back; an entry whose hash is not of this slot."""
    sl = h % slots
    raw = os.pread(fd, 4, F.INDEX_HEADER_SIZE + sl * 4)
    n = F.INDEX_SLOT.unpack(raw)[0] if len(raw) == 4 else 0
    if n < 0:
        return f"slot {sl} points at entry {n}"
    if n >= count:   # a batch's slot before its header (being written, or cut short)
        raw = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + n * F.INDEX_ENTRY_SIZE)
        if len(raw) < F.INDEX_ENTRY_SIZE or F.INDEX_ENTRY.unpack(raw)[0] % slots != sl:
            return f"slot {sl} points at entry {n}, past the {count} entries and no pending entry of its"
        n = resolve(fd, table_end, n, count)
    seen = 0
    while 0 < n < count and seen < count:
        seen += 1
        ent = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + n * F.INDEX_ENTRY_SIZE)
        if len(ent) < F.INDEX_ENTRY_SIZE:
            return f"entry {n} of slot {sl} is past the file's end"
        eh, phys, _td, prev = F.INDEX_ENTRY.unpack(ent)
        if eh == h:
            out.append(phys)
            if len(out) >= limit:
                return None
        elif eh % slots != sl:
            return f"entry {n}, on the chain of slot {sl}, holds a key of slot {eh % slots}"
        if prev >= n:
            return f"entry {n} chains forward to entry {prev}"
        n = prev
    return None


def keys_of_last(fd: int, table_end: int, count: int, end_phys: int) -> int:
    """How many of the newest entries of the file open as ``fd`` (``count`` in its header)
    are keys of its last record (at ``end_phys``): a file's roll may split a record's keys,
    its first ones ending the file, and a replay of the record must add only the rest."""
    for n in range(count - 1):
        raw = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + (count - 1 - n) * F.INDEX_ENTRY_SIZE)
        if len(raw) < F.INDEX_ENTRY_SIZE or F.INDEX_ENTRY.unpack(raw)[1] != end_phys:
            return n
    return count - 1


def kept(fd: int, table_end: int, count: int, end_phys: int) -> int:
    """How many entries of the file open as ``fd`` (``count`` in its header, entries in log
    order) to keep when offsets from ``end_phys`` on are forgotten: up to the first of its
    newest entries that all point at or past it (an entry left pointing there would lead a
    lookup where no record starts, or to another record later written there)."""
    n = count
    while n > 1:
        raw = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + (n - 1) * F.INDEX_ENTRY_SIZE)
        if len(raw) < F.INDEX_ENTRY_SIZE or F.INDEX_ENTRY.unpack(raw)[1] < end_phys:
            break
        n -= 1
    return n


def add_arrays(table_bytes: bytearray, slots: int, hashes: list[int], physs: list[int], tdiff: int, count: int,
               resolve: Callable[[int], int]) -> tuple[bytes, list[int]]:
    """A batch's entries as arrays (``index.py``'s big batches, numpy loaded): the entries'
    bytes, the slot table (``table_bytes``, big-endian ints at the file's positions) updated
    in place, and the file positions of the slots changed (ascending). An entry's ``prevIndex`` is the batch's
    previous entry in its slot, or for the first one the slot's value before the batch
    (``resolve``d when a killed writer left it past ``count``)."""
    from store.log.arrays import layouts  # (a big batch's: a small one never loads numpy)
    np = layouts().np
    k = len(hashes)
    h = np.array(hashes, np.int64)
    sl = h % slots
    idx = np.arange(count, count + k, dtype=np.int64)
    order = np.argsort(sl, kind="stable")   # each slot's entries together, in batch order
    ss = sl[order]
    first = np.ones(k, bool)
    first[1:] = ss[1:] != ss[:-1]
    prev = np.empty(k, np.int64)
    prev[order[1:][~first[1:]]] = idx[order[:-1][~first[1:]]]
    heads = order[first]
    table = np.frombuffer(table_bytes, ">i4", slots, F.INDEX_HEADER_SIZE)
    try:
        old = table[sl[heads]].astype(np.int64)
        for j in np.flatnonzero((old >= count) | (old < 0)).tolist():
            old[j] = resolve(int(old[j]))
        prev[heads] = old
        ent = np.empty(k, np.dtype([("hash", ">i4"), ("phys", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")]))
        ent["hash"] = h
        ent["phys"] = physs
        ent["tdiff"] = tdiff
        ent["prev"] = prev
        last = np.ones(k, bool)
        last[:-1] = first[1:]
        changed = ss[last]
        table[changed] = idx[order[last]]
        return ent.tobytes(), (changed * 4 + F.INDEX_HEADER_SIZE).tolist()
    finally:
        del table   # no view of the caller's table may outlive this call


def runs(positions: list[int], gap: int, table_end: int) -> list[tuple[int, int]]:
    """The byte ranges of a slot table to write back for the slots at file ``positions``:
    slots at most ``gap`` bytes apart in one range (a write costs more than copying that
    much), ascending; so many that they would about cover the table, as one span."""
    if len(positions) * gap >= table_end:
        return [(min(positions), max(positions) + 4)]
    positions = sorted(positions)
    out = []
    start = prev = positions[0]
    for sp in positions[1:]:
        if sp - prev > gap:
            out.append((start, prev + 4))
            start = sp
        prev = sp
    out.append((start, prev + 4))
    return out
