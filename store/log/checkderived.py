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

Beside live writers: a writer appends records to the log first, then their entries, so the
derived files never point past the log's end *as measured after reading them* (each check
of "past the end" takes that measure; ``check.py`` scans the log written meanwhile before
the entries no record claimed are judged). What one read can catch half written (an index
file between its slots and its header, a consume-queue file between two pages of an
append) is looked at again with writers held off (``Confirm``) before it is reported.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable, Protocol, TypeVar

from store.flock import list_dir
from store.layout import Layout
from store.log import format as F
from store.log import indexfence
from store.log.arrays import layouts
from store.log.consumequeue import ConsumeQueue, queue_ids
from store.log.index import KeyIndex
from store.log.queuerebuild import entries_array, entry_place
from store.log.recordscan import Window, queue_runs
from store.log.topics import TopicConfig


class Report(Protocol):
    """Where a problem goes: its file, byte offset and reason, and (``at``) the commit-log
    offset of the record it concerns when there is one (``check.py`` matches it with the
    known damage)."""

    def __call__(self, file: str, offset: int, reason: str, at: int | None = None) -> None: ...


T = TypeVar("T")


class Confirm(Protocol):
    """Runs a look at a suspected problem again with the store's writers held off (a brief
    hold of the write lock: no batch is half written while it runs) and returns its result."""

    def __call__(self, look: Callable[[], T]) -> T: ...


_RUN = 1024          # entries read at once per queue
_FEW = 3             # unclaimed entries named one by one; more are summed up per run


class _Cursor:
    def __init__(self, q: ConsumeQueue, topic: str, queue_id: int) -> None:
        self.q, self.topic, self.queue_id = q, topic, queue_id
        self.next = q.min_offset()      # the first entry not yet accounted for
        self.end = q.max_offset()
        self.buf_first = 0
        self.buf: list[tuple[int, int, int]] = []
        self.short: tuple[int, int] | None = None   # (queue offset, phys) claimed past the end

    def entry(self, k: int) -> tuple[int, int, int] | None:
        """Entry ``k`` as (phys, size, tags), from a run read at once: the per-entry path of
        :meth:`QueueCursors.claim`, so the run is turned into tuples in one call (a field of a
        numpy row read one at a time costs ten times what the whole comparison does)."""
        i = k - self.buf_first
        if not 0 <= i < len(self.buf):
            self.buf_first, self.buf = k, self.entries_array(k, _RUN).tolist()
            i = 0
            if not self.buf:
                return None
        return self.buf[i]

    def entries_array(self, k: int, n: int) -> Any:
        """Entries ``[k, k + n)`` as a numpy array (fewer at the queue's end)."""
        try:
            return entries_array(self.q, k, n)
        finally:
            self.q.close()   # a cursor per queue: keep no descriptors between runs

    def path_of(self, k: int) -> tuple[str, int]:
        path, off = entry_place(self.q, k)
        return str(path), off


