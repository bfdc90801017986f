"""A waiting consumer does not wait behind its own offset commits: those that may wait are
written by a thread of their own, and the loop goes on delivering meanwhile, no further than
one pull batch past the committed offset (the redelivery bound the README promises).

Made deterministic by holding the offsets table's lock from the test: a commit then cannot
finish until the test lets it, and what the consumer prints meanwhile shows whether its
delivery waited for it."""
from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.procs import MQ, Proc, wait_for

READ_BATCH = 256   # a --json consumer's pull batch: the most it delivers past its commit


@contextmanager
def offsets_table_locked(root: Path) -> Iterator[None]:
    """Hold the group offsets table's lock: every commit waits until the block ends."""
    path = root / "config" / "consumerOffset.json.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _bodies(proc: Proc) -> list[str]:
    return [json.loads(line)["body"] for line in proc.stdout().splitlines() if line.strip()]


def test_messages_are_delivered_while_a_commit_waits(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    proc = mq.start("consume", "T", "-g", "g", "--json", "--from", "first")
    mq.send_lines("T", ["warm"])
    assert wait_for(lambda: _bodies(proc) == ["warm"], timeout=60), proc.stderr()
    assert wait_for(lambda: mq.offsets("g", "T").get(("T", 0)) == 1, timeout=60)
    with offsets_table_locked(mq.root):
        mq.send_lines("T", ["a"])
        assert wait_for(lambda: _bodies(proc)[-1:] == ["a"], timeout=60), proc.stderr()
        # the commit after "a" now waits for the lock; "b" is delivered all the same
        mq.send_lines("T", ["b"])
        assert wait_for(lambda: _bodies(proc)[-1:] == ["b"], timeout=20), \
            f"'b' was not delivered while the commit after 'a' waited: {_bodies(proc)}"
        assert mq.offsets("g", "T")[("T", 0)] == 1   # nothing committed meanwhile
    assert wait_for(lambda: mq.offsets("g", "T").get(("T", 0)) == 3, timeout=60), proc.stderr()
    assert proc.stop() == 0
    assert _bodies(proc) == ["warm", "a", "b"]


def test_no_more_than_a_pull_batch_is_delivered_past_the_commit(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    proc = mq.start("consume", "T", "-g", "g", "--json", "--from", "first")
    mq.send_lines("T", ["warm"])
    assert wait_for(lambda: _bodies(proc) == ["warm"], timeout=60), proc.stderr()
    assert wait_for(lambda: mq.offsets("g", "T").get(("T", 0)) == 1, timeout=60)
    n = 3 * READ_BATCH
    with offsets_table_locked(mq.root):
        mq.send_lines("T", [f"m{i}" for i in range(n)])
        assert wait_for(lambda: len(_bodies(proc)) >= 1 + READ_BATCH, timeout=60), proc.stderr()
        time.sleep(1.0)   # room for a consumer that ignores the bound to overshoot
        # a crash now would deliver again only what is past the committed offset (1)
        assert len(_bodies(proc)) == 1 + READ_BATCH
    assert wait_for(lambda: len(_bodies(proc)) == 1 + n, timeout=60), proc.stderr()
    assert wait_for(lambda: mq.offsets("g", "T").get(("T", 0)) == 1 + n, timeout=60)
    assert proc.stop() == 0
    assert _bodies(proc) == ["warm"] + [f"m{i}" for i in range(n)]


RAW_BATCH = 1000   # a raw consumer's pull batch: the most it delivers past its commit


def test_a_draining_consumer_pulls_and_commits_a_whole_batch_while_its_commits_are_quick(mq: MQ) -> None:
    # With no commit out (the last one was quick: written in the loop, the table's lock free),
    # a pull takes all a queue may deliver past its committed offset: one pull and one commit a
    # batch, not two. While a commit is out, a pull takes at most half, the other half delivered
    # while it is written (test_messages_are_delivered_while_a_commit_waits). The group's
    # commits, in the offsets journal, show the size of each step; the first is always quick
    # (no record past the snapshot the start's commit wrote: none is due).
    from store.log.offsetjournal import Journal
    mq.ok("topic", "create", "T", "--queues", "1")
    n = 4 * RAW_BATCH + 10
    mq.send_lines("T", [f"m{i}" for i in range(n)])
    res = mq.ok("consume", "T", "-g", "g", "--from", "first", "-e")
    assert res.stdout.splitlines() == [b"m%d" % i for i in range(n)]
    tail = Journal(mq.root / "config" / "consumerOffset.log").read()
    steps = sorted({0, *(rec["set"]["T@g"]["0"] for rec in tail.records if "T@g" in rec.get("set", {}))})
    assert steps[-1] == n == mq.offsets("g", "T")[("T", 0)]
    assert steps[1] == RAW_BATCH, steps
    assert max(b - a for a, b in zip(steps, steps[1:])) <= RAW_BATCH, steps


def _inotify_fds(pid: int) -> int:
    """How many inotify instances the process ``pid`` has open."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass   # (closed meanwhile)
    return count


def test_a_draining_consumer_waiting_for_its_own_commit_sets_up_no_watch(mq: MQ) -> None:
    # A -e consumer that delivers faster than its commits are written waits for them (a pull
    # batch at most past the committed offset): the writer thread wakes it, so it watches no
    # file for that wait, and never opens an inotify instance (whose close alone holds the
    # process's end 10-20 ms, the kernel waiting out an RCU grace period).
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["warm"])
    mq.ok("consume", "T", "-g", "g", "--from", "first", "-e")   # (the group's offset: no start to commit)
    n = 3 * RAW_BATCH
    mq.send_lines("T", [f"m{i}" for i in range(n)])
    out = mq.root.parent / "drain.out"
    with offsets_table_locked(mq.root):
        proc = mq.start("consume", "T", "-g", "g", "-e", out=out)
        assert wait_for(lambda: len(out.read_bytes().splitlines()) >= RAW_BATCH, timeout=60), proc.stderr()
        # held back behind its commit, which waits for the lock: no watch set up meanwhile
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert _inotify_fds(proc.pid) == 0
            time.sleep(0.05)
        assert len(out.read_bytes().splitlines()) < n
    assert proc.wait(60) == 0, proc.stderr()
    assert out.read_bytes().splitlines() == [b"m%d" % i for i in range(n)]
    assert mq.offsets("g", "T")[("T", 0)] == 1 + n
