"""What consuming a batch means for ``mqctl consume --exec CMD``: running CMD. This and
``mqctl/consumer/stdoutsink.py`` (writing to stdout) are the CLI's sinks for the library's
consumer runtime (:class:`store.ConsumerRuntime`), which does everything else; a handler
process itself is a :class:`~mqctl.consumer.child.Child`.

A handler returns True when the batch is consumed. The stdout handler consumes a batch once
it is written and flushed (``BrokenPipe`` if the reader went away: nothing of that batch is
committed). The exec handler runs CMD without a shell, body on stdin, metadata in ``MQ_*``
environment variables; exit 0 = consumed, anything else (or ``--consume-timeout``) = failed.
Handlers are started without running any Python between ``fork`` and ``exec`` (so the spawn
is a ``vfork``), each in a process group of its own that a watchdog process hands out
(``mqctl/consumer/watchdog.py``): when the consumer dies, even of SIGKILL, even right around a
spawn, the watchdog kills every group still in use. Their own group keeps a Ctrl-C at the
terminal for the consumer alone (which then lets the batches in handlers finish and commits
them) and lets a timeout kill a handler's whole tree. A clustering handler inherits a
descriptor of its queue's lock file: the OS lock is held until the last handler of the queue
is gone, so no new owner can start the queue while a handler of the previous one may still
run.
"""
from __future__ import annotations

import concurrent.futures as cf
import errno
import fcntl
import os
import shutil
import signal
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from mqctl.consumer.child import Child, HandlerTimeout, kill_tree
from mqctl.consumer.outputs import emit_outputs, read_captured
from mqctl.consumer.slots import FifoSlots
from mqctl.consumer.watchdog import Watchdog
from mqctl.output import BrokenPipe, reader_gone
from store.errors import HandlerError, UsageError

if TYPE_CHECKING:
    from store import Outcome
    from store import StoredMessage as Message


def _ignore(_signum: int, _frame: object) -> None:
    pass


def split_command(cmd: str) -> list[str]:
    from mqctl.shellwords import split  # (as sh splits it: the one splitter of CMD strings)
    try:
        argv = split(cmd)
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


