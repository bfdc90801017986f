"""What a newcomer hits at the edges (issue 27): a consumer on a terminal stopped by Ctrl-C,
auto-creation said and refusable, a consumer started before its topic, ``mqctl help``, the
Spark entry points, kcat's ``-o`` and the smaller surprises. Every test runs ``mqctl`` as a
user does: real processes on a real store (a real pseudo-terminal for Ctrl-C)."""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.procs import MQ, mqctl_env, one_error, run, wait_for  # noqa: F401

# -- 1: Ctrl-C on a terminal keeps what was counted as consumed -------------------------------


def _pending(master: int) -> int:
    """Bytes written to the pty that its reader (the master side) has not taken yet."""
    return int(struct.unpack("i", fcntl.ioctl(master, termios.FIONREAD, struct.pack("i", 0)))[0])


def test_ctrl_c_on_a_terminal_commits_only_what_the_terminal_showed(mq: MQ) -> None:
    """A consumer on a terminal nobody reads for a while blocks with a full tty buffer; ^C
    then used to discard that buffer (the tty driver flushes output on an interrupt) while
    the consumer committed it: messages never seen and never delivered again. Now every
    committed message was read from the terminal, and the rest come to the group again."""
    n = 6000
    mq.ok("topic", "create", "big", "--queues", "2")
    mq.send_lines("big", (f"body-{i:05d}-" + "x" * 40 for i in range(n)))
    master, slave = os.openpty()

    def controlling_terminal() -> None:   # what a shell does for a foreground job
        os.setsid()
        fcntl.ioctl(1, termios.TIOCSCTTY, 0)

    err = mq.work / "tty.err"
    with open(err, "wb") as ferr:
        p = subprocess.Popen(mq.argv("consume", "big", "-g", "ttyg", "--from", "first", "-f", r"%p:%o %s\n"),
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=ferr, env=mq.environ(),
                             preexec_fn=controlling_terminal)
    os.close(slave)
    try:
        # nobody reads the terminal: the consumer fills its buffer and blocks in a write
        wait_for(lambda: _pending(master) >= 4095, what="the terminal's buffer to fill")
        os.write(master, b"\x03")   # Ctrl-C, typed on the terminal
        shown = b""
        while select.select([master], [], [], 60)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the consumer closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert p.wait(timeout=60) == 0, err.read_text()
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    shown = shown.replace(b"^C", b"")   # the echo of the interrupt, wherever it fell in a line
    seen = {(int(q), int(o)) for q, o in re.findall(rb"(\d+):(\d+) body-\d{5}-x+\r?\n", shown)}
    committed = mq.offsets("ttyg", "big")
    assert sum(committed.values()) > 0
    lost = [(q, o) for (_, q), end in committed.items() for o in range(end) if (q, o) not in seen]
    assert not lost, f"{len(lost)} messages committed but never shown on the terminal"
    rest = mq.ok("consume", "big", "-g", "ttyg", "-e", "-f", r"%p:%o\n").out.split()
    again = {(int(q), int(o)) for q, o in (x.split(":") for x in rest)}
    assert len(seen | again) == n


# -- 6: the Spark entry points of the contract -------------------------------------------------


def test_store_spark_exports_its_entry_points_lazily() -> None:
    """``from store.spark import register`` (spec/cli.md, the README) works, and neither
    ``import store`` nor ``import store.spark`` imports PySpark."""
    script = """
import sys
import store, store.spark
assert "pyspark" not in sys.modules, "import store.spark imported pyspark"
from store.spark import local_session, prepare_environment, register, ship_archive
assert all(map(callable, (register, local_session, prepare_environment, ship_archive)))
assert sorted(store.spark.__all__) == ["local_session", "prepare_environment", "register", "ship_archive"]
print("ok")
"""
    res = run([sys.executable, "-c", script], env=mqctl_env(None))
    assert res.returncode == 0 and res.out == "ok\n", str(res)


# -- 9: the README's completion commands on a fresh HOME; mqctl help -------------------------


def _readme_block_after(marker: str) -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```sh\n", readme.index(marker)) + len("```sh\n")
    return readme[start:readme.index("```", start)]


def test_readme_completion_commands_work_on_a_fresh_home(mq: MQ, tmp_path: Path) -> None:
    """The bash and fish lines of the README's completion block, run as written in a HOME
    that has no ~/.local or ~/.config yet, install the scripts (the zsh line needs zsh)."""
    home = tmp_path / "home"
    home.mkdir()
    block = _readme_block_after("### Shell completion")
    lines = [ln for ln in block.splitlines() if ln.strip() and "zsh" not in ln]
    res = mq.shell("set -e\n" + "\n".join(lines), extra_env={"HOME": str(home)})
    assert res.returncode == 0, str(res)
    assert "complete" in (home / ".local/share/bash-completion/completions/mqctl").read_text()
    assert "complete" in (home / ".config/fish/completions/mqctl.fish").read_text()


def test_help_command_is_the_help_flag(mq: MQ) -> None:
    """``mqctl help consume`` prints ``mqctl consume --help``; ``mqctl help`` ``mqctl --help``;
    ``mqctl help topic create`` the sub-command's page; an unknown name is exit 2."""
    for words in (["consume"], [], ["topic", "create"]):
        by_flag = mq.ok(*words, "--help")
        by_help = mq.ok("help", *words)
        assert by_help.out == by_flag.out and by_help.out.startswith("Usage: mqctl"), words
    one_error(mq.run("help", "nosuch"), 2, "No such command 'nosuch'")
