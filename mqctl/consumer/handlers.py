"""What consuming a batch means for ``mqctl consume``: writing it to stdout, or running
``--exec CMD``. These are the CLI's sinks for the library's consumer runtime
(``store/client/runtime.py``), which does everything else.

A handler returns True when the batch is consumed. The stdout handler consumes a batch once
it is written and flushed (``BrokenPipe`` if the reader went away: nothing of that batch is
committed). The exec handler runs CMD without a shell, body on stdin, metadata in ``MQ_*``
environment variables; exit 0 = consumed, anything else (or ``--consume-timeout``) = failed.
Handler children get SIGKILL when the consumer dies (``PR_SET_PDEATHSIG``), so a ``kill -9``
of the consumer does not leave a handler running on.
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
from typing import Callable

from store.client.runtime import Outcome, ThreadPoolSink
from store.errors import HandlerError, UsageError
from store.record import Message

from ..output import write_records

_PR_SET_PDEATHSIG = 1
_libc_prctl: Callable[..., int] | None = None


def _load_prctl() -> None:
    global _libc_prctl
    try:
        _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _libc_prctl = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _libc_prctl is not None:
        _libc_prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Its own process group: a Ctrl-C at the terminal goes to the consumer alone, which then
    # lets the batches in handlers finish and commits them (instead of every handler dying
    # of SIGINT and its message counting as failed), and a timeout can kill the handler's
    # whole tree, not just the shell at its top.
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


class StdoutSink:
    """``consume`` without ``--exec``: raw bodies, the JSON envelope, or a ``--format``.

    An inline sink: a batch is consumed once written and flushed (``BrokenPipe``: nothing of
    it is). ``raw`` (the renderer is body + newline) lets the runtime hand over bare bodies."""

    def __init__(self, render: Callable[[Message], bytes], raw: bool = False) -> None:
        self.render = render
        self.raw = raw

    def consume(self, batch: list[Message]) -> None:
        write_records([self.render(m) for m in batch])

    def write_raw(self, bodies: list[bytes]) -> None:
        write_records([b"\n".join(bodies), b"\n"])


def split_command(cmd: str) -> list[str]:
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise UsageError(f"--exec {cmd!r}: {exc}") from exc
    if not argv:
        raise UsageError("--exec needs a command")
    return argv


def check_runnable(argv: list[str]) -> None:
    """Fail before joining the group when the handler cannot be started at all."""
    prog = argv[0]
    if os.sep in prog:
        if not (os.path.isfile(prog) and os.access(prog, os.X_OK)):
            raise HandlerError(f"cannot run handler {prog!r}: not an executable file")
    elif shutil.which(prog) is None:
        raise HandlerError(f"cannot run handler {prog!r}: not found on PATH")


class ExecHandler:
    """``--exec CMD``: one child process per message, or per batch with ``--batch N``."""

    def __init__(self, argv: list[str], group: str, timeout_s: float | None) -> None:
        check_runnable(argv)
        _load_prctl()
        self.argv = argv
        self.group = group
        self.timeout_s = timeout_s

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
            "MQ_RECONSUME_TIMES": str(m.reconsume_times),
            "MQ_GROUP": self.group,
            "MQ_BORN_TIMESTAMP": str(m.born_timestamp),
            "MQ_STORE_TIMESTAMP": str(m.store_timestamp),
            "MQ_BATCH_SIZE": str(len(msgs)),
        })
        if len(msgs) > 1:
            env["MQ_QUEUE_OFFSETS"] = ",".join(str(x.queue_offset) for x in msgs)
            env["MQ_MSG_IDS"] = ",".join(x.uniq_key or x.msg_id for x in msgs)
        return env

    def run(self, msgs: list[Message], topic: str) -> tuple[bool, str]:
        """(consumed, why not). Raises HandlerError when the command cannot be started."""
        body = msgs[0].body if len(msgs) == 1 else b"".join(m.body + b"\n" for m in msgs)
        # stdin is a file written in full before the handler starts, not a pipe: if this
        # consumer is killed, the kernel closes a pipe's write end before the handler's death
        # signal arrives, and the handler would read a cut body as if it were whole.
        with tempfile.TemporaryFile(prefix="mqctl-body-") as stdin:
            stdin.write(body)
            stdin.flush()
            stdin.seek(0)
            try:
                proc = subprocess.Popen(self.argv, stdin=stdin, env=self.environment(msgs, topic),
                                        preexec_fn=_die_with_parent, close_fds=True)
            except OSError as exc:
                raise HandlerError(f"cannot run handler {self.argv[0]!r}: {exc.strerror or exc}") from exc
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                return False, f"handler timed out after {self.timeout_s:g}s"
        if proc.returncode == 0:
            return True, ""
        if proc.returncode < 0:
            return False, f"handler killed by signal {-proc.returncode}"
        return False, f"handler exited with {proc.returncode}"


class ExecSink(ThreadPoolSink):
    """``--exec CMD`` as a pool sink: ``--threads`` handler runs at a time, ``--batch`` messages
    each. The command is checked before the consumer joins its group."""

    def __init__(self, argv: list[str], group: str, timeout_s: float | None, threads: int, batch: int) -> None:
        self.handler = ExecHandler(argv, group, timeout_s)
        super().__init__(self._run, threads, batch)

    def _run(self, batch: list[Message], topic: str) -> Outcome:
        return self.handler.run(batch, topic)


def _kill_tree(proc: subprocess.Popen) -> None:
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
