"""The record and consume-queue layouts of ``format.py`` as numpy dtypes, for the paths that
handle a batch as arrays: bulk reads (``columns.py``), the write path's array framing
(``framing.py``) and the Spark reader (``arraycolumns.py``); and :func:`rows`, how such a path
takes a field of the same width from many records at once.

numpy is imported on the first call of :func:`layouts`, never on import of this module: its
import costs ~0.1 s, which a single ``mqctl send`` or a short consume must not pay.
"""
from __future__ import annotations

from dataclasses import dataclass

from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class Layouts:
    """numpy, and the layouts as its dtypes and constant arrays."""

    np: Any
    head: Any         # RECORD_HEADER field by field (88 bytes, packed, big-endian)
    write_head: Any   # the same bytes with SYSFLAG .. PREPARED TX OFFSET as one 48-byte block
    cq: Any           # a consume-queue entry: PHYS, SIZE, TAGS
    crc_head: Any     # "__CRC32#" 0x01: what precedes a record CRC property's ten digits
    pow10: Any        # 10**0 .. 10**9 (int64): the digits' weights, lowest first


_CACHE: list[Layouts] = []


def layouts() -> Layouts:
    if not _CACHE:
        import numpy as np
        fields = [("total", ">i4"), ("magic", ">u4"), ("bodycrc", ">u4"), ("qid", ">i4"), ("flag", ">i4"),
                  ("qoff", ">i8"), ("phys", ">i8")]
        head = np.dtype([*fields, ("sysflag", ">i4"), ("born", ">i8"), ("bornhost", ">u8"), ("stored", ">i8"),
                         ("storehost", ">u8"), ("reconsume", ">i4"), ("prepared", ">i8"), ("blen", ">i4")])
        write_head = np.dtype([*fields, ("const", "V48"), ("blen", ">i4")])
        cq = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
        assert head.itemsize == write_head.itemsize == F.RECORD_HEADER_SIZE
        assert cq.itemsize == F.CQ_ENTRY_SIZE
        crc_head = np.frombuffer(F.CRC_PROPERTY_HEAD, np.uint8)
        _CACHE.append(Layouts(np, head, write_head, cq, crc_head, 10 ** np.arange(10, dtype=np.int64)))
    return _CACHE[0]


def rows(span: bytes, at: Any, width: int) -> Any:
    """The ``width`` bytes of ``span`` from each offset in ``at`` (an int array, in range), as
    an ``(len(at), width)`` uint8 array. Taken through a view whose element ``i`` is the
    ``width`` bytes from byte ``i``: one copy per row, where indexing byte by byte
    (``at[:, None] + arange(width)``) makes an index and a copy per byte."""
    np = layouts().np
    if len(span) < width:   # (no window fits: the byte-by-byte way, which raises the same)
        return np.frombuffer(span, np.uint8)[at[:, None] + np.arange(width)]
    windows = np.ndarray((len(span) - width + 1,), np.dtype((np.void, width)), span, 0, (1,))
    return windows[at].view(np.uint8).reshape(len(at), width)
