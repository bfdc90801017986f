"""The ``consume --dedup`` log: ids of messages whose handler completed, per group.

File ``dedup/<group>.log`` — append-only text, one record per line::

    <storeMs> <uniqKey>\\n

``storeMs`` is the wall clock (ms since the epoch) when the line was written; ``uniqKey`` is
the message's unique key (printable ASCII without spaces, at most 255 characters). Every
member of the group, in whatever process, appends to the same file with ``O_APPEND`` and one
``write`` per :meth:`DedupLog.record` (a handler's batch), so records of different members
interleave as whole lines. Readers keep their position and read only the new tail
(:meth:`DedupLog.refresh`); a last line without its newline is a write still in progress and
is left for the next refresh. A line that does not parse (left by a machine crash in the
middle of a write) is skipped; an appender that finds the file not ending in a newline starts
its batch with one, so its own lines stay intact.

Bounds. Memory holds at most ``max_entries`` ids no older than ``max_age_ms`` (default one
million, seven days); older ones are forgotten, and a redelivery of a forgotten id is handed
to the handler again. When the file grows past ``2 × max_entries`` lines it is compacted: under
an exclusive lock on ``dedup/<group>.log.lock`` the remembered entries are written to a temp
file that is renamed over the log. Appenders take the same lock exclusively for their few system
calls, and reopen the log when its inode changed, so no append lands in a replaced file, and an
appender that finds the file not ending in a newline knows it is a torn line left by a crash,
never another member's write still in progress (with a shared lock, one appender could see
another's line half written and add a stray empty line). Readers notice the new inode (or a
shorter file) and read it again from the start.

Damage. The lines a crash leaves that do not parse are of two kinds, each ended by the next
appender's newline: a line's start, cut short; and zeros (blocks a power cut did not write
back) among the text of the lines around them, each run of zeros ending at that newline or
where the next block begins (a :data:`SECTOR` boundary). Any other line that does not parse
(bytes no line holds, zeros elsewhere, a key longer than allowed, two lines run together) is
damage: the keys it held are forgotten, so their messages, delivered again, are handled again.
``store check`` reports it (:func:`problems`) and ``store recover`` rewrites the log without
it (:func:`drop_damaged`).

Guarantees, honestly:

* A consumer checks :meth:`DedupLog.seen` before running a handler and writes the id with
  :meth:`DedupLog.record` right after the handler completed, in the thread that waited for
  it, before that handler's slot frees (a pool sink's ``on_outcome``,
  :mod:`store.client.sinks`). The one window left is a crash after the handler completed and
  before its id is recorded (or while it still runs, and finishes before it is killed): that
  message is delivered again after the restart, so a crash costs at most one duplicate per
  handler slot (one handler run: the message, or the batch with ``--batch``).
* One instance may be shared by threads (handler threads record while the loop refreshes and
  checks): its methods take an instance lock.
* ``record`` is durable against a process crash once it returns (the bytes are in the kernel);
  against a machine crash only with ``fsync=True``.
* The log rules out *redeliveries* of recorded ids. Two deliveries of one id that run at the
  same moment (say two members during a rebalance hand-over) both pass ``seen`` before either
  is recorded; the log does not claim ids in flight.
"""
from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from store import fsutil
from store.errors import BadInputError, UsageError, io_error
from store.flock import close_kept, keep, list_dir, wait_flock
from store.layout import Layout, lock_beside
from store.names import validate_group

MAX_ENTRIES = 1_000_000
MAX_AGE_MS = 7 * 24 * 3600 * 1000
LOCK_TIMEOUT_S = 30.0
READ_CHUNK_BYTES = 1 << 20

SECTOR = 512   # the least a power cut loses at once
LOG_SUFFIX = ".log"

