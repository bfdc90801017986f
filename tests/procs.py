"""Helpers for tests that drive real ``mqctl`` processes against one store.

* :class:`MQ` — a store directory plus ways to run ``mqctl`` on it: :meth:`MQ.run` (to
  completion, with a deadline), :meth:`MQ.start` (a background :class:`Proc`), and direct
  looks at the files the processes coordinate through (offsets, live members, queue locks).
* :func:`wait_for` — poll a condition until a deadline; never a fixed long sleep.
* :class:`LockSampler` — samples ``store.client.qlocks.list_locks`` (what ``mqctl locks`` shows) in a
  thread during a run, to check afterwards that no queue ever had two live holders.
* :func:`handler_script` — writes an executable ``/bin/sh`` handler for ``--exec``.

Every wait is bounded; a test that hangs is a failing test, not a stuck CI job. Processes a
test started are killed (by pid) when the fixture ends, whatever the test did.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]
DEFAULT_TIMEOUT = 60.0


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05,
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


class Proc:
    """A background ``mqctl`` process with its stdout/stderr going to files (never a pipe
    that nobody reads, which could block it)."""

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


@dataclass
class MQ:
    """One store directory and the processes a test runs on it."""

    root: Path
    work: Path
    procs: list[Proc] = field(default_factory=list)
    _n: int = 0

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["MQCTL_STORE"] = str(self.root)
        env.pop("MQCTL_DEBUG", None)
        env["NO_COLOR"] = "1"
        return env

    def run(self, *args: str, input: bytes | str | None = None, timeout: float = DEFAULT_TIMEOUT,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run ``mqctl ARGS`` to completion; stdout bytes, stderr text."""
        data = input.encode() if isinstance(input, str) else input
        try:
            cp = subprocess.run(MQCTL + list(args), input=data, capture_output=True,
                                env=self.env, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"mqctl {' '.join(args)} did not finish within {timeout:g} s") from exc
        cp.stderr = cp.stderr.decode(errors="replace")
        if check and cp.returncode != 0:
            raise AssertionError(f"mqctl {' '.join(args)} exited {cp.returncode}: {cp.stderr}")
        return cp

    def ok(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        return self.run(*args, check=True, **kw)

    def start(self, *args: str, stdin: Any = subprocess.DEVNULL, stdout: Any = None,
              extra_env: dict[str, str] | None = None, new_session: bool = False) -> Proc:
        """Start ``mqctl ARGS`` in the background (stdout/stderr to files unless given).
        ``new_session``: in a process group of its own, as a shell job would be, so a test
        can signal the whole group the way a terminal's Ctrl-C does."""
        self._n += 1
        out = self.work / f"proc{self._n}.out"
        err = self.work / f"proc{self._n}.err"
        env = self.env
        if extra_env:
            env.update(extra_env)
        fout = open(out, "wb") if stdout is None else None
        ferr = open(err, "wb")
        try:
            p = subprocess.Popen(MQCTL + list(args), stdin=stdin,
                                 stdout=fout if stdout is None else stdout, stderr=ferr, env=env,
                                 start_new_session=new_session)
        finally:
            if fout is not None:
                fout.close()
            ferr.close()
        proc = Proc(p, out, err, list(args))
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.alive():
                try:
                    proc.kill9()
                except (OSError, subprocess.TimeoutExpired):
                    pass

    # -- the store, read directly -----------------------------------------------------------
    def store(self):  # noqa: ANN201
        from store.log.broker import Store
        return Store.open(self.root)

    def send_lines(self, topic: str, lines: Iterable[str], *extra: str) -> None:
        self.ok("send", topic, *extra, input="".join(f"{line}\n" for line in lines))

    def offsets(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets, read from config/consumerOffset.json itself."""
        path = self.root / "config" / "consumerOffset.json"
        if not path.exists():
            return {}
        table = json.loads(path.read_text())["offsetTable"]
        out = {}
        for key, queues in table.items():
            t, g = key.split("@")
            if g == group and (topic is None or t == topic):
                out.update({(t, int(q)): o for q, o in queues.items()})
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
        from store.client.qlocks import list_locks
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


def handler_script(path: Path, body: str) -> str:
    """Write an executable ``/bin/sh`` script and return its path, for ``--exec``."""
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


class LockSampler(threading.Thread):
    """Sample a group's queue locks every ``interval`` s until :meth:`stop`.

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
                if info.pid not in allowed and _pid_running(info.pid):
                    self.conflicts.append(f"queue {info.queueId}: held by unexpected pid {info.pid}")
            self.samples.append((time.monotonic(), holders))
            self._stop_evt.wait(self.interval)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(timeout=10)


def _pid_running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed, not yet reaped by the test) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def one_error(cp: subprocess.CompletedProcess, code: int, start: str) -> str:
    """``cp`` failed with ``code`` and said so in one stderr line ``mqctl: error: START…``;
    the line."""
    assert cp.returncode == code, (cp.returncode, cp.stderr)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert lines[0].startswith("mqctl: error: " + start), lines[0]
    return lines[0]


def read_pty(master: int, timeout: float = 30.0) -> bytes:
    """Everything a child writes to the pseudo-terminal whose master side is ``master``, until
    it closes the terminal (EIO) or is silent for ``timeout`` s; closes ``master``."""
    import select
    out = b""
    try:
        while select.select([master], [], [], timeout)[0]:
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
