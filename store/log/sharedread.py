"""Shared reads: runs of several queues of one topic served by one ``pread`` of the log.

A topic's queues are interleaved in the commit log, so a member that holds several of them
and reads each on its own reads every window of the log once per queue, or each record with
a ``pread`` of its own (the records of one queue of eight are too sparse for one read). A
shared read takes one window of the log (the lowest run's segment, at most 8 MiB, ending at
the last indexed record) and cuts every run out of it. Its records are checked as
:func:`store.log.columns.pull_columns` checks them: by the exact loop
(:func:`store.log.columns.check_run`, in C where it was built), which names each damaged
record, or, without the C loop, as arrays (numpy) for a backlog that pays for numpy's import.
"""
from __future__ import annotations

import sys

from store.log import columns as C
from store.log import consumequeue as CQ
from store.log import format as F
from store.log.columns import Columns, check_run
from store.log.queueends import reader_end

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.consumequeue import ConsumeQueue
    from store.log.engine import Engine

# At most this much of the log at once (a window that stays in the CPU's caches while its
# records are checked and cut out).
_WINDOW = 8 * 1024 * 1024
# The same for the exact loop, which goes over its window record by record, a CRC, a header
# and a body's write each, as the window was just copied in: one that fits in a core's own
# cache (L2) is read back from there. Measured, 8 queues of 4 KiB records, 100 MB: 2 MiB
# windows 49-56 ms, 8 MiB windows 66-76 ms (1 and 4 MiB in between); 100-byte records: the same.
_LOOP_WINDOW = 2 * 1024 * 1024
_SPARSE_MIN = 1024 * 1024   # a window over 4x its runs' own bytes is still read at once below this
# Records bigger than this on average are read one pread each without numpy (measured, one
# consumer of 8 queues, 100 MB: 64 KiB records 38 ms by their own reads, 46 ms by windows;
# 4 KiB records 106 -> 94 ms by windows).
_LOOP_MAX_AVG = 16384


def pull_many(engine: Engine, topic: str, requests: list[tuple[int, int, int, int]],
              full: bool = False) -> dict[int, Columns]:
    """Runs of several queues of ``topic`` (``(queue_id, offset, max_count, max_bytes)``
    each), read together with one ``pread`` per window; each run stops after the record that
    reaches its ``max_bytes``.

    Returns the runs served so, by queue id (each may be shorter than asked); a queue not in
    the answer is read on its own (:func:`~store.log.columns.pull_columns`). ``full``: every
    column, as :func:`~store.log.columns.pull_records`, else bodies only, as memoryviews
    into the read when they are big (each keeps the whole read alive). With the C check loop
    (``columns.NATIVE``) the exact loop checks every read. Without it numpy checks the records
    when it is loaded or at least ``VECTOR_MIN_BACKLOG`` messages are left in the queues asked
    for; below that the exact loop checks bodies-only reads, numpy is not imported, and a full
    read is not served (each queue's own pull is cheaper there)."""
    queues = [(engine.queues.queue(topic, r[0]), *r) for r in requests]
    # (this handle's first look at a queue sees to its end: its file cut short?)
    ends = [q.max_offset() if q.end_checked else reader_end(engine, topic, qid, q) for q, qid, *_r in queues]
    if C.NATIVE:
        return _pull_many_loop(engine, topic, queues, ends, full)
    if "numpy" not in sys.modules and sum(e - r[2] for e, r in zip(ends, queues)) < C.VECTOR_MIN_BACKLOG:
        # Without numpy only bodies (a raw consumer's, written out from the window) are read
        # together: a full read copies every body out of its window, and a fresh window's
        # pages cost more than the preads they save (Python consumer, 100 MB of 4 KiB
        # records: 176 ms against 162 by each queue's own reads).
        return {} if full else _pull_many_loop(engine, topic, queues, ends, False)
    return _pull_many_arrays(engine, topic, queues, ends, full)


