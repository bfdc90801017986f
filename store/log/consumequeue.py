"""One consume queue: the fixed-width index of a (topic, queue) into the commit log.

Files ``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` hold ``CQ_SEGMENT_ENTRIES``
entries of 20 bytes each (layout in ``format.py``); entry ``i`` of the queue lives at byte
``i * 20`` of the queue's logical space, so the queue offset of an entry is arithmetic, not
stored. Like commit-log segments, these files grow as entries are appended; their total size
is the queue's max offset. Entries are appended only under the store's write lock, after the
records they point at are complete, so a reader that sees an entry can read its record.
Retention deletes old segments only through :meth:`ConsumeQueue.remove_segments` (durably).
"""
from __future__ import annotations

import os
from pathlib import Path

from store import fsutil
from store.errors import StoreError, io_error, naming
from store.flock import list_dir
from store.fsutil import SegmentListing, ensure_dir, fdatasync_path, fsync_dir, open_private, pwrite_all
from store.layout import Layout, segment_file, segment_file_s
from store.log import filestat
from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable

_ENTRY = F.CQ_ENTRY
_SIZE = F.CQ_ENTRY_SIZE


def cut_entries(raw: bytes, lo: int, limit: int, max_bytes: int,
                ordered: bool) -> tuple[list[tuple[int, int, int]], int, int]:
    """The prefix of the raw entries ``raw`` a read takes: ``(entries, end, taken)``.

    Entries are taken as ``(phys, size, tags)`` up to, not including, the first that is
    invalid (``phys < 0`` or ``size <= 0``: a zero-filled or torn tail, damage), ends past
    ``limit``, or (``ordered``) begins before the previous one ends, the first before ``lo``
    (a queue's records lie in log order: a window of the log serves the prefix that does);
    and up to, including, the one that brings their sizes to ``max_bytes``. ``end``: where
    the last one taken ends (``lo`` when none); ``taken``: their sizes' sum. This loop is the
    definition; ``nativecheck.cut_entries`` is the same in C, used where it was built."""
    out = []
    end, taken = lo, 0
    for e in _ENTRY.iter_unpack(raw[: len(raw) - len(raw) % _SIZE]):
        phys, size, _tags = e
        if phys < 0 or size <= 0 or (ordered and phys < end) or phys + size > limit:
            break
        out.append(e)
        end = phys + size
        taken += size
        if taken >= max_bytes:
            break
    return out, end, taken


# cut_entries in C where the package was built with it (nativecheck.c), else the loop above
take_entries: Callable[[bytes, int, int, int, bool], tuple[list[tuple[int, int, int]], int, int]] = cut_entries
try:   # (a build of an older source lacks it)
    from store.log import nativecheck
    if nativecheck.INTERFACE == F.NATIVE_INTERFACE:
        take_entries = nativecheck.cut_entries
except ImportError:
    pass
NO_LIMIT = (1 << 63) - 1   # (limits for take_entries that cut nothing: within 64 bits)


