"""Records from stdin, in large blocks: ``mqctl send``'s reader.

Stdin is read in chunks of whatever is available (``os.read``), so a file is sent in large
batches and a slow pipe (``tail -f | mqctl send``) message by message without waiting for a
batch to fill.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

READ_CHUNK = 1 << 20
READ_CHUNK_FILE = 4 << 20


class LongRecord(Exception):
    """A record longer than the reader was told any record can be: it was counted to its end
    (its delimiter, or the end of the input), not held, so one line of many GB without a
    newline costs no memory. The records before it have been yielded; nothing after it is."""

    def __init__(self, size: int, whole: bool = True) -> None:
        super().__init__(f"a record of {'' if whole else 'over '}{size} bytes")
        self.size = size
        self.whole = whole   # False: counted up to COUNT_MAX only (an input without end, /dev/zero)


# How far a record past the cap is counted to tell its size: an input with no delimiter and
# no end (`mqctl send < /dev/zero`) is not read for ever, at full CPU, to say how big it is.
COUNT_MAX = 1 << 30


def split_records(data: bytes, delim: bytes, zero_copy: bool, pending: bytes = b"") -> tuple[list[Any], bytes]:
    """``pending + data`` cut into records, and the partial record after the last delimiter.
    Long records (the first is 1 KiB or more) come as memoryviews of ``data`` when
    ``zero_copy``: the store copies a big body once, straight into its batch buffer. A
    ``pending`` partial record is completed without copying all of ``data`` onto it."""
    if pending and len(delim) > 1:
        data, pending = pending + data, b""   # a delimiter may straddle the two
    find = data.find
    i = find(delim)
    if i < 0:
        return [], pending + data if pending else data
    if zero_copy and len(pending) + i >= 1024:   # judged by the first record: long ones
        mv = memoryview(data)
        step = len(delim)
        out: list[Any] = [pending + data[:i]] if pending else [mv[:i]]   # bytes and memoryviews
        start = i + step
        i = find(delim, start)
        while i >= 0:
            out.append(mv[start:i])
            start = i + step
            i = find(delim, start)
        return out, data[start:]
    if pending:
        data = pending + data
    parts = data.split(delim)
    return parts, parts.pop()


# A pipe's buffer is raised to this (F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size): the
# writer then hands over large blocks, and each read takes up to this much at once.
PIPE_SIZE = 1 << 20
# A read at least this big means a fast writer: when the pipe is momentarily empty after it,
# wait this long for more before sending a partial batch (a slow pipe never waits).
FAST_READ = 64 * 1024
FAST_WAIT_S = 0.002
# Once a read of a pipe is that big, the pipe is read ahead by a thread, at most this many
# reads ahead of the records handed out (each at most the pipe's size: 8 MiB held at most).
READ_AHEAD = 8


class ReadAhead:
    """A pipe read in a thread of its own, up to ``depth`` reads ahead of the records handed
    out: the writer (``cat``) is not stopped by a full pipe while the sender frames and writes
    a batch (the pipe holds at most 1 MiB, a batch is 2 MiB: without it, the writer waited for
    most of each batch, and the sender then for the writer). Measured, 1 GB of 64 KiB lines
    through ``cat | mqctl send`` on a loaded machine: ~40 % less wall time, the same CPU
    time. Reads come out in order, a read's error where its data would. :meth:`stop` ends
    the thread: no read is begun after the one it is in or about to begin (whose data is
    dropped), and it ends at the end of the input or a read's error."""

    def __init__(self, fd: int, size: int, depth: int = READ_AHEAD) -> None:
        import threading
        from queue import SimpleQueue
        # Its own descriptor of the pipe: a read the thread begins just after :meth:`stop` (past
        # its look at ``stopped``) then reads the pipe it was made for, never another file the
        # caller opened under the number the caller closed (a test's next pipe lost its first
        # read so); it is closed when the thread ends.
        self.fd, self.size = os.dup(fd), size
        self.reads: SimpleQueue[Any] = SimpleQueue()
        self.room = threading.Semaphore(depth)
        self.stopped = False
        threading.Thread(target=self._run, name="mqctl-stdin", daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                self.room.acquire()
                if self.stopped:
                    return
                try:
                    data: Any = os.read(self.fd, self.size)
                except OSError as exc:
                    data = exc
                if self.stopped:
                    return
                self.reads.put(data)
                if not data or isinstance(data, OSError):
                    return
        finally:
            os.close(self.fd)

    def read(self, fd: int, size: int) -> bytes:
        """The next read's data (``os.read``'s signature: ``fd`` and ``size`` are the thread's)."""
        data: bytes | OSError = self.reads.get()
        self.room.release()
        if isinstance(data, OSError):
            raise data
        return data

    def waiting(self) -> bool:
        """A read is done and not yet taken."""
        return not self.reads.empty()

    def stop(self) -> None:
        self.stopped = True
        self.room.release()


def _grow_pipe(fd: int) -> int:
    """Raise the pipe's buffer to :data:`PIPE_SIZE` (or what the system allows); its size."""
    try:
        import fcntl
        try:
            with open("/proc/sys/fs/pipe-max-size", "rb") as fh:
                limit = int(fh.read())
        except (OSError, ValueError):
            limit = PIPE_SIZE
        want = min(PIPE_SIZE, limit)
        try:
            return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, want)
        except OSError:
            return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except (OSError, ImportError, AttributeError):
        return 65536


