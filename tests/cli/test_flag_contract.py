"""Corners of cli.md (and the common CLI conventions where it is silent), through real processes:
SIGTERM during ``send``, kcat's ``%m``/``%n`` in ``consume --format``, ``--no-group -o +N``,
sizes with units, ``--exec`` with mqctl's own stdout closed."""
from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.procs import MQ, one_error, wait_for


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


# -- consume --format: kcat's %m and %n -----------------------------------------------------------

def test_format_m_is_the_message_id_and_n_the_delivery_count(mq: MQ) -> None:
    sent = json.loads(mq.ok("send", "T", "hello", "--json").stdout)
    first = mq.ok("consume", "T", "--no-group", "--from", "first", "-e", "--format", "%m %n %r\\n").stdout
    assert first == f"{sent['msgId']} 1 0\n".encode()
    # a failed delivery comes back through the retry topic: its second delivery
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", "false", "--retry-delay", "1ms")
    again = mq.ok("consume", "%RETRY%G", "--no-group", "--from", "first", "-e", "--format", "%m %n %r\\n").stdout
    assert again == f"{sent['msgId']} 2 1\n".encode()
    listed = mq.ok("consume", "--help").stdout.decode()
    assert "%m message id" in " ".join(listed.split()) and "%n delivery count" in " ".join(listed.split())


def test_format_completion_offers_the_tokens(mq: MQ) -> None:
    res = mq.run("consume", "T", "--format", "%o%", extra_env={
        "_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": "mqctl consume T --format %o%", "COMP_CWORD": "4"})
    offered = res.stdout.decode().split()
    assert "%o%m" in offered and "%o%n" in offered and "%o%s" in offered
    res = mq.run("consume", "T", "--format", "", extra_env={
        "_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": "mqctl consume T --format ''", "COMP_CWORD": "4"})
    assert {"raw", "json", "%m", "%n"} <= set(res.stdout.decode().split())


# -- consume -o +N: N after the start of each queue (as rpk reads it) -----------------------------

def test_offset_plus_n_starts_n_after_the_start_of_each_queue(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    for i in range(6):
        mq.ok("send", "T", f"m{i}", "-q", str(i % 2))
    got = mq.ok("consume", "T", "--no-group", "-o", "+2", "-e", "--format", "%p %o %s\\n").stdout.decode()
    assert sorted(got.splitlines()) == ["0 2 m4", "1 2 m5"]
    assert mq.ok("consume", "T", "--no-group", "-o", "+9", "-e").stdout == b"", "past the end: at the end"
    # a group's new queues start there too (its committed offsets win afterwards)
    got = mq.ok("consume", "T", "-g", "G", "-o", "+1", "-e", "--format", "%p %o\\n").stdout.decode()
    assert sorted(got.splitlines()) == ["0 1", "0 2", "1 1", "1 2"]
    one_error(mq.run("consume", "T", "--no-group", "-o", "+x", "-e"), 2, "bad time '+x'")
    assert "+N (N after the start of each queue" in " ".join(mq.ok("consume", "--help").stdout.decode().split())


# -- sizes with units ------------------------------------------------------------------------------

def test_init_takes_sizes_with_units(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "s", tmp_path)
    mq.ok("init", "--max-message-size", "1KiB", "--segment-size", "64MiB")
    settings = json.loads((mq.root / "store.json").read_text())
    assert settings["maxMessageSize"] == 1024 and settings["commitlogSegmentSize"] == 64 << 20
    for given, size in (("2k", 2048), ("1.5KiB", 1536), ("3MB", 3_000_000), ("4mib", 4 << 20), ("100", 100)):
        other = MQ(tmp_path / given, tmp_path)
        other.ok("init", "--max-message-size", given)
        assert json.loads((other.root / "store.json").read_text())["maxMessageSize"] == size, given


def test_bad_sizes_are_one_line_usage_errors(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "s", tmp_path)
    for flag, given, says in (("--max-message-size", "1XB", "is not a size"),
                              ("--segment-size", "64 MiBs", "is not a size"),
                              ("--segment-size", "0.3K", "not a whole number of bytes"),
                              ("--max-message-size", "5MiB", "5MiB (5242880 bytes) is not in the range 1<=x<=4194304"),
                              ("--max-message-size", "-1", "is not a size")):
        err = one_error(mq.run("init", flag, given), 2, f"Invalid value for '{flag}'")
        assert says in err, err
    assert not mq.root.exists()
    one_error(mq.run("bench", "produce", "--size", "1Q"), 2, "Invalid value for '--size'")


# -- consume --exec with mqctl's own stdout closed -------------------------------------------------

def test_a_handler_can_write_when_mqctls_stdout_is_closed(mq: MQ) -> None:
    mq.ok("send", "T", "a")
    mq.ok("send", "T", "b")
    res = mq.shell("mqctl consume T -g G --from first -e --exec cat >&-")
    assert res.returncode == 0 and "Bad file descriptor" not in res.stderr and "RETRY" not in res.stderr, str(res)
    assert mq.committed_total("G", "T") == 2
    assert "%RETRY%G" not in mq.ok("topic", "list", "--all").stdout.decode()
