"""Consumer groups across processes: members splitting a topic, joining, dying (kill -9),
broadcasting, and the retry / dead-letter path. Real ``mqctl`` processes only."""
from __future__ import annotations

import collections
import json
import signal
import time

import pytest

from tests.procs import MQ, handler_script, wait_for  # noqa: F401  (mq is a fixture)

# Appends "BODY|QUEUE|CONSUMER_PID|RECONSUME|TOPIC" to $LOG with one write per message.
RECORD = ('b=$(cat); printf "%s|%s|%s|%s|%s\\n" "$b" "$MQ_QUEUE_ID" "$PPID" "$MQ_RECONSUME_TIMES" '
          '"$MQ_TOPIC" >> "$LOG"')


def read_log(path) -> list[list[str]]:
    return [line.split("|") for line in path.read_text().splitlines()] if path.exists() else []


def start_member(mq: MQ, log, *extra: str, topic: str = "T", group: str = "G"):
    return mq.start("consume", topic, "-g", group, "--from", "first", "--rebalance-interval", "0.2",
                    "--exec", handler_script(mq.work / "rec.sh", RECORD), *extra,
                    extra_env={"LOG": str(log)})


def queues_by_pid(rows: list[list[str]]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = collections.defaultdict(set)
    for _body, qid, pid, *_ in rows:
        out[pid].add(int(qid))
    return out


def test_members_split_queues_and_a_third_one_joins(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    log = mq.work / "log"
    a, b = start_member(mq, log), start_member(mq, log)
    split = mq.wait_balanced("G", "T", 2, 8)
    assert sorted(len(s) for s in split.values()) == [4, 4]
    mq.send_lines("T", [f"p1-{i}" for i in range(200)])
    wait_for(lambda: len(read_log(log)) >= 200, 30, what="200 messages handled")
    time.sleep(0.3)  # would-be duplicates have a moment to show up
    rows = read_log(log)
    assert sorted(r[0] for r in rows) == sorted(f"p1-{i}" for i in range(200)), "each message once overall"
    by_pid = queues_by_pid(rows)
    assert set(by_pid) == {str(a.pid), str(b.pid)}
    assert not (by_pid[str(a.pid)] & by_pid[str(b.pid)]), "members' queues must be disjoint"

    t0 = time.monotonic()
    c = start_member(mq, log)
    split3 = mq.wait_balanced("G", "T", 3, 8, timeout=15)
    moved_in = time.monotonic() - t0
    assert sorted(len(s) for s in split3.values()) == [2, 3, 3]
    assert moved_in < 10, f"queues took {moved_in:.1f} s to move to a new member"
    mark = len(rows)
    mq.send_lines("T", [f"p2-{i}" for i in range(300)])
    wait_for(lambda: len(read_log(log)) >= mark + 300, 30, what="300 more messages handled")
    time.sleep(0.3)
    rows2 = read_log(log)[mark:]
    assert sorted(r[0] for r in rows2) == sorted(f"p2-{i}" for i in range(300)), "each message once overall"
    by_pid = queues_by_pid(rows2)
    assert set(by_pid) == {str(p.pid) for p in (a, b, c)}
    seen: set[int] = set()
    for qs in by_pid.values():
        assert not (qs & seen), "members' queues must be disjoint"
        seen |= qs
    assert seen == set(range(8))
    for p in (a, b, c):
        p.signal(signal.SIGTERM)
    for p in (a, b, c):
        assert p.wait(20) == 0, p.stderr()
    assert mq.committed_total("G", "T") == 500
    assert not mq.members("G")


@pytest.mark.slow
def test_killed_member_queues_are_taken_over_nothing_lost(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    log = mq.work / "log"
    slow = handler_script(mq.work / "slow.sh", "sleep 0.01; " + RECORD)
    members = [mq.start("consume", "T", "-g", "G", "--from", "first", "--rebalance-interval", "0.2",
                        "--exec", slow, extra_env={"LOG": str(log)}) for _ in range(3)]
    mq.wait_balanced("G", "T", 3, 8)
    n = 600
    mq.send_lines("T", [f"m{i}" for i in range(n)])
    wait_for(lambda: len(read_log(log)) >= 100, 30, what="consumption to be under way")
    victim = members[0]
    victim_queues = mq.member_queues("G", "T")
    victim.kill9()
    # (how soon is a benchmark's question, tests/bench/bench_members.py: here, that it happens)
    survivors = mq.wait_balanced("G", "T", 2, 8, timeout=120)
    assert all(cid in victim_queues for cid in survivors)
    wait_for(lambda: {r[0] for r in read_log(log)} >= {f"m{i}" for i in range(n)}, 60,
             what="every message handled at least once")
    rows = read_log(log)
    # A handler of the killed member can see its stdin end early (the consumer died while
    # writing the body) and run on with a cut body; nothing of it was committed.
    # (Its $PPID may read as the reaper's by then, so: not a survivor's.)
    cut = [r for r in rows if r[0] not in {f"m{i}" for i in range(n)}]
    assert all(r[2] not in {str(p.pid) for p in members[1:]} for r in cut), cut
    assert {r[0] for r in rows} - {r[0] for r in cut} == {f"m{i}" for i in range(n)}
    # The killed member's handlers died with it; only survivors handle after the hand-over.
    for p in members[1:]:
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.stderr()
    assert mq.committed_total("G", "T") == n


def test_broadcast_members_each_see_everything(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    b1 = mq.start("consume", "T", "-g", "B", "--broadcast", "--client-id", "b1", "--from", "first")
    b2 = mq.start("consume", "T", "-g", "B", "--broadcast", "--client-id", "b2", "--from", "first")
    wait_for(lambda: {"b1", "b2"} <= set(mq.member_queues("B")), 15, what="both members")
    mq.send_lines("T", [f"m{i}" for i in range(50)])
    for p in (b1, b2):
        wait_for(lambda p=p: len(p.lines()) >= 50, 20, what="every message at every member")
    for p in (b1, b2):
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.stderr()
        assert sorted(p.lines()) == sorted(b"m%d" % i for i in range(50))
    for cid in ("b1", "b2"):
        path = mq.root / "offsets" / cid / "B" / "offsets.json"
        table = json.loads(path.read_text())["offsetTable"]
        assert sum(e["offset"] for e in table if e["topic"] == "T") == 50
    assert mq.offsets("B") == {}, "broadcast offsets never go to the shared table"
    # A restart with the same client id resumes from its own file.
    mq.send_lines("T", ["late"])
    assert mq.ok("consume", "T", "-g", "B", "--broadcast", "--client-id", "b1", "-e").stdout == b"late\n"


def test_clustering_members_beside_a_broadcast_member_of_their_group_read_every_queue(mq: MQ) -> None:
    """A broadcast member of the group's topic was counted in the clustering members' share of
    its queues, so the queues allotted to it went unread by them (here 6 of 8 read). A
    broadcast member has no share (RocketMQ allocates among clustering members only): the
    clustering members read every queue between them, and the broadcast member every message
    for itself; ``rebalance`` lists it with no queues, ``progress`` names the clustering holders."""
    mq.ok("topic", "create", "T", "--queues", "8")
    n = 200
    mq.send_lines("T", [f"m{i}" for i in range(n)])
    everything = sorted(b"m%d" % i for i in range(n))
    # (its id sorts last: counted, the queues allotted to it were the clustering members' last ones)
    bc = mq.start("consume", "T", "-g", "G", "--broadcast", "--client-id", "z-bc", "--from", "first")
    wait_for(lambda: "z-bc" in mq.member_queues("G"), what="the broadcast member to join")
    c1 = mq.start("consume", "T", "-g", "G", "--client-id", "c1", "--from", "first", "--rebalance-interval", "0.2")
    c2 = mq.start("consume", "T", "-g", "G", "--client-id", "c2", "--from", "first", "--rebalance-interval", "0.2")
    try:
        wait_for(lambda: len(c1.lines()) + len(c2.lines()) >= n, what="the clustering members to get every message")
        wait_for(lambda: len(bc.lines()) >= n, what="the broadcast member to get every message")
        settled = [{"group": "G", "topic": "T", "strategy": "averagely", "clientId": "c1", "queues": [0, 1, 2, 3],
                    "holds": [0, 1, 2, 3]},
                   {"group": "G", "topic": "T", "strategy": "averagely", "clientId": "c2", "queues": [4, 5, 6, 7],
                    "holds": [4, 5, 6, 7]},
                   {"group": "G", "topic": "T", "strategy": "averagely", "clientId": "z-bc", "queues": [],
                    "holds": []}]
        wait_for(lambda: mq.ok("rebalance", "T", "-g", "G", "--json").json_lines() == settled,
                 what="c1 and c2 to share the queues without z-bc")
        human = mq.ok("rebalance", "T", "-g", "G")
        assert human.stderr.splitlines() == ["averagely: 8 queues of T shared by 2 members; broadcast member z-bc "
                                             "reads every queue for itself, with no share"]
        owners = {r["queueId"]: r["owner"] for r in mq.ok("progress", "-g", "G", "--topic", "T", "--json").json_lines()
                  if r["clientId"] is None}
        assert owners == {q: "c1" if q < 4 else "c2" for q in range(8)}
    finally:
        for p in (c1, c2, bc):
            assert p.stop() == 0, p.stderr()
    assert sorted(c1.lines() + c2.lines()) == everything, "each message once among the clustering members"
    assert sorted(bc.lines()) == everything
    assert mq.committed_total("G", "T") == n


def test_retry_then_dead_letter(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    log = mq.work / "log"
    # "bad" always fails; "flaky" fails on its first delivery only; "good" never fails.
    h = handler_script(mq.work / "h.sh", RECORD + f"""
case "$b" in
  bad) exit 3 ;;
  flaky) if [ ! -e {mq.work}/flaky-once ]; then : > {mq.work}/flaky-once; exit 1; fi ;;
esac
exit 0""")
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--retry-delay", "100ms",
                 "--max-reconsume", "2", "--exec", h, extra_env={"LOG": str(log)})
    mq.send_lines("T", ["bad", "flaky", "good"], "--keys", "K1", "--tag", "TG")
    st = mq.store()

    def dlq():
        if not st.has_topic("%DLQ%G"):
            return []
        return list(st.iter_queue("%DLQ%G", 0, 0))
    dead = wait_for(dlq, 30, what="the bad message in %DLQ%G")
    wait_for(lambda: sum(r[0] == "flaky" for r in read_log(log)) == 2, 20, what="flaky to be retried")
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.stderr()
    rows = read_log(log)
    tries = collections.defaultdict(list)
    for body, _q, _pid, rt, topic in rows:
        tries[body].append((int(rt), topic))
    # reconsumeTimes travels with each retry; the handler sees the original topic.
    assert tries["bad"] == [(0, "T"), (1, "T"), (2, "T")]
    assert tries["flaky"] == [(0, "T"), (1, "T")]
    assert tries["good"] == [(0, "T")]
    assert len(dead) == 1
    m = dead[0]
    assert m.body == b"bad" and m.reconsume_times == 2
    assert m.tags == "TG" and "K1" in m.keys
    assert "moved to %DLQ%G" in p.stderr()
    # The DLQ is an ordinary topic to read.
    out = mq.ok("consume", "%DLQ%G", "-g", "inspect", "--from", "first", "-e", "--json").stdout
    env = json.loads(out)
    assert env["body"] == "bad" and env["reconsumeTimes"] == 2
    assert mq.committed_total("G", "T") == 3


@pytest.mark.parametrize("mode", ["concurrent", "orderly"])
def test_consume_timeout_counts_as_failure(mq: MQ, mode: str) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    log = mq.work / "log"
    # Hangs on its first delivery only; exec so that the kill reaches the sleeper itself.
    h = handler_script(mq.work / "h.sh", RECORD + f"""
if [ ! -e {mq.work}/hung-once ]; then : > {mq.work}/hung-once; exec sleep 60; fi""")
    extra = ["--orderly", "--suspend-ms", "100"] if mode == "orderly" else ["--retry-delay", "100ms"]
    t0 = time.monotonic()
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--consume-timeout", "0.5", *extra,
                 "--exec", h, extra_env={"LOG": str(log)})
    mq.send_lines("T", ["slowpoke"])
    wait_for(lambda: len(read_log(log)) >= 2, 30, what="a second delivery after the timeout")
    assert time.monotonic() - t0 < 30
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.stderr()
    assert "timed out" in p.stderr()
    assert [r[3] for r in read_log(log)][:2] == ["0", "1"]


def test_consume_timeout_kills_the_handlers_whole_tree(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    log = mq.work / "log"
    pidfile = mq.work / "sleeper"
    # No exec: the shell waits for a sleep of its own, which must not outlive the timeout.
    h = handler_script(mq.work / "h.sh", RECORD + f"""
if [ ! -e {pidfile} ]; then sleep 60 & echo $! > {pidfile}; wait; fi""")
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--consume-timeout", "0.5",
                 "--retry-delay", "100ms", "--exec", h, extra_env={"LOG": str(log)})
    mq.send_lines("T", ["m"])
    wait_for(lambda: len(read_log(log)) >= 2, 30, what="a second delivery after the timeout")
    sleeper = int(pidfile.read_text())
    from tests.procs import pid_running
    wait_for(lambda: not pid_running(sleeper), 5, what="the handler's child to be killed")
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.stderr()


def test_ctrl_c_lets_running_handlers_finish(mq: MQ) -> None:
    """Ctrl-C at a terminal signals the whole foreground job. The handler must not die of it
    (its message would count as failed and go to the retry topic): the consumer stops, lets
    the batch finish, commits it, and exits 0."""
    import os
    mq.ok("topic", "create", "T", "--queues", "1")
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", """b=$(cat)
echo "start|$b" >> "$LOG"
sleep 1
echo "end|$b" >> "$LOG" """)
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--exec", h,
                 extra_env={"LOG": str(log)}, new_session=True)
    mq.send_lines("T", ["m"])
    wait_for(lambda: ["start", "m"] in read_log(log), 20, what="the handler to start")
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(20) == 0, p.stderr()
    assert read_log(log) == [["start", "m"], ["end", "m"]]
    assert mq.committed_total("G", "T") == 1
    assert not mq.store().has_topic("%RETRY%G") or mq.store().max_offset("%RETRY%G", 0) == 0


def test_bench_commands_run(mq: MQ) -> None:
    """Not a timing test: the benchmark commands run end to end and report their figures."""
    prod = json.loads(mq.ok("bench", "produce", "--count", "2000", "--json", "--dir", str(mq.work)).stdout)
    assert prod["msgsPerSec"] > 0 and prod["peakRssMiB"] > 0 and prod["count"] == 2000
    rows = [json.loads(line) for line in mq.ok(
        "bench", "consume", "--orderly", "--members", "1,2", "--count", "2000", "--repeat", "1",
        "--json", "--dir", str(mq.work), timeout=120).stdout.splitlines()]
    assert [r["members"] for r in rows] == [1, 2] and all(r["msgsPerSec"] > 0 for r in rows)
    assert rows[0]["ratio"] == 1.0
    ho = json.loads(mq.ok("bench", "consume", "--handover", "--members", "2", "--runs", "2", "--json",
                          "--dir", str(mq.work), timeout=120).stdout)
    assert ho["runs"] == 2 and ho["medianMs"] > 0
    assert not [p for p in mq.work.iterdir() if p.name.startswith("mqctl-bench-")], "scratch stores are removed"


def test_the_rebalance_preview_of_the_groups_retry_topic_lists_its_live_members(mq: MQ) -> None:
    """``rebalance %RETRY%G -g G`` said no live member consumed the retry topic while the
    members held it (each clustering member consumes its group's retry topic, as in
    RocketMQ, though its record names only its topic): it previews them, as ``locks`` and
    ``consumers`` show them."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", ["x"])
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", "false", "--max-reconsume", "1")
    members = [mq.start("consume", "T", "-g", "G", "--strategy", "hash", "--client-id", cid) for cid in "ab"]
    try:
        wait_for(lambda: len(mq.members("G")) == 2, what="both members to join")
        rows = mq.ok("rebalance", "%RETRY%G", "-g", "G", "--json").json_lines()
        assert [(r["clientId"], r["strategy"]) for r in rows] == [("a", "hash"), ("b", "hash")], rows
        [owner] = [r["clientId"] for r in rows if r["queues"] == [0]]
        # (what the members do: the one the preview gives the retry queue takes it)
        wait_for(lambda: mq.member_queues("G", "%RETRY%G").get(owner) == {0}, what=f"{owner} to hold it")
    finally:
        for p in members:
            p.stop()
