"""The one harness for tests that run ``mqctl``: as real processes on a store, or (for
property tests) through its ``main`` in this process.

* :func:`mqctl_env` — the environment every test's ``mqctl`` runs in: its store, no colour,
  and nothing inherited that would change what it does (failpoints, debug, another store,
  a completion request).
* :class:`Result` — a finished run: exit code, stdout bytes, stderr text.
* :func:`run` — run a command to completion within a deadline, optionally with one of its
  standard streams on a pseudo-terminal.
* :class:`Proc` — a background process, stdout/stderr to files; kill -9, SIGTERM, wait.
* :class:`Feeder` — ``mqctl send --json`` fed batch by batch through a pipe.
* :class:`MQ` — one store directory and the ``mqctl`` processes a test runs on it
  (:meth:`MQ.run`, :meth:`MQ.ok`, :meth:`MQ.start`, :meth:`MQ.feed`, :meth:`MQ.cli`,
  :meth:`MQ.shell`), direct
  looks at the files the processes coordinate through (offsets, live members, queue locks),
  and the invariants the fault and power tests check (:meth:`MQ.check_clean`, :meth:`MQ.drain`).
  ``tests/power``'s machine is an ``MQ`` whose processes run on a LazyFS mount.
* :func:`wait_for` — poll a condition until a deadline; never a fixed long sleep.
* :func:`one_error` — the contract for a rejection: one ``mqctl: error:`` line, no traceback.
* :func:`run_inprocess` — ``mqctl ARGS`` through :func:`mqctl.app.main` in this process.
* :func:`python`, :func:`finish` — ``python -c SCRIPT`` children (other holders of a lock or
  a log), and waiting for them to succeed.
* :class:`LockSampler`, :func:`handler_script`, :func:`pid_running`.

Every wait is bounded; a test that hangs is a failing test, not a stuck CI job. Processes a
test started are killed (by pid) when the fixture ends, whatever the test did.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from mqctl.entry import COMPLETE_VAR

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]
DEFAULT_TIMEOUT = 60.0
KILLED = -signal.SIGKILL   # the exit status of a process killed by SIGKILL (or a failpoint)
# What a caller's environment may set that would change what a test's mqctl does.
_INHERITED_NOT = ("MQCTL_STORE", "MQCTL_FAILPOINTS", "MQCTL_DEBUG", COMPLETE_VAR)
Stream = Literal["stdin", "stdout", "stderr"]


def mqctl_env(root: Path | None, failpoints: str | None = None,
              extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment for ``mqctl`` on the store ``root`` (None: no store in the environment,
    for a command line that names its own or needs none): ``MQCTL_FAILPOINTS`` only when
    ``failpoints`` names some (see ``store/failpoints.py``), then ``extra`` on top, where None
    unsets a variable (``{"NO_COLOR": None}``: colour as a user's shell would allow it)."""
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_NOT}
    if root is not None:
        env["MQCTL_STORE"] = str(root)
    env["NO_COLOR"] = "1"
    if failpoints:
        env["MQCTL_FAILPOINTS"] = failpoints
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def ready(read: int | None, write: int | None, timeout: float) -> tuple[bool, bool]:
    """Whether ``read`` can be read (or is at its end) and ``write`` written, within
    ``timeout`` s: ``select()`` by ``poll()``, because select refuses a descriptor numbered
    1024 or more, which the process of a long test session can reach."""
    poller = select.poll()
    if read is not None:
        poller.register(read, select.POLLIN)
    if write is not None:
        poller.register(write, select.POLLOUT)
    events = dict(poller.poll(max(0.0, timeout) * 1000))
    done = select.POLLHUP | select.POLLERR | select.POLLNVAL
    return (read is not None and bool(events.get(read, 0) & (select.POLLIN | done)),
            write is not None and bool(events.get(write, 0) & (select.POLLOUT | done)))


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; return that. AssertionError after
    ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Result:
    """A finished ``mqctl`` run. ``args``: the words after ``mqctl`` (for messages)."""

    args: list[str]
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def __str__(self) -> str:
        return f"mqctl {' '.join(self.args)} -> {self.returncode}\nstderr: {self.stderr[-3000:]}"


