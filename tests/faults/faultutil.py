"""Helpers for the fault tests (tests/faults/): real ``mqctl`` processes, crashes, damage.

* :class:`MQ` (fixture ``mq``): one store directory and the ``mqctl`` processes a test runs on
  it — :meth:`MQ.run` (to completion, bounded), :meth:`MQ.start` (background, stdout/stderr to
  files, killed by pid when the test ends), :meth:`MQ.feed` (a ``send`` fed batch by batch).
* Invariant checks shared by the crash, corruption and soak tests: :func:`assert_one_error`,
  :meth:`MQ.check_clean`, :meth:`MQ.drain`, :func:`is_dirty`.

Every wait is bounded: a test that hangs fails, it never blocks CI.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

from tests.procs import Proc  # tests/ is on sys.path (tests/conftest.py)
from tests.procs import wait_for as _wait_for

REPO = Path(__file__).resolve().parents[2]
MQCTL = [sys.executable, "-m", "mqctl"]
KILLED = -signal.SIGKILL
TIMEOUT = 60.0


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """:func:`procs.wait_for` with this directory's longer default (kill-9 recoveries)."""
    return _wait_for(cond, timeout, interval, what)


def base_env(store: Path, failpoints: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MQCTL_FAILPOINTS", "MQCTL_DEBUG", "MQCTL_STORE")}
    env["MQCTL_STORE"] = str(store)
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if failpoints:
        env["MQCTL_FAILPOINTS"] = failpoints
    if extra:
        env.update(extra)
    return env


@dataclass
class Result:
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


def assert_one_error(res: Result, code: int, *, allow_warnings: bool = False, allow_info: bool = False) -> str:
    """The contract for a rejection: exit ``code``, no traceback, and one line on stderr
    ``mqctl: error: …``, the last one (warning lines before it only when ``allow_warnings``,
    any other line — a command's summary — when ``allow_info``). Returns it."""
    assert res.returncode == code, str(res)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, str(res)
    lines = [ln for ln in res.stderr.split("\n") if ln.strip()]  # (only a newline ends a line)
    errors = [ln for ln in lines if ln.startswith("mqctl: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], str(res)
    if allow_info:
        pass
    elif allow_warnings:
        assert all(ln.startswith(("mqctl: error: ", "mqctl: warning: ")) for ln in lines), str(res)
    else:
        assert lines == errors, str(res)
    return errors[0]


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
        data = memoryview("".join(f"{ln}\n" for ln in lines).encode())
        want = len(self.acked) + len(lines)
        deadline = time.monotonic() + timeout
        out_fd, in_fd = self.p.stdout.fileno(), self.p.stdin.fileno()
        os.set_blocking(in_fd, False)  # a write takes what the pipe has room for, never waits
        while len(self.acked) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no results from {self.args} within {timeout} s")
            r, w, _ = select.select([out_fd], [in_fd] if data else [], [], left)
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
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        rest = self.p.stdout.read()
        self._buf += rest
        self.acked += [json.loads(x) for x in self._buf.split(b"\n") if x.strip()]
        self._buf = b""
        rc = self.p.wait(timeout=timeout)
        self.stderr = self.p.stderr.read().decode(errors="replace")
        return rc


@dataclass
class MQ:
    root: Path
    work: Path
    procs: list[Any] = field(default_factory=list)
    _n: int = 0

    def env(self, failpoints: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        return base_env(self.root, failpoints, extra)

    def run(self, *args: str, input: bytes | str | None = None, failpoints: str | None = None,
            env: dict[str, str] | None = None, timeout: float = TIMEOUT,
            preexec_fn: Callable[[], None] | None = None) -> Result:
        data = input.encode() if isinstance(input, str) else input
        try:
            cp = subprocess.run(MQCTL + list(args), input=data, capture_output=True,
                                env=self.env(failpoints, env), timeout=timeout, preexec_fn=preexec_fn)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"mqctl {' '.join(args)} did not finish within {timeout:g} s") from exc
        return Result(list(args), cp.returncode, cp.stdout, cp.stderr.decode(errors="replace"))

    def ok(self, *args: str, **kw: Any) -> Result:
        res = self.run(*args, **kw)
        assert res.returncode == 0, str(res)
        return res

    def cli(self, *args: str, stdin: bytes = b"") -> Result:
        """``mqctl ARGS`` through the CLI's ``main`` in this process (see :func:`run_inprocess`)."""
        return run_inprocess(["--store", str(self.root), *args], stdin=stdin, workdir=self.work)

    def start(self, *args: str, failpoints: str | None = None, env: dict[str, str] | None = None,
              argv: list[str] | None = None) -> Proc:
        self._n += 1
        out = self.work / f"proc{self._n}.out"
        err = self.work / f"proc{self._n}.err"
        cmd = argv if argv is not None else MQCTL + list(args)
        with open(out, "wb") as fout, open(err, "wb") as ferr:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fout, stderr=ferr,
                                 env=self.env(failpoints, env))
        proc = Proc(p, out, err, list(args) or cmd)
        self.procs.append(proc)
        return proc

    def feed(self, *args: str, failpoints: str | None = None) -> Feeder:
        p = subprocess.Popen(MQCTL + ["send", *args, "--json"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(failpoints))
        f = Feeder(p, list(args))
        self.procs.append(f)
        return f

    def cleanup(self) -> None:
        for proc in self.procs:
            p = proc.p
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            for stream in (getattr(p, "stdin", None), getattr(p, "stdout", None), getattr(p, "stderr", None)):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass

    # -- invariants -------------------------------------------------------------------------
    def check(self) -> Result:
        return self.run("store", "check", "--json")

    def check_clean(self) -> None:
        res = self.check()
        assert res.returncode == 0, f"store check is not clean:\n{res.out}\n{res.stderr}"
        assert res.json_lines()[-1]["status"] == "OK"

    def drain(self, topic: str, group: str, *extra: str) -> list[dict]:
        """Every message of ``topic`` as a fresh member of ``group`` gets it (``--json``)."""
        res = self.run("consume", topic, "-g", group, "--from", "first", "-e", "--json", *extra)
        assert res.returncode == 0, str(res)
        return res.json_lines()

    def offsets(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets, read from config/consumerOffset.json itself."""
        path = self.root / "config" / "consumerOffset.json"
        if not path.exists():
            return {}
        table = json.loads(path.read_text())["offsetTable"]
        out: dict[tuple[str, int], int] = {}
        for key, queues in table.items():
            t, _, g = key.rpartition("@")
            if g == group and (topic is None or t == topic):
                out.update({(t, int(q)): o for q, o in queues.items()})
        return out


def is_dirty(root: Path) -> bool:
    """The checkpoint disagrees with the commit log: a writer died inside a batch."""
    from store.layout import Layout
    from store.log import checkpoint as ckpt
    from store.log.commitlog import CommitLog
    lay = Layout(root)
    cp = ckpt.read(lay.checkpoint)
    return cp is None or cp.written_end != CommitLog(lay.commitlog_dir).end()


def script(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(0o755)
    return str(path)


# A handler for --exec: logs "consumerPid topic queueId queueOffset msgId body" (one O_APPEND
# write, so lines of concurrent handlers never interleave), then sleeps $HANDLER_SLEEP.
LOGGING_HANDLER = r"""
#!/bin/sh
body=$(cat)
printf '%s %s %s %s %s %s\n' "$PPID" "$MQ_TOPIC" "$MQ_QUEUE_ID" "$MQ_QUEUE_OFFSET" "$MQ_MSG_ID" "$body" >> "$HANDLER_LOG"
[ -n "$HANDLER_SLEEP" ] && sleep "$HANDLER_SLEEP"
exit 0
"""


def read_handler_log(path: Path, with_pid: bool = False) -> list[tuple]:
    """The handler log's lines as (topic, queueId, queueOffset, msgId, body), or with the
    consumer's pid first."""
    out: list[tuple] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(" ", 5)
        if len(parts) == 6 and parts[0].isdigit():
            row = (parts[1], int(parts[2]), int(parts[3]), parts[4], parts[5])
            out.append((int(parts[0]), *row) if with_pid else row)
    return out


def drop_torn_by_kills(rows: list[tuple], bodies: set[str], killed: set[int]) -> tuple[list[tuple], int]:
    """Handler-log rows (with pids) without the ones whose body is not a sent body; each of
    those must come from a consumer that was killed: a SIGKILLed consumer closes the pipe to a
    handler it just started before the kernel sends the handler its death signal, so the
    handler may run on with a truncated body (reported: mqctl/consumer/handlers.py). Returns
    the rows kept and how many were dropped; an unknown body from a live consumer fails."""
    kept, torn = [], 0
    for row in rows:
        if row[-1] in bodies:
            kept.append(row[1:])
        else:
            assert row[0] in killed, f"a handler of a consumer that was not killed got a body never sent: {row}"
            torn += 1
    return kept, torn


@pytest.fixture
def mq(tmp_path: Path) -> Iterable[MQ]:
    m = MQ(tmp_path / "store", tmp_path)
    yield m
    m.cleanup()


def keyed_lines(keys: list[str], start: dict[str, int], n: int) -> list[str]:
    """``n`` lines ``KEY:KEY-SEQ`` spread over ``keys``, each key's SEQ counting up from ``start``."""
    out = []
    for i in range(n):
        k = keys[i % len(keys)]
        start[k] = start.get(k, 0) + 1
        out.append(f"{k}:{k}-{start[k]}")
    return out


def assert_key_order(envs: Iterable[dict]) -> None:
    """Per queue in queue-offset order, each key's sequence numbers only go up."""
    by_queue: dict[tuple[str, int], list[dict]] = {}
    for e in envs:
        by_queue.setdefault((e["topic"], e["queueId"]), []).append(e)
    for q, rows in by_queue.items():
        last: dict[str, int] = {}
        for e in sorted(rows, key=lambda r: r["queueOffset"]):
            key, _, seq = e["body"].rpartition("-")
            assert int(seq) > last.get(key, 0), f"order of key {key} broken in queue {q}: {e}"
            last[key] = int(seq)


# -- the CLI in this process -------------------------------------------------------------------

_COMMANDS: dict[int, Any] = {}


def _cached_command(app: Any) -> Any:
    cmd = _COMMANDS.get(id(app))
    if cmd is None:
        cmd = _COMMANDS[id(app)] = _ORIGINAL_GET_COMMAND(app)
    return cmd


import typer.main as _typer_main  # noqa: E402

_ORIGINAL_GET_COMMAND = _typer_main.get_command


def run_inprocess(args: list[str], stdin: bytes = b"", env: dict[str, str] | None = None,
                  workdir: Path | None = None) -> Result:
    """``mqctl ARGS`` through :func:`mqctl.app.main` itself (its error boundary included), in
    this process: ~100x cheaper than a subprocess, so property tests can afford it. stdin,
    stdout and stderr are real files (commands use their descriptors); everything the run
    changes in ``sys`` and in signal dispositions is put back."""
    import tempfile

    import typer.main as typer_main

    from mqctl.app import main
    saved_std = (sys.stdin, sys.stdout, sys.stderr)
    saved_sig = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGXFSZ)}
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    with tempfile.TemporaryFile(dir=workdir) as fin, tempfile.TemporaryFile(dir=workdir) as fout, \
            tempfile.TemporaryFile(dir=workdir) as ferr:
        fin.write(stdin)
        fin.seek(0)
        code = 0
        get_command = typer_main.get_command
        typer_main.get_command = _cached_command  # building Typer's command tree is most of the cost
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
