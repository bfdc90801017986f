"""Corners of cli.md (and cli-conventions.md where it is silent), through real processes:
SIGTERM during ``send``, kcat's ``%m``/``%n`` in ``consume --format``, ``--no-group -o +N``,
sizes with units, ``--exec`` with mqctl's own stdout closed."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.procs import MQ, wait_for


def _blocked_on_a_pipe(pid: int) -> bool:
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _stored(mq: MQ, topic: str) -> int:
    res = mq.run("consume", topic, "--no-group", "--from", "first", "-e", "--json")
    return len(res.json_lines()) if res.returncode == 0 else 0


# -- send: SIGTERM as Ctrl-C, exit 143 ------------------------------------------------------------

def test_sigterm_during_a_stdin_send_prints_the_summary_and_exits_143(mq: MQ) -> None:
    proc = mq.start("send", "T", stdin=subprocess.PIPE)
    assert proc.p.stdin is not None
    proc.p.stdin.write(b"a\nb\nc\n")
    proc.p.stdin.flush()
    wait_for(lambda: _stored(mq, "T") == 3, 60.0, what="the three lines to be stored")
    try:
        wait_for(lambda: _blocked_on_a_pipe(proc.pid), 60.0, interval=0.02, what="send to read stdin again")
    except AssertionError:
        pass   # a kernel that does not show wchan: the handlers were set long before
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 143, proc.stderr()
    lines = proc.stderr().splitlines()
    assert lines[-2].startswith("sent 3 messages to T (queue") and lines[-1] == "mqctl: error: terminated", lines
    assert _stored(mq, "T") == 3
