"""``mqctl`` started with a standard stream closed (``>&-``, ``2>&-``), as a script or a
daemon's supervisor may start it: a command that needs no standard output still succeeds, one
whose data cannot be written says so in one line with exit 1 (a consumer then commits nothing),
and a closed standard error costs only the diagnostics, never the exit code. Real processes
through a shell, which is what closes the descriptors; for a stderr whose reader left or whose
terminal hung up, started in a session of their own on that pipe or pseudo-terminal."""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.procs import MQ, handler_script, one_error


def test_a_closed_standard_output_fails_only_the_commands_that_write_data(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    # The summary of a send goes to stderr: the send is done and says so with exit 0.
    res = mq.shell("mqctl send T one >&-")
    assert res.returncode == 0 and "sent 1 message" in res.stderr, res
    for command in ("consume T -g G --from first -c 1", "consume T -g G --from first -c 1 --json",
                    "send T two --json", "topic list", "--version"):
        one_error(mq.shell(f"mqctl {command} >&-"), 1, "cannot write to standard output")
    # Nothing was written, so nothing was consumed: the group reads both messages afterwards.
    assert mq.offsets("G") == {("T", 0): 0}
    res = mq.ok("consume", "T", "-g", "G", "--from", "first", "-e")
    assert res.stdout == b"one\ntwo\n", res


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_standard_output_says_it_is_stdout_not_the_store(mq: MQ) -> None:
    """Stdout on a full disk (``/dev/full``: every write fails with ENOSPC): the error names
    standard output, not the store, exit 1; a consumer commits nothing it could not write."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.ok("send", "T", "one")
    for command in ("consume T -g G --from first -e", "consume T -g G --from first -e --json",
                    "topic list", "msg show $(mqctl consume T --no-group --from first -e -f %i)"):
        line = one_error(mq.shell(f"mqctl {command} > /dev/full"), 1, "cannot write to standard output: ")
        assert line.lower().endswith("no space left on device"), (command, line)
    assert mq.offsets("G") == {("T", 0): 0}
    assert mq.ok("consume", "T", "-g", "G", "--from", "first", "-e").stdout == b"one\n"


def test_a_closed_standard_error_keeps_every_exit_code(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    for command, code in (("send T one", 0), ("send T", 0), ("send 'bad name' x", 2),
                          ("topic status missing", 3), ("topic create T --queues 2", 4)):
        res = mq.shell(f"printf 'two\\n' | mqctl {command} 2>&-")
        assert res.returncode == code and res.stderr == "", (command, res)
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b"one\ntwo\n"


def test_a_json_send_whose_result_cannot_be_written_says_what_it_stored(mq: MQ) -> None:
    """The messages are stored before their result lines are written: the error line says
    so, with the last msg id, so a script that retries on exit 1 can tell it must not send
    them again."""
    mq.ok("topic", "create", "T", "--queues", "1")
    line = one_error(mq.shell("mqctl send T one --json >&-"), 1, "cannot write to standard output: it is closed")
    assert line.endswith(tuple(f"the message was stored with msg id {m['msgId']}"
                               for m in mq.ok("consume", "T", "--no-group", "--from", "first", "-e",
                                              "--json").json_lines()))
    line = one_error(mq.shell("printf 'a\\nb\\n' | mqctl send T --json --flush sync >&-"), 1,
                     "cannot write to standard output: it is closed")
    last = mq.ok("consume", "T", "--no-group", "--from", "first", "-e", "--json").json_lines()[-1]
    assert last["body"] == "b" and line.endswith(
        f"the first 2 messages of the input were stored, the last with msg id {last['msgId']}"), line


def _mqctl_with_stderr(mq: MQ, args: list[str], stderr: int, sighup: object = signal.SIG_DFL,
                       **kw: Any) -> subprocess.Popen[bytes]:
    """``mqctl ARGS`` in a session of its own (no controlling terminal: no SIGHUP from the
    kernel), stdout discarded, stderr the descriptor given."""
    def child() -> None:
        os.setsid()
        signal.signal(signal.SIGHUP, sighup)   # type: ignore[arg-type]
    return subprocess.Popen(mq.argv(*args), stdin=subprocess.DEVNULL, stdout=kw.get("stdout", subprocess.DEVNULL),
                            stderr=stderr, env=mq.environ(), cwd=mq.cwd, preexec_fn=child)


def test_a_stderr_whose_reader_left_costs_only_the_diagnostics(mq: MQ) -> None:
    """A pipe on stderr whose reader is gone (EPIPE): the send is done, exit 0, not 141 (that
    is for stdout) nor 1."""
    mq.ok("topic", "create", "T", "--queues", "1")
    r, w = os.pipe()
    os.close(r)
    try:
        p = _mqctl_with_stderr(mq, ["send", "T", "one"], w)
    finally:
        os.close(w)
    assert p.wait(timeout=60) == 0
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b"one\n"


@pytest.mark.parametrize("sighup", [signal.SIG_DFL, signal.SIG_IGN])
def test_a_one_shot_on_a_hung_up_terminal_ends_as_sighup_ends_it(mq: MQ, sighup: object) -> None:
    """Its terminal hung up (the pty's master closed) before mqctl wrote its summary there:
    mqctl is not the terminal's controlling process, so no SIGHUP came; it acts as if one had
    (ends by SIGHUP), or under ``nohup`` (SIGHUP ignored) goes on without its diagnostics
    (exit 0). Either way the message is stored and nothing prints a traceback anywhere."""
    mq.ok("topic", "create", "T", "--queues", "1")
    master, slave = pty.openpty()
    os.close(master)
    try:
        p = _mqctl_with_stderr(mq, ["send", "T", "one"], slave, sighup)
    finally:
        os.close(slave)
    assert p.wait(timeout=60) == (0 if sighup is signal.SIG_IGN else -signal.SIGHUP)
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b"one\n"


def test_a_check_loop_whose_terminal_hangs_up_ends_as_on_sighup(mq: MQ, tmp_path: Path) -> None:
    """``tx check --loop`` on a terminal, in a session of its own: the master side closes
    (the window closed) after a pass; its next summary line fails with EIO, which is the
    hang-up: the loop ends quietly with exit 0, as SIGHUP ends it."""
    cmd = handler_script(tmp_path / "unknown.sh", "echo UNKNOWN\n")
    mq.ok("tx", "send", "orders", "half")
    master, slave = pty.openpty()
    try:
        p = _mqctl_with_stderr(mq, ["tx", "check", "--check-cmd", cmd, "--timeout", "0", "--loop",
                                    "--interval", "0.1s"], slave, stdout=slave)
    finally:
        os.close(slave)
    try:
        seen = b""
        while b"check pass" not in seen:
            assert select.select([master], [], [], 60)[0], seen
            seen += os.read(master, 4096)
    finally:
        os.close(master)
    try:
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
