"""Orderly consumption across processes: one holder per queue under a queue lock,
per-key order through kill -9 and hand-overs, failures that block only their own queue,
dead-lettering after --max-reconsume, and ordered topics. Real ``mqctl`` processes only."""
from __future__ import annotations

import collections
import json
import random
import signal
import threading
import time

import pytest

from tests.procs import MQ, LockSampler, handler_script, wait_for  # noqa: F401  (mq is a fixture)

# One line per message of the batch: "BODY|QUEUE|CONSUMER_PID|RECONSUME", one write each.
RECORD_BATCH = ('while IFS= read -r l || [ -n "$l" ]; do '
                'printf "%s|%s|%s|%s\\n" "$l" "$MQ_QUEUE_ID" "$PPID" "$MQ_RECONSUME_TIMES"; '
                'done >> "$LOG"')


def read_log(path) -> list[list[str]]:
    return [line.split("|") for line in path.read_text().splitlines()] if path.exists() else []


def member(mq: MQ, log, *extra: str, topic: str = "T", group: str = "G", handler: str | None = None):
    h = handler or handler_script(mq.work / "rec.sh", RECORD_BATCH)
    return mq.start("consume", topic, "-g", group, "--orderly", "--from", "first",
                    "--rebalance-interval", "0.2", "--exec", h, *extra, extra_env={"LOG": str(log)})


def check_key_order(rows: list[list[str]]) -> int:
    """Per key, first deliveries come in sequence order with no gap, and a redelivery only
    repeats a sequence number already seen. Returns how many rows were redeliveries."""
    seen: dict[str, int] = {}
    repeats = 0
    for body, *_ in rows:
        key, seq = body.rsplit(".", 1)
        seq = int(seq)
        top = seen.get(key, -1)
        if seq > top:
            assert seq == top + 1, f"key {key}: first delivery of {seq} came after {top}"
            seen[key] = seq
        else:
            repeats += 1
    return repeats


def pid_runs(rows: list[list[str]], queue: int) -> list[str]:
    """The consumer pids that handled ``queue``, one entry per uninterrupted run."""
    runs: list[str] = []
    for r in rows:
        if int(r[1]) == queue and (not runs or runs[-1] != r[2]):
            runs.append(r[2])
    return runs