def line_cap(max_size: int, json: bool, key_delim: bytes | None) -> int:
    """The longest line that can hold a message of at most ``max_size`` bytes: a raw line is
    its body; a key and its delimiter may come before it; a JSON line may escape or base64
    its body (at most 6 bytes a byte, as \\u0000)."""
    if json:
        return 6 * max_size + (1 << 20)
    return max_size + (0 if key_delim is None else (1 << 16) + len(key_delim))


def read_chunks(fd: int, delim: bytes, zero_copy: bool = False,
                cap: int | None = None) -> Iterator[tuple[list[bytes], bool]]:
    """Records from ``fd`` split on ``delim``, grouped by what each read returned, each group
    with ``more``: whether more input can be read at once (a file, or a pipe with data
    waiting). A sender batches while ``more`` and sends as soon as the input pauses, so a
    file goes in large batches and ``tail -f | mqctl send`` message by message.

    Reads are large: READ_CHUNK from a file; from a pipe, whatever it holds, its buffer raised
    to PIPE_SIZE first. After a large read from a pipe found empty, the input is given
    FAST_WAIT_S to go on before ``more`` is false, so a fast pipeline is sent in full batches.

    A record still unfinished past ``cap`` bytes is not kept: it is counted to its end and
    :class:`LongRecord` raised. (A record within one read is yielded whatever its size: a
    read's size bounds it.) The start of a record that spans reads is kept as the reads
    came and joined once, when it ends: each byte is copied once, not once a read."""
    import select
    import stat
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        mode = 0
    regular = stat.S_ISREG(mode)
    size = READ_CHUNK
    fifo = stat.S_ISFIFO(mode)
    if fifo:
        size = max(_grow_pipe(fd), 65536)
    elif regular:
        size = READ_CHUNK_FILE
    read = os.read
    ahead: ReadAhead | None = None   # (a fast pipe's reads, once one is big: ReadAhead)
    pending = b""
    held: list[bytes] = []   # an unfinished record's reads after ``pending``
    held_len = 0
    tail = len(delim) - 1    # a delimiter may straddle two reads, or more
    last = b""
    try:
        while True:
            try:
                data = read(fd, size)
            except InterruptedError:
                continue
            if not data:
                if held:
                    pending = b"".join([pending, *held])
                if pending:
                    yield [pending], False
                return
            if ahead is None and fifo and len(data) >= FAST_READ:
                ahead = ReadAhead(fd, size)
                read = ahead.read
            if pending and delim not in data:
                if not held:
                    last = pending[-tail:] if tail else b""
                # (``last``: the record's last bytes so far, across reads shorter than the delimiter)
                if not (tail and delim in last + data[:tail]):
                    held.append(data)   # still no end to the record
                    held_len += len(data)
                    if tail:
                        last = (last + data[-tail:])[-tail:]
                    if cap is not None and len(pending) + held_len > cap:
                        raise LongRecord(*_count_to_end(read, fd, size, delim, len(pending) + held_len, last))
                    continue
            if held:
                pending = b"".join([pending, *held])
                held, held_len = [], 0
            parts, pending = split_records(data, delim, zero_copy, pending)
            if cap is not None and len(pending) > cap:
                if parts:
                    yield parts, True
                raise LongRecord(*_count_to_end(read, fd, size, delim, len(pending), pending[-tail:] if tail else b""))
            if parts:
                if regular or (ahead is not None and ahead.waiting()):
                    more = True
                else:
                    try:
                        more = bool(select.select([fd], [], [], 0)[0]) or (
                            len(data) >= FAST_READ and bool(select.select([fd], [], [], FAST_WAIT_S)[0]))
                    except (OSError, ValueError):
                        more = False
                yield parts, more
    finally:
        if ahead is not None:
            ahead.stop()


def _count_to_end(read: Callable[[int, int], bytes], fd: int, size: int, delim: bytes, counted: int,
                  tail: bytes) -> tuple[int, bool]:
    """The length of a record of which ``counted`` bytes (ending in ``tail``) have been read
    (by ``read``, ``os.read`` or a :class:`ReadAhead`'s): read on to its delimiter or the end
    of the input, keeping nothing; and True. Past :data:`COUNT_MAX` bytes, what was counted
    and False."""
    while True:
        if counted > COUNT_MAX:
            return counted, False
        try:
            data = read(fd, size)
        except InterruptedError:
            continue
        if not data:
            return counted, True
        at = (tail + data).find(delim)
        if at >= 0:
            return counted + at - len(tail), True
        counted += len(data)
        if tail:
            tail = (tail + data)[-len(tail):]
