"""The commands ``mqctl tx`` runs (``--exec``, ``--check-cmd``: mqctl/txrun.py) run in a
session of their own, so only mqctl can end them: whatever signal ends mqctl, and whenever it
comes, the command's whole process group goes with it.

Real ``mqctl`` processes for SIGTERM and SIGHUP at the usual moment, and for what a command
leaves running once its own process exited (killed with its group; a check command's answer is
read without waiting for the EOF such a child may hold back). The two moments too
short to hit from outside — a signal while ``Popen`` starts the command, and a second one while
mqctl cleans up after the first — are hit inside a ``Runner`` in this process, with the signal
sent to itself at that step."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqctl import txrun
from mqctl.errors import Terminated
from tests.procs import MQ, handler_script, pid_running, wait_for


def _pid_of(path: Path) -> int:
    return wait_for(lambda: path.exists() and int(path.read_text()), what=f"{path.name} to be written")


def _slow(tmp_path: Path, pidfile: Path) -> str:
    return handler_script(tmp_path / "slow.sh", f"""\
        echo $$ > {pidfile}.part && mv {pidfile}.part {pidfile}
        exec sleep 600
        """)


def _end(*pids: int) -> None:
    for pid in pids:
        if pid and pid_running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sighup_as(request: pytest.FixtureRequest) -> Iterator[object]:
    """The SIGHUP disposition the test's mqctl processes start with: they inherit an ignored
    one from this process (run under ``nohup``, as a CI job may be, it is ignored here too)."""
    old = signal.signal(signal.SIGHUP, request.param)
    yield request.param
    signal.signal(signal.SIGHUP, old)


_ONE_SHOTS = [["tx", "check", "--check-cmd", "CMD", "--timeout", "0"],
              ["tx", "send", "orders", "x", "--exec", "CMD"]]


def _signalled(mq: MQ, tmp_path: Path, args: list[str], sigs: list[int], exits: tuple[int, ...]) -> str:
    """Run ``mqctl ARGS`` (``CMD``: a slow command), send it ``sigs`` once the command runs,
    check that it exits with one of ``exits`` and that the command ended with it; its stderr."""
    pidfile = tmp_path / "pid"
    cmd = _slow(tmp_path, pidfile)
    mq.ok("init")
    if args[1] == "check":
        mq.ok("tx", "send", "orders", "half")
    p = mq.start(*[cmd if a == "CMD" else a for a in args])
    pid = 0
    try:
        pid = _pid_of(pidfile)
        for sig in sigs:
            p.signal(sig)
        assert p.wait() in exits, p.stderr()
        wait_for(lambda: not pid_running(pid), what="the command to end with mqctl")
        return p.stderr()
    finally:
        mq.cleanup()
        _end(pid)


@pytest.mark.parametrize("sighup_as", [signal.SIG_DFL], indirect=True)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("args", _ONE_SHOTS + [["tx", "check", "--check-cmd", "CMD", "--timeout", "0", "--loop"]])
def test_a_signal_that_ends_mqctl_ends_the_command(mq: MQ, tmp_path: Path, args: list[str], sig: int,
                                                   sighup_as: object) -> None:
    """SIGHUP (the terminal closed) as SIGTERM: the command would outlive mqctl otherwise. A
    one-shot command exits as the signal's default would (128 + signal); the loop quietly."""
    err = _signalled(mq, tmp_path, args, [sig], (0,) if "--loop" in args else (128 + sig, -sig))
    assert "Traceback" not in err
    # the command mqctl killed itself is no command's failure to warn about
    assert "killed by signal" not in err, err
    assert "mqctl: error:" not in err or "--loop" not in args, err   # (the loop ends quietly)


@pytest.mark.parametrize("args", _ONE_SHOTS)
def test_a_one_shot_ended_by_sigterm_says_terminated(mq: MQ, tmp_path: Path, args: list[str]) -> None:
    """143 with ``mqctl: error: terminated`` last on stderr, as ``send -`` and the README's
    exit-code table say (SIGINT's ``interrupted`` has its line too); it used to exit 143
    without a word."""
    err = _signalled(mq, tmp_path, args, [signal.SIGTERM], (128 + signal.SIGTERM,))
    assert err.endswith("mqctl: error: terminated\n"), err


