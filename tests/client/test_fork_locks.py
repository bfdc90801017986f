"""A process that forks (``os.fork``, multiprocessing's fork start) while a consumer of it
holds flock'd descriptors: its membership lock, orderly queue locks, or a short lock such as
the offset table's. A flock lives while any descriptor of its open file does, so a child that
kept its copies held the queues (and the member's client id) locked after the parent died,
and a lock another thread of the parent held at the fork stayed held for the child's life.
The child now closes its copies at the fork (``store.flock.keep``), never unlocking them."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

from store.log.offsets import exclusive
from tests.procs import MQ, pid_running, python, ready


def _free(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_child_forked_from_an_orderly_consumer_keeps_none_of_its_locks(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.ok("send", "T", "x", "-q", "0")
    script = """
        import os, sys
        import store
        c = store.Consumer("T", "g", sys.argv[1], orderly=True, start_from="first", client_id="parent")
        c.__enter__()
        for m in c.messages(exit_at_end=True):
            pass                      # holds both queues now, and its membership
        if os.fork() == 0:
            os.write(1, b"child %d\\n" % os.getpid())   # (one write: print may make two, which interleave)
            sys.stdin.read()          # lives until the test closes its stdin
            os._exit(0)
        os.wait3(os.WNOHANG)
        os.write(1, b"ready\\n")
        sys.stdin.read()
    """
    errors = mq.work / "fork-script.err"   # (a file: the forked child holds any pipe open)
    with errors.open("w") as err:
        proc = python(script, mq.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    child = 0
    try:
        assert proc.stdout is not None and proc.stdin is not None
        out, deadline = b"", time.monotonic() + 60
        while not {b"child", b"ready"} <= {line.split(b" ")[0] for line in out.split(b"\n")[:-1]}:
            if not ready(proc.stdout.fileno(), None, deadline - time.monotonic())[0]:
                raise AssertionError(f"the script said only {out!r} in 60 s: {errors.read_text()}")
            chunk = os.read(proc.stdout.fileno(), 4096)   # (not readline: poll sees no data it buffered)
            if not chunk:
                raise AssertionError(f"the script ended ({proc.wait()}): {errors.read_text()}")
            out += chunk
        child = int(next(line.split()[1] for line in out.split(b"\n") if line.startswith(b"child ")))
        held = sorted((mq.root / "locks" / "g" / "T").glob("*.lock"))
        member = next((mq.root).rglob("parent.lock"))
        assert len(held) == 2 and not any(_free(p) for p in [*held, member])   # the parent holds them
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert pid_running(child)
        # the child, still running, holds none of them
        assert all(_free(p) for p in [*held, member] if p.exists())
        mq.ok("consume", "T", "-g", "g", "--orderly", "-e", "--client-id", "parent")
    finally:
        if child and pid_running(child):
            os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_lock_held_at_the_fork_is_not_held_by_the_child(tmp_path: Path) -> None:
    """The offset table's lock, held (by another thread, say) when the process forks: the
    child closes its copy, so the lock ends when the holder lets it go, not when the child
    exits."""
    lock = tmp_path / "offsets.lock"
    r, w = os.pipe()
    started_r, started_w = os.pipe()
    with exclusive(lock):
        pid = os.fork()
        if pid == 0:   # pragma: no cover (the child waits for the test to close the pipe)
            os.close(w)
            os.write(started_w, b"x")   # (it runs: what the fork does in the child is done)
            os.read(r, 1)
            os._exit(0)
    os.close(r)
    os.close(started_w)
    try:
        assert os.read(started_r, 1) == b"x"
        assert _free(lock)
    finally:
        os.close(started_r)
        os.close(w)
        os.waitpid(pid, 0)


def test_a_child_leaving_the_lock_block_closes_no_descriptor_of_its_own(tmp_path: Path) -> None:
    """A child forked inside a short lock's block goes on to its end: the descriptor number
    the fork closed may be the child's own file by then, which the block's end must not close."""
    lock, other = tmp_path / "offsets.lock", tmp_path / "other"
    pid = 0
    with exclusive(lock):
        number = next(int(fd) for fd in os.listdir("/proc/self/fd")
                      if os.path.realpath(f"/proc/self/fd/{fd}") == str(lock.resolve()))
        pid = os.fork()
        if pid == 0:   # pragma: no cover (the child's exit status says what it saw)
            try:
                mine = os.open(other, os.O_WRONLY | os.O_CREAT, 0o600)
                os.dup2(mine, number)   # (the number free in the child: its copy closed at the fork)
            except BaseException:
                os._exit(3)
    if pid == 0:   # pragma: no cover
        try:
            os.fstat(number)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
