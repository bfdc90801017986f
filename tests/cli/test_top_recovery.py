"""``mqctl top`` names a store that needs recovery — what the next opener that can write would
repair — as one problem row (kind ``recovery``) and in ``--json``'s ``problems.recovery``,
at the first look, changing nothing: a torn record past the checkpoint's end, a commit log
cut by hand, a consume queue cut short. It once said "no problems" while ``store check``
exited 1 (and, for the cut log, the next command dropped 3001 messages' queue entries)."""
from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import store
from store.layout import Layout
from store.log import format as F
from tests.procs import MQ


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _damage(root: Path, how: str) -> None:
    lay = Layout(root)
    seg = lay.commitlog_dir / F.segment_name(0)
    if how == "torn":   # 150 bytes of a record appended after the last one
        data = seg.read_bytes()
        with open(seg, "ab") as f:
            f.write(data[:150])
    elif how == "cut-log":   # the last record cut in two
        os.truncate(seg, seg.stat().st_size - 100)
    else:   # the queue's last 10 entries cut off
        cq = lay.queue_dir("t", 0) / F.segment_name(0)
        os.truncate(cq, cq.stat().st_size - 10 * F.CQ_ENTRY.size)


@pytest.mark.parametrize(("how", "says"), [
    ("torn", "(past it: a torn or unfinished batch)"),
    ("cut-log", "(short of it: the log was cut; a recovery drops the entries of the records lost)"),
    ("cut-queue", "consume queue t/0 ends at offset 290, but the commit log holds t/0@290"),
])
def test_top_names_a_store_that_needs_recovery(mq: MQ, how: str, says: str) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", input="".join(f"m{i}\n" for i in range(300)))
    assert "no problems" in mq.ok("top", "--once").out
    _damage(mq.root, how)
    before = _tree(mq.root)
    out = mq.ok("top", "--once").out
    [row] = [ln for ln in out.splitlines() if ln.startswith("recovery ")]
    assert says in row and row.endswith("the next writer repairs it, or run: mqctl store recover"), row
    [obj] = mq.ok("top", "--once", "--json").json_lines()
    found = obj["problems"]["recovery"]
    # (a cut log also leaves its queue's last entries pointing past the log's end: a second
    # finding, about the queue, which the same recovery repairs)
    assert says in found[0] and len(found) <= 2, found
    assert obj["problems"]["warnings"] == []   # (the fields there were, as they were)
    assert _tree(mq.root) == before   # top repaired nothing
    assert mq.run("store", "check").returncode == 1   # (as check says)
    mq.ok("store", "recover")
    assert mq.ok("top", "--once", "--json").json_lines()[0]["problems"]["recovery"] == []
    assert "no problems" in mq.ok("top", "--once").out


def test_a_log_past_its_checkpoint_while_a_writer_holds_the_lock_counts_at_a_later_look(
        mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between a batch's records and its checkpoint the log is past the checkpoint for an
    instant: while the write lock is held (a writer at work) one look is not enough, a later
    one that finds it unchanged (``STUCK_S`` on: none here) is; with the lock free the first
    look says so."""
    from store.client import recoverylook
    monkeypatch.setattr(recoverylook, "STUCK_S", 0.0)
    mq.ok("send", "t", input="a\nb\n")
    _damage(mq.root, "torn")
    fd = os.open(Layout(mq.root).write_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with store.Monitor(mq.root) as mon:
            assert mon.snapshot().problems.recovery == ()
            [found] = mon.snapshot().problems.recovery
            assert "torn or unfinished batch" in found
    finally:
        os.close(fd)
    with store.Monitor(mq.root) as mon:
        assert len(mon.snapshot().problems.recovery) == 1


def test_a_queue_cut_while_top_looks_is_found_within_a_round_of_looks(mq: MQ,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first look (every queue) each look asks a few queues in turn: a queue cut
    by hand meanwhile is named within one round of them."""
    from store.client import recoverylook
    monkeypatch.setattr(recoverylook, "QUEUES_PER_LOOK", 2)
    mq.ok("topic", "create", "t", "--queues", "8")
    mq.ok("send", "t", input="".join(f"m{i}\n" for i in range(400)))
    with store.Monitor(mq.root) as mon:
        assert mon.snapshot().problems.recovery == ()
        _damage(mq.root, "cut-queue")
        found = [mon.snapshot().problems.recovery for _ in range(4)]
        assert found[-1] and found[-1][0].startswith("consume queue t/0 ends at offset"), found
        assert mon.snapshot().problems.recovery == found[-1]   # (kept while nothing changes)


def test_a_store_written_to_while_top_looks_is_never_a_problem(mq: MQ) -> None:
    """Looks one after the other while a producer writes small batches (each one's records
    come before its checkpoint, two looks may fall between them): not one names recovery."""
    mq.ok("topic", "create", "t", "--queues", "4")
    writer = subprocess.Popen([sys.executable, "-c", (
        "import store, sys\n"
        "with store.Producer(sys.argv[1]) as p:\n"
        "    for i in range(3000):\n"
        "        p.send('t', b'x%d' % i)\n"), str(mq.root)])
    looks = 0
    try:
        with store.Monitor(mq.root) as mon:
            while writer.poll() is None or looks < 5:
                assert mon.snapshot().problems.recovery == (), looks
                looks += 1
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == 0 and looks > 5, looks


def test_an_unreadable_checkpoint_is_named(mq: MQ) -> None:
    mq.ok("send", "t", "a")
    Layout(mq.root).checkpoint.write_bytes(b"\0" * 10)
    [found] = mq.ok("top", "--once", "--json").json_lines()[0]["problems"]["recovery"]
    assert found == "the checkpoint is missing or unreadable"
