"""``store check``'s comparison of the derived files with the log, streamed alongside the one
pass over the log (``check.py``), in bounded memory.

Consume queues: a cursor per queue reads its entries in runs as the records that claim them
come by (a queue's records are in log order, so its entries are read front to back once).
Each claimed entry must point at its record, with its size and tag code; an entry that no
record claims (the cursor passed it, or it is past the last claim) must point below the
log's first segment (removed by retention) or it is reported; a queue that ends before the
last offset its records claim lost entries.

Key index: each file is checked whole (``KeyIndex.problem``), then the ``(key hash, offset)``
pairs its slot chains reach are kept, sorted, while the log pass is in its range; a record's
keys must be among the pairs of the file covering it, or of the newest file (recovery adds
keys of older records there).
"""
from __future__ import annotations

import array
import bisect
import os
import sys
from typing import Any, Callable

from store.layout import Layout
from store.log import format as F
from store.log.consumequeue import ConsumeQueue
from store.log.index import KeyIndex, key_hash
from store.log.recordscan import Rec
from store.log.topics import TopicConfig

Report = Callable[[str, int, str], None]
_RUN = 1024          # entries read at once per queue
_FEW = 3             # unclaimed entries named one by one; more are summed up per run


class _Cursor:
    def __init__(self, q: ConsumeQueue, topic: str, queue_id: int) -> None:
        self.q, self.topic, self.queue_id = q, topic, queue_id
        self.next = q.min_offset()      # the first entry not yet accounted for
        self.end = q.max_offset()
        self.buf_first = 0
        self.buf = b""
        self.short: tuple[int, int] | None = None   # (queue offset, phys) claimed past the end

    def entry(self, k: int) -> tuple[int, int, int] | None:
        i = k - self.buf_first
        if not 0 <= i < len(self.buf) // F.CQ_ENTRY_SIZE:
            self.buf_first, self.buf = k, self.q.read_raw(k, _RUN)
            self.q.close()   # a cursor per queue: keep no descriptors between runs
            i = 0
            if not self.buf:
                return None
        phys, size, tags = F.CQ_ENTRY.unpack_from(self.buf, i * F.CQ_ENTRY_SIZE)
        return phys, size, tags

    def path_of(self, k: int) -> tuple[str, int]:
        byte = k * F.CQ_ENTRY_SIZE
        base = byte - byte % self.q.segment_bytes
        return str(self.q.segment_path(base)), byte - base


class QueueCursors:
    def __init__(self, layout: Layout, segment_entries: int, log_min: int, report: Report) -> None:
        self.layout = layout
        self.segment_entries = segment_entries
        self.log_min = log_min
        self.report = report
        self.cursors: dict[tuple[str, int], _Cursor] = {}

    def _cursor(self, topic: str, queue_id: int) -> _Cursor:
        c = self.cursors.get((topic, queue_id))
        if c is None:
            q = ConsumeQueue(self.layout.queue_dir(topic, queue_id), self.segment_entries)
            c = self.cursors[(topic, queue_id)] = _Cursor(q, topic, queue_id)
        return c

    def claim(self, r: Rec, pending: bool) -> None:
        """Record ``r`` is entry ``r.queue_offset`` of its queue (``pending``: it may not have
        its entry yet)."""
        c = self._cursor(r.topic, r.queue_id)
        k = r.queue_offset
        if k >= c.end:
            if not pending and (c.short is None or k > c.short[0]):
                c.short = (k, r.phys)
            self._unclaimed(c, c.next, c.end)
            c.next = max(c.next, c.end)
            return
        if k >= c.next:
            self._unclaimed(c, c.next, k)
            c.next = k + 1
        e = c.entry(k)
        if e is None:
            return
        phys, size, tags = e
        if (phys, size) != (r.phys, r.size):
            path, off = c.path_of(k)
            self.report(path, off, f"entry {k} points at commit-log offset {phys} (size {size}), but the record "
                                   f"of {r.topic}/{r.queue_id}@{k} is at {r.phys} (size {r.size})")
        elif tags != r.tag_code:
            path, off = c.path_of(k)
            self.report(path, off + 12, f"entry {k} has tag code {tags}, but its record's is {r.tag_code} "
                                        f"(a tag filter would pass it over; run mqctl store recover)")

    def _unclaimed(self, c: _Cursor, a: int, b: int) -> None:
        """Entries ``[a, b)`` of ``c`` that no valid record claims: each is reported unless
        its record went with retention; past a few, the rest of the run in one line."""
        named = 0
        for k in range(a, b):
            e = c.entry(k)
            if e is not None and 0 <= e[0] < self.log_min and e[1] > 0:
                continue   # its record was removed by retention
            path, off = c.path_of(k)
            if named == _FEW:
                self.report(path, off, f"entries {k} to {b - 1} of {c.topic}/{c.queue_id} point where no valid "
                                       f"record claims them either (run mqctl store recover)")
                return
            named += 1
            self.report(path, off, f"entry {k} points at commit-log offset {e[0] if e else -1}, where no valid "
                                   f"record of {c.topic}/{c.queue_id}@{k} starts")

    def finish(self, topics: dict[str, TopicConfig]) -> int:
        """Every queue on disk: entries past the last claim, torn entries, queues of no topic,
        queues that end before their records' claims. Returns how many entries were read."""
        root = self.layout.consumequeue_dir
        try:
            names = sorted(os.listdir(root))
        except FileNotFoundError:
            names = []
        for topic in names:
            if topic not in topics:
                self.report(str(root / topic), 0, "consume queue of a topic that is not in topics.json")
                continue
            try:
                qids = sorted(int(x) for x in os.listdir(root / topic) if x.isascii() and x.isdigit())
            except (FileNotFoundError, NotADirectoryError):
                continue
            for qid in qids:
                c = self._cursor(topic, qid)
                segs = c.q.segments()
                if segs:
                    size = os.stat(c.q.segment_path(segs[-1])).st_size
                    if size % F.CQ_ENTRY_SIZE:
                        self.report(str(c.q.segment_path(segs[-1])), size - size % F.CQ_ENTRY_SIZE,
                                    "partial (torn) consume-queue entry")
        total = 0
        for (topic, qid), c in sorted(self.cursors.items()):
            if c.next < c.end:
                self._unclaimed(c, c.next, c.end)
            if c.short is not None:
                qoff, phys = c.short
                self.report(str(self.layout.queue_dir(topic, qid)), c.end * F.CQ_ENTRY_SIZE,
                            f"consume queue {topic}/{qid} ends at offset {c.end}, but the record at commit-log "
                            f"offset {phys} is {topic}/{qid}@{qoff} (entries lost: run mqctl store recover)")
            total += c.end - c.q.min_offset()
            c.q.close()
        return total