def run(cmd: Sequence[str | bytes], *, env: Mapping[str, str], args: Sequence[str] | None = None,
        input: bytes | str | None = None, timeout: float = DEFAULT_TIMEOUT, cwd: Path | None = None,
        preexec_fn: Callable[[], None] | None = None, tty: Stream | None = None,
        tty_size: tuple[int, int] | None = None) -> Result:
    """Run ``cmd`` to completion; AssertionError when it is not done within ``timeout`` s.
    ``args``: how the result names the run (default: ``cmd``). stdin is ``input``, or empty
    (never the test runner's own).

    ``tty``: that stream is a pseudo-terminal instead (``tty_size``: its rows and columns).
    What the command writes to it is that stream's output in the result (with the terminal's
    ``\r\n`` line ends); on a terminal stdin, ``input`` is typed, then Ctrl-D."""
    data = input.encode() if isinstance(input, str) else input
    shown = [a if isinstance(a, str) else repr(a) for a in (cmd if args is None else args)]
    if tty is not None:
        assert tty == "stdin" or data is None, "input goes to stdin: a terminal only when tty='stdin'"
        return _run_on_tty(cmd, shown, tty, tty_size, data or b"", env=env, timeout=timeout,
                           cwd=cwd, preexec_fn=preexec_fn)
    try:
        cp = subprocess.run(list(cmd), input=data, capture_output=True, env=dict(env),
                            stdin=subprocess.DEVNULL if data is None else None,
                            timeout=timeout, cwd=cwd, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"mqctl {' '.join(shown)} did not finish within {timeout:g} s") from exc
    return Result(shown, cp.returncode, cp.stdout, cp.stderr.decode(errors="replace"))


def _run_on_tty(cmd: Sequence[str | bytes], shown: list[str], tty: Stream, size: tuple[int, int] | None,
                data: bytes, *, env: Mapping[str, str], timeout: float, cwd: Path | None,
                preexec_fn: Callable[[], None] | None) -> Result:
    master, slave = pty.openpty()
    if size is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    # The streams not on the terminal go to files: a pipe nobody reads while the terminal is
    # read could block the command.
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        streams: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": fout, "stderr": ferr}
        streams[tty] = slave
        try:
            p = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, preexec_fn=preexec_fn, **streams)
        finally:
            os.close(slave)
        on_tty = b""
        try:
            if tty == "stdin":
                os.write(master, data + b"\x04")   # Ctrl-D at the start of a line ends the input
            else:
                on_tty = _read_pty(master, timeout)
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            p.kill()
            p.wait()
            raise AssertionError(f"mqctl {' '.join(shown)} did not finish within {timeout:g} s") from exc
        finally:
            if tty == "stdin":
                os.close(master)
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    if tty == "stdout":
        out = on_tty
    elif tty == "stderr":
        err = on_tty
    return Result(shown, p.returncode, out, err.decode(errors="replace"))


