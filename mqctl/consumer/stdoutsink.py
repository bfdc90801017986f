"""``mqctl consume`` without ``--exec``: :class:`StdoutSink` writes each message's line (the raw
body, the JSON envelope or a ``--format``) to stdout, batches of big bodies with ``writev``,
and counts how many whole lines reached the reader when a write fails."""
from __future__ import annotations

import os
import sys

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
    newline) lets the runtime hand over bare bodies."""

    def __init__(self, render: Callable[[Message], bytes], raw: bool = False) -> None:
        self.render = render
        self.raw = raw
        self.completed = 0
        self.fd = _stdout_fd()
        self._poll: Any = None   # select.poll on stdout when it is a pipe; False when not

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
            i, done = 0, 0   # chunks[i] is the first not written in full; done: of its bytes
            while i < len(chunks):
                group: list[bytes | memoryview] = list(chunks[i:i + _IOV_MAX])
                if done:
                    group[0] = memoryview(group[0])[done:]
                n = os.writev(self.fd, group) if len(group) > 1 else os.write(self.fd, group[0])
                written += n
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
