"""The handler watchdog of ``mqctl consume --exec``: what kills a consumer's handlers when the
consumer itself is killed (SIGKILL included), without running any code in a handler between
``fork`` and ``exec`` (so the spawn keeps its ``vfork`` path: well under 1 ms to start a handler
instead of about 5 ms for a full fork of a threaded process that runs Python in the child).

One watchdog process per consumer, started once, in a process group of its own (a Ctrl-C at
the terminal does not reach it), ignoring the catchable signals. It forks *placeholders*: each
one makes itself the leader of a new process group and then only waits. Every handler is
spawned into a fresh placeholder's group (``posix_spawnp(..., setpgroup=G)``: the C
library's ``setpgid`` between its ``vfork``-like clone and ``exec``), so each handler still
has a group of its own: a timeout or a second Ctrl-C kills that handler's whole tree with
``killpg(G)``, and a handler's own ``kill 0`` reaches its own tree only.

The consumer holds the only write end of the command pipe. When the consumer is gone (exit or
SIGKILL, at any moment) the watchdog reads EOF and SIGKILLs every group it handed out and has
not been given back (and every adopted one), then exits. The races, closed:

* killed between ``vfork`` and the handler's ``setpgid``: the child (a descriptor table of its
  own) still holds its copy of the command pipe's write end until ``exec`` closes it (it is
  close-on-exec), which comes after ``setpgid``; so EOF comes only once the child is in its
  group (and is killed with it) or has failed;
* a group cannot vanish or be reused while handed out: its placeholder is the watchdog's child
  and is reaped only when the consumer gives the group back (after reaping the handler), so
  the group's number stays allocated even if the placeholder is killed (a zombie pins it);
* the watchdog itself killed: its placeholders exit (EOF on the watchdog's life pipe), a
  handler's ``setpgid`` into a group gone with them fails (the handler never starts, the
  consumer retries in a new group), and the consumer notices (a thread waits for the hang-up
  of the watchdog's pipe, and every spawn checks), starts a new watchdog and has it *adopt*
  the groups of handlers still running (on its command line, so there is no moment when the
  new watchdog runs without knowing them), to kill them too if the consumer dies.

Wire format (native ``struct``, records of at most ``PIPE_BUF`` bytes, so writes are atomic):

* consumer -> watchdog, the command pipe: 5-byte records ``<Bi`` (op, pgid); op 1 = DONE (the
  handler of group pgid was reaped: kill the group — its placeholder and whatever the handler
  left running in it — reap the placeholder and fork a fresh one, or forget pgid if it was
  adopted).
* watchdog -> consumer, the ready pipe: 4-byte records ``<i``, the pgid of a placeholder ready
  to be used. The watchdog keeps ``pool`` placeholders ready or handed out.

This file is also the watchdog's program: it is run as a script (``python -I -S watchdog.py
CMD_FD READY_FD POOL [ADOPTED_PGID...]``), so its top level imports the standard library only.
"""
from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time

