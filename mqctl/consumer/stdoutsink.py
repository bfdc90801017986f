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
        self._poll: Any = None   # select.poll on stdout when it is a pipe; False when not
        self.stopping: Callable[[], bool] = lambda: False   # the consumer was asked to stop
        self._nb: int | None = None   # a non-blocking descriptor of stdout's pipe or terminal; -1: none

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
            i, done = 0, 0   # chunks[i] is the first not written in full; done: of its bytes
            while i < len(chunks):
                group: list[bytes | memoryview] = list(chunks[i:i + _IOV_MAX])
                if done:
                    group[0] = memoryview(group[0])[done:]
                if limit >= 0:
                    group = _cut(group, limit - written)
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
                        _wait_writable(nb)
                        continue
                written += n
                if limit < 0 and nb >= 0 and self.stopping():
                    limit, grace = _line_end(written, sizes, bodies), time.monotonic() + _STOP_GRACE_S
                if limit == written:
                    raise InterruptedError("stopping: the line in progress was written")
                if n == sum(map(len, group)):
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

    def idle_check(self) -> None:
        """Called by an idle consumer: BrokenPipe if stdout is a pipe whose reader is gone
        (``| head`` got its lines while everything fitted in the pipe), so the consumer exits
        141 now instead of at its next write, which may never come."""
        if self._poll is None:
            import select
            import stat
            try:
                if not stat.S_ISFIFO(os.fstat(self.fd).st_mode):
                    self._poll = False
                    return
                self._poll = select.poll()
                self._poll.register(self.fd, 0)   # POLLERR / POLLHUP are always reported
            except (OSError, AttributeError, ValueError):
                self._poll = False
                return
        if self._poll is False:
            return
        if self._poll.poll(0):
            self.completed = 0
            from mqctl.output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader")


_STOP_LOOK_S = 0.1    # how often a write waiting for room looks at the stop
_STOP_GRACE_S = 0.5   # how long a stop waits for the reader to take the rest of the line in progress


def _wait_writable(fd: int) -> None:
    import select
    p = select.poll()
    p.register(fd, select.POLLOUT)
    p.poll(_STOP_LOOK_S * 1000)


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
