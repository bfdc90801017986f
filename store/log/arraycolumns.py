"""Vectorised bulk read of one queue (numpy), for the Spark source.

:func:`store.log.columns.pull_columns` checks and cuts records one at a time in Python, about 2 µs
a record. A Spark ``count()`` over a Python data source has no column pruning, so that loop
is most of the read. Here a run of consume-queue entries and the records they point at are
decoded as arrays: the headers are copied out into one structured array, every field check of
:mod:`store.log.columns` is one comparison over the run, and bodies and properties are cut out by
Arrow (:func:`slices`). Only the record CRC stays one call per record.

A run stops at its segment's end and is kept within one ``max_bytes`` read (with many queues, a
queue's records are sparse in the log: the run gets shorter). The path is optimistic: a run
with anything unusual (entries out of log order, a record failing any check) returns ``None``,
and the caller reads that run with :func:`store.log.columns.pull_columns`, which names each damaged
record exactly. So the two paths serve the same records, and nothing damaged is ever served.

Checks per record (as ``columns.py``): TOTALSIZE equals the entry's size, magic V1, its own
commit-log offset, queue id and queue offset, a body length inside the record, the topic
field, the properties length reaching the end, and the ``__CRC32#`` property (ten ASCII digits
least significant first) equal to the CRC of the bytes before it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from store.log import format as F
from store.log.arrays import layouts
from store.log.record import crc32

if TYPE_CHECKING:
    from store.log.engine import Engine

_L = layouts()
_CQ, _HEAD, _CRC_HEAD, _POW10 = _L.cq, _L.head, _L.crc_head, _L.pow10
_DIGITS = np.arange(10, dtype=np.int64)
_MIN_SIZE = F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE


@dataclass
class VecColumns:
    """A run of one queue's messages as arrays (``offsets`` dense from the run's start)."""

    offsets: np.ndarray
    phys: np.ndarray
    born: np.ndarray
    stored: np.ndarray
    bodies: pa.BinaryArray
    props: pa.BinaryArray     # raw ``name 0x01 value 0x02`` bytes, the record CRC left out
    next_offset: int

    def __len__(self) -> int:
        return len(self.offsets)


def slices(span: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.BinaryArray:
    """``span[starts[i]:ends[i]]`` for every i (ascending, not overlapping), as one Arrow
    binary array. The ranges and the gaps between them are the elements of one array laid
    over the span without a copy; taking every other element copies just the ranges (C)."""
    n = len(starts)
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts
    bounds[1::2] = ends
    laid = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), span])
    return laid.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


def pull_vector(engine: Engine, topic: str, queue_id: int, offset: int, max_count: int,
                max_bytes: int) -> VecColumns | None:
    """Up to ``max_count`` messages of a queue from ``offset`` (fewer at a segment end), or
    None when this run needs the exact path (``bulk.pull_columns``); ``offset`` must be below
    the queue's max offset."""
    q = engine.queues.queue(topic, queue_id)
    raw = q.read_raw(offset, max_count)
    if not raw:
        return None
    ent = np.frombuffer(raw, _CQ)
    phys = ent["phys"].astype(np.int64)
    size = ent["size"].astype(np.int64)
    # as columns.py: stop after the record that reaches max_bytes
    n = min(len(ent), int(np.searchsorted(np.cumsum(size), max_bytes)) + 1)
    phys, size = phys[:n], size[:n]
    log = engine.commitlog
    lo = int(phys[0])
    seg_end = log.segment_of(lo) + log.segment_size
    if lo < 0:
        return None
    # a run stops where it leaves its segment (the next run starts in the next one)
    n = min(n, int(np.searchsorted(phys + size, seg_end, side="right")))
    if n == 0:
        return None
    phys, size = phys[:n], size[:n]
    if size.min() < _MIN_SIZE or phys.min() < 0 or (n > 1 and bool((np.diff(phys) < size[:-1]).any())):
        return None
    # One read covers the run, other queues' records between its own included: with many
    # queues, a shorter run keeps that read within max_bytes (at least one record).
    n = max(1, int(np.searchsorted(phys + size - lo, max_bytes, side="right")))
    phys, size = phys[:n], size[:n]
    hi = int(phys[-1] + size[-1])
    if hi > seg_end:
        return None
    span = log.read_bytes(lo, hi - lo)
    if len(span) != hi - lo:
        return None
    buf = np.frombuffer(span, np.uint8)
    abuf = pa.py_buffer(span)
    starts = phys - lo
    ends = starts + size
    heads = slices(abuf, starts, starts + F.RECORD_HEADER_SIZE)
    head = np.frombuffer(heads.buffers()[2], _HEAD, count=n)
    topic_field = np.frombuffer(bytes((len(topic.encode()),)) + topic.encode(), np.uint8)
    tf = len(topic_field)
    blen = head["blen"].astype(np.int64)
    t = starts + F.RECORD_HEADER_SIZE + blen
    p = t + tf + 2
    ok = ((head["total"] == size) & (head["magic"] == F.MAGIC_V1) & (head["phys"] == phys)
          & (head["qoff"] == offset + np.arange(n)) & (head["qid"] == queue_id)
          & (blen >= 0) & (p + F.CRC_PROPERTY_SIZE <= ends))
    if not ok.all():
        return None
    if not (buf[t[:, None] + np.arange(tf)] == topic_field).all():
        return None
    plen = (buf[p - 2].astype(np.int64) << 8) | buf[p - 1]
    crc_at = ends - F.CRC_PROPERTY_SIZE
    if (not (p + plen == ends).all() or not (buf[crc_at[:, None] + np.arange(9)] == _CRC_HEAD).all()
            or not (buf[ends - 1] == 2).all()):
        return None
    digits = buf[(crc_at + 9)[:, None] + _DIGITS].astype(np.int64) - 48
    if digits.min() < 0 or digits.max() > 9:
        return None
    want = digits @ _POW10
    got = np.array([crc32(span[a:b]) for a, b in zip(starts.tolist(), crc_at.tolist())], np.int64)
    if not ((got & F.CRC_MASK) == want).all():
        return None
    return VecColumns(
        offsets=offset + np.arange(n, dtype=np.int64), phys=phys,
        born=head["born"].astype(np.int64), stored=head["stored"].astype(np.int64),
        bodies=slices(abuf, starts + F.RECORD_HEADER_SIZE, t), props=slices(abuf, p, crc_at),
        next_offset=offset + n)