class IndexCheck:
    def __init__(self, idx: KeyIndex, log_end: int, report: Report) -> None:
        self.idx, self.log_end, self.report = idx, log_end, report
        self.files = idx.files()
        self.fenced = idx.rebuilding()
        if self.fenced:
            report(str(idx.dir), 0, "a key-index rebuild was interrupted: lookups search the log until it is "
                                    "done (run mqctl store recover)")
        self.trusted_from: int | None = None
        self.loaded: dict[int, Any] = {}     # file base -> sorted pairs (None: untrusted)
        self.pending: list[tuple[int, str]] = []
        self.missing = 0
        self.example: tuple[str, int] | None = None
        if not self.fenced and self.files:
            self.newest = self._load(self.files[-1])
        elif not self.fenced:
            self.trusted_from = 0

    def _load(self, base: int) -> Any:
        if base in self.loaded:
            return self.loaded[base]
        for old in [b for b in self.loaded if b != base and b != self.files[-1]]:
            del self.loaded[old]
        path = self.idx.path(base)
        why = self.idx.problem(base, thorough=True)
        pairs = None
        if why is not None:
            self.report(str(path), 0, f"key index {why} (run mqctl store recover)")
        else:
            ephys = self.idx.header(base)[3]
            count = self.idx.header(base)[5]
            if count > 1 and ephys >= self.log_end:
                self.report(str(path), 24, f"header says records up to offset {ephys} are indexed, past the end "
                                           f"of the commit log (new keys would not be)")
            else:
                pairs = reachable_pairs(self.idx, base)
                if self.trusted_from is None or base < self.trusted_from:
                    self.trusted_from = base if self.trusted_from is None else min(self.trusted_from, base)
        self.loaded[base] = pairs
        return pairs

    def add(self, phys: int, keys: tuple[str, ...]) -> None:
        for k in keys:
            self.pending.append((phys, k))

    def flush(self) -> None:
        """Look up the keys of the window just scanned."""
        if self.fenced or not self.pending:
            self.pending.clear()
            return
        files = self.files
        for phys, k in self.pending:
            if not files:
                covering = None
            else:
                i = bisect.bisect_right(files, phys) - 1
                covering = files[i] if i >= 0 else None
            pair = (key_hash(k) << 32) ^ (phys & 0xFFFFFFFF)
            found = False
            for base in (covering, files[-1] if files else None):
                if base is None:
                    continue
                pairs = self._load(base)
                if pairs is not None and _has(pairs, pair):
                    found = True
                    break
            if not found and self.trusted_from is not None and phys >= self.trusted_from:
                self.missing += 1
                if self.example is None:
                    self.example = (k, phys)
        self.pending.clear()

    def finish(self) -> None:
        self.flush()
        for base in self.files:   # files no record's range reached are checked too
            if base not in self.loaded and not self.fenced:
                self._load(base)
        if self.missing and self.example is not None:
            key, phys = self.example
            self.report(str(self.idx.dir), 0, f"{self.missing} key(s) of records are not found in the key index, "
                                              f"e.g. {key!r} of the record at commit-log offset {phys} "
                                              f"(msg query would miss them; run mqctl store recover)")


def _has(pairs: "array.array[int]", pair: int) -> bool:
    i = bisect.bisect_left(pairs, pair)
    return i < len(pairs) and pairs[i] == pair


def reachable_pairs(idx: KeyIndex, base: int) -> "array.array[int]":
    """``(keyHash << 32) ^ (offset & 0xFFFFFFFF)`` of every entry of file ``base`` that a
    lookup of its key would reach (on the chain of its key's slot), sorted: 8 bytes each."""
    with open(idx.path(base), "rb") as fh:
        data = fh.read()
    count = F.INDEX_HEADER.unpack_from(data, 0)[5]
    table = array.array("i")
    table.frombytes(data[F.INDEX_HEADER_SIZE:idx.table_end])
    if sys.byteorder == "little":
        table.byteswap()
    ent = data[idx.table_end:idx.table_end + count * F.INDEX_ENTRY_SIZE]
    out = array.array("Q")
    slots = idx.slots
    unpack = F.INDEX_ENTRY.unpack_from
    for sl, head in enumerate(table):
        n, steps = head, 0
        while 0 < n < count and steps < count:
            h, phys, _td, prev = unpack(ent, n * F.INDEX_ENTRY_SIZE)
            if h % slots == sl:
                out.append(((h << 32) ^ (phys & 0xFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF)
            if prev >= n:
                break
            n, steps = prev, steps + 1
    return array.array("Q", sorted(out))
