"""A handler process of ``consume --exec``: :class:`Child` (its pid and process group, waited
for once), how long to wait for it (a pidfd polled), and :func:`kill_tree`, which ends the
handler's whole process group."""
from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass

_POLL_MAX_MS = 1 << 30


class HandlerTimeout(Exception):
    """A handler still ran when :meth:`Child.wait`'s time was up (control flow inside this
    module: :meth:`ExecHandler.finish` turns it into a failed outcome, never raised further)."""


@dataclass(eq=False)
class Child:
    """A handler process :meth:`ExecHandler.spawn` started: its pid, the process group it
    runs in, and its exit status once reaped (as ``Popen.returncode``: -N for a signal)."""

    pid: int
    pgid: int
    returncode: int | None = None
    stdout_fd: int = -1   # (--to) the file its stdout goes to, until it is read back
    output: bytes = b""   # its stdout, when captured and it exited 0

    def wait(self, timeout: float | None = None) -> int:
        """Reap it (HandlerTimeout if it still runs after ``timeout`` s). Not thread-safe:
        only the thread that owns the child (the one that started it, or the pool thread it
        handed it to) waits for it, :func:`kill_tree` included; others only signal it
        (:meth:`ExecHandler.abort`)."""
        if self.returncode is not None:
            return self.returncode
        if timeout is not None and not _exited(self, timeout):
            raise HandlerTimeout()
        if self.returncode is None:
            self._reap(0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _reap(self, flags: int) -> bool:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:   # reaped elsewhere (SIGCHLD ignored): as Popen, say 0
            self.returncode = 0
            return True
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        return True


def _exited(child: Child, timeout: float) -> bool:
    """Whether ``child`` exits within ``timeout`` s: a pidfd polled (no polling loop, so a
    handler's end is seen at once), or, without pidfd, waitpid(WNOHANG) at a growing interval
    as ``Popen.wait`` does."""
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        pidfd = -1
    deadline = time.monotonic() + timeout
    if pidfd >= 0:
        try:
            p = select.poll()
            p.register(pidfd, select.POLLIN)
            while True:
                left_ms = int((deadline - time.monotonic()) * 1000 + 0.999)
                # poll takes a C int of ms: a --consume-timeout of weeks is waited in parts
                if p.poll(max(0, min(left_ms, _POLL_MAX_MS))):
                    return True
                if left_ms <= _POLL_MAX_MS:
                    return False
        finally:
            os.close(pidfd)
    delay = 0.0005
    while not child._reap(os.WNOHANG):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        delay = min(delay * 2, left, 0.05)
        time.sleep(delay)
    return True


def kill_tree(child: Child) -> None:
    """SIGKILL the handler's process group (one of its own, see the module docstring), so a
    ``sh -c 'sleep 999'`` does not leave the sleep running after its shell is gone."""
    try:
        os.killpg(child.pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()
    child.wait()