def test_three_members_kill9_keeps_per_key_order(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    log = mq.work / "log"
    h = handler_script(mq.work / "slow.sh", "sleep 0.02\n" + RECORD_BATCH)
    members = [member(mq, log, "--batch", "4", handler=h) for _ in range(3)]
    split = mq.wait_balanced("G", "T", 3, 8)
    wait_for(lambda: len([i for i in mq.locks("G") if i.alive]) == 8, 15, what="8 queue locks")
    pids = {p.pid for p in members}
    allowed = set(pids)
    sampler = LockSampler(mq, "G", "T", lambda: set(allowed))
    sampler.start()

    keys = [f"k{j}" for j in range(40)]
    waves, per_wave = 6, 5
    victim = None
    t_kill = took = 0.0
    try:
        for w in range(waves):
            lines = [f"{k}:{k}.{w * per_wave + s}" for s in range(per_wave) for k in keys]
            mq.ok("send", "T", "--key-delimiter", ":", input="".join(line + "\n" for line in lines))
            if w == 2:
                # Kill the member holding the most queues, mid-run.
                cid = max(split, key=lambda c: len(split[c]))
                victim = next(p for p in members if cid.endswith(f"@{p.pid}"))
                victim_queues = split[cid]
                wait_for(lambda victim=victim: any(r[2] == str(victim.pid) for r in read_log(log)), 15,
                         what="the victim to be consuming")
                victim.kill9()
                allowed.discard(victim.pid)
                t_kill = time.monotonic()
                mq.wait_balanced("G", "T", 2, 8, timeout=15)
                took = time.monotonic() - t_kill
        total = waves * per_wave * len(keys)
        want = {f"{k}.{s}" for k in keys for s in range(waves * per_wave)}
        wait_for(lambda: {r[0] for r in read_log(log)} >= want, 60, what="every message handled")
    finally:
        sampler.stop()
    assert took < 5, f"survivors took {took:.1f} s to take the killed member's queues"
    survivors = [p for p in members if p is not victim]
    for p in survivors:
        p.signal(signal.SIGTERM)
    for p in survivors:
        assert p.wait(30) == 0, p.stderr()

    rows = read_log(log)
    # A handler of the killed member may have run with a cut body (its stdin ended when the
    # consumer died); such a run is never committed, and only the victim can have one.
    # (Its $PPID may read as the reaper's by then, so: not a survivor's.)
    cut = [r for r in rows if r[0] not in want]
    assert all(r[2] not in {str(p.pid) for p in survivors} for r in cut), cut
    rows = [r for r in rows if r[0] in want]
    assert {r[0] for r in rows} == want
    repeats = check_key_order(rows)
    # Redeliveries come only from the killed member's queues, and are few.
    counts = collections.Counter(r[0] for r in rows)
    redelivered_queues = {int(r[1]) for r in rows if counts[r[0]] > 1}
    assert redelivered_queues <= victim_queues, (redelivered_queues, victim_queues)
    assert repeats < total // 4
    # One holder at a time: a queue never goes back to a member it was taken from, and the
    # lock table never showed two live holders or a dead one.
    for q in range(8):
        runs = pid_runs(rows, q)
        assert len(runs) == len(set(runs)), f"queue {q} went back and forth between {runs}"
    assert not sampler.conflicts, sampler.conflicts[:5]
    assert len(sampler.samples) > 10
    held_after = [s for t, s in sampler.samples if t > t_kill + took + 0.5]
    assert held_after and all(victim.pid not in s.values() for s in held_after)
    assert mq.committed_total("G", "T") == total
    assert not mq.locks("G"), "locks are released at exit"


@pytest.mark.slow
def test_sigterm_finishes_the_batch_then_the_queue_moves(mq: MQ) -> None:
    mq.ok("topic", "create", "S", "--queues", "1")
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", """b=$(cat)
printf "start|%s|%s\\n" "$b" "$PPID" >> "$LOG"
[ "$b" = slow ] && sleep 2
printf "end|%s|%s\\n" "$b" "$PPID" >> "$LOG"
""")
    a = member(mq, log, "--client-id", "a", topic="S", handler=h)
    wait_for(lambda: [i.clientId for i in mq.locks("G") if i.alive] == ["a"], 15, what="a to lock the queue")
    b = member(mq, log, "--client-id", "b", topic="S", handler=h)
    wait_for(lambda: set(mq.member_queues("G")) == {"a", "b"}, 15, what="b to join")
    mq.ok("send", "S", "-q", "0", input="slow\nnext\n")
    wait_for(lambda: ["start", "slow", str(a.pid)] in read_log(log), 15, what="the slow batch to start")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.stderr()
    rows = read_log(log)
    assert ["end", "slow", str(a.pid)] in rows, "the batch in the handler finishes before exit"
    assert mq.offsets("G", "S")[("S", 0)] >= 1, "its offset is persisted"
    wait_for(lambda: ["end", "next", str(b.pid)] in read_log(log), 15, what="b to take the queue")
    rows = read_log(log)
    assert [r for r in rows if r[1] == "slow"] == [["start", "slow", str(a.pid)], ["end", "slow", str(a.pid)]]
    assert rows.index(["end", "slow", str(a.pid)]) < rows.index(["start", "next", str(b.pid)])
    assert [i.clientId for i in mq.locks("G") if i.alive] == ["b"]
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0
    assert mq.offsets("G", "S") == {("S", 0): 2}


def test_failing_message_blocks_only_its_queue_then_dead_letters(mq: MQ) -> None:
    mq.ok("topic", "create", "F", "--queues", "2")
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", """b=$(cat)
printf "%s|%s|%s|%s\\n" "$b" "$MQ_QUEUE_ID" "$PPID" "$MQ_RECONSUME_TIMES" >> "$LOG"
[ "$b" != bad ]""")
    mq.ok("send", "F", "-q", "0", input="bad\nafter\n")
    mq.ok("send", "F", "-q", "1", input="".join(f"x{i}\n" for i in range(5)))
    p = member(mq, log, "--suspend-ms", "100", topic="F", handler=h)
    wait_for(lambda: sum(r[0] == "bad" for r in read_log(log)) >= 4, 20, what="bad to be retried")
    wait_for(lambda: {f"x{i}" for i in range(5)} <= {r[0] for r in read_log(log)}, 15,
             what="the other queue to progress")
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.stderr()
    rows = read_log(log)
    assert "after" not in {r[0] for r in rows}, "nothing behind a failing message is consumed"
    rts = [int(r[3]) for r in rows if r[0] == "bad"]
    assert rts == list(range(len(rts))), "each retry in place counts as a reconsume"
    assert [r[0] for r in rows if r[1] == "1"] == [f"x{i}" for i in range(5)]
    assert mq.offsets("G", "F") == {("F", 0): 0, ("F", 1): 5}
    assert "retrying in place" in p.stderr()

    # With --max-reconsume 2 it is tried 3 times, dead-lettered, and the queue moves on.
    mark = len(rows)
    p = member(mq, log, "--suspend-ms", "100", "--max-reconsume", "2", "-e", topic="F", handler=h)
    assert p.wait(30) == 1, p.stderr()   # it gave up on a message
    assert p.stderr().rstrip().split("\n")[-1].startswith("mqctl: error: gave up on 1 message (moved to %DLQ%G")
    rows = read_log(log)[mark:]
    assert [(r[0], r[3]) for r in rows if r[1] == "0"] == [("bad", "0"), ("bad", "1"), ("bad", "2"), ("after", "0")]
    assert mq.offsets("G", "F") == {("F", 0): 2, ("F", 1): 5}
    dlq = json.loads(mq.ok("consume", "%DLQ%G", "-g", "look", "--from", "first", "-e", "--json").stdout)
    assert dlq["body"] == "bad" and dlq["reconsumeTimes"] == 2
    assert "%DLQ%G" in p.stderr()


def test_deleted_lock_file_causes_no_double_consumption(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    log = mq.work / "log"
    h = handler_script(mq.work / "slow.sh", "sleep 0.01\n" + RECORD_BATCH)
    members = [member(mq, log, "--batch", "2", handler=h) for _ in range(2)]
    mq.wait_balanced("G", "T", 2, 4)
    lock_dir = mq.root / "locks" / "G" / "T"
    wait_for(lambda: len(list(lock_dir.glob("*.lock"))) == 4, 15, what="4 lock files")
    stop = threading.Event()
    deleted = [0]

    def vandal() -> None:
        rnd = random.Random(7)
        while not stop.wait(0.2):
            files = sorted(lock_dir.glob("*.lock"))
            if files:
                try:
                    rnd.choice(files).unlink()
                    deleted[0] += 1
                except FileNotFoundError:
                    pass

    th = threading.Thread(target=vandal, daemon=True)
    th.start()
    keys = [f"k{j}" for j in range(12)]
    want = set()
    try:
        # Messages keep coming until the vandal has struck five times (however fast the
        # members drain each wave): the deletions land while queues are being consumed.
        w = 0
        while w < 5 or (deleted[0] < 5 and w < 500):
            lines = [f"{k}:{k}.{w * 5 + s}" for s in range(5) for k in keys]
            want.update(line.split(":", 1)[1] for line in lines)
            mq.ok("send", "T", "--key-delimiter", ":", input="".join(line + "\n" for line in lines))
            w += 1
        wait_for(lambda: {r[0] for r in read_log(log)} >= want, 120, what="every message handled")
    finally:
        stop.set()
        th.join(10)
    assert deleted[0] >= 5
    time.sleep(0.5)  # let any would-be duplicate show up
    rows = read_log(log)
    counts = collections.Counter(r[0] for r in rows)
    dup = {b: c for b, c in counts.items() if c > 1}
    assert not dup, f"handled more than once after a lock file was deleted: {sorted(dup)[:10]}"
    assert check_key_order(rows) == 0
    # The members notice, take their queues again, and keep going.
    # An idle queue whose lock file went away is locked again within a rebalance or two,
    # not only at the 20 s renewal.
    wait_for(lambda: len([i for i in mq.locks("G") if i.alive]) == 4, 5, what="locks taken again")
    for p in members:
        assert p.alive()
        p.signal(signal.SIGTERM)
    for p in members:
        assert p.wait(20) == 0, p.stderr()
    assert "lock" in members[0].stderr() + members[1].stderr()
    assert mq.committed_total("G", "T") == len(want)


def test_one_queue_topic_is_globally_ordered_across_members(mq: MQ) -> None:
    mq.ok("topic", "create", "G1", "--queues", "1")
    log = mq.work / "log"
    a = member(mq, log, "--batch", "3", topic="G1")
    wait_for(lambda: [i.pid for i in mq.locks("G") if i.alive] == [a.pid], 15, what="a to hold the queue")
    b = member(mq, log, "--batch", "3", topic="G1")
    wait_for(lambda: len(mq.members("G")) == 2, 15, what="b to join")
    n = 0
    for w in range(4):
        mq.ok("send", "G1", "-q", "0", input="".join(f"g.{n + i}\n" for i in range(30)))
        n += 30
        if w == 1:
            wait_for(lambda: len(read_log(log)) >= 30, 15, what="a to consume")
            a.signal(signal.SIGTERM)
            assert a.wait(20) == 0, a.stderr()
    wait_for(lambda: len(read_log(log)) >= n, 30, what="all messages")
    b.signal(signal.SIGTERM)
    assert b.wait(20) == 0
    rows = read_log(log)
    assert [r[0] for r in rows] == [f"g.{i}" for i in range(n)], "one total order, no repeats"
    assert pid_runs(rows, 0) in ([str(a.pid), str(b.pid)], [str(a.pid)])
    assert str(b.pid) in {r[2] for r in rows}


def test_ordered_topic_requires_a_sharding_key_or_queue(mq: MQ) -> None:
    mq.ok("topic", "create", "O", "--queues", "4", "--order")
    listed = [json.loads(line) for line in mq.ok("topic", "list", "--json").stdout.splitlines()]
    assert any(t["topic"] == "O" and t["order"] for t in listed)
    cp = mq.run("send", "O", "no key")
    assert cp.returncode == 2 and "sharding key" in cp.stderr
    cp = mq.run("send", "O", input="a\nb\n")
    assert cp.returncode == 2
    mq.ok("send", "O", "keyed", "-s", "order-42")
    mq.ok("send", "O", "queued", "-q", "3")
    mq.ok("send", "O", "--key-delimiter", ":", input="k1:x\nk2:y\n")
    out = mq.ok("consume", "O", "-g", "G", "--orderly", "--from", "first", "-e").stdout.split()
    assert sorted(out) == [b"keyed", b"queued", b"x", b"y"]
