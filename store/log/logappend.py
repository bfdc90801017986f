"""A write batch's appends to the commit log (``commitlog.py``, whose rules they follow).

:class:`LogAppender` places records, rolling to a new segment with a BLANK trailer, and writes
each segment's bytes with one ``pwrite`` (``pwritev`` of big bodies) at the log's end; a
``--flush sync`` batch writes zeros ahead of its records (:data:`commitlog.PREALLOC_STEP`) so
its ``fdatasync`` overwrites. It is the commit log's owner's writer half: nothing else writes
a segment. Failpoint ``log-between-pieces``: a batch's write stopped between two of its write calls.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from store.errors import MessageTooLargeError, StoreError, io_error
from store.failpoints import failpoint
from store.fsutil import fsync_dir, pwrite_all
from store.log import filestat
from store.log import format as F
from store.log.commitlog import PREALLOC_STEP, CommitLog
from store.log.record import Buffer


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class _Chunk:
    """One batch's bytes bound for one commit-log file (its ``base``), and where they go in it."""

    base: int
    start: int                 # file position where this chunk's bytes go
    data: bytearray = field(default_factory=bytearray)
    parts: list[Buffer] | None = None  # instead of ``data``: buffers written as they are (pwritev)


class LogAppender:
    """Places records for one batch; call only while holding the store's write lock.

    :meth:`place` returns the physical offset the next record will have (rolling to a new
    segment when it does not fit), :meth:`add` buffers it, :meth:`flush` writes every buffered
    chunk with one ``pwrite`` (or one ``pwritev`` of its parts) per segment. On failure
    :meth:`undo` restores the previous end.
    """

    def __init__(self, log: CommitLog, end: int, checked: tuple[int, int] | None = None) -> None:
        """``checked``: the log's write descriptor as :meth:`CommitLog.end_as_written` found it
        linked for this batch, under the same hold of the write lock (no other writer can have
        removed its segment since): written through without a second ``fstat``."""
        self.log = log
        self._checked = checked
        self.start_end = end
        self.pos = end
        self.chunks: list[_Chunk] = []
        self._new_segments: list[int] = []
        self.last_fd = -1   # the descriptor :meth:`flush` wrote the last segment through
        self.prealloc = False   # a --flush sync batch: zeros are written ahead (_write_ahead)

    def _chunk(self) -> _Chunk:
        base = self.log.segment_of(self.pos)
        if not self.chunks or self.chunks[-1].base != base:
            self.chunks.append(_Chunk(base, self.pos - base))
        return self.chunks[-1]

    def place(self, size: int) -> int:
        seg = self.log.segment_size
        if size + F.END_FILE_MIN_BLANK > seg:
            raise MessageTooLargeError(
                f"record of {size} bytes does not fit in a {seg}-byte commit-log segment")
        base = self.log.segment_of(self.pos)
        left = base + seg - self.pos
        if size + F.END_FILE_MIN_BLANK > left:
            ch = self._chunk()
            trailer = F.BLANK_TRAILER.pack(left, F.BLANK_MAGIC)
            if ch.parts is not None:
                ch.parts.append(trailer)
            else:
                ch.data += trailer
            self.pos = base + seg
        return self.pos

    def start_chunk(self) -> bytearray:
        """The buffer the next record at :attr:`pos` goes into (for callers that inline
        :meth:`add`; they must advance :attr:`pos` themselves). A chunk already written as
        parts gets a new buffer as its next part."""
        ch = self._chunk()
        if ch.parts is not None:
            buf = bytearray()
            ch.parts.append(buf)
            return buf
        return ch.data

    def start_parts(self) -> list[Buffer]:
        """Like :meth:`start_chunk`, but a list of buffers written as they are, without
        being copied together first (big bodies). One chunk holds one or the other."""
        ch = self._chunk()
        if ch.parts is None:
            if ch.data:
                ch.parts = [bytes(ch.data)]
                ch.data = bytearray()
            else:
                ch.parts = []
        return ch.parts

    def add(self, record: bytes) -> None:
        ch = self._chunk()
        if ch.parts is not None:
            ch.parts.append(record)
        else:
            ch.data += record
        self.pos += len(record)

    def flush(self, sync: bool = False) -> None:
        new_file = False
        for ch in self.chunks:
            checked = self._checked
            try:
                if checked is not None and checked[0] == ch.base and self.log.write_fd_is(checked):
                    fd = checked[1]
                else:
                    fd = self.log.write_fd(ch.base)
            except StoreError:   # (a later segment of the batch: the earlier ones are written)
                self.undo()
                raise
            try:
                if ch.base != self.log.segment_of(self.start_end):
                    self._new_segments.append(ch.base)
                    new_file = True
                if new_file or ch.start == 0:
                    new_file = True
                if ch.parts is not None:
                    _pwritev_all(fd, ch.parts, ch.start)
                else:
                    _pwrite_pieces(fd, ch.data, ch.start)
                if self.prealloc and ch is self.chunks[-1]:
                    self._write_ahead(fd, checked, ch)
                if sync:
                    os.fdatasync(fd)
                self.last_fd = fd
            except OSError as exc:
                self.log.drop_write_fd()
                self.undo()
                raise io_error(exc, f"append to {self.log.segment_path(ch.base)}") from exc
        if new_file:
            # A new segment's name is made durable before any record in it is acknowledged
            # by anyone: a later ``--flush sync`` writer syncs only file data (and may not be
            # the process that created the file). One directory fsync per segment.
            try:
                fsync_dir(self.log.dir)
            except OSError as exc:
                self.undo()
                raise io_error(exc, f"sync directory {self.log.dir}") from exc

    def _write_ahead(self, fd: int, checked: tuple[int, int] | None, ch: _Chunk) -> None:
        """A ``--flush sync`` batch's last segment: when its records come within a header of
        the file's end, zeros are written after them up to the next :data:`PREALLOC_STEP`
        boundary (at most the segment's end), before the batch's ``fdatasync``, which makes
        them durable with it. That ``fdatasync`` grows the file (a journal commit) once a
        step; the next sends' overwrite blocks already there (none). Zeros after the records
        are no part of the log (:func:`written_length`)."""
        end = self.pos - ch.base
        have = self.log.checked_size if checked is not None and fd == checked[1] else filestat.untimed(fd)[1]
        seg = self.log.segment_size
        if end + F.END_FILE_MIN_BLANK <= have or have >= seg:
            return
        top = min(seg, ((end + F.END_FILE_MIN_BLANK) // PREALLOC_STEP + 1) * PREALLOC_STEP)
        start = max(have, end)
        try:
            pwrite_all(fd, bytes(top - start), start)
        except OSError:   # (a full disk or a size limit: the records are written, zeros are only for speed)
            return
        self.log.checked_size = top

    def undo(self) -> None:
        """Cut the log back to where this batch started (best effort: called on failure)."""
        first_base = self.log.segment_of(self.start_end)
        for base in self._new_segments:
            if base != first_base:
                try:
                    os.unlink(self.log.segment_path(base))
                except OSError:
                    pass
        path = self.log.segment_path(first_base)
        try:
            if path.exists():
                os.truncate(path, self.start_end - first_base)
        except OSError:
            pass


_IOV_MAX = 1024
# The most one write call carries. The kernel's copy into the page cache costs several times
# more when one call is tens of MB (it then takes large page-cache folios, which this VM's
# balloon may have handed back to the host and must fault in again: send_many of 64 KiB
# bodies, ~22 MB a call, spent 77-114 us of system CPU a message against 13-17 in 1 MiB
# calls, measured with tests/bench/bench_api_write.py); a few more calls cost nothing beside.
_WRITE_PIECE = 1 << 20


def _pwrite_pieces(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """``pwrite_all`` of ``data`` at ``pos``, ``_WRITE_PIECE`` at a time."""
    if len(data) <= _WRITE_PIECE:
        pwrite_all(fd, data, pos)
        return
    view = memoryview(data)
    for i in range(0, len(view), _WRITE_PIECE):
        if i:
            failpoint("log-between-pieces")
        pwrite_all(fd, view[i:i + _WRITE_PIECE], pos + i)


def _pwritev_all(fd: int, parts: list[Buffer], pos: int) -> None:
    """Write every buffer of ``parts`` at ``pos`` in order (pwritev of up to ``_IOV_MAX``
    buffers and about ``_WRITE_PIECE`` bytes at a time); a short write is finished with plain
    pwrites, so a full disk or a file-size limit surfaces as an OSError."""
    i, count = 0, len(parts)
    while i < count:
        j, want = i, 0
        while j < count and j - i < _IOV_MAX and want < _WRITE_PIECE:
            want += len(parts[j])
            j += 1
        if i:
            failpoint("log-between-pieces")
        group = parts[i:j]
        i = j
        n = os.pwritev(fd, group, pos)
        if n <= 0 and want:
            raise OSError(28, "short write")
        pos += n
        if n < want:
            pwrite_all(fd, memoryview(b"".join(group))[n:], pos)
            pos += want - n