def _pull_many_loop(engine: Engine, topic: str, queues: list[tuple[ConsumeQueue, int, int, int, int]],
                    ends: list[int], full: bool) -> dict[int, Columns]:
    """:func:`pull_many` without numpy: the window read once, each run checked by the loop;
    bodies only, big ones handed out as views into it, or (``full``, with the C loop) every
    column."""
    runs = []
    for (q, queue_id, offset, max_count, max_bytes), max_off in zip(queues, ends):
        count = min(max_count, max_off - offset)
        if count <= 0 or max_bytes <= 0:
            continue
        raw = q.read_raw(offset, count)
        first = CQ.take_entries(raw[:F.CQ_ENTRY_SIZE], 0, CQ.NO_LIMIT, CQ.NO_LIMIT, False)[0]
        if first:
            runs.append((q, queue_id, offset, max_off, max_bytes, raw, first[0][0]))
    if len(runs) < 2:
        return {}
    log = engine.commitlog
    lo = min(r[6] for r in runs)
    limit = min(log.segment_of(lo) + log.segment_size, lo + _LOOP_WINDOW)
    kept = []
    own = records = 0
    hi = lo
    for q, queue_id, offset, max_off, max_bytes, raw, _first in runs:
        # the prefix in the window and in log order, cut after the record reaching max_bytes
        run, end, taken = CQ.take_entries(raw, lo, limit, max_bytes, True)
        if run:
            kept.append((q, queue_id, offset, max_off, max_bytes, run))
            own += taken
            records += len(run)
            hi = max(hi, end)
    if len(kept) < 2 or (hi - lo > 4 * own and hi - lo > _SPARSE_MIN) or own > records * _LOOP_MAX_AVG:
        # the runs are not where one read serves them, or their records are so big that a
        # pread each costs less than a window's fresh pages: each is read on its own
        return {}
    span = log.read_bytes(lo, hi - lo)
    if len(span) != hi - lo:
        return {}
    out: dict[int, Columns] = {}
    for q, queue_id, offset, max_off, max_bytes, entries in kept:
        col = Columns([], [], [], [], [], [], offset, max_off)
        check_run(log, q, topic, queue_id, offset, entries, lo, span, max_bytes, col, not full, full, not full)
        out[queue_id] = col
    return out


def _pull_many_arrays(engine: Engine, topic: str, queues: list[tuple[ConsumeQueue, int, int, int, int]],
                      ends: list[int], full: bool) -> dict[int, Columns]:
    """:func:`pull_many` with numpy: every run's records checked as arrays at once; empty
    when anything is unusual (each run on its own then names what)."""
    from store.log.arrays import layouts  # (numpy's paths only: a short consume never loads it)
    np = layouts().np
    runs = []
    for (q, queue_id, offset, max_count, max_bytes), max_off in zip(queues, ends):
        count = min(max_count, max_off - offset)
        screened = C.screen_run(q, offset, count, max_bytes) if count > 0 and max_bytes > 0 else None
        if screened is not None:
            runs.append((queue_id, offset, max_off, *screened))
    if len(runs) < 2:
        return {}
    log = engine.commitlog
    lo = min(int(r[3][0]) for r in runs)
    limit = min(log.segment_of(lo) + log.segment_size, lo + _WINDOW)
    kept = []
    for queue_id, offset, max_off, phys, size in runs:
        k = int(np.searchsorted(phys + size, limit, side="right"))
        if k:
            kept.append((queue_id, offset, max_off, phys[:k], size[:k]))
    own = sum(int(r[4].sum()) for r in kept)
    hi = max(int(r[3][-1] + r[4][-1]) for r in kept) if kept else lo
    if len(kept) < 2 or (hi - lo > 4 * own and hi - lo > _SPARSE_MIN):
        return {}   # the runs are not where one read serves them: each is read on its own
    span = log.read_bytes(lo, hi - lo)
    if len(span) != hi - lo:
        return {}
    phys = np.concatenate([r[3] for r in kept])
    size = np.concatenate([r[4] for r in kept])
    counts = [len(r[3]) for r in kept]
    qoffs = np.concatenate([r[1] + np.arange(c) for r, c in zip(kept, counts)])
    qids = np.repeat(np.array([r[0] for r in kept], np.int64), counts)
    starts = phys - lo
    checked = C.check_span(span, starts, starts + size, size, phys, qoffs, qids, topic)
    if checked is None:
        return {}
    out: dict[int, Columns] = {}
    a = 0
    for (queue_id, offset, max_off, _p, _s), c in zip(kept, counts):
        col = Columns([], [], [], [], [], [], offset, max_off)
        C.cut_span(span, starts, phys, checked, a, a + c, offset, col, full, not full)
        out[queue_id] = col
        a += c
    return out