_KEY_RE = re.compile(r"[!-~]{1,255}")
_LINE_RE = re.compile(rb"([0-9]{1,19}) ([!-~]{1,255})")
_LINES_RE = re.compile(rb"^[0-9]{1,19} [!-~]{1,255}\n", re.MULTILINE)   # (whole lines that parse, in a file)
_TORN_RE = re.compile(rb"[0-9]{1,19}(?: [!-~]{0,255})?")   # (a line's start)
_CUT_RE = re.compile(rb"[ -~\0]*")   # (what a line a power cut left holds: text and zeros)
_ZEROS_RE = re.compile(rb"\0+")

Clock = Callable[[], int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _ReadState:
    """Where this instance stands in the log file it last read."""

    fd: int | None = None
    inode: tuple[int, int] | None = None  # (st_dev, st_ino) of the file ``fd`` is open on
    pos: int = 0  # bytes consumed; always just after a newline
    lines: int = 0  # complete lines consumed from this file, for the compaction trigger


class DedupLog:
    """One group's record of completed message ids, shared by all its members.

    Call :meth:`refresh` to pick up what other members recorded before checking a batch with
    :meth:`seen`. Use as a context manager, or :meth:`close` it, to release its descriptors.
    """

    def __init__(
        self,
        layout: Layout,
        group: str,
        max_entries: int = MAX_ENTRIES,
        max_age_ms: int = MAX_AGE_MS,
        clock: Clock = now_ms,
    ) -> None:
        if max_entries < 1 or max_age_ms < 1:
            raise UsageError("dedup bounds must be positive")
        self.path: Path = layout.dedup_log(validate_group(group))
        self.max_entries = max_entries
        self.max_age_ms = max_age_ms
        self._clock = clock
        self._lock_path = lock_beside(self.path)
        # Insertion order is recording order, so the oldest entries are at the front.
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._read = _ReadState()
        self._append_fd: int | None = None
        # Handler threads record while the consumer's loop refreshes and checks: one at a time
        # (re-entrant: record refreshes, compaction too).
        self._mutex = threading.RLock()
        self.refresh()

    # -- reading
    def refresh(self) -> int:
        """Read the records appended since the last call; returns how many lines were read."""
        try:
            with self._mutex:
                return self._read_tail()
        except OSError as exc:
            raise io_error(exc, f"read {self.path}") from exc

    def _read_tail(self) -> int:
        fd = self._reader_fd()
        if fd is None:
            return 0
        size = os.fstat(fd).st_size
        if size < self._read.pos:
            # Shorter than what we already read: not ours to explain, so start over.
            self._read.pos = self._read.lines = 0
        count = 0
        for block in _complete_lines(fd, self._read.pos, size):
            count += self._ingest(block)
            self._read.pos += len(block)
        self._read.lines += count
        self._trim()
        return count

    def seen(self, key: str) -> bool:
        """Whether ``key`` was recorded (by any member) and is not yet forgotten."""
        ms = self._entries.get(key)
        return ms is not None and ms >= self._clock() - self.max_age_ms

    def __len__(self) -> int:
        return len(self._entries)

    # -- writing
    def record(self, keys: Iterable[str], fsync: bool = False) -> None:
        """Append ``keys`` as completed, in one write; compacts the log when it is too long."""
        keys = list(keys)
        for key in keys:
            if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
                raise BadInputError(f"cannot record message key {key!r}: "
                                    "use 1-255 printable ASCII characters without spaces")
        if not keys:
            return
        with self._mutex:
            now = self._clock()
            self._append("".join(f"{now} {key}\n" for key in keys).encode("ascii"), fsync)
            for key in keys:
                self._remember(key, now)
            self.refresh()
            if self._read.lines > 2 * self.max_entries:
                self._compact(force=False)

    def compact(self) -> None:
        """Rewrite the log with only the remembered entries, oldest first."""
        with self._mutex:
            self._compact(force=True)

    def close(self) -> None:
        with self._mutex:
            for fd in (self._read.fd, self._append_fd):
                if fd is not None:
                    os.close(fd)
            self._read = _ReadState()
            self._append_fd = None

    def __enter__(self) -> DedupLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- memory
    def _ingest(self, block: bytes) -> int:
        lines = block.split(b"\n")[:-1]  # block ends with a newline
        for line in lines:
            match = _LINE_RE.fullmatch(line)
            if match is not None:
                self._remember(match.group(2).decode("ascii"), int(match.group(1)))
        return len(lines)

    def _remember(self, key: str, ms: int) -> None:
        self._entries[key] = max(ms, self._entries.get(key, ms))
        self._entries.move_to_end(key)

    def _trim(self) -> None:
        horizon = self._clock() - self.max_age_ms
        # Lines arrive roughly in time order, so stopping at the first young entry is enough;
        # the count bound holds regardless.
        while self._entries:
            oldest_ms = next(iter(self._entries.values()))
            if len(self._entries) <= self.max_entries and oldest_ms >= horizon:
                break
            self._entries.popitem(last=False)

    # -- files
    def _reader_fd(self) -> int | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._close_reader()
            return None
        if self._read.fd is not None and (st.st_dev, st.st_ino) == self._read.inode:
            return self._read.fd
        # First read, or the log was replaced by a compaction: read the new file from the start.
        self._close_reader()
        try:
            fd = fsutil.open_private(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        fst = os.fstat(fd)
        self._read = _ReadState(fd=fd, inode=(fst.st_dev, fst.st_ino))
        return fd

    def _close_reader(self) -> None:
        if self._read.fd is not None:
            os.close(self._read.fd)
        self._read = _ReadState()

    def _append(self, data: bytes, fsync: bool) -> None:
        fsutil.ensure_dir(self.path.parent)
        with self._locked(shared=False):   # exclusive: the torn-tail check must be exact
            try:
                fd, created = self._appender_fd()
                if _ends_torn(fd):
                    data = b"\n" + data
                _write_all(fd, data)
                if fsync:
                    os.fsync(fd)
                    if created:
                        fsutil.fsync_dir(self.path.parent)
            except OSError as exc:
                raise io_error(exc, f"write {self.path}") from exc

    def _appender_fd(self) -> tuple[int, bool]:
        """The append descriptor, reopened when the log was replaced; (fd, newly created)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if self._append_fd is not None and st is not None:
            fst = os.fstat(self._append_fd)
            if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
                return self._append_fd, False
        if self._append_fd is not None:
            os.close(self._append_fd)
            self._append_fd = None
        # Read-write, not write-only, so that _ends_torn can pread the last byte.
        self._append_fd = fsutil.open_private(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        return self._append_fd, st is None

    def _compact(self, force: bool) -> None:
        fsutil.ensure_dir(self.path.parent)
        with self._locked(shared=False):
            # Appenders are shut out now, so this reads the log to its true end.
            self.refresh()
            if not force and self._read.lines <= 2 * self.max_entries:
                return  # another member compacted while we waited for the lock
            newest = sorted(self._entries.items(), key=lambda item: item[1])
            data = "".join(f"{ms} {key}\n" for key, ms in newest).encode("ascii")
            fsutil.atomic_write_bytes(self.path, data, keep_bak=False)
        self.refresh()

    def _locked(self, shared: bool) -> AbstractContextManager[None]:
        return _locked(self._lock_path, shared)


@contextmanager
def _locked(lock_path: Path, shared: bool) -> Iterator[None]:
    # Opened per use and released by closing: the lock is held for a few system calls.
    try:
        fd = keep(fsutil.open_private(lock_path, os.O_RDWR | os.O_CREAT))   # (not a forked child's)
    except OSError as exc:
        raise io_error(exc, f"open {lock_path}") from exc
    try:
        wait_flock(fd, lock_path, LOCK_TIMEOUT_S, shared=shared)
        yield
    finally:
        close_kept(fd)


def _complete_lines(fd: int, pos: int, size: int) -> Iterator[bytes]:
    """Blocks of whole lines between ``pos`` and ``size``; a torn last line is held back."""
    want = READ_CHUNK_BYTES
    while pos < size:
        block = os.pread(fd, min(want, size - pos), pos)
        if not block:
            return  # the file shrank under us: the next refresh sees it and starts over
        end = block.rfind(b"\n") + 1
        if end == 0:
            if pos + len(block) >= size:
                return  # only an incomplete line is left: wait for its newline
            want *= 2  # a line longer than the chunk (garbage): read further
            continue
        yield block[:end]
        pos += end


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# -- damage (store check, store recover) --------------------------------------------------

def dedup_logs(layout: Layout) -> list[tuple[str, Path]]:
    """Every group's dedup log on disk, as (group, path)."""
    out = []
    for name in sorted(list_dir(layout.dedup_root)):
        group = name[:-len(LOG_SUFFIX)] if name.endswith(LOG_SUFFIX) else ""
        try:
            path = layout.dedup_log(validate_group(group))
        except UsageError:
            continue   # (a temp file of a compaction, a lock, anything else)
        out.append((group, path))
    return out


def damaged_lines(data: bytes) -> list[tuple[int, int]]:
    """The lines of a log's content that are damage (see the module docstring), as (byte offset,
    length); a last line without its newline is a write in progress, not looked at."""
    end = data.rfind(b"\n") + 1
    if len(_LINES_RE.findall(data, 0, end)) == data.count(b"\n", 0, end):
        return []   # (every line parses: one pass in C)
    out, at = [], 0
    while at < end:
        stop = data.index(b"\n", at)
        line = data[at:stop]
        if line and _LINE_RE.fullmatch(line) is None and not _cut_left(line, at):
            out.append((at, len(line)))
        at = stop + 1
    return out


def _cut_left(line: bytes, at: int) -> bool:
    """Whether ``line`` (at byte ``at`` of its file) is what a crash leaves: a line's start, or
    text and zeros, each run of zeros ending with the line or at a sector's start (where the
    next block, written back, begins)."""
    if b"\0" not in line:
        return _TORN_RE.fullmatch(line) is not None
    return _CUT_RE.fullmatch(line) is not None and all(
        m.end() == len(line) or (at + m.end()) % SECTOR == 0 for m in _ZEROS_RE.finditer(line))


def _read_log(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:   # (one read: a compaction meanwhile renames a new file in)
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise io_error(exc, f"read {path}") from exc


def problems(layout: Layout) -> list[tuple[str, int, str]]:
    """What ``store check`` reports of the dedup logs (reads only), as (file, byte offset, why)."""
    out = []
    for group, path in dedup_logs(layout):
        data = _read_log(path)
        bad = damaged_lines(data) if data is not None else []
        if bad:
            n = f"{len(bad)} line{'s' if len(bad) > 1 else ''}"
            out.append((str(path), bad[0][0], f"dedup log of group {group} damaged: {n} that do not parse "
                        f"({sum(b[1] for b in bad)} bytes; not what a crash leaves): the keys they held are "
                        f"forgotten, so those messages are handled again if delivered again; mqctl store "
                        f"recover drops them"))
    return out


def drop_damaged(layout: Layout, warn: Callable[[str], None]) -> None:
    """Rewrite every dedup log that :func:`problems` finds damaged with only its lines that
    parse, in their order (under the log's lock: no member appends meanwhile; members read the
    new file from its start), each said with ``warn``. What a crash left goes with them."""
    for _group, path in dedup_logs(layout):
        data = _read_log(path)
        if data is None or not damaged_lines(data):
            continue
        with _locked(lock_beside(path), shared=False):
            data = _read_log(path) or b""
            bad = damaged_lines(data)
            if not bad:
                continue
            kept = b"".join(m.group(0) for m in _LINES_RE.finditer(data))
            fsutil.atomic_write_bytes(path, kept, keep_bak=False)
        warn(f"{path} was damaged at byte {bad[0][0]}: rewritten without the {len(bad)} line(s) that do not "
             f"parse (the keys they held are forgotten: those messages are handled again if delivered again)")
