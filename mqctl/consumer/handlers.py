"""What consuming a batch means for ``mqctl consume``: writing it to stdout, or running
``--exec CMD``. These are the CLI's sinks for the library's consumer runtime
(``store/client/runtime.py``), which does everything else.

A handler returns True when the batch is consumed. The stdout handler consumes a batch once
it is written and flushed (``BrokenPipe`` if the reader went away: nothing of that batch is
committed). The exec handler runs CMD without a shell, body on stdin, metadata in ``MQ_*``
environment variables; exit 0 = consumed, anything else (or ``--consume-timeout``) = failed.
Handler children get SIGKILL when the consumer dies (``PR_SET_PDEATHSIG``, checked against
``getppid()`` right after it is set, so a consumer killed between ``fork()`` and ``prctl()``
does not leave its handler running), and a clustering handler inherits a descriptor of its
queue's lock file: the OS lock is held until the last handler of the queue is gone, so no
new owner can start the queue while a handler of the previous one may still run.
"""
from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from store.client.runtime import Outcome, ThreadPoolSink
from store.errors import HandlerError, UsageError
from store.log.record import Message

if TYPE_CHECKING:
    from concurrent.futures import Future

_PR_SET_PDEATHSIG = 1
_libc_prctl: Callable[..., int] | None = None


def _load_prctl() -> None:
    global _libc_prctl
    try:
        _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _libc_prctl = None


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    if _libc_prctl is not None:
        _libc_prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The death signal only covers a parent that dies from now on: one killed between
        # fork() and prctl() has already gone, and the child was re-parented.
        if os.getppid() != parent:
            os._exit(137)
    # Its own process group: a Ctrl-C at the terminal goes to the consumer alone, which then
    # lets the batches in handlers finish and commits them (instead of every handler dying
    # of SIGINT and its message counting as failed), and a timeout can kill the handler's
    # whole tree, not just the shell at its top.
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)



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
        self._write(lines, [len(x) for x in lines])

    def write_raw(self, bodies: list[bytes]) -> None:
        self._write([b"\n".join(bodies), b"\n"], None, bodies)

    def _write(self, chunks: list[bytes], sizes: list[int] | None, bodies: list[bytes] | None = None) -> None:
        self.completed = 0
        written = 0
        try:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    n = os.write(self.fd, view)
                    written += n
                    view = view[n:]
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


def _whole_lines(nbytes: int, sizes: list[int] | None, bodies: list[bytes] | None) -> int:
    """How many leading lines fit in full in the first ``nbytes`` bytes written."""
    total = n = 0
    for size in (sizes if sizes is not None else (len(b) + 1 for b in bodies or ())):
        total += size
        if total > nbytes:
            break
        n += 1
    return n


def split_command(cmd: str) -> list[str]:
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise UsageError(f"--exec {cmd!r}: {exc}") from exc
    if not argv:
        raise UsageError("--exec needs a command")
    return argv


def check_runnable(argv: list[str], what: str = "handler") -> None:
    """Fail before anything starts when the command (a consumer's handler, a transaction's
    check command, ...) cannot be started at all."""
    prog = argv[0]
    if os.sep in prog:
        if not (os.path.isfile(prog) and os.access(prog, os.X_OK)):
            raise HandlerError(f"cannot run {what} {prog!r}: not an executable file")
    elif shutil.which(prog) is None:
        raise HandlerError(f"cannot run {what} {prog!r}: not found on PATH")