def _empty_file() -> int:
    """A close-on-exec descriptor of a new, empty, unnamed file: a memfd (one syscall, no file
    system), or an unlinked temporary file where there is none."""
    try:
        return os.memfd_create("mqctl-body", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        import tempfile  # (only here: not on every consumer's start-up)
        with tempfile.TemporaryFile(prefix="mqctl-body-") as f:
            return os.dup(f.fileno())


def _null_stdout() -> int:
    """-1 when this process's stdout can be written; else (started with it closed, ``>&-``:
    ``mqctl/entry.py`` holds the descriptor with a read-only /dev/null) a close-on-exec
    descriptor, above 2, of /dev/null opened for writing, to be the handlers' stdout: a handler
    that prints (``cat``) must not fail on EBADF and send every message to its retry topic."""
    try:
        if fcntl.fcntl(1, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
            return -1
    except OSError:
        pass   # (closed: a library caller's process)
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    if null <= 2:
        low, null = null, fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(low)
    return null


def _fill(fd: int, body: bytes) -> None:
    """Write ``body`` into the empty file ``fd`` with ``pwrite``: the file's offset, which the
    handler shares, stays at 0, where it starts reading. (mqctl keeps out of ``store``'s file
    helpers: this file is the handler's, not the store's.)"""
    view = memoryview(body)
    pos = 0
    while pos < len(view):
        n = os.pwrite(fd, view[pos:], pos)
        if n <= 0:   # a full memory file system: say so rather than loop
            raise OSError(errno.ENOSPC, "short write of a handler's stdin")
        pos += n


def _no_inherited_fds() -> None:
    """Make every descriptor above stderr that this process got inheritable (from whoever
    started it) close-on-exec: a handler is started with ``posix_spawn``, which has no
    "close the others" action before Python 3.13, so what a handler inherits is what is not
    close-on-exec. Python opens everything close-on-exec (PEP 446), and so does the store:
    once per consumer (its :class:`ExecHandler`) is enough."""
    d = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                os.set_inheritable(fd, False)
        except OSError:
            pass   # the listing's own descriptor, closed by now


# subprocess resets these (Python ignores them) before exec: so does the handler's spawn.
_PIPE_DEATHS = (-signal.SIGPIPE, 128 + signal.SIGPIPE)   # (killed by it, or a shell's child was)
_RESET_SIGNALS = tuple(getattr(signal, s) for s in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, s))


class ExecHandler:
    """``--exec CMD``: one child process per message, or per batch with ``--batch N``.

    Stdin: the body as it is; with ``--batch N`` (N > 1) each body and a newline, even in a
    batch of one; with ``--json`` one envelope per line. The ``MQ_*`` variables describe the
    first message, except ``MQ_RECONSUME_TIMES`` (the highest of the batch: above 0, it holds
    a redelivery); ``MQ_QUEUE_OFFSETS`` and ``MQ_MSG_IDS`` list every message of a batch.

    A handler is started with ``posix_spawnp`` (a ``vfork``-like clone in the C library: no
    Python runs in the child): stdin a memfd written in full first, ``setpgid`` into the
    watchdog's group, ``execvp``. Its environment is this process's as it was when the
    handler was set up (taken once, not per message), plus the ``MQ_*`` variables. glibc's
    ``posix_spawn`` leaves its two internal signals (32 and 33) ignored in the new program;
    programs on glibc set their own handlers for them, and nothing else uses them."""

    def __init__(self, argv: list[str], group: str, timeout_s: float | None,
                 render: Callable[[Message], bytes] | None = None, lines: bool = False,
                 pool: int = 2, capture: bool = False) -> None:
        check_runnable(argv)
        self.capture = capture        # --to: stdout goes to a file read back as outputs
        self.null_out = -1 if capture else _null_stdout()   # >&-: a /dev/null it can write
        self.argv = argv
        self.group = group
        self.timeout_s = timeout_s
        self.render = render          # --json: the handler reads envelopes, one per line
        self.lines = lines            # --batch N > 1: every body ends with a newline
        self.running: set[Child] = set()   # handlers started and not yet reaped
        self.aborted = False
        self.closed = False
        self.base_env = dict(os.environ)
        self.spare: list[int] = []   # empty files for the next handlers' stdin (list: atomic pop)
        # pool: placeholders kept ready, one more than the handlers that can run at once
        self.watchdog = Watchdog(pool)
        _no_inherited_fds()
        # Nothing runs in the child before exec, so a handler keeps the dispositions this
        # process has, but exec resets every caught signal to its default: an ignored SIGINT
        # (a consumer started with `&` by a script) becomes a caught one that does nothing.
        # (SIGPIPE and SIGXFSZ, which Python ignores, are reset by the spawn: _RESET_SIGNALS.)
        if (signal.getsignal(signal.SIGINT) == signal.SIG_IGN
                and threading.current_thread() is threading.main_thread()):
            signal.signal(signal.SIGINT, _ignore)

    def environment(self, msgs: list[Message], topic: str) -> dict[str, str]:
        m = msgs[0]
        env = self.base_env.copy()
        offset_id = m.msg_id
        env.update({
            "MQ_TOPIC": topic,
            "MQ_QUEUE_ID": str(m.queue_id),
            "MQ_QUEUE_OFFSET": str(m.queue_offset),
            "MQ_MSG_ID": m.uniq_key or offset_id,
            "MQ_OFFSET_MSG_ID": offset_id,
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
        for child in list(self.running):
            try:
                os.killpg(child.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """No handler starts after this; the watchdog kills what still runs and exits."""
        self.closed = True
        self.watchdog.close()
        if self.null_out >= 0:
            os.close(self.null_out)
            self.null_out = -1
        while self.spare:
            os.close(self.spare.pop())

    def spawn(self, msgs: list[Message], topic: str, pass_fds: tuple[int, ...] = ()) -> Child | None:
        """Start the handler of a batch, for :meth:`finish`; None after :meth:`abort`. Raises
        HandlerError when the command cannot be started."""
        if self.aborted:
            return None
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
        env = self.environment(msgs, topic)
        # stdin is a file written in full before the handler starts, not a pipe: if this
        # consumer is killed, the kernel closes a pipe's write end before the handler is
        # killed, and the handler would read a cut body as if it were whole.
        try:   # an empty file made after the last spawn (see below), or a new one
            stdin = self.spare.pop()
        except IndexError:
            stdin = _empty_file()
        low: list[int] = []
        out = -1
        try:
            _fill(stdin, body)
            # Every descriptor reaches the handler through a dup2 onto another number, made in
            # the child only: the copy there is not close-on-exec, and nothing inheritable is
            # ever opened here (a handler started meanwhile by another thread gets none of
            # them). Not dup2 onto itself, which clears close-on-exec only on glibc 2.29 and
            # later; so a source among 0-2 (this process runs with them closed) is first
            # copied above them, as subprocess does, and the passed ones land above them all.
            if stdin <= 2:
                low.append(stdin)
                stdin = fcntl.fcntl(stdin, fcntl.F_DUPFD_CLOEXEC, 3)
            fds = []
            for fd in pass_fds:
                if fd <= 2:
                    fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
                    low.append(fd)
                fds.append(fd)
            if self.capture:   # (made before ``top``: no passed descriptor may land on it)
                out = _empty_file()
                if out <= 2:
                    low.append(out)
                    out = fcntl.fcntl(out, fcntl.F_DUPFD_CLOEXEC, 3)
            top = max([stdin, out, *fds]) + 1
            actions = [(os.POSIX_SPAWN_DUP2, stdin, 0),
                       *((os.POSIX_SPAWN_DUP2, fd, top + i) for i, fd in enumerate(fds))]
            if out >= 0:
                actions.append((os.POSIX_SPAWN_DUP2, out, 1))
            elif self.null_out >= 0:
                actions.append((os.POSIX_SPAWN_DUP2, self.null_out, 1))
            for attempt in (1, 2):
                try:
                    pgid = self.watchdog.take()
                except OSError as exc:
                    raise HandlerError(f"cannot run handler {self.argv[0]!r}: {exc.strerror or exc}") from exc
                try:
                    pid = os.posix_spawnp(self.argv[0], self.argv, env, file_actions=actions,
                                          setpgroup=pgid, setsigdef=_RESET_SIGNALS)
                    break
                except OSError as exc:
                    self.watchdog.give_back(pgid)
                    # EPERM from setpgid: the group went with a watchdog that died; a new one
                    # gives a new group.
                    if attempt == 1 and exc.errno == errno.EPERM:
                        self.watchdog.check()
                        continue
                    raise HandlerError(f"cannot run handler {self.argv[0]!r}: {exc.strerror or exc}") from exc
        except BaseException:
            if out >= 0:
                os.close(out)
            raise
        finally:
            os.close(stdin)
            for fd in low:
                os.close(fd)
        child = Child(pid, pgid, stdout_fd=out)
        self.running.add(child)
        if not self.spare and not self.aborted and not self.closed:
            # the next handler's stdin, made now that this one is started: out of its latency
            try:
                self.spare.append(_empty_file())
            except OSError:
                pass   # made when needed, or the error is reported then
        try:
            # A watchdog that died between take() and the spawn: the new one adopts pgid.
            self.watchdog.check()
            if self.aborted:   # abort() ran between the check above and the start
                kill_tree(child)
        except BaseException:
            self.finish(child)
            raise
        return child

    def finish(self, child: Child) -> tuple[bool | None, str]:
        """Wait for a handler :meth:`spawn` started (killing it at the timeout): (consumed,
        why not); None: ended by :meth:`abort`, hand the batch back."""
        try:
            child.wait(self.timeout_s)
        except HandlerTimeout:
            kill_tree(child)
            return False, f"handler timed out after {self.timeout_s:g}s"
        finally:
            self.running.discard(child)
            if child.returncode is None:   # an exception on the way: do not leave it running
                kill_tree(child)
            self.watchdog.give_back(child.pgid)   # reaped: the group may go
        code = child.wait()   # reaped: its exit status
        if child.stdout_fd >= 0:
            try:
                child.output = read_captured(child.stdout_fd) if code == 0 else b""
            finally:
                os.close(child.stdout_fd)
                child.stdout_fd = -1
        if self.aborted and code != 0:
            return None, "handler ended by a second interrupt"
        if code in _PIPE_DEATHS and not self.capture and reader_gone(1):
            # It wrote to the consumer's stdout, whose reader left (`| head`): SIGPIPE (itself, or
            # a command of its shell). Not the message's failure (no retry, no dead letter): the
            # consumer stops as a write of its own would (exit 141), this batch uncommitted. (Any
            # other failure is the message's, reader or not: retried, dead-lettered, said.)
            raise BrokenPipe("stdout was closed by the reader")
        if code == 0:
            return True, ""
        if code < 0:
            return False, f"handler killed by signal {-code}"
        return False, f"handler exited with {code}"


class ExecSink:
    """``--exec CMD`` as a :class:`~store.client.sinks.PoolSink`: ``--threads`` handler
    runs at a time, ``--batch`` messages each. The command is checked before the consumer
    joins its group."""

    client_messages = False     # (the optional PoolSink attributes)
    persist_every_s = 0.0
    spread = 0
    per_message = False
    cancel_on_stop = True       # a batch still waiting for a slot is handed back by a stop
    interleave = True           # a batch of each queue held in turn

    def __init__(self, argv: list[str], group: str, timeout_s: float | None, threads: int, batch: int,
                 render: Callable[[Message], bytes] | None = None, outputs: str | None = None) -> None:
        self.handler = ExecHandler(argv, group, timeout_s, render, lines=batch > 1, pool=threads + 1,
                                   capture=outputs is not None)
        # --to: stdout read as messages ("lines", "json"), the outputs of the batch's last one
        self.outputs = outputs
        self.emit: Callable[[Message, list[Any]], None] | None = None
        self.batch = max(1, batch)
        self.max_in_flight = 2 * max(1, threads)
        # --threads handlers at a time (the slots); a pool thread per batch in flight, which
        # waits for its handler, or for a slot and then starts it: a batch is never queued
        # behind another's wait.
        self.slots = FifoSlots(max(1, threads))
        self.pool = cf.ThreadPoolExecutor(max_workers=2 * self.max_in_flight, thread_name_prefix="handler")
        # set by the runtime (--dedup): told each outcome in this thread, before the slot frees
        self.on_outcome: Callable[[list[Message], Outcome], None] | None = None
        # set by the runtime: asked before a handler that waited for a slot starts
        self.may_start: Callable[[list[Message]], bool] | None = None
        try:
            self.handler.watchdog.start()   # now, not in the first handler's latency
        except OSError as exc:
            raise HandlerError(f"cannot run handler {argv[0]!r}: {exc.strerror or exc}") from exc

    def submit(self, batch: list[Message], topic: str) -> Future[Outcome]:
        return self._submit(batch, topic, None)

    def submit_locked(self, batch: list[Message], topic: str, lock_fd: int) -> Future[Outcome]:
        """Like ``submit``; the handler inherits ``lock_fd`` (a copy of its queue's lock,
        closed here when it is done), so the queue stays locked while it runs."""
        return self._submit(batch, topic, lock_fd)

    def _submit(self, batch: list[Message], topic: str, lock_fd: int | None) -> Future[Outcome]:
        """With a slot free the handler starts now, in the caller's thread: handing the
        start to a pool thread costs milliseconds (it waits for the GIL while the caller's
        loop runs on). Otherwise a pool thread starts it when a slot frees; until then the
        future is pending, so a stop can still hand the batch back (``cancel``)."""
        fut: Future[Outcome] = Future()
        job: Callable[[], None]
        ticket = self.slots.ticket()
        if ticket.is_set():
            fut.set_running_or_notify_cancel()   # running: a stop waits for it
            try:
                started = self.handler.spawn(batch, topic, () if lock_fd is None else (lock_fd,))
            except BaseException as exc:
                self._settle(fut, lock_fd, exc)
                return fut

            def job() -> None:
                self._wait(fut, started, lock_fd, batch)
        else:
            def job() -> None:
                self._later(fut, ticket, batch, topic, lock_fd)
            started = None
        try:
            self.pool.submit(job)
        except BaseException as exc:   # the pool was shut down
            if started is not None:
                kill_tree(started)
                self.handler.finish(started)
            if fut.running():
                self._settle(fut, lock_fd, exc)
            else:
                self.slots.withdraw(ticket)
                if lock_fd is not None:
                    os.close(lock_fd)
            raise
        return fut

    def _later(self, fut: Future[Outcome], ticket: threading.Event, batch: list[Message], topic: str,
               lock_fd: int | None) -> None:
        ticket.wait()
        if not fut.set_running_or_notify_cancel():   # handed back by a stop meanwhile
            self.slots.release()
            if lock_fd is not None:
                os.close(lock_fd)
            return
        try:
            refused = self.may_start is not None and not self.may_start(batch)
        except BaseException as exc:   # (--dedup's look at its log failed: the consumer's error, not a hang)
            self._settle(fut, lock_fd, exc)
            return
        if refused:
            # its queue was let go while it waited (this process stopped past its lease, say),
            # or --dedup recorded a message of it meanwhile (Holdings.may_start)
            self._wait(fut, None, lock_fd, batch, "handed back before its handler started")
            return
        try:
            started = self.handler.spawn(batch, topic, () if lock_fd is None else (lock_fd,))
        except BaseException as exc:
            self._settle(fut, lock_fd, exc)
            return
        self._wait(fut, started, lock_fd, batch)

    def _wait(self, fut: Future[Outcome], started: Child | None, lock_fd: int | None,
              batch: list[Message], not_started: str = "the consumer is stopping") -> None:
        try:
            outcome: Outcome = (None, not_started) if started is None else self.handler.finish(started)
            if outcome[0] is True and self.outputs is not None and started is not None:
                assert self.emit is not None
                outcome = emit_outputs(self.emit, batch[-1], started.output, self.outputs == "json")
        except BaseException as exc:
            self._settle(fut, lock_fd, exc)
        else:
            try:
                if self.on_outcome is not None:
                    # (--dedup's record: the handler was reaped just now, and nothing waits
                    # for this thread yet, so a crash can fall between them only here)
                    self.on_outcome(batch, outcome)
            finally:
                self._settle(fut, lock_fd, outcome)

    def _settle(self, fut: Future[Outcome], lock_fd: int | None, result: Outcome | BaseException) -> None:
        """The handler is done (or never started): free its slot and its copy of the queue's
        lock, then complete the future."""
        self.slots.release()
        if lock_fd is not None:
            os.close(lock_fd)
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    def abort(self) -> None:
        self.handler.abort()

    def shutdown(self, wait: bool) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=True)
        self.handler.close()
