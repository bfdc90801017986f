"""What a pull of one queue's records reads of the commit log: :func:`fetch_span`.

A queue's records lie in log order, interleaved with other queues' records (a producer's round
robin stores one of each queue's in turn). A run of them is read with one ``pread`` of the span
of the log they lie in when that span is mostly theirs; else record by record. Reading the span
of a sparse run copies every other queue's records between them out of the log too: a member
holding one queue of 16 read 16 times its own records' bytes, into a fresh buffer of up to 4 MiB
a pull. With the C check loop (``own_reads``) a sparse run is never read so: the loop reads the
run's records itself, a record and those after it within 4 KiB of each other with one read of
at most 64 KiB (``nativecheck.c``'s ``read_gather``). Measured, groups of 8 and 16 members on 16
queues, 100-byte bodies, 2 CPU hogs on 2 cores: ~35 % less CPU a message. Those reads still copy
the other queues' records within 4 KiB: with 100-byte bodies on 16 queues, 16 times the run's
own bytes. So a long run of small records (256 or more, of at most 8 KiB on average) is read
through a mapping of the segment instead, only each record's own bytes copied out of it, and
unmapped before the loop returns (``nativecheck.c``'s ``map_run``, with the numbers that chose
those bounds: a mapping costs several reads to make and undo).
"""
from __future__ import annotations

from operator import itemgetter

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.commitlog import CommitLog

# Without the C loop, a sparse run's prefix within a pull's max_bytes is still read at once
# when the other records between its own average at most this many bytes each (copying a gap
# costs less than a read of its own, in the Python loop), and the prefix holds this many.
GAP_PER_READ = 12288
_MIN_DENSE_RUN = 16


def fetch_span(log: CommitLog, entries: list[tuple[int, int, int]],
               max_bytes: int, own_reads: bool = False) -> tuple[list[tuple[int, int, int]], int, bytes]:
    """The records of a run of one queue's consume-queue entries, with one ``pread``:
    ``(entries, lo, span)``, ``span`` starting at commit-log offset ``lo``.

    The run is cut before the first entry outside the first record's segment (a record never
    spans segments, and the caller's next pull starts there). When the records are too sparse
    for one read (the span over four times their own size and, unless ``own_reads``, over
    ``max_bytes``), the span is empty and the caller reads each record on its own. The span
    is ``bytes``, not a memoryview: slicing and comparing small pieces of bytes is cheaper."""
    # A queue's entries are in log order, so the first and last bound the run; a damaged
    # entry breaks that, and the caller reads a record outside the span on its own.
    lo, hi = entries[0][0], entries[-1][0] + entries[-1][1]
    seg_end = log.segment_of(lo) + log.segment_size
    if hi > seg_end or hi <= lo:
        cut = 1   # keep the prefix in the first record's segment
        while cut < len(entries) and lo <= entries[cut][0] and entries[cut][0] + entries[cut][1] <= seg_end:
            cut += 1
        entries = entries[:cut]
        hi = max(e[0] + e[1] for e in entries)
    own = sum(map(itemgetter(1), entries))
    if own_reads and hi - lo > own * 4:
        return entries, lo, b""   # the C loop reads the run's own records (module docstring)
    if hi - lo <= max_bytes or hi - lo <= own * 4:
        return entries, lo, log.read_bytes(lo, hi - lo)
    # Sparse: the prefix of the run within max_bytes of ``lo`` is still read at once when the
    # other records between its own are few bytes each (GAP_PER_READ); the next pull starts
    # after it. Otherwise each record is read on its own.
    end = lo + max_bytes
    fit = own = 0
    for phys, size, _tags in entries:
        if phys < lo or phys + size > end:
            break
        fit += 1
        own += size
    if fit >= _MIN_DENSE_RUN:
        hi = max(e[0] + e[1] for e in entries[:fit])
        if hi - lo - own <= fit * GAP_PER_READ:
            return entries[:fit], lo, log.read_bytes(lo, hi - lo)
    return entries, lo, b""
