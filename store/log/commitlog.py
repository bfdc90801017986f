"""The commit log: ordered segments of records, addressed by a global physical offset.

Segment ``B`` (file ``commitlog/<B as 20 digits>``) holds offsets ``[B, B + segment_size)``;
bases are multiples of the segment size, so ``offset - offset % segment_size`` locates a
record's segment without any table. The record and BLANK trailer layouts are in ``format.py``.

Where a segment's records end (:func:`written_length`, the one definition every reader of the
log's end or a segment's length goes through): one past its last non-zero byte. Every record
ends with its CRC property, whose last byte is 0x02, and a BLANK trailer with its magic
(format.py), so zeros after the last record are never part of one. A ``--flush sync`` writer
writes zeros ahead of its records (:data:`PREALLOC_STEP` at a time, ``logappend.py``)
so that each send's ``fdatasync`` overwrites blocks already allocated and sized instead of
growing the file, which makes the filesystem commit its journal in every ``fdatasync`` (an
append's ``fdatasync`` was measured at 0.64x the rate of an overwrite's on this VM's ext4;
RocketMQ preallocates its mapped files for the same reason, and finds their end by a scan
at recovery). A file's size is therefore only an upper bound of its records' end; a file
written without preallocation (every store before) ends with its last record, so its length
is its size, as before. No flag in ``store.json`` keeps older versions out: they take a zero
tail for the zero-filled tail of a torn write; their writers' recovery cuts it and appends
where the records end (nothing is lost), their ``store check`` reports it as damage until then.
A sealed segment ends with its BLANK trailer: what its file holds past that (non-zero bytes, or
anything past the segment's size) is no record's and never read (:func:`past_trailer`);
``store check`` warns of it, ``store recover`` cuts it (:meth:`CommitLog.cut_past_trailer`).

Writers append through ``logappend.py``'s ``LogAppender`` while holding the store's write lock; readers use
:meth:`CommitLog.read` without any lock: they only ever read records that a consume queue or
the index already points at, which are complete before those entries are written.
Retention deletes the oldest segments only through :meth:`CommitLog.remove_segments`, which
syncs the directory after (a failed sync is warned about: a power cut may bring them back).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from store.errors import io_error, naming
from store.fsutil import SegmentListing, ensure_dir, open_private, unlink_all
from store.layout import segment_file, segment_file_s
from store.log import filestat
from store.log import format as F
from store.log.record import Message, RecordError, decode, record_size_at

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable, Iterator


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
        self.checked_size = 0   # the file size of ``checked`` as found (zeros written ahead included)
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
        return segment_file(self.dir, base)

    def segments(self) -> list[int]:
        """Bases of the segment files present, oldest first."""
        return self._listing.bases()

    def segment_of(self, offset: int) -> int:
        return offset - offset % self.segment_size

    def end(self) -> int:
        """The offset one past the last record's last byte (the next record's offset)."""
        segs = self.segments()
        if not segs:
            return 0
        last = segs[-1]
        return last + self.length(last)

    def length(self, base: int) -> int:
        """How many bytes of segment ``base`` its records fill (:func:`written_length`);
        FileNotFoundError when it is missing."""
        path = segment_file_s(self._dir_s, base)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return written_length(fd, path)
        finally:
            os.close(fd)

    def end_as_written(self, expected: int) -> int:
        """:meth:`end`, for a writer holding the write lock that expects the log to end at
        ``expected`` (the checkpoint's written end): one look (untimed) at the segment it keeps open
        for appends when that is the segment holding ``expected``, instead of a look at the
        directory and a ``stat``.

        Its size tells the truth whenever it is still linked (a segment recovery removes, or
        one removed and made anew, is unlinked under the descriptor): a writer begins the next
        segment only in a batch that first appends the BLANK trailer to this one
        (``LogAppender.flush`` writes a batch's segments in order), which fills it to
        ``segment_size``; so a writer that died after beginning the next segment left this one
        at a size that is not ``expected``, and the caller recovers. Any other case: :meth:`end`.

        A segment longer than ``expected`` ends there when it holds zeros there (written ahead
        by a ``--flush sync`` writer): a write lands in order from its first byte, so a writer
        killed in the middle of one left the record's header, and a write past ``expected``
        by anyone else moved the checkpoint past it. (The look asks for no timestamp:
        ``filestat.untimed``.)"""
        cached = self._write_fd
        self.checked = None
        if cached is not None and cached[0] == expected - expected % self.segment_size:
            try:
                links, size, _ino = filestat.untimed(cached[1])
                at = expected - cached[0]
                if links and size > at and os.pread(cached[1], 8, at) != _ZERO_HEADER:
                    return self.end()
            except OSError:
                return self.end()
            if links:
                self.checked = cached
                self.checked_size = size
                return expected if size > at else cached[0] + size
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
        use (one stat, untimed): a segment removed and written anew (recovery cutting a torn new
        segment, then the next writer) is read from its new file, not the old inode."""
        path = self.segment_path(base)
        ino = filestat.untimed(path)[2]     # FileNotFoundError: the caller's "missing"
        cached = self._read_fds.get(base)
        if cached is not None:
            if cached[1] == ino:
                return cached[0]
            os.close(self._read_fds.pop(base)[0])
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._read_fds[base] = (fd, filestat.untimed(fd)[2])
        return fd

    def read_bytes(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at the end of a segment)."""
        base = self.segment_of(offset)
        try:
            fd = self._fd(base)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(fd, size, offset - base)
        except OSError as exc:   # (a read's error names no file, "Is a directory": say which)
            raise naming(exc, self.segment_path(base)) from exc

    def read(self, offset: int, size: int | None = None, verify: bool = True) -> Message:
        """The record at ``offset``; RecordError when it is missing, torn or damaged."""
        data = self.read_bytes(offset, size if size else F.MAX_RECORD_SIZE)
        if size is None and len(data) >= 4:
            total = int.from_bytes(data[:4], "big", signed=True)
            data = data[:max(total, 0)] if 0 < total <= len(data) else data
        msg = decode(data, 0, len(data), verify=verify)
        if msg.commitlog_offset != offset:
            raise RecordError(f"record claims offset {msg.commitlog_offset}, found at {offset}")
        return msg

    def find_record_after(self, after: int, window: int = 1 << 20) -> int | None:
        """The offset of the first valid record strictly after ``after`` (recovery: where a
        damaged range ends), or None: found by its magic, then decoded whole. Segments are
        read a ``window`` at a time (one that reaches past it is read alone), not whole."""
        magic = F.MAGIC_V1.to_bytes(4, "big")
        for base in self.segments():
            if base + self.segment_size <= after:
                continue
            pos = base + max(after + 1 - base, 0)   # (candidates at ``pos`` and after)
            while True:
                chunk = self.read_bytes(pos, window)
                i = chunk.find(magic, 4)
                if i < 0:
                    if len(chunk) < window:
                        break   # (the segment's end)
                    pos += len(chunk) - 7   # (a record whose size and magic straddle the window's end: next)
                    continue
                if self._valid_at(pos + i - 4, chunk, i - 4):
                    return pos + i - 4
                pos += i - 3
        return None

    def _valid_at(self, offset: int, chunk: bytes, i: int) -> bool:
        """Whether a valid record of this offset starts at ``chunk[i:]`` (read at ``offset``)."""
        total = int.from_bytes(chunk[i:i + 4], "big", signed=True)
        if i + total > len(chunk):
            if total > self.segment_size:
                return False
            chunk, i = self.read_bytes(offset, total), 0
        try:
            return decode(chunk, i, len(chunk)).commitlog_offset == offset
        except RecordError:
            return False

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
            trailer = False
            with open(path, "rb") as fh:
                fsize = written_length(fh.fileno(), path)
                buf_start = pos - base
                fh.seek(buf_start)
                buf = fh.read(max(0, min(chunk, fsize - buf_start)))   # (not the zeros past ``fsize``)
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
                            buf = fh.read(max(0, min(max(chunk, F.MAX_RECORD_SIZE), fsize - buf_start)))
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
        holding it is shortened (zeros written ahead past ``end`` go too). Returns the bytes of
        records cut (zeros are none)."""
        cut = 0
        last = self.segment_of(end)
        for base in self.segments():
            path = self.segment_path(base)
            if base > last:
                cut += self.length(base)
                path.unlink()
            elif base == last and filestat.untimed(path)[1] > end - base:
                cut += max(0, self.length(base) - (end - base))
                os.truncate(path, end - base)
        self._drop_fds(closing=False)   # the handle stays open: its next fsync keeps a descriptor again
        return cut

    def remove_segments(self, bases: list[int], warn: Callable[[str], None],
                        each: Callable[[str], None] | None = None) -> None:
        """Delete segments ``bases``, in order (retention: the oldest, never the last), and
        sync the directory (``fsutil.unlink_all``: ``each(name)`` after each file, a failed
        sync warned about); the descriptors kept of any segment are dropped."""
        try:
            unlink_all(self.dir, [F.segment_name(b) for b in bases], warn, each)
        finally:
            self._drop_fds(closing=False)

    def cut_past_trailer(self, base: int, trailer_end: int) -> int:
        """Cut what segment ``base`` holds past its BLANK trailer, which ends at byte
        ``trailer_end`` (:func:`past_trailer`; ``store recover``, write lock held): never the
        last segment, never a record (the trailer is read again first, and must say the
        segment's size). Returns the bytes cut."""
        segs = self.segments()
        if base not in segs[:-1] or trailer_end < F.END_FILE_MIN_BLANK:
            return 0
        path = self.segment_path(base)
        try:
            with open(path, "r+b") as fh:
                fd = fh.fileno()
                head = os.pread(fd, F.END_FILE_MIN_BLANK, trailer_end - F.END_FILE_MIN_BLANK)
                left, magic = F.BLANK_TRAILER.unpack(head) if len(head) == F.END_FILE_MIN_BLANK else (0, 0)
                size = os.fstat(fd).st_size
                if magic != F.BLANK_MAGIC or trailer_end - F.END_FILE_MIN_BLANK + left != self.segment_size \
                        or size <= trailer_end:
                    return 0
                os.ftruncate(fd, trailer_end)
                os.fsync(fd)
        except OSError as exc:
            raise io_error(exc, f"cut {path}") from exc
        finally:
            self._drop_fds(closing=False)
        return size - trailer_end

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
        if cached is not None and (cached[0] != base or not filestat.untimed(cached[1])[0]):
            os.close(cached[1])
            cached = None
        if cached is None:
            try:
                cached = (base, os.open(segment_file_s(self._dir_s, base), os.O_RDONLY | os.O_CLOEXEC))
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
                if cached[0] == base and filestat.untimed(cached[1])[0]:
                    return cached[1]
            except OSError as exc:
                self.drop_write_fd()
                raise io_error(exc, f"open {self.segment_path(base)}") from exc
            self.drop_write_fd()
        path = self.segment_path(base)
        ensure_dir(self.dir)
        try:
            # (read-write: end_as_written reads the header at the checkpoint's end through it)
            fd = open_private(path, os.O_RDWR | os.O_CREAT)
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


# How far ahead of its records a ``--flush sync`` writer writes zeros (LogAppender._write_ahead).
PREALLOC_STEP = 1 << 20
_ZERO_HEADER = bytes(8)
_TAIL_READ = 256 * 1024
_ZERO_PIECE = 4096
_ZEROS = bytes(_TAIL_READ)   # (calloc'd: pages of zeros the kernel maps on first touch)


def past_trailer(fd: int, trailer_end: int, segment_size: int, written: int) -> int:
    """Bytes of a sealed segment (open as ``fd``; ``written``: its :func:`written_length`)
    past its BLANK trailer, which ends at byte ``trailer_end``: no record's (no reader reads
    past a trailer, nor past a segment's size). Up to its last non-zero byte, or to the file's
    end when the file outgrows the segment's size (the zeros a sync writer wrote ahead never
    do: within it they are nothing)."""
    size = filestat.untimed(fd)[1]
    return max(0, (size if size > segment_size else written) - trailer_end)


def written_length(fd: int, path: str | Path) -> int:
    """Where the records of the segment open as ``fd`` (the file ``path``) end: one past its
    last non-zero byte (the module's docstring says why that is the rule). A file that ends
    with a record (every file not written ahead) costs a look at its size and one ``pread`` of
    a byte; the zeros a sync writer wrote ahead, at most :data:`PREALLOC_STEP`, are read back
    to the records. An error reading it names ``path`` (a segment that is a directory)."""
    try:
        return _written_length(fd)
    except OSError as exc:   # (a read's error names no file: say which)
        raise naming(exc, path) from exc


def _written_length(fd: int) -> int:
    size = filestat.untimed(fd)[1]
    if size <= 0:
        return 0
    if os.pread(fd, 1, size - 1) not in (b"\0", b""):
        return size
    end = size
    while end > 0:
        n = end % _TAIL_READ or _TAIL_READ
        buf = os.pread(fd, n, end - n)   # (shorter when the file was cut meanwhile)
        # zeros told by comparing (a memcmp), 4 KiB at a time from the block's end; rstrip
        # tests a byte at a time, ~6x the block's read, so only the last non-zero piece gets it
        k = 0 if buf == _ZEROS[:len(buf)] else len(buf)
        while k > 0:
            lo = max(0, k - _ZERO_PIECE)
            if buf[lo:k] != _ZEROS[:k - lo]:   # (a slice of a bytes: a new one, 4 KiB)
                return end - n + lo + len(buf[lo:k].rstrip(b"\0"))
            k = lo
        end -= n
    return 0