@pytest.mark.parametrize("sighup_as", [signal.SIG_IGN], indirect=True)
@pytest.mark.parametrize("args", _ONE_SHOTS)
def test_a_sighup_a_one_shot_was_started_ignoring_stays_ignored(mq: MQ, tmp_path: Path, args: list[str],
                                                                sighup_as: object) -> None:
    """Started under ``nohup``: a SIGHUP changes nothing, and the SIGTERM after it ends mqctl
    as a SIGTERM does (signals pending together are taken lowest first: a SIGHUP handled
    would have ended it with 129)."""
    _signalled(mq, tmp_path, args, [signal.SIGHUP, signal.SIGTERM], (128 + signal.SIGTERM, -signal.SIGTERM))


def test_tx_send_started_ignoring_sigint_ends_on_one_as_on_ctrl_c(mq: MQ, tmp_path: Path) -> None:
    """``mqctl tx send ... --exec CMD &`` in a script starts with SIGINT ignored (the shell
    does that to a background job); a ``kill -INT`` to mqctl alone then ends it as Ctrl-C at a
    terminal does, like ``send``: exit 130, the command killed, the half message left for the
    check service. (It used to wait for the command, then commit.)"""
    pidfile = tmp_path / "pid"
    cmd = _slow(tmp_path, pidfile)
    mq.ok("init")
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # what mqctl inherits, as from `&`
    try:
        p = mq.start("tx", "send", "orders", "x", "--exec", cmd)
    finally:
        signal.signal(signal.SIGINT, old)
    pid = 0
    try:
        pid = _pid_of(pidfile)
        p.signal(signal.SIGINT)
        assert p.wait() == 130, p.stderr()
        assert p.stderr().endswith("mqctl: error: interrupted\n"), p.stderr()
        assert p.stdout() == b""   # no JSON line: the transaction was not ended
        wait_for(lambda: not pid_running(pid), what="the command to end with mqctl")
        [half] = mq.ok("tx", "list", "--json").json_lines()
        assert half["topic"] == "orders"
    finally:
        mq.cleanup()
        _end(pid)


def test_a_check_command_that_exited_is_answered_though_its_child_holds_its_stdout(mq: MQ, tmp_path: Path) -> None:
    """The check command answers and exits at once, leaving a child in the background that
    holds its stdout: its exit is what counts, not the EOF of its stdout (which would come only
    at --cmd-timeout, the answer thrown away), and the child is killed with its group."""
    child = tmp_path / "child"
    cmd = handler_script(tmp_path / "leaves.sh", f"""\
        cat >/dev/null
        sleep 600 &
        echo $! > {child}.part && mv {child}.part {child}
        echo COMMIT
        """)
    mq.ok("init")
    tx = json.loads(mq.ok("tx", "send", "orders", "half").stdout)["txId"]
    kid = 0
    try:
        r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0", "--cmd-timeout", "40s", "--json")
        kid = _pid_of(child)
        assert r.returncode == 0, r.stderr
        [event] = map(json.loads, r.stdout.splitlines())
        assert (event["txId"], event["answer"], event["state"]) == (tx, "COMMIT", "COMMITTED"), r.stderr
        assert "left a process holding its stdout; killed it" in r.stderr
        wait_for(lambda: not pid_running(kid), what="the command's child to be killed")
    finally:
        _end(kid)


