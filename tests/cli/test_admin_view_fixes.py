"""Admin views a newcomer found wrong: the messages of a deleted topic shown as the messages of
the topic made anew under its name, and long-running views that a ``kill -INT`` did not stop
when started in a script's background.

Real ``mqctl`` processes."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.procs import MQ, wait_for

# -- a deleted topic's messages ---------------------------------------------------------------------

def test_msg_query_leaves_out_the_messages_of_a_deleted_topic_made_anew(mq: MQ) -> None:
    """Its records stay in the log until retention, but no queue holds them: the offset they
    had names another message now. msg query showed "gone" at deltop/2@0, where "newq2" is."""
    mq.ok("send", "deltop", "gone", "-k", "dk", "-q", "2")
    [gone] = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()
    mq.ok("topic", "delete", "deltop", "--yes")
    mq.ok("send", "deltop", "newq2", "-q", "2")
    res = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json")
    assert res.stdout == b"", res
    assert "no messages with key dk in topic deltop" in mq.ok("msg", "query", "--topic", "deltop", "-k", "dk").stderr
    mq.ok("send", "deltop", "again", "-k", "dk", "-q", "2")   # the new topic's message with the key is found
    assert [r["body"] for r in mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()] == ["again"]

    # msg show of the deleted one: still readable (exit 0), said to be deleted with its topic
    shown = mq.ok("msg", "show", gone["msgId"], "--json").json_lines()[0]
    assert shown["body"] == "gone" and shown["deleted"] is True and shown["consumerGroups"] == []
    [event] = [e for e in shown["history"] if e.get("this")]
    assert event["deleted"] is True and event["event"] == "sent"
    text = mq.ok("msg", "show", gone["msgId"]).out
    assert "deleted with topic deltop" in text and "deleted with its topic  (this copy)" in text, text
    [now] = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()
    assert mq.ok("msg", "show", now["msgId"], "--json").json_lines()[0]["deleted"] is False


# -- SIGINT in a script's background ----------------------------------------------------------------

def _catches_sigint(pid: int) -> bool:
    """Whether the process has a handler for SIGINT now (``SigCgt`` in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True   # (ended already: wait() tells how)
    caught = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.parametrize("args", [
    ["tx", "check", "--check-cmd", "echo UNKNOWN", "--loop", "--interval", "0.2s"],
    ["top", "--json", "--interval", "0.2"],
])
def test_a_long_running_view_started_ignoring_sigint_ends_on_one(mq: MQ, args: list[str]) -> None:
    """``mqctl tx check --loop &`` or ``mqctl top --json &`` in a script start with SIGINT
    ignored (bash does that to a background job); a ``kill -INT`` then ends them with exit 0,
    as it ends ``consume`` (tx check's help: "until SIGINT or SIGTERM (then exit 0)"). They
    kept running: the ignored SIGINT stayed ignored."""
    mq.ok("init")
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # what mqctl inherits, as from `&`
    try:
        p = mq.start(*args)
    finally:
        signal.signal(signal.SIGINT, old)
    try:
        wait_for(lambda: _catches_sigint(p.pid), timeout=30, what=f"mqctl {args[0]} to handle SIGINT")
        p.signal(signal.SIGINT)
        assert p.wait() == 0, p.stderr()
    finally:
        mq.cleanup()


def test_msg_query_shows_the_intact_matches_and_then_fails_on_a_damaged_one(mq: MQ) -> None:
    """One damaged record among a key's matches: the others are printed (as without it), the
    damaged one is named on stderr and the command exits 5. It printed nothing, exit 5."""
    sent = [mq.ok("send", "dq", f"body-{i}", "-k", "dk", "--json").json_lines()[0] for i in range(3)]
    victim = sent[1]
    seg = sorted((mq.root / "commitlog").iterdir())[0]
    at = int(victim["commitLogOffset"]) + 100   # (a byte of its body: its record CRC fails)
    with open(seg, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    res = mq.run("msg", "query", "--topic", "dq", "-k", "dk", "--json")
    assert res.returncode == 5, res
    assert sorted(r["body"] for r in res.json_lines()) == ["body-0", "body-2"]
    assert res.stderr.count("damaged message") == 1 and res.stderr.strip().splitlines()[-1].startswith("mqctl: error:")
    table = mq.run("msg", "query", "--topic", "dq", "-k", "dk")
    assert table.returncode == 5 and "body-0" in table.out and "body-2" in table.out and "body-1" not in table.out
