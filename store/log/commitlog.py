"""The commit log: ordered segments of records, addressed by a global physical offset.

Segment ``B`` (file ``commitlog/<B as 20 digits>``) holds offsets ``[B, B + segment_size)``;
bases are multiples of the segment size, so ``offset - offset % segment_size`` locates a
record's segment without any table. A segment's file size is its write position (files are
not preallocated), which is how a writer that just took the store lock finds the end even
when other processes appended since it last looked. The record and BLANK trailer layouts are
in ``format.py``.

Writers append through :class:`LogAppender` while holding the store's write lock; readers use
:meth:`CommitLog.read` without any lock: they only ever read records that a consume queue or
the index already points at, which are complete before those entries are written.
Failpoint ``log-between-pieces``: a batch's write stopped between two of its write calls.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import MessageTooLargeError, StoreError, io_error
from store.failpoints import failpoint
from store.fsutil import SegmentListing, ensure_dir, fsync_dir, open_private, pwrite_all
from store.log import filestat
from store.log import format as F
from store.log.record import Buffer, Message, RecordError, decode, record_size_at

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterator


class CommitLog:
    def __init__(self, directory: Path, segment_size: int = F.COMMITLOG_SEGMENT_SIZE) -> None:
        self.dir = directory
        self.segment_size = segment_size
        self._read_fds: dict[int, tuple[int, int]] = {}   # base -> (fd, inode)
        # The segment the last batch was appended to, kept open for the next: (base, fd).
        self._write_fd: tuple[int, int] | None = None
        # The write descriptor :meth:`end_as_written` found linked: a batch takes it at once,
        # still under the lock it was checked in (``LogAppender``'s ``checked``).
        self.checked: tuple[int, int] | None = None
        # The segment synced last, kept open for the next fsync, (base, fd): fsyncs run in
        # any thread (a sender's group commit, a background flush), hence the lock. It is not
        # held through the fsync (the descriptor is taken out meanwhile): close() does not
        # wait for an async writer's background flush, which promised nothing. None after close().
        self._sync_fd: tuple[int, int] | None = None
        self._sync_lock = threading.Lock()
        self._closed = False
        self._listing = SegmentListing(directory)
        self._dir_s = str(directory)

    # -- segments ------------------------------------------------------------------------
    def segment_path(self, base: int) -> Path:
        return self.dir / F.segment_name(base)

    def segments(self) -> list[int]:
        """Bases of the segment files present, oldest first."""
        return self._listing.bases()

    def segment_of(self, offset: int) -> int:
        return offset - offset % self.segment_size

    def end(self) -> int:
        """The offset one past the last byte written (the next record's offset)."""
        segs = self.segments()
        if not segs:
            return 0
        last = segs[-1]
        return last + os.stat(f"{self._dir_s}/{last:020d}").st_size

    def end_as_written(self, expected: int) -> int:
        """:meth:`end`, for a writer holding the write lock that expects the log to end at
        ``expected`` (the checkpoint's written end): one ``fstat`` of the segment it keeps open
        for appends when that is the segment holding ``expected``, instead of a look at the
        directory and a ``stat``.

        Its size tells the truth whenever it is still linked (a segment recovery removes, or
        one removed and made anew, is unlinked under the descriptor): a writer begins the next
        segment only in a batch that first appends the BLANK trailer to this one
        (``LogAppender.flush`` writes a batch's segments in order), which fills it to
        ``segment_size``; so a writer that died after beginning the next segment left this one
        at a size that is not ``expected``, and the caller recovers. Any other case: :meth:`end`."""
        cached = self._write_fd
        self.checked = None
        if cached is not None and cached[0] == expected - expected % self.segment_size:
            try:
                links, size = filestat.links_size(cached[1])
            except OSError:
                return self.end()
            if links:
                self.checked = cached
                return cached[0] + size
        return self.end()

    def min_offset(self) -> int:
        segs = self.segments()
        return segs[0] if segs else 0

    def listing_stamp(self) -> tuple[int, int] | None:
        """The stamp of the last listing of the segments (:attr:`SegmentListing.stamp`)."""
        return self._listing.stamp

    # -- reading ---------------------------------------------------------------------------
    def _fd(self, base: int) -> int:
        """A cached read descriptor for segment ``base``, checked against the path on every
        use (one stat): a segment removed and written anew (recovery cutting a torn new
        segment, then the next writer) is read from its new file, not the old inode."""
        path = self.segment_path(base)
        ino = os.stat(path).st_ino          # FileNotFoundError: the caller's "missing"
        cached = self._read_fds.get(base)
        if cached is not None:
            if cached[1] == ino:
                return cached[0]
            os.close(self._read_fds.pop(base)[0])
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._read_fds[base] = (fd, os.fstat(fd).st_ino)
        return fd

    def read_bytes(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at the end of a segment)."""
        base = self.segment_of(offset)
        try:
            return os.pread(self._fd(base), size, offset - base)
        except FileNotFoundError:
            return b""

    def read(self, offset: int, size: int | None = None, verify: bool = True) -> Message:
        """The record at ``offset``; RecordError when it is missing, torn or damaged."""
        data = self.read_bytes(offset, size if size else F.MAX_MESSAGE_SIZE + 65536 + 512)
        if size is None and len(data) >= 4:
            total = int.from_bytes(data[:4], "big", signed=True)
            data = data[:max(total, 0)] if 0 < total <= len(data) else data
        msg = decode(data, 0, len(data), verify=verify)
        if msg.commitlog_offset != offset:
            raise RecordError(f"record claims offset {msg.commitlog_offset}, found at {offset}")
        return msg

    def scan(self, start: int, verify: bool = True) -> Iterator[tuple[int, Message | None, RecordError | None]]:
        """Walk records from ``start``: yields ``(offset, message, None)`` for each valid
        record and ends with ``(offset, None, error)`` at the first invalid one (if any).
        BLANK trailers move on to the next segment."""
        chunk = 4 * 1024 * 1024
        segs = self.segments()
        pos = start
        while segs and pos < segs[-1] + self.segment_size:
            base = self.segment_of(pos)
            if base not in segs:
                later = [s for s in segs if s > base]
                if not later:
                    return
                pos = later[0]
                continue
            path = self.segment_path(base)
            fsize = os.stat(path).st_size
            trailer = False
            with open(path, "rb") as fh:
                buf_start = pos - base
                fh.seek(buf_start)
                buf = fh.read(chunk)
                bpos = 0
                while True:
                    file_pos = buf_start + bpos
                    if file_pos >= fsize:
                        break
                    try:
                        total = record_size_at(buf, bpos, len(buf))
                    except RecordError as exc:
                        if exc.torn and buf_start + len(buf) < fsize:
                            # ran past our chunk, not the file: read on from here
                            buf_start = file_pos
                            fh.seek(buf_start)
                            buf = fh.read(max(chunk, F.MAX_MESSAGE_SIZE + 65536 + 1024))
                            bpos = 0
                            continue
                        yield base + file_pos, None, exc
                        return
                    if total == 0:  # BLANK trailer: the rest of this segment is unused
                        trailer = True
                        break
                    try:
                        msg = decode(buf, bpos, len(buf), verify=verify)
                        if msg.commitlog_offset != base + file_pos:
                            raise RecordError(
                                f"record claims offset {msg.commitlog_offset}, found at {base + file_pos}")
                    except RecordError as exc:
                        yield base + file_pos, None, exc
                        return
                    yield base + file_pos, msg, None
                    bpos += total
            if base == segs[-1]:
                return
            if not trailer:
                # Every segment but the last ends with a BLANK trailer (``place`` keeps room
                # for one). Without it, the end of this segment was lost (a power cut before
                # its data was synced) while a later segment survived: a gap, never skipped
                # silently, or the consume queues would point past it into nothing.
                yield base + max(fsize, pos - base), None, RecordError(
                    f"segment {F.segment_name(base)} ends at byte {fsize} without its end-of-segment "
                    f"trailer (its tail was lost)", torn=True)
                return
            pos = base + self.segment_size

    def truncate_to(self, end: int) -> int:
        """Cut the log at ``end`` (recovery, write lock held): later segments go, the segment
        holding it is shortened. Returns the bytes cut."""
        cut = 0
        last = self.segment_of(end)
        for base in self.segments():
            path = self.segment_path(base)
            size = os.stat(path).st_size
            if base > last:
                cut += size
                path.unlink()
            elif base == last and size > end - base:
                cut += size - (end - base)
                os.truncate(path, end - base)
        self._drop_fds(closing=False)   # the handle stays open: its next fsync keeps a descriptor again
        return cut

    def close(self) -> None:
        self._drop_fds(closing=True)

    def _drop_fds(self, closing: bool) -> None:
        for fd, _ino in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        self.drop_write_fd()
        with self._sync_lock:
            self._drop_sync_fd()
            if closing:
                self._closed = True   # a background flush after this keeps nothing open

    def datasync(self, base: int) -> None:
        """``fdatasync`` segment ``base`` (any thread); a segment removed meanwhile (retention)
        needs nothing. Its descriptor is kept for the next call and checked on each: a
        segment removed and made anew (recovery cut a torn one) is opened anew.

        The kept descriptor is taken out for the fsync and put back after it (unless the log
        was closed meanwhile, or another thread kept one): a ``close()`` during a background
        flush's fsync returns at once, and the flush closes its descriptor itself."""
        with self._sync_lock:
            cached, self._sync_fd = self._sync_fd, None
        if cached is not None and (cached[0] != base or not os.fstat(cached[1]).st_nlink):
            os.close(cached[1])
            cached = None
        if cached is None:
            try:
                cached = (base, os.open(f"{self._dir_s}/{base:020d}", os.O_RDONLY | os.O_CLOEXEC))
            except FileNotFoundError:
                return
        try:
            os.fdatasync(cached[1])
        finally:
            with self._sync_lock:
                keep = not self._closed and self._sync_fd is None
                if keep:
                    self._sync_fd = cached
            if not keep:
                os.close(cached[1])

    def _drop_sync_fd(self) -> None:
        cached, self._sync_fd = self._sync_fd, None
        if cached is not None:
            os.close(cached[1])

    # -- writing (store write lock held) -----------------------------------------------------
    def write_fd(self, base: int) -> int:
        """A descriptor to append to segment ``base`` (created if missing), kept open between
        batches. It is checked on every use: a segment recovery removed (a torn new one) and a
        writer made anew has a link count of 0 under the old descriptor, which is then closed.
        (Recovery cuts a segment back in place: the descriptor stays right.)"""
        cached = self._write_fd
        if cached is not None:
            try:
                if cached[0] == base and os.fstat(cached[1]).st_nlink:
                    return cached[1]
            except OSError as exc:
                self.drop_write_fd()
                raise io_error(exc, f"open {self.segment_path(base)}") from exc
            self.drop_write_fd()
        path = self.segment_path(base)
        ensure_dir(self.dir)
        try:
            fd = open_private(path, os.O_WRONLY | os.O_CREAT)
        except OSError as exc:
            raise io_error(exc, f"open {path}") from exc
        self._write_fd = (base, fd)
        return fd

    def write_fd_is(self, cached: tuple[int, int]) -> bool:
        """Whether ``cached`` is still the descriptor kept for appends (not closed since)."""
        return self._write_fd is cached

    def drop_write_fd(self) -> None:
        cached, self._write_fd = self._write_fd, None
        if cached is not None:
            os.close(cached[1])


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