def test_what_a_local_transaction_left_running_is_killed_once_it_exited(mq: MQ, tmp_path: Path) -> None:
    """``tx send --exec``: the same rule. The command's exit decides, and its group does not
    outlive it (a child holding mqctl's stderr would hold up whoever reads it)."""
    child = tmp_path / "child"
    cmd = handler_script(tmp_path / "local.sh", f"""\
        sleep 600 >/dev/null 2>&1 &
        echo $! > {child}.part && mv {child}.part {child}
        """)
    mq.ok("init")
    kid = 0
    try:
        r = mq.ok("tx", "send", "orders", "x", "--exec", cmd)
        kid = _pid_of(child)
        assert json.loads(r.stdout)["state"] == "COMMITTED"
        wait_for(lambda: not pid_running(kid), what="what the local transaction left running to be killed")
    finally:
        _end(kid)


@pytest.fixture
def own_sigterm():
    """These tests send SIGTERM to this process: the runner's handler must be what gets it."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL or threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGTERM is handled by the test runner here")
    yield
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL   # (the runner put it back)


def test_a_signal_while_the_command_starts_ends_it(own_sigterm: None, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "pid"
    real = subprocess.Popen
    started: list[int] = []

    def popen_then_signal(*args: object, **kw: object) -> subprocess.Popen[bytes]:
        proc = real(*args, **kw)   # type: ignore[call-overload]
        started.append(proc.pid)
        os.kill(os.getpid(), signal.SIGTERM)   # (taken as Popen returns: the command is running)
        return proc

    monkeypatch.setattr(txrun.subprocess, "Popen", popen_then_signal)
    try:
        with pytest.raises(Terminated):
            txrun.Runner().run([_slow(tmp_path, pidfile)], b"", dict(os.environ), None)
        wait_for(lambda: not pid_running(started[0]), what="the command to be killed")
    finally:
        _end(*started)


def test_a_second_signal_during_the_clean_up_cannot_cut_it_short(own_sigterm: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "pid"
    real_kill = txrun.kill_group
    again: list[int] = []

    def signal_again_then_kill(proc: subprocess.Popen[bytes]) -> None:
        if not again:
            again.append(proc.pid)
            os.kill(os.getpid(), signal.SIGTERM)   # (the second one, as the group is to be killed)
        real_kill(proc)

    monkeypatch.setattr(txrun, "kill_group", signal_again_then_kill)
    first = threading.Thread(target=lambda: (_pid_of(pidfile), os.kill(os.getpid(), signal.SIGTERM)))
    first.start()
    pid = 0
    try:
        with pytest.raises(Terminated):
            txrun.Runner().run([_slow(tmp_path, pidfile)], b"", dict(os.environ), None)
        assert again
        pid = _pid_of(pidfile)
        wait_for(lambda: not pid_running(pid), what="the command to be killed")
    finally:
        first.join()
        _end(pid)


def test_a_check_loop_started_with_sighup_ignored_outlives_a_hang_up(mq: MQ, tmp_path: Path) -> None:
    """``nohup mqctl tx check --loop`` (SIGHUP ignored when it starts, as ``nohup`` leaves it):
    the terminal's hang-up must not end the check service. The check command sends the SIGHUP
    itself, so mqctl has taken it before that pass ends; a second pass shows the loop went on."""
    calls = tmp_path / "calls"
    cmd = handler_script(tmp_path / "hup.sh", f"""\
        echo asked >> {calls}
        kill -HUP $PPID
        echo UNKNOWN
        """)
    mq.ok("init")
    mq.ok("tx", "send", "orders", "half")
    args = ["tx", "check", "--check-cmd", cmd, "--timeout", "0", "--loop", "--interval", "0.1s"]
    script = "trap '' HUP; exec " + " ".join(shlex.quote(a) for a in mq.argv(*args))
    err = tmp_path / "loop.err"
    with open(err, "wb") as ferr:
        p = subprocess.Popen(["bash", "--norc", "--noprofile", "-c", script], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=ferr, env=mq.environ(), cwd=mq.cwd)
    try:
        def asked() -> int:
            return len(calls.read_text().splitlines()) if calls.exists() else 0
        wait_for(lambda: p.poll() is not None or asked() >= 2, what="a second pass, or mqctl's end")
        assert p.poll() is None and asked() >= 2, err.read_text()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, err.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