def one_error(res: Result, code: int, start: str = "", *, allow_warnings: bool = False,
              allow_info: bool = False) -> str:
    """The contract for a rejection: exit ``code``, no traceback, and one line on stderr
    ``mqctl: error: START…``, the last one (warning lines before it only when
    ``allow_warnings``, any other line — a command's summary — when ``allow_info``).
    Returns that line."""
    assert res.returncode == code, str(res)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, str(res)
    lines = [ln for ln in res.stderr.split("\n") if ln.strip()]  # (only a newline ends a line)
    errors = [ln for ln in lines if ln.startswith("mqctl: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], str(res)
    assert errors[0].startswith("mqctl: error: " + start), errors[0]
    if allow_info:
        pass
    elif allow_warnings:
        assert all(ln.startswith(("mqctl: error: ", "mqctl: warning: ")) for ln in lines), str(res)
    else:
        assert lines == errors, str(res)
    return errors[0]


class Proc:
    """A background process with its stdout/stderr going to files (never a pipe that nobody
    reads, which could block it)."""

    def __init__(self, popen: subprocess.Popen, out: Path, err: Path, args: list[str]) -> None:
        self.p = popen
        self.out_path = out
        self.err_path = err
        self.args = args

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.kill(self.p.pid, sig)
            except ProcessLookupError:   # it exited in between
                pass

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.p.wait(timeout=10)

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{' '.join(self.args)} did not exit within {timeout:g} s; "
                                 f"stderr: {self.stderr()[-2000:]}") from None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait (a consumer persists its offsets and exits 0)."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def stdout(self) -> bytes:
        return self.out_path.read_bytes() if self.out_path.exists() else b""

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def lines(self) -> list[bytes]:
        return self.stdout().splitlines()


class Feeder:
    """``mqctl send … --json`` fed batch by batch through a pipe: each batch is written, then
    its result lines are awaited, so each batch is one store write (one read of stdin). The
    results read are exactly what the process acknowledged before it died."""

    def __init__(self, popen: subprocess.Popen, args: list[str]) -> None:
        self.p = popen
        self.args = args
        self.acked: list[dict] = []
        self._buf = b""
        self.stderr = ""

    def batch(self, lines: list[str], timeout: float = 20.0) -> bool:
        """Send one batch; True when all its results came back, False when the process died.

        Writing and reading are interleaved: a batch bigger than the pipe makes ``send``
        answer (and fill its stdout pipe) before it has read all of stdin, so writing the
        whole batch first could deadlock both processes."""
        assert self.p.stdout is not None and self.p.stdin is not None
        data = memoryview("".join(f"{ln}\n" for ln in lines).encode())
        want = len(self.acked) + len(lines)
        deadline = time.monotonic() + timeout
        out_fd, in_fd = self.p.stdout.fileno(), self.p.stdin.fileno()
        os.set_blocking(in_fd, False)  # a write takes what the pipe has room for, never waits
        while len(self.acked) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no results from {self.args} within {timeout} s")
            r, w = ready(out_fd, in_fd if data else None, left)
            if w:
                try:
                    data = data[os.write(in_fd, data):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    return False
            if not r:
                continue
            chunk = os.read(out_fd, 65536)
            if not chunk:
                return False
            self._buf += chunk
            *whole, self._buf = self._buf.split(b"\n")
            self.acked += [json.loads(x) for x in whole if x.strip()]
        return True

    def close(self, timeout: float = 30.0) -> int:
        assert self.p.stdout is not None and self.p.stdin is not None and self.p.stderr is not None
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        self._buf += self.p.stdout.read()
        self.acked += [json.loads(x) for x in self._buf.split(b"\n") if x.strip()]
        self._buf = b""
        rc = self.p.wait(timeout=timeout)
        self.stderr = self.p.stderr.read().decode(errors="replace")
        return rc


@dataclass
class MQ:
    """One store directory and the ``mqctl`` processes a test runs on it. ``work``: where
    their output files go; ``cwd``: the directory they run in (default: the test's own);
    ``extra_env``: what every one of its processes gets on top of :func:`mqctl_env` (a
    call's own ``extra_env`` on top of that)."""

    root: Path
    work: Path
    cwd: Path | None = None
    extra_env: dict[str, str | None] = field(default_factory=dict)
    procs: list[Proc | Feeder] = field(default_factory=list)
    _n: int = 0

    # -- how a command runs (tests/power's machine runs each inside a mount namespace) -----
    def argv(self, *args: str) -> list[str]:
        return MQCTL + list(args)

    def where(self) -> str:
        """Added to every failure message: the state a run failed in (none here)."""
        return ""

    def fresh(self, stem: str) -> str:
        """``stem`` and a number this MQ has not handed out before (unique file names)."""
        self._n += 1
        return f"{stem}{self._n}"

    def environ(self, failpoints: str | None = None,
                extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The environment of this MQ's processes (:func:`mqctl_env`'s options)."""
        return mqctl_env(self.root, failpoints, {**self.extra_env, **(extra or {})})

    # -- running mqctl ----------------------------------------------------------------------
    def run(self, *args: str, input: bytes | str | None = None, failpoints: str | None = None,
            extra_env: Mapping[str, str | None] | None = None, timeout: float = DEFAULT_TIMEOUT,
            cwd: Path | None = None, preexec_fn: Callable[[], None] | None = None,
            tty: Stream | None = None, check: bool = False) -> Result:
        """Run ``mqctl ARGS`` to completion (``check``: it must exit 0; ``tty``: that stream
        on a pseudo-terminal, see :func:`run`)."""
        res = run(self.argv(*args), args=args, env=self.environ(failpoints, extra_env),
                  input=input, timeout=timeout, cwd=cwd or self.cwd, preexec_fn=preexec_fn, tty=tty)
        if check:
            assert res.returncode == 0, f"{res}{self.where()}"
        return res

    def ok(self, *args: str, **kw: Any) -> Result:
        return self.run(*args, check=True, **kw)

    def cli(self, *args: str, stdin: bytes = b"", check: bool = False) -> Result:
        """``mqctl ARGS`` through the CLI's ``main`` in this process (see :func:`run_inprocess`);
        ``check``: it must exit 0."""
        res = run_inprocess(["--store", str(self.root), *args], stdin=stdin, workdir=self.work)
        if check:
            assert res.returncode == 0, str(res)
        return res

    def shell(self, script: str, *, extra_env: Mapping[str, str | None] | None = None,
              timeout: float = DEFAULT_TIMEOUT, cwd: Path | None = None) -> Result:
        """``bash -c SCRIPT`` in this MQ's environment, with this project's ``mqctl`` first on
        PATH: a pipeline, or a shell function calling ``mqctl`` back (completion)."""
        path = f"{_BIN.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return run(["bash", "--norc", "--noprofile", "-c", script], args=["bash -c", script],
                   env=self.environ(extra={"PATH": path, **(extra_env or {})}),
                   timeout=timeout, cwd=cwd or self.cwd)

    def start(self, *args: str, stdin: Any = subprocess.DEVNULL, stdout: Any = None,
              out: Path | None = None, failpoints: str | None = None,
              extra_env: Mapping[str, str | None] | None = None, new_session: bool = False) -> Proc:
        """Start ``mqctl ARGS`` in the background: stdout to the file ``out`` (default: a new
        one in ``work``) unless ``stdout`` is given, stderr to a file. ``new_session``: in a
        process group of its own, as a shell job would be, so a test can signal the whole
        group the way a terminal's Ctrl-C does."""
        name = self.fresh("proc")
        out = out or self.work / f"{name}.out"
        err = self.work / f"{name}.err"
        fout = open(out, "ab") if stdout is None else None
        ferr = open(err, "wb")
        try:
            p = subprocess.Popen(self.argv(*args), stdin=stdin,
                                 stdout=fout if stdout is None else stdout, stderr=ferr,
                                 env=self.environ(failpoints, extra_env), cwd=self.cwd,
                                 start_new_session=new_session)
        finally:
            if fout is not None:
                fout.close()
            ferr.close()
        proc = Proc(p, out, err, list(args))
        self.procs.append(proc)
        return proc

    def feed(self, *args: str, failpoints: str | None = None) -> Feeder:
        """``mqctl send ARGS --json``, fed batch by batch (:class:`Feeder`)."""
        p = subprocess.Popen(self.argv("send", *args, "--json"), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.environ(failpoints), cwd=self.cwd)
        feeder = Feeder(p, list(args))
        self.procs.append(feeder)
        return feeder

    def kill_all(self) -> None:
        """SIGKILL every process still running, then reap them all."""
        for proc in self.procs:
            if proc.p.poll() is None:
                try:
                    os.kill(proc.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self) -> None:
        self.kill_all()
        for proc in self.procs:
            for stream in (proc.p.stdin, proc.p.stdout, proc.p.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass

    # -- the invariants ---------------------------------------------------------------------
    def check(self) -> Result:
        return self.run("store", "check", "--json", timeout=90)

    def check_clean(self) -> None:
        res = self.check()
        assert res.returncode == 0, f"store check is not clean{self.where()}:\n{res.out}\n{res.stderr}"
        assert res.json_lines()[-1]["status"] == "OK", res.out

    def drain(self, topic: str, group: str, *extra: str,
              timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
        """Every message of ``topic`` as a fresh member of ``group`` gets it (``--json``)."""
        res = self.run("consume", topic, "-g", group, "--from", "first", "-e", "--json", *extra,
                       timeout=timeout)
        assert res.returncode == 0, f"{res}{self.where()}"
        return res.json_lines()

    # -- the store, read directly -----------------------------------------------------------
    def store(self):  # noqa: ANN201
        from store.log.messagestore import Store
        return Store.open(self.root)

    def send_lines(self, topic: str, lines: Iterable[str], *extra: str) -> None:
        self.ok("send", topic, *extra, input="".join(f"{line}\n" for line in lines))

    def offsets(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets, read from the files: ``config/consumerOffset.json``
        and the records of its journal (``consumerOffset.log``) past it, every member's
        commit since the snapshot."""
        from store.layout import Layout
        from store.log.offsettable import load
        out: dict[tuple[str, int], int] = {}
        for key, queues in load(Layout(self.root)).table.offsets.items():
            t, _, g = key.rpartition("@")
            if g == group and (topic is None or t == topic):
                out.update({(t, q): o for q, o in queues.items()})
        return out

    def committed_total(self, group: str, topic: str) -> int:
        return sum(self.offsets(group, topic).values())

    def members(self, group: str) -> list:
        from store.client.members import live_members
        from store.layout import Layout
        return live_members(Layout(self.root), group)

    def member_queues(self, group: str, topic: str | None = None) -> dict[str, set[int]]:
        """clientId -> queue ids its published record says it holds."""
        out = {}
        for m in self.members(group):
            out[m.clientId] = {q["queueId"] for q in m.queues if topic is None or q["topic"] == topic}
        return out

    def locks(self, group: str) -> list:
        from store.client.locktable import list_locks
        from store.layout import Layout
        return list_locks(Layout(self.root), group)

    def wait_balanced(self, group: str, topic: str, members: int, queues: int,
                      timeout: float = 20.0) -> dict[str, set[int]]:
        """Wait until ``members`` live members publish disjoint queue sets covering the topic."""
        def balanced() -> dict[str, set[int]] | None:
            mq = self.member_queues(group, topic)
            if len(mq) != members or any(not s for s in mq.values()):
                return None
            held = [q for s in mq.values() for q in s]
            if len(held) != len(set(held)) or set(held) != set(range(queues)):
                return None
            sizes = [len(s) for s in mq.values()]
            if max(sizes) - min(sizes) > 1:
                return None   # a member still hands queues over (averagely / circle split)
            return mq
        return wait_for(balanced, timeout, what=f"{members} members of {group} to split {topic}")


def mqctl(root: Path, *args: str, **kw: Any) -> Result:
    """``mqctl ARGS`` on the store ``root``, to completion (:meth:`MQ.run`'s options)."""
    return MQ(root, root.parent).run(*args, **kw)


def python(script: str, *args: object, **popen: Any) -> subprocess.Popen[str]:
    """``python -c SCRIPT ARGS`` (``script`` dedented) in a child process, text mode, e.g. a
    second holder of a lock. It imports the installed package as any program does: no path
    set-up. ``popen``: Popen's options (``stdin=subprocess.PIPE``…)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                            text=True, **popen)


def finish(*children: subprocess.Popen[str], timeout: float = 120.0) -> list[str]:
    """Wait for each child; every one must exit 0 (its stderr, if piped, says why not).
    Returns their stdouts ("" where not piped)."""
    outs = []
    for child in children:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise AssertionError(f"a child process did not finish within {timeout:g} s") from None
        assert child.returncode == 0, f"child process exited {child.returncode}: {err}"
        outs.append(out or "")
    return outs


def handler_script(path: Path, body: str) -> str:
    """Write an executable script and return its path, for ``--exec`` and ``--check-cmd``.
    ``body`` is dedented; without a ``#!`` line of its own it runs under ``/bin/sh``."""
    text = textwrap.dedent(body).strip() + "\n"
    path.write_text(text if text.startswith("#!") else "#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


class LockSampler(threading.Thread):
    """Sample a group's queue locks (what ``mqctl locks`` shows) every ``interval`` s until
    :meth:`stop`.

    Each sample is ``(time, {queueId: pid of the live holder})``. ``conflicts`` lists any
    sample in which one queue showed two live holders or a live holder whose process is not
    among ``allowed_pids()`` (e.g. a member that was killed).
    """

    def __init__(self, env: MQ, group: str, topic: str, allowed_pids: Callable[[], set[int]],
                 interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.env, self.group, self.topic = env, group, topic
        self.allowed = allowed_pids
        self.interval = interval
        self.samples: list[tuple[float, dict[int, int]]] = []
        self.conflicts: list[str] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            allowed = self.allowed()
            holders: dict[int, int] = {}
            for info in self.env.locks(self.group):
                if info.topic != self.topic or not info.alive:
                    continue
                if info.queueId in holders and holders[info.queueId] != info.pid:
                    self.conflicts.append(f"queue {info.queueId}: live holders {holders[info.queueId]} and {info.pid}")
                holders[info.queueId] = info.pid
                if info.pid not in allowed and pid_running(info.pid):
                    self.conflicts.append(f"queue {info.queueId}: held by unexpected pid {info.pid}")
            self.samples.append((time.monotonic(), holders))
            self._stop_evt.wait(self.interval)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(timeout=10)


def pid_running(pid: int | None) -> bool:
    """The process ``pid`` exists and is not a zombie (killed, not yet reaped by the test)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _read_pty(master: int, timeout: float) -> bytes:
    """Everything a child writes to the pseudo-terminal whose master side is ``master``, until
    it closes the terminal (EIO) or is silent for ``timeout`` s; closes ``master``."""
    out = b""
    try:
        while ready(master, None, timeout)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return out


# -- the CLI in this process -------------------------------------------------------------------

_COMMANDS: dict[int, Any] = {}   # Typer app -> its click command, built once per session


def run_inprocess(args: list[str], stdin: bytes = b"", env: dict[str, str] | None = None,
                  workdir: Path | None = None) -> Result:
    """``mqctl ARGS`` through :func:`mqctl.app.main` itself (its error boundary included), in
    this process: ~100x cheaper than a subprocess, so property tests can afford it. stdin,
    stdout and stderr are real files (commands use their descriptors); everything the run
    changes in ``sys``, ``os.environ`` and signal dispositions is put back."""
    import typer.main as typer_main

    from mqctl.app import main
    get_command = typer_main.get_command

    def cached_command(app: Any) -> Any:
        cmd = _COMMANDS.get(id(app))
        if cmd is None:
            cmd = _COMMANDS[id(app)] = get_command(app)
        return cmd

    saved_std = (sys.stdin, sys.stdout, sys.stderr)
    saved_sig = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGXFSZ)}
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    with tempfile.TemporaryFile(dir=workdir) as fin, tempfile.TemporaryFile(dir=workdir) as fout, \
            tempfile.TemporaryFile(dir=workdir) as ferr:
        fin.write(stdin)
        fin.seek(0)
        code = 0
        typer_main.get_command = cached_command  # building Typer's command tree is most of the cost
        try:
            for k, v in (env or {}).items():
                os.environ[k] = v
            sys.stdin = open(fin.fileno(), "r", closefd=False)
            sys.stdout = open(fout.fileno(), "w", closefd=False, encoding="utf-8")
            sys.stderr = open(ferr.fileno(), "w", closefd=False, encoding="utf-8")
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        finally:
            typer_main.get_command = get_command
            sys.stdin, sys.stdout, sys.stderr = saved_std
            for s, h in saved_sig.items():
                signal.signal(s, h)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        fout.seek(0)
        ferr.seek(0)
        return Result(list(args), code, fout.read(), ferr.read().decode(errors="replace"))