class QueueCursors:
    def __init__(self, layout: Layout, segment_entries: int, log_min: Callable[[], int], report: Report,
                 confirm: Confirm, known: Callable[[int], bool] | None = None) -> None:
        self.layout = layout
        self.known = known          # whether a log offset is in damage ``store recover`` reported
        self.segment_entries = segment_entries
        self.log_min = log_min      # measured again when an entry is below no record seen
        self.min_seen = log_min()
        self.report = report
        self.confirm = confirm
        self.cursors: dict[tuple[str, int], _Cursor] = {}

    def _cursor(self, topic: str, queue_id: int) -> _Cursor:
        c = self.cursors.get((topic, queue_id))
        if c is None:
            q = ConsumeQueue(self.layout.queue_dir(topic, queue_id), self.segment_entries)
            c = self.cursors[(topic, queue_id)] = _Cursor(q, topic, queue_id)
        return c

    def claim_window(self, w: Window, topics: dict[str, TopicConfig], pending_from: int | None) -> None:
        """Every record of ``w`` that its queue must hold: compared with the queue's entries,
        a queue's run at a time (records past ``pending_from`` may lack their entries)."""
        np = layouts().np
        for topic, qid, run in queue_runs(w, topics):
            c = self._cursor(topic, qid)
            qoffs, phys, size, tags = w.queue_offset[run], w.phys[run], w.size[run], w.tag_code[run]
            k0, n = int(qoffs[0]), len(run)
            if k0 == c.next and k0 + n <= c.end and int(qoffs[-1]) == k0 + n - 1 and (
                    n == 1 or bool((np.diff(qoffs) == 1).all())):
                ent = c.entries_array(k0, n)
                if len(ent) == n:
                    # (the entries that match their records are all a claim would settle: only
                    # the others are claimed one by one, each naming what is wrong)
                    bad = np.flatnonzero((ent["phys"] != phys) | (ent["size"] != size) | (ent["tags"] != tags))
                    c.next = k0 + n
                    for i in bad.tolist():
                        self.claim(c, k0 + i, int(phys[i]), int(size[i]), int(tags[i]), False)
                    continue
            pend = [pending_from is not None and x >= pending_from for x in phys.tolist()]
            for a, b, s_, t_, pe in zip(qoffs.tolist(), phys.tolist(), size.tolist(), tags.tolist(), pend):
                self.claim(c, a, b, s_, t_, pe)

    def claim(self, c: _Cursor, k: int, rphys: int, rsize: int, rtag: int, pending: bool) -> None:
        """The record at ``rphys`` is entry ``k`` of ``c``'s queue (``pending``: it may not
        have its entry yet)."""
        if k >= c.end:
            if not pending and (c.short is None or k > c.short[0]):
                c.short = (k, rphys)
            self._unclaimed(c, c.next, c.end)
            c.next = max(c.next, c.end)
            return
        if k >= c.next:
            if k > c.next:
                self._unclaimed(c, c.next, k)
            c.next = k + 1
        e = c.entry(k)
        if e is None:
            return
        phys, size, tags = e
        if (phys, size) != (rphys, rsize):
            path, off = c.path_of(k)
            self.report(path, off, f"entry {k} points at commit-log offset {phys} (size {size}), but the record "
                                   f"of {c.topic}/{c.queue_id}@{k} is at {rphys} (size {rsize})", at=phys)
        elif tags != rtag:
            path, off = c.path_of(k)
            self.report(path, off + 12, f"entry {k} has tag code {tags}, but its record's is {rtag} "
                                        f"(a tag filter would pass it over; run mqctl store recover)")

    def _unclaimed(self, c: _Cursor, a: int, b: int) -> None:
        """Entries ``[a, b)`` of ``c`` that no valid record claims: each is reported unless
        its record went with retention; past a few, the rest of the run in one line."""
        named = 0
        for k in range(a, b):
            e = c.entry(k)
            if self._retired(c, k, e):
                continue   # its record was removed by retention
            path, off = c.path_of(k)
            if named == _FEW:
                self._unclaimed_rest(c, k, b, e)
                return
            named += 1
            self.report(path, off, f"entry {k} points at commit-log offset {e[0] if e else -1}, where no valid "
                                   f"record of {c.topic}/{c.queue_id}@{k} starts", at=e[0] if e else None)

    def _unclaimed_rest(self, c: _Cursor, k: int, b: int, e: tuple[int, int, int] | None) -> None:
        """Entries ``[k, b)`` in one line (``e``: entry ``k``): damage already reported by
        ``store recover`` when every one of them points into it (found by the first's offset),
        else a problem that ``store recover`` is to look at."""
        path, off = c.path_of(k)
        what = f"entries {k} to {b - 1} of {c.topic}/{c.queue_id} point where no valid record claims them either"
        rest = [c.entry(j) for j in range(k, b)]
        known = self.known
        if known is not None and e is not None and all(
                x is not None and known(x[0]) or self._retired(c, j, x) for j, x in zip(range(k, b), rest)):
            self.report(path, off, what, at=e[0])
        else:
            self.report(path, off, what + " (run mqctl store recover)")

    def _retired(self, c: _Cursor, k: int, e: tuple[int, int, int] | None) -> bool:
        """Entry ``k`` (``e``, None: unreadable) went with retention, or its record did: the
        log's start is measured again (retention may have moved it since the scan began)."""
        if e is None:
            return k < c.q.min_offset()
        if e[1] <= 0 or e[0] < 0:
            return False
        if e[0] >= self.min_seen:
            self.min_seen = self.log_min()
        return e[0] < self.min_seen

    def open_all(self, topics: dict[str, TopicConfig], topics_now: Callable[[], dict[str, TopicConfig]]) -> None:
        """A cursor for every queue on disk (each queue's end is measured now: the log written
        after this covers every entry they hold); torn entries, queues of no topic
        (``topics_now``: a topic made during the check is left to the next one)."""
        root = self.layout.consumequeue_dir
        names = sorted(list_dir(root))
        now: dict[str, TopicConfig] | None = None
        for topic in names:
            if topic not in topics:
                now = topics_now() if now is None else now
                if topic not in now:
                    self.report(str(root / topic), 0,
                                "consume queue of a topic that has no config (run mqctl store recover)")
                continue
            for qid in queue_ids(self.layout, topic):
                c = self._cursor(topic, qid)
                torn = self._torn(c) and self.confirm(partial(self._torn, c))
                if torn:
                    self.report(torn[0], torn[1], "partial (torn) consume-queue entry")

    @staticmethod
    def _torn(c: _Cursor) -> tuple[str, int] | None:
        """Where the last segment of ``c``'s queue ends inside an entry (an append is seen
        half done by a read beside it: confirmed with writers held off)."""
        segs = c.q.segments()
        if not segs:
            return None
        path = c.q.segment_path(segs[-1])
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return None
        return (str(path), size - size % F.CQ_ENTRY_SIZE) if size % F.CQ_ENTRY_SIZE else None

    def finish(self) -> int:
        """Entries past the last claim, queues that end before their records' claims (after
        :meth:`open_all` and the scan of the log it covers). Returns how many entries were read."""
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
    def __init__(self, idx: KeyIndex, log_end: Callable[[], int], report: Report, confirm: Confirm) -> None:
        self.idx, self.log_end, self.report, self.confirm = idx, log_end, report, confirm
        self.files = idx.files()
        self.fenced = indexfence.rebuilding(idx)
        if self.fenced:
            report(str(idx.dir), 0, "a key-index rebuild was interrupted: lookups search the log until it is "
                                    "done (run mqctl store recover)")
        self.trusted_from: int | None = None
        self.loaded: dict[int, Any] = {}     # file base -> its reachable (offsets, hashes) (None: untrusted)
        self.missing = 0
        self.example: int | None = None
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
        data, why = self._judge(base)
        if why is not None:   # (a writer's batch caught between its slots and its header?)
            data, why = self.confirm(lambda: self._judge(base))
        pairs = None
        if why is not None:
            self.report(str(path), 0, f"key index {why} (run mqctl store recover)")
        elif data is not None:   # (None: removed by retention since the check began)
            _bts, _ets, _bp, ephys, _slots, count = self.idx.header(base, data)
            # (the log's end measured after the header was read: a healthy index is behind it)
            if count > 1 and ephys >= self.log_end():
                self.report(str(path), 24, f"header says records up to offset {ephys} are indexed, past the end "
                                           f"of the commit log (new keys would not be)")
            else:
                pairs = self.idx.reachable(data)
                if self.trusted_from is None or base < self.trusted_from:
                    self.trusted_from = base if self.trusted_from is None else min(self.trusted_from, base)
        self.loaded[base] = pairs
        return pairs

    def _judge(self, base: int) -> tuple[bytes | None, str | None]:
        """One read of file ``base`` and why it cannot be trusted (None: it can); no bytes
        when the file is gone (retention)."""
        try:
            data = self.idx.snapshot(base)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return b"", f"unreadable: {exc.strerror or exc}"
        return data, self.idx.problem(base, thorough=True, data=data)

    def add_window(self, w: Window, pending_from: int | None) -> None:
        """Look up the index keys of the records of ``w`` (those below ``pending_from``)."""
        np = layouts().np
        if self.fenced or w.key_hash is None or not len(w.key_hash):
            return
        kh, kp = w.key_hash, w.key_phys
        if pending_from is not None:
            keep = kp < pending_from
            kh, kp = kh[keep], kp[keep]
        if not len(kp):
            return
        found = np.zeros(len(kp), bool)
        if self.files:
            files = np.array(self.files, np.int64)
            cover = np.searchsorted(files, kp, side="right") - 1
            for ci in np.unique(cover).tolist():
                if ci >= 1:
                    # A record whose keys a file's roll split: its first keys end the file
                    # before (loaded for the records before it, in this window or the last),
                    # the rest begin the file named by its offset.
                    split = np.flatnonzero((cover == ci) & (kp == self.files[ci]))
                    before = self._load(self.files[ci - 1]) if len(split) else None
                    if before is not None:
                        found[split] |= _found(np, kh[split], kp[split], *before)
                if ci >= 0:
                    pairs = self._load(self.files[ci])
                    if pairs is not None:
                        m = cover == ci
                        found[m] |= _found(np, kh[m], kp[m], *pairs)
            newest = self._load(self.files[-1])
            if newest is not None and not found.all():
                found[~found] |= _found(np, kh[~found], kp[~found], *newest)
        if self.trusted_from is None:
            return
        miss = np.flatnonzero(~found & (kp >= self.trusted_from))
        if len(miss):
            self.missing += len(miss)
            if self.example is None:
                self.example = int(kp[miss[0]])

    def finish(self) -> None:
        for base in self.files:   # files no record's range reached are checked too
            if base not in self.loaded and not self.fenced:
                self._load(base)
        if self.missing and self.example is not None:
            self.report(str(self.idx.dir), 0, f"{self.missing} key(s) of records are not found in the key index, "
                                              f"e.g. a key of the record at commit-log offset {self.example} "
                                              f"(msg query would miss them; run mqctl store recover)")


def _found(np: Any, kh: Any, kp: Any, phys: Any, hashes: Any) -> Any:
    """Which keys ``(kh, kp)`` (hashes and record offsets, offsets ascending, as a window's)
    are among an index file's reachable entries ``(phys, hashes)`` (offsets ascending): the
    file's entries in the keys' range of offsets are taken; usually they are the keys
    themselves, in order (one comparison), else each key is looked up among them."""
    lo = int(np.searchsorted(phys, kp[0], side="left"))
    hi = int(np.searchsorted(phys, kp[-1], side="right"))
    ph, hs = phys[lo:hi], hashes[lo:hi]
    if len(ph) == len(kp) and bool((ph == kp).all()) and bool((hs == kh).all()):
        return np.ones(len(kp), bool)
    found = np.zeros(len(kp), bool)
    if not len(ph):
        return found
    # (offset - first, hash) as one uint64: offsets within a window's range fit 32 bits
    have = np.sort(((ph - kp[0]).astype(np.uint64) << np.uint64(32)) | hs.astype(np.uint64))
    want = ((kp - kp[0]).astype(np.uint64) << np.uint64(32)) | kh.astype(np.uint64)
    i = np.searchsorted(have, want)
    i[i == len(have)] = 0
    return have[i] == want