class ConsumeQueue:
    def __init__(self, directory: Path, segment_entries: int = F.CQ_SEGMENT_ENTRIES) -> None:
        self.dir = directory
        self.segment_entries = segment_entries
        self.segment_bytes = segment_entries * _SIZE
        self._read_fds: dict[int, tuple[int, int]] = {}   # base -> (fd, inode)
        # The segment this handle appended to last, kept open between batches: (base, fd),
        # and how many bytes it held after that append.
        self._tail: tuple[int, int] | None = None
        self._tail_size = 0
        self._listing = SegmentListing(directory)
        self._dir_s = str(directory)
        # This handle looked at the queue's end once (``queueends.py``): not again.
        self.end_checked = False
        # (queueends.py) where the look found the queue cut short and this process could not
        # repair it (a read-only store): the log offset a repair would start from, else None
        self.unrepaired_from: int | None = None
        # the listing's stamp when the last segment's name led to its cached read descriptor
        self._end_stamp: tuple[int, int] | None = None

    # -- segments --------------------------------------------------------------------------
    def segments(self) -> list[int]:
        return self._listing.bases()

    def segment_path(self, base: int) -> Path:
        return segment_file(self.dir, base)

    def max_offset(self) -> int:
        """The next offset to be written (= number of entries ever written).

        A reader asks every turn: while the directory is as it was when the last segment's
        name was found to be the descriptor this handle reads it by (the listing's stamp),
        its size comes from an ``fstat`` of that descriptor, not a ``stat`` by path. A
        segment removed or written anew (retention, recovery, a topic re-created) changes the
        directory; recovery cutting entries off in place changes the file's own size."""
        segs = self.segments()
        stamp = self._listing.stamp
        if segs and stamp is not None and stamp == self._end_stamp:
            cached = self._read_fds.get(segs[-1])
            if cached is not None:
                size = filestat.untimed(cached[0])[1]   # (no timestamp asked: filestat.py)
                if size:
                    return (segs[-1] + size) // _SIZE
        self._end_stamp = None
        top = segs[-1] if segs else -1
        while segs:
            last = segs.pop()
            try:
                _links, size, ino = filestat.untimed(segment_file_s(self._dir_s, last))
            except FileNotFoundError:
                continue
            cached = self._read_fds.get(last)
            if size and last == top and cached is not None and cached[1] == ino:
                self._end_stamp = stamp
            if size == 0 and segs:
                # An empty last segment (a failed batch's undo, or a writer killed between
                # creating the file and writing it) is not the end: the entries end in the
                # segment before it, which may not be full.
                continue
            return (last + size) // _SIZE
        return 0

    def min_offset(self) -> int:
        segs = self.segments()
        return segs[0] // _SIZE if segs else 0

    def listing_stamp(self) -> tuple[int, int] | None:
        """The stamp of the last listing of the segments (:attr:`SegmentListing.stamp`)."""
        return self._listing.stamp

    # -- reading ---------------------------------------------------------------------------
    def _fd(self, base: int) -> int | None:
        """A read descriptor for segment ``base``, cached, and checked against the path on
        every use (one stat): a segment deleted and written anew (``store recover``, a topic
        deleted and re-created) must be read from its new file, never the old inode. (The
        path as a string: a Path built each read cost as much as the stat.)"""
        path = segment_file_s(self._dir_s, base)
        try:
            ino = filestat.untimed(path)[2]   # (no timestamp asked: filestat.py)
        except FileNotFoundError:
            self._drop_fd(base)
            return None
        cached = self._read_fds.get(base)
        if cached is not None:
            if cached[1] == ino:
                return cached[0]
            self._drop_fd(base)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        self._read_fds[base] = (fd, filestat.untimed(fd)[2])
        return fd

    def _drop_fd(self, base: int) -> None:
        cached = self._read_fds.pop(base, None)
        if cached is not None:
            os.close(cached[0])

    def read_raw(self, offset: int, count: int) -> bytes:
        """The bytes of up to ``count`` entries from ``offset`` within one segment, unchecked
        (whole entries only): for readers that decode a run at once (``store/log/arraycolumns.py``)."""
        byte_off = offset * _SIZE
        base = byte_off - byte_off % self.segment_bytes
        fd = self._fd(base)
        if fd is None:
            return b""
        n = min(count, (base + self.segment_bytes - byte_off) // _SIZE)
        try:
            data = os.pread(fd, n * _SIZE, byte_off - base)
        except OSError as exc:   # (a read's error names no file, "Is a directory": say which)
            raise naming(exc, segment_file_s(self._dir_s, base)) from exc
        return data[: len(data) - len(data) % _SIZE]

    def read_entries(self, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` entries from ``offset`` within one segment: (phys, size, tags); stops
        early at its end (the caller asks again) and at an invalid entry (``size <= 0``)."""
        return take_entries(self.read_raw(offset, count), 0, NO_LIMIT, NO_LIMIT, False)[0]

    def invalid_at(self, offset: int) -> str | None:
        """Why the entry at ``offset`` cannot be read when it is present but invalid (zero
        filled, negative); None when it is valid or absent. Readers that get no entries below
        the max offset ask this, then skip the entry as damaged: stopping there would wait
        for ever for an entry that is never going to change."""
        raw = self.read_raw(offset, 1)
        if len(raw) < _SIZE:
            return None
        phys, size, _tags = _ENTRY.unpack(raw)
        if phys < 0 or size <= 0:
            return f"consume-queue entry {offset} is invalid (offset {phys}, size {size}): no record to deliver"
        return None

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        got = self.read_entries(offset, 1)
        return got[0] if got else None

    def last_entry(self) -> tuple[int, int, int] | None:
        m = self.max_offset()
        return self.entry(m - 1) if m > 0 else None

    def close(self) -> None:
        for fd, _ino in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        self.drop_tail()

    def remove_segments(self, bases: list[int], warn: Callable[[str], None], each: Callable[[str], None]) -> None:
        """Delete segments ``bases`` in order (retention: never the last with entries), durably (``unlink_all``)."""
        self.close()
        fsutil.unlink_all(self.dir, [F.segment_name(b) for b in bases], warn, each)

    def drop_tail(self) -> None:
        """Close the descriptor kept for appends (see :meth:`write_end`)."""
        tail, self._tail = self._tail, None
        if tail is not None:
            os.close(tail[1])

    # -- writing (store write lock held) ---------------------------------------------------
    def write_end(self) -> int:
        """:meth:`max_offset`, for a writer holding the write lock: from the descriptor of the
        segment this handle appended to last, when that is still the queue's last segment (one
        ``fstat`` instead of a directory listing and a ``stat``; a writer's batches touch
        every queue of a topic).

        It is still the last when it is linked, holds only whole entries and is neither empty
        nor full: a later segment is begun only once this one is full, recovery cuts a queue
        back from its end (``truncate_to``, in place), and deleting a topic or a segment
        unlinks the file. Anything else falls back to the listing. A segment found shorter
        than this handle left it, or unlinked (cut or deleted by hand, or by a recovery), clears
        :attr:`end_checked`: the writer looks at the queue's end again (``queueends.py``)."""
        tail = self._tail
        if tail is not None:
            base, fd = tail
            try:
                links, size, _ino = filestat.untimed(fd)
            except OSError:
                links, size = 0, -1
            if not links or size < self._tail_size:
                self.end_checked = False   # cut or removed since this handle's append: looked at again
            if links and 0 < size < self.segment_bytes and size % _SIZE == 0:
                return (base + size) // _SIZE
            self.drop_tail()
        return self.max_offset()

    def append(self, first_offset: int, entries: bytes | bytearray, keep: bool = False,
               checked: bool = False) -> list[tuple[str, int]]:
        """Write ``entries`` (whole 20-byte entries) starting at queue offset ``first_offset``.
        ``keep``: keep the last segment written open for the next batch (a writer's, whose
        store bounds how many it keeps: :meth:`QueueTable.append`). ``checked``: the caller
        took ``first_offset`` from :meth:`write_end` under the same hold of the write lock, so
        a tail still kept is linked and ends there (no second ``fstat``).

        Returns the undo list ``(path, previous size)`` for each file touched, so a failed
        batch can be cut back; when this call itself fails, what it wrote is cut back first."""
        pos = first_offset * _SIZE
        tail = self._tail
        if tail is not None and tail[0] <= pos and pos + len(entries) <= tail[0] + self.segment_bytes:
            # The usual batch: into the segment kept open, when it is still linked and ends
            # where the batch begins (as write_end found it), with one pwrite.
            base, fd = tail
            try:
                st = None if checked else filestat.untimed(fd)
            except OSError:
                st = None
            if checked or (st is not None and st[0] and st[1] == pos - base):
                undo = [(segment_file_s(self._dir_s, base), pos - base)]
                try:
                    pwrite_all(fd, entries, pos - base)
                except OSError as exc:
                    self.drop_tail()
                    cut_back(undo)
                    raise io_error(exc, f"append to {undo[0][0]}") from exc
                self._tail_size = pos - base + len(entries)
                return undo
        self.drop_tail()   # anything else: the files as they are named now
        undo = []
        try:
            self._append(first_offset, entries, undo, keep)
        except StoreError:
            cut_back(undo)
            raise
        return undo

    def _append(self, first_offset: int, entries: bytes | bytearray, undo: list[tuple[str, int]],
                keep: bool) -> None:
        pos = first_offset * _SIZE
        view = memoryview(entries)
        while view:
            base = pos - pos % self.segment_bytes
            room = base + self.segment_bytes - pos
            part, view = view[:room], view[room:]
            path = segment_file_s(self._dir_s, base)
            try:
                try:
                    fd = open_private(path, os.O_WRONLY | os.O_CREAT)
                except FileNotFoundError:   # a new queue (or one removed under us): make its directory
                    ensure_dir(self.dir, durable=False)   # synced by the derived flush
                    fd = open_private(path, os.O_WRONLY | os.O_CREAT)
            except OSError as exc:
                raise io_error(exc, f"open {path}") from exc
            try:
                undo.append((path, filestat.untimed(fd)[1]))
                pwrite_all(fd, part, pos - base)
            except OSError as exc:
                os.close(fd)
                raise io_error(exc, f"append to {path}") from exc
            pos += len(part)
            if keep and not view:
                self._tail, self._tail_size = (base, fd), pos - base   # kept for the next batch (write_end)
            else:
                os.close(fd)

    def drop_partial_entry(self) -> None:
        """Cut a torn (partial) entry off the last segment (recovery)."""
        segs = self.segments()
        if segs:
            path = self.segment_path(segs[-1])
            size = os.stat(path).st_size
            if size % _SIZE:
                os.truncate(path, size - size % _SIZE)

    def write_entry(self, offset: int, entry: bytes) -> None:
        """Overwrite entry ``offset`` in place (recovery: a hole given a filler entry)."""
        byte_off = offset * _SIZE
        base = byte_off - byte_off % self.segment_bytes
        fd = open_private(self.segment_path(base), os.O_WRONLY)
        try:
            pwrite_all(fd, entry, byte_off - base)
        finally:
            os.close(fd)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or after ``offset`` (recovery)."""
        byte_off = offset * _SIZE
        for base in reversed(self.segments()):
            path = self.segment_path(base)
            if base >= byte_off and base > 0:
                path.unlink()
            else:
                if os.stat(path).st_size > byte_off - base:
                    os.truncate(path, max(byte_off - base, 0))
                break
        self.close()


# -- a queue's own damage, as its files show it (``queueends.py`` asks, once per handle) -----------

def end_damage(q: ConsumeQueue) -> tuple[int, str] | None:
    """Damage the queue's files show by themselves, toward its end: ``(the first entry that
    cannot be trusted, why)``, or None. A listing, a ``stat`` and a read of the last
    entries: once per handle, never per read.

    Seen: a segment missing between two others, or one short of full before the last
    (entries lost in the middle: a file deleted or cut), a partial entry at the end (a
    file cut mid-entry), and a tail of invalid entries (zeroed: a torn write, or bytes
    put there by hand). Not seen: a last segment cut at an entry boundary, or deleted —
    those look like a shorter queue, and only the commit log can tell."""
    segs = q.segments()
    for base, nxt in zip(segs, segs[1:]):
        try:
            size = os.stat(q.segment_path(base)).st_size
        except FileNotFoundError:
            return None   # (changed under us: a later look decides)
        if nxt != base + q.segment_bytes:
            return (base + size) // _SIZE, (f"segment {F.segment_name(base + q.segment_bytes)} is "
                                            f"missing (the next one is {F.segment_name(nxt)})")
        if size < q.segment_bytes:
            return (base + size) // _SIZE, (f"segment {F.segment_name(base)} holds {size // _SIZE} of its "
                                            f"{q.segment_entries} entries, and a later one exists")
    if not segs:
        return None
    try:
        size = os.stat(q.segment_path(segs[-1])).st_size
    except FileNotFoundError:
        return None
    if size % _SIZE:
        return (segs[-1] + size) // _SIZE, f"ends with a partial entry ({size % _SIZE} of {_SIZE} bytes)"
    m = (segs[-1] + size) // _SIZE
    low = segs[-1] // _SIZE
    if m == low or q.entry(m - 1) is not None:
        return None   # (the usual queue: its last entry is valid)
    first = m - 1
    while first > low:   # the run of invalid entries the queue ends with
        k = max(first - 1024, low)
        valid = [i for i, (phys, sz, _t) in enumerate(_ENTRY.iter_unpack(q.read_raw(k, first - k)))
                 if phys >= 0 and sz > 0]
        if valid:
            first = k + valid[-1] + 1
            break
        first = k
    return first, f"ends with {m - first} invalid (zeroed) entr{'y' if m - first == 1 else 'ies'}"


def changed_since(q: ConsumeQueue, ns: int) -> bool:
    """Whether the queue's last segment or its directory changed (``st_ctime``) at or after
    ``ns``: a file written, cut, removed or made since, by a batch or by hand (at the same
    time too: file times move by clock ticks of several ms). A queue with no directory (no
    message yet, or removed) asks its topic's directory."""
    segs = q.segments()
    paths = [str(q.segment_path(segs[-1]))] if segs else []
    paths += [str(q.dir)] if os.path.isdir(q.dir) else [str(q.dir.parent)]
    for path in paths:
        try:
            if os.stat(path).st_ctime_ns >= ns:
                return True
        except FileNotFoundError:
            return True
    return False


def last_write_ms(q: ConsumeQueue) -> int | None:
    """When the last segment was last written (``st_mtime``, ms since the epoch); None
    without one."""
    segs = q.segments()
    if not segs:
        return None
    try:
        return os.stat(q.segment_path(segs[-1])).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return None


def pack_entry(phys: int, size: int, tags: int) -> bytes:
    return _ENTRY.pack(phys, size, tags)


def cut_back(undo: list[tuple[str, int]]) -> None:
    """Cut each file of an undo list (:meth:`ConsumeQueue.append`'s) back to its previous size,
    newest first; best effort (called on a failure already being raised)."""
    for path, size in reversed(undo):
        try:
            os.truncate(path, size)
        except OSError:
            pass


def sync_changed_queues(layout: Layout, since_s: int) -> None:
    """fsync every consume-queue segment written since ``since_s`` (s since the epoch; 0: all),
    then the directories whose entries changed (new queues and segments are not synced when
    they are made: the derived flush syncs them, children before parents)."""
    changed_dirs: list[Path] = []
    for topic, qid in queue_dirs(layout):
        if not changed_dirs or changed_dirs[-1].parent.name != topic:
            changed_dirs.append(layout.topic_cq_dir(topic))
        qdir = layout.queue_dir(topic, qid)
        changed_dirs.append(qdir)
        for i, base in enumerate(reversed(fsutil.segment_bases(qdir))):
            path = segment_file(qdir, base)
            if i > 0 and since_s:
                try:
                    if os.stat(path).st_mtime < since_s - 2:
                        break   # older segments were complete at the last flush
                except FileNotFoundError:
                    continue
            fdatasync_path(path)
    for d in reversed(changed_dirs):   # children before parents
        fsutil.sync_dir_if_changed(d, since_s)
    fsutil.sync_dir_if_changed(layout.consumequeue_dir, since_s)


def queue_ids(layout: Layout, topic: str) -> list[int]:
    """The queue ids that have a directory under ``consumequeue/<topic>/``, ascending."""
    return sorted(int(n) for n in list_dir(layout.topic_cq_dir(topic))
                  if n.isascii() and n.isdigit() and n == str(int(n)))   # ("007" is no queue's name)


def queue_dirs(layout: Layout) -> list[tuple[str, int]]:
    """``(topic, queue id)`` of every queue directory under ``consumequeue/``, sorted: the one
    walk over the store's queues (the derived flush, recovery, check, the settings' repair)."""
    return [(topic, qid) for topic in sorted(list_dir(layout.consumequeue_dir)) for qid in queue_ids(layout, topic)]


def remove_queues(directory: Path) -> None:
    """Remove a topic's tree of queue files (a deleted topic's, or an orphan left by an older
    version's killed ``topic delete``), durably: the parent directory is fsynced after, so a
    power cut cannot bring the queues back once the caller goes on (a topic delete removes
    the topic's config next, and queues without a config would be healed into a topic)."""
    if not os.path.lexists(directory):
        return   # (every new topic asks: shutil's import only when there is one)
    if fsutil.remove_tree(directory):
        fsync_dir(directory.parent)
