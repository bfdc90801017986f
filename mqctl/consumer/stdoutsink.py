"""``mqctl consume`` without ``--exec``: :class:`StdoutSink` writes each message's line (the raw
body, the JSON envelope or a ``--format``) to stdout, batches of big bodies with ``writev``,
and counts how many whole lines reached the reader when a write fails."""
from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

    from store import StoredMessage as Message


def _stdout_fd() -> int:
    """The descriptor behind ``sys.stdout`` (1, unless a caller redirected ``sys.stdout``, as
    in-process runs of the CLI do)."""
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return 1


class StdoutSink:
    """``consume`` without ``--exec``: raw bodies, the JSON envelope, or a ``--format``.

    An inline sink: a message is consumed once the write of its whole line returned. When a
    write fails (the reader closed the pipe: ``BrokenPipe``, exit 141; or a second signal
    interrupted a blocked write) ``completed`` tells the runtime how many leading messages of
    the call were delivered, and only those are committed. For a pipe, delivered means taken
    out of the pipe by the reader: what was still in the pipe's buffer when the reader went
    away (``FIONREAD``) was never read, and is not counted. ``raw`` (the renderer is body +
    newline) lets the runtime hand over bare bodies.

    A stop (``stopping()``: SIGINT/SIGTERM) ends a write blocked on a reader that does not
    read: a pipe or a terminal is written through a non-blocking descriptor of its own (opened
    again through ``/proc``: the one shared with the shell stays blocking), and while it is full
    the sink waits for room looking at the stop every ``_STOP_LOOK_S``. Once stopping, it writes
    at most the rest of the line in progress (for ``_STOP_GRACE_S`` at most), then raises
    ``InterruptedError`` with ``completed`` the lines written whole: the runtime commits those
    and stops as for any stop (exit 0). Nothing is written after the stop but that rest."""

    def __init__(self, render: Callable[[Message], bytes], raw: bool = False) -> None:
        self.render = render
        self.raw = raw
        self.completed = 0
        self.fd = _stdout_fd()
        self.stopping: Callable[[], bool] = lambda: False   # the consumer was asked to stop
        self._nb: int | None = None   # a non-blocking descriptor of stdout's pipe or terminal; -1: none
        self._nb_poll: Any = None   # select.poll on it, waiting for room

    def consume(self, batch: list[Message]) -> None:
        lines = [self.render(m) for m in batch]
        # one write for the batch (a write per line was a syscall per message); the sizes
        # still say which lines a failed write delivered whole
        self._write([b"".join(lines)], [len(x) for x in lines])

    def write_raw(self, bodies: Sequence[bytes | memoryview]) -> None:
        total = sum(map(len, bodies))
        if total >= 1 << 20:
            from mqctl.output import keep_big_buffers
            keep_big_buffers()   # batches this big will follow: reuse their memory (once)
        if total >= len(bodies) * _GATHER_MIN_AVG:
            # big bodies go to the kernel as they are (writev): not copied together first
            iov: list[bytes | memoryview] = [b"\n"] * (2 * len(bodies))
            iov[::2] = bodies
            self._write(iov, None, bodies)
            return
        self._write([b"\n".join(bodies), b"\n"], None, bodies)

    def _write(self, chunks: Sequence[bytes | memoryview], sizes: list[int] | None,
               bodies: Sequence[bytes | memoryview] | None = None) -> None:
        self.completed = 0
        written = 0
        try:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            if self.stopping():
                raise InterruptedError("stopping: nothing more is written")
            nb = self._nonblocking()
            limit = -1   # once stopping: the byte count to stop at (the end of the line in progress)
            grace = 0.0
            # A non-blocking write takes no more than the pipe has room for (64 KiB, as the reader
            # frees it): its groups stop at about that many bytes, so that each write does not
            # rebuild and measure a group of 1,024 chunks (CPU for 200 MB of 1 KiB bodies to
            # | cat: 0.42 s uncapped, 0.34 s capped, 0.27 s blocking). A blocking write takes it all.
            cap = _NB_GROUP_BYTES if nb >= 0 else _NO_CAP
            i, done = 0, 0   # chunks[i] is the first not written in full; done: of its bytes
            while i < len(chunks):
                group, size = _group(chunks, i, done, cap)
                if limit >= 0:
                    group = _cut(group, limit - written)
                    size = sum(map(len, group))
                if nb < 0:
                    n = os.writev(self.fd, group) if len(group) > 1 else os.write(self.fd, group[0])
                else:
                    try:
                        n = os.writev(nb, group) if len(group) > 1 else os.write(nb, group[0])
                    except BlockingIOError:
                        n = 0
                        if limit < 0 and self.stopping():
                            limit, grace = _line_end(written, sizes, bodies), time.monotonic() + _STOP_GRACE_S
                        if limit == written or (limit >= 0 and time.monotonic() >= grace):
                            raise InterruptedError("stopping: the reader took nothing more") from None
                        self._wait_writable(nb)
                        continue
                written += n
                if limit < 0 and nb >= 0 and self.stopping():
                    limit, grace = _line_end(written, sizes, bodies), time.monotonic() + _STOP_GRACE_S
                if limit == written:
                    raise InterruptedError("stopping: the line in progress was written")
                if n == size:
                    i, done = i + len(group), 0
                    continue
                while i < len(chunks) and (n or not len(chunks[i])):   # past what was written
                    left = len(chunks[i]) - done
                    if n < left:
                        done += n
                        break
                    n -= left
                    i, done = i + 1, 0
        except BrokenPipeError as exc:
            self.completed = _whole_lines(written - _unread(self.fd), sizes, bodies)
            from mqctl.output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader") from exc
        except OSError as exc:
            self.completed = _whole_lines(written, sizes, bodies)
            from mqctl.errors import stdout_write_error
            raise stdout_write_error(exc) from exc
        except BaseException:
            self.completed = _whole_lines(written, sizes, bodies)
            raise
        if sizes is None:
            self.completed = len(bodies or ())
        else:
            self.completed = len(sizes)


    def _nonblocking(self) -> int:
        """A descriptor of stdout's pipe or terminal opened again, non-blocking (its own open file
        description: O_NONBLOCK on the shared one would reach the shell and every other process
        writing there); -1 where there is none (a file, a socket, no ``/proc``)."""
        if self._nb is None:
            self._nb = -1
            try:
                import stat
                if stat.S_ISFIFO(os.fstat(self.fd).st_mode) or os.isatty(self.fd):
                    self._nb = os.open(f"/proc/self/fd/{self.fd}",
                                       os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            except OSError:
                pass   # (no /proc, or a pipe whose reader is gone: the write says so)
        return self._nb

    def _wait_writable(self, fd: int) -> None:
        """Until ``fd`` has room, or ``_STOP_LOOK_S`` (to look at the stop again)."""
        if self._nb_poll is None:
            import select
            self._nb_poll = select.poll()
            self._nb_poll.register(fd, select.POLLOUT)
        self._nb_poll.poll(_STOP_LOOK_S * 1000)

    def close(self) -> None:
        """Close the non-blocking descriptor of stdout, if one was opened (stdout stays open)."""
        if self._nb is not None and self._nb >= 0:
            os.close(self._nb)
        self._nb, self._nb_poll = None, None

    def idle_check(self) -> None:
        """Called by an idle consumer: BrokenPipe if stdout is a pipe whose reader is gone
        (``| head`` got its lines while everything fitted in the pipe), so the consumer exits
        141 now instead of at its next write, which may never come."""
        from mqctl.output import BrokenPipe, reader_gone
        if reader_gone(self.fd):
            self.completed = 0
            raise BrokenPipe("stdout was closed by the reader")


_STOP_LOOK_S = 0.1    # how often a write waiting for room looks at the stop
_STOP_GRACE_S = 0.5   # how long a stop waits for the reader to take the rest of the line in progress


_NB_GROUP_BYTES = 1 << 16   # a pipe's room at most (its default size), what one non-blocking write takes
_NO_CAP = 1 << 62


def _group(chunks: Sequence[bytes | memoryview], i: int, done: int,
           cap: int) -> tuple[list[bytes | memoryview], int]:
    """The next write's chunks from ``chunks[i]`` (``done`` of its bytes written already): at
    most ``_IOV_MAX``, and none after the one that reaches ``cap`` bytes; and their size."""
    if cap >= _NO_CAP:   # (a blocking write: slice and sum in C)
        group = list(chunks[i:i + _IOV_MAX])
        if done:
            group[0] = memoryview(group[0])[done:]
        return group, sum(map(len, group))
    first = chunks[i] if not done else memoryview(chunks[i])[done:]
    group, size = [first], len(first)
    for j in range(i + 1, min(len(chunks), i + _IOV_MAX)):
        if size >= cap:
            break
        group.append(chunks[j])
        size += len(chunks[j])
    return group, size


def _line_end(nbytes: int, sizes: list[int] | None, bodies: Sequence[bytes | memoryview] | None) -> int:
    """Where the line that byte ``nbytes`` falls in ends (``nbytes`` itself at a line's end)."""
    total = 0
    for size in (sizes if sizes is not None else (len(b) + 1 for b in bodies or ())):
        if total >= nbytes:
            break
        total += size
    return total


def _cut(group: list[bytes | memoryview], left: int) -> list[bytes | memoryview]:
    """The first ``left`` bytes of ``group``."""
    out: list[bytes | memoryview] = []
    for chunk in group:
        if left <= 0:
            break
        out.append(chunk if len(chunk) <= left else memoryview(chunk)[:left])
        left -= len(out[-1])
    return out


_GATHER_MIN_AVG = 1024   # raw bodies this big on average are written with writev, not joined
_IOV_MAX = 1024


def _unread(fd: int) -> int:
    """Bytes still in the pipe ``fd`` writes to (0 if it is not a pipe, or cannot say): after
    the reader closed its end, they are what it never read."""
    try:
        import fcntl
        import stat
        import struct
        import termios
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
        buf = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
        n: int = struct.unpack("i", buf)[0]
        return max(0, n)
    except (OSError, ImportError, AttributeError, ValueError):
        return 0


def _whole_lines(nbytes: int, sizes: list[int] | None, bodies: Sequence[bytes | memoryview] | None) -> int:
    """How many leading lines fit in full in the first ``nbytes`` bytes written."""
    total = n = 0
    for size in (sizes if sizes is not None else (len(b) + 1 for b in bodies or ())):
        total += size
        if total > nbytes:
            break
        n += 1
    return n