CMD = struct.Struct("<Bi")
READY = struct.Struct("<i")
DONE = 1
# Waiting longer than this for a placeholder means the watchdog is stuck (stopped, say).
TAKE_TIMEOUT_S = 10.0
# A watchdog that dies at once (cannot start, say) is not started again more often than this.
RESTART_EVERY_S = 1.0
_IGNORED = ("SIGINT", "SIGQUIT", "SIGHUP", "SIGTERM", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE")


# -- the watchdog process ----------------------------------------------------------------------

def _placeholder(life_r: int, close: tuple[int, ...]) -> None:   # in a forked child; never returns
    try:
        for fd in close:   # the watchdog's ends: its death and the consumer's must show
            os.close(fd)
        os.setpgid(0, 0)
        # Blocks until the watchdog is gone (no writer is left on the life pipe).
        while os.read(life_r, 1):
            pass
    finally:
        os._exit(0)


def serve(cmd_fd: int, ready_fd: int, pool: int, adopted: set[int]) -> None:
    """The watchdog's loop: returns when the consumer is gone, after killing its groups
    (``adopted``: those of a previous watchdog's handlers still running)."""
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    life_r, life_w = os.pipe()
    groups: set[int] = set()     # placeholders not reaped yet: ready or handed out

    def fork_placeholder() -> None:
        pid = os.fork()
        if pid == 0:
            _placeholder(life_r, (life_w, cmd_fd, ready_fd))
        try:
            os.setpgid(pid, pid)   # both sides set it: whichever runs first, it is set here
        except OSError:
            pass
        groups.add(pid)
        os.write(ready_fd, READY.pack(pid))

    pending = b""
    try:
        for _ in range(pool):
            fork_placeholder()
        while True:
            data = os.read(cmd_fd, 4096)
            if not data:
                break
            pending += data
            while len(pending) >= CMD.size:
                op, pgid = CMD.unpack_from(pending)
                pending = pending[CMD.size:]
                if op == DONE and pgid in groups:
                    groups.discard(pgid)
                    # The whole group: what the handler left running in it (``cmd &``, nohup)
                    # ends with the handler. It held the queue's lock through the descriptor
                    # it inherited, so a killed consumer's queue waited for it (up to the
                    # lease), and it ran on beside the queue's next owner.
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except OSError:
                        os.kill(pgid, signal.SIGKILL)
                    os.waitpid(pgid, 0)
                    fork_placeholder()
                elif op == DONE:
                    adopted.discard(pgid)
    except BrokenPipeError:
        pass   # the consumer closed the ready pipe: it is gone too
    for g in groups | adopted:
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            pass


# -- the consumer's side -----------------------------------------------------------------------

class WatchdogError(OSError):
    """The watchdog could not be started, or gave no process group in time."""


class Watchdog:
    """The consumer's end: hands out a fresh process group per handler (:meth:`take`), gets
    it back once the handler is reaped (:meth:`give_back`). Thread-safe. Starts the watchdog
    process on first use (or :meth:`start`), and again whenever it finds it dead."""

    def __init__(self, pool: int = 2) -> None:
        self.pool = max(1, pool)
        self.proc: subprocess.Popen[bytes] | None = None
        self.cmd = -1            # write end of the command pipe (only this process holds it)
        self.ready = -1          # read end of the ready pipe
        self.generation = 0
        self.started_at = 0.0
        self.in_use: set[int] = set()
        self.closed = False
        # take_lock: one reader of the ready pipe at a time, and no restart under a reader;
        # lock: the state and the command pipe. Always taken in that order.
        self.take_lock = threading.Lock()
        self.lock = threading.Lock()

    # Callers hold take_lock and lock.
    def _start(self) -> None:
        if self.proc is not None:
            self._discard()
        cmd_r, cmd_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(cmd_r), str(ready_w),
                 str(self.pool), *(str(g) for g in sorted(self.in_use))],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                close_fds=True, pass_fds=(cmd_r, ready_w), process_group=0)
        except OSError as exc:
            os.close(cmd_w)
            os.close(ready_r)
            raise WatchdogError(exc.errno, f"cannot start the handler watchdog: {exc.strerror or exc}") from exc
        finally:
            os.close(cmd_r)     # the watchdog's ends: the command pipe must have one writer (us)
            os.close(ready_w)   # and the ready pipe one writer (the watchdog)
        os.set_blocking(ready_r, False)   # take() reads first, and polls only when empty
        self.cmd, self.ready = cmd_w, ready_r
        self.generation += 1
        self.started_at = time.monotonic()
        threading.Thread(target=self._monitor, args=(self.generation, ready_r), daemon=True,
                         name="handler-watchdog").start()

    def _discard(self) -> None:
        """Forget the current watchdog (dead, or to be replaced): kill and reap it, close the
        command pipe. Its ready pipe is closed by its monitor thread."""
        proc, self.proc = self.proc, None
        if proc is not None:
            # Killed before its command pipe is closed: a live watchdog that read EOF would
            # kill the groups of the handlers running now, which the next one adopts instead.
            try:
                proc.kill()
            except OSError:
                pass
            proc.wait()
        if self.cmd >= 0:
            os.close(self.cmd)
            self.cmd = -1
        self.ready = -1

    def _send(self, op: int, pgid: int) -> None:
        if self.cmd < 0:
            return
        try:
            os.write(self.cmd, CMD.pack(op, pgid))
        except OSError:   # the watchdog is gone; the next take() or the monitor starts another
            pass

    def _alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _monitor(self, generation: int, ready: int) -> None:
        """Waits for the hang-up of this generation's ready pipe (the watchdog died, or was
        discarded), then starts a new watchdog if this one was still current."""
        try:
            p = select.poll()
            p.register(ready, 0)   # POLLHUP and POLLERR are always reported
            while not p.poll():
                pass
            time.sleep(max(0.0, self.started_at + RESTART_EVERY_S - time.monotonic()))
            with self.take_lock, self.lock:
                if generation == self.generation and not self.closed:
                    try:
                        self._start()
                    except OSError:
                        self._discard()   # the next take() tries again, or fails
        finally:
            os.close(ready)

    def start(self) -> None:
        with self.take_lock, self.lock:
            if not self.closed and not self._alive():
                self._start()

    def check(self) -> None:
        """Start a new watchdog now if this one died, adopting the groups in use (call it
        after a spawn: a handler may have joined a group whose watchdog died meanwhile)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            return
        with self.take_lock, self.lock:
            if not self.closed and not self._alive():
                self._start()

    def take(self) -> int:
        """A fresh process group for one handler (its pgid). Raises WatchdogError."""
        with self.take_lock:
            for _attempt in range(3):
                with self.lock:
                    if self.closed:
                        raise WatchdogError("the consumer is stopping")
                    if not self._alive():
                        self._start()
                    ready = self.ready
                try:   # a placeholder is most often ready: no poll (a syscall) first
                    data: bytes | None = os.read(ready, READY.size)
                except BlockingIOError:
                    p = select.poll()
                    p.register(ready, select.POLLIN)
                    data = os.read(ready, READY.size) if p.poll(TAKE_TIMEOUT_S * 1000) else None
                with self.lock:
                    # A pgid left in the pipe by a watchdog that has died since: its placeholder
                    # is gone and the number may belong to another group by now.
                    if data and len(data) == READY.size and self._alive():
                        pgid: int = READY.unpack(data)[0]
                        self.in_use.add(pgid)
                        return pgid
                    self._discard()   # dead (EOF) or stuck: replace it
        raise WatchdogError("the handler watchdog does not answer")

    def give_back(self, pgid: int) -> None:
        """The handler spawned in ``pgid`` was reaped (or never started)."""
        with self.lock:
            self.in_use.discard(pgid)
            self._send(DONE, pgid)

    def close(self) -> None:
        """The watchdog kills the groups still in use and exits."""
        with self.take_lock, self.lock:
            self.closed = True
            proc, self.proc = self.proc, None
            if self.cmd >= 0:
                os.close(self.cmd)
                self.cmd = -1
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), {int(g) for g in sys.argv[4:]})