class ExecHandler:
    """``--exec CMD``: one child process per message, or per batch with ``--batch N``.

    Stdin: the body as it is; with ``--batch N`` (N > 1) each body and a newline, even in a
    batch of one; with ``--json`` one envelope per line. The ``MQ_*`` variables describe the
    first message, except ``MQ_RECONSUME_TIMES`` (the highest of the batch: above 0, it holds
    a redelivery); ``MQ_QUEUE_OFFSETS`` and ``MQ_MSG_IDS`` list every message of a batch."""

    def __init__(self, argv: list[str], group: str, timeout_s: float | None,
                 render: Callable[[Message], bytes] | None = None, lines: bool = False) -> None:
        check_runnable(argv)
        _load_prctl()
        self.argv = argv
        self.group = group
        self.timeout_s = timeout_s
        self.render = render          # --json: the handler reads envelopes, one per line
        self.lines = lines            # --batch N > 1: every body ends with a newline
        self.running: set[subprocess.Popen[bytes]] = set()
        self.aborted = False

    def environment(self, msgs: list[Message], topic: str) -> dict[str, str]:
        m = msgs[0]
        env = dict(os.environ)
        env.update({
            "MQ_TOPIC": topic,
            "MQ_QUEUE_ID": str(m.queue_id),
            "MQ_QUEUE_OFFSET": str(m.queue_offset),
            "MQ_MSG_ID": m.uniq_key or m.msg_id,
            "MQ_OFFSET_MSG_ID": m.msg_id,
            "MQ_KEYS": " ".join(m.keys),
            "MQ_TAGS": m.tags or "",
            # a batch: the most any of its messages was redelivered (above 0: it holds a retry)
            "MQ_RECONSUME_TIMES": str(max(x.reconsume_times for x in msgs)),
            "MQ_GROUP": self.group,
            "MQ_BORN_TIMESTAMP": str(m.born_timestamp),
            "MQ_STORE_TIMESTAMP": str(m.store_timestamp),
            "MQ_BATCH_SIZE": str(len(msgs)),
        })
        if self.lines or len(msgs) > 1:   # --batch: every message's, in queue order
            env["MQ_QUEUE_OFFSETS"] = ",".join(str(x.queue_offset) for x in msgs)
            env["MQ_MSG_IDS"] = ",".join(x.uniq_key or x.msg_id for x in msgs)
        return env

    def abort(self) -> None:
        """End every running handler now (a second SIGINT/SIGTERM); none starts after this.
        Their batches are handed back, not counted as failed."""
        self.aborted = True
        for proc in list(self.running):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def run(self, msgs: list[Message], topic: str, pass_fds: tuple[int, ...] = ()) -> tuple[bool | None, str]:
        """(consumed, why not); None: ended by :meth:`abort`, hand the batch back. Raises
        HandlerError when the command cannot be started."""
        if self.aborted:
            return None, "the consumer is stopping"
        if self.render is not None:
            # As consume --json prints it: a redelivery from the retry topic under the topic
            # it was sent to (MQ_TOPIC too), its reconsumeTimes above 0.
            render = self.render
            body = b"".join(render(m if m.topic == topic else replace(m, topic=topic)) for m in msgs)
        elif self.lines or len(msgs) > 1:
            # --batch: one body per line, the last one too, whether the batch is full or not
            # (a `while read` handler would miss a last line without its newline).
            body = b"".join(m.body + b"\n" for m in msgs)
        else:
            body = msgs[0].body
        # stdin is a file written in full before the handler starts, not a pipe: if this
        # consumer is killed, the kernel closes a pipe's write end before the handler's death
        # signal arrives, and the handler would read a cut body as if it were whole.
        with tempfile.TemporaryFile(prefix="mqctl-body-") as stdin:
            stdin.write(body)
            stdin.flush()
            stdin.seek(0)
            parent = os.getpid()
            try:
                proc = subprocess.Popen(self.argv, stdin=stdin, env=self.environment(msgs, topic),
                                        preexec_fn=lambda: _die_with_parent(parent), close_fds=True,
                                        pass_fds=pass_fds)
            except OSError as exc:
                raise HandlerError(f"cannot run handler {self.argv[0]!r}: {exc.strerror or exc}") from exc
            self.running.add(proc)
            try:
                if self.aborted:   # abort() ran between the check above and the start
                    _kill_tree(proc)
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                return False, f"handler timed out after {self.timeout_s:g}s"
            finally:
                self.running.discard(proc)
        if self.aborted and proc.returncode != 0:
            return None, "handler ended by a second interrupt"
        if proc.returncode == 0:
            return True, ""
        if proc.returncode < 0:
            return False, f"handler killed by signal {-proc.returncode}"
        return False, f"handler exited with {proc.returncode}"


class ExecSink(ThreadPoolSink):
    """``--exec CMD`` as a pool sink: ``--threads`` handler runs at a time, ``--batch`` messages
    each. The command is checked before the consumer joins its group."""

    def __init__(self, argv: list[str], group: str, timeout_s: float | None, threads: int, batch: int,
                 render: Callable[[Message], bytes] | None = None) -> None:
        self.handler = ExecHandler(argv, group, timeout_s, render, lines=batch > 1)
        super().__init__(self._run, threads, batch)

    def _run(self, batch: list[Message], topic: str) -> Outcome:
        return self.handler.run(batch, topic)

    def submit_locked(self, batch: list[Message], topic: str, lock_fd: int) -> Future[Outcome]:
        """Like ``submit``; the handler inherits ``lock_fd`` (a copy of its queue's lock,
        closed here when it is done), so the queue stays locked while it runs."""
        closed: list[bool] = []

        def close_once() -> None:
            if not closed:
                closed.append(True)
                os.close(lock_fd)

        def work() -> Outcome:
            try:
                return self.handler.run(batch, topic, (lock_fd,))
            finally:
                close_once()
        try:
            fut = self.pool.submit(work)
        except BaseException:
            close_once()
            raise
        fut.add_done_callback(lambda f: close_once() if f.cancelled() else None)
        return fut

    def abort(self) -> None:
        self.handler.abort()


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the handler's process group (it leads one, see ``_die_with_parent``), so a
    ``sh -c 'sleep 999'`` does not leave the sleep running after its shell is gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def warn(msg: str) -> None:
    try:
        sys.stderr.write(f"mqctl: warning: {msg}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
