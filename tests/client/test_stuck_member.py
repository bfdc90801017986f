"""A member alive but stuck (SIGSTOP) stops counting for the group's allocation once it has
not proved it runs for the member expiry (RocketMQ: a client without a heartbeat for 120 s
is dropped and the others rebalance): the others take its queues, breaking its expired
queue locks; on SIGCONT it notices, delivers nothing more of the queues it lost, and
rejoins. Real ``mqctl consume`` processes, with every lease scaled down for the test
(``MQCTL_TEST_LEASE_SCALE``, store/client/leases.py: member expiry 6 s, queue lock lease 3 s).

Before, the stuck member kept its queues for ever: its membership flock was still held, so
every allocation still gave them to it, and nobody ever tried its expired locks."""
from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

import pytest

from tests.procs import MQ, Proc, wait_for

SCALED = {"MQCTL_TEST_LEASE_SCALE": "0.05"}


def _consumer(mq: MQ, *extra: str) -> Proc:
    return mq.start("consume", "T", "-g", "G", "--from", "first", *extra, extra_env=SCALED)


def _send(mq: MQ, queue: int, bodies: list[str]) -> None:
    mq.ok("send", "T", "-q", str(queue), input="".join(f"{b}\n" for b in bodies))


def _client_of(mq: MQ, proc: Proc, group: str = "G") -> str:
    [cid] = [m.clientId for m in mq.members(group) if m.pid == proc.pid]
    return cid


def _lines(proc: Proc) -> list[str]:
    return [ln.decode() for ln in proc.lines()]


@pytest.mark.parametrize("mode,queues", [("--orderly", 2), ("concurrently", 1)])
@pytest.mark.slow
def test_a_stopped_member_loses_its_queues_then_rejoins_without_duplicates(mq: MQ, mode: str, queues: int) -> None:
    mq.ok("topic", "create", "T", "--queues", str(queues), *(["--order"] if mode == "--orderly" else []))
    extra = [mode] if mode == "--orderly" else []
    a = _consumer(mq, *extra)
    mq.wait_balanced("G", "T", 1, queues)
    b = _consumer(mq, *extra)
    wait_for(lambda: len(mq.members("G")) == 2, what="both members to join")
    if queues > 1:
        mq.wait_balanced("G", "T", 2, queues)
    held = mq.member_queues("G", "T")
    a_id, b_id = _client_of(mq, a), _client_of(mq, b)
    [lost] = sorted(held[a_id])   # (with one queue: the first member keeps it)

    a.signal(signal.SIGSTOP)
    try:
        first = [f"{q}-first-{i}" for q in range(queues) for i in range(3)]
        for q in range(queues):
            _send(mq, q, [b for b in first if b.startswith(f"{q}-")])
        # the stopped member's queue is taken over once it stops counting: B prints it all
        wait_for(lambda: set(first) <= set(_lines(b)), timeout=90,
                 what=f"{b_id} to take queue {lost} of the stopped {a_id}")
        assert any(lk.queueId == lost and lk.clientId == b_id for lk in mq.locks("G"))
    finally:
        a.signal(signal.SIGCONT)
    # It notices, and rejoins: counted again, the group shares the queues with it again.
    wait_for(lambda: "rejoining" in a.stderr(), timeout=60, what=f"{a_id} to rejoin")
    assert f"lost the lock on queue T:{lost} of group G" in a.stderr(), a.stderr()
    if queues > 1:
        mq.wait_balanced("G", "T", 2, queues, timeout=60)
    then = [f"{q}-then-{i}" for q in range(queues) for i in range(3)]
    for q in range(queues):
        _send(mq, q, [b for b in then if b.startswith(f"{q}-")])
    wait_for(lambda: set(first + then) <= set(_lines(a) + _lines(b)), timeout=60, what="every message")
    assert not set(first) & set(_lines(a)), "the stopped member delivered what its queue's new owner did"
    assert a.stop() == 0 and b.stop() == 0
    counts = collections.Counter(_lines(a) + _lines(b))
    assert sorted(counts.elements()) == sorted(first + then), "each message once"


def test_a_broadcast_member_never_stops_counting(mq: MQ) -> None:
    """A broadcast member shares nothing and does not beat: it leaves no proof of life to
    grow old (which made it vanish from ``mqctl rebalance`` 120 s after it joined, exit 3)."""
    import os
    mq.ok("topic", "create", "T", "--queues", "2")
    a = mq.start("consume", "T", "-g", "B", "--broadcast", extra_env=SCALED)
    wait_for(lambda: len(mq.members("B")) == 1, what="the broadcast member to join")
    for beat in (mq.root / "consumers" / "B" / ".beats").glob("*"):
        os.utime(beat, (0, 0))   # (as if it had joined long ago)
    shown = mq.ok("rebalance", "T", "-g", "B")
    assert _client_of(mq, a, "B") in shown.out, shown
    assert a.stop() == 0


@pytest.mark.slow
def test_the_views_show_a_stopped_member_expired_holding_nothing(mq: MQ) -> None:
    """``consumers``, ``progress``, ``top`` and ``rebalance`` agree on who is live, by the
    rebalance's own test (the member's beat), and on who holds a queue (its lock): a member
    stopped past the member expiry is shown ``expired`` and holding nothing, its queues with
    the member that took them. Before, consumers, progress and top showed it live, still
    holding the queues it had lost (its stale claim), and progress counted 2 live members."""
    import json

    mq.ok("topic", "create", "T", "--queues", "4")
    a = _consumer(mq)
    mq.wait_balanced("G", "T", 1, 4)
    b = _consumer(mq)
    mq.wait_balanced("G", "T", 2, 4)
    a_id, b_id = _client_of(mq, a), _client_of(mq, b)
    a.signal(signal.SIGSTOP)
    try:
        # the others share the queues without it once it expires, breaking its locks
        wait_for(lambda: sorted(lk.queueId for lk in mq.locks("G") if lk.alive and lk.clientId == b_id)
                 == [0, 1, 2, 3], timeout=90, what=f"{b_id} to take every queue of the stopped {a_id}")
        rows = {r["clientId"]: r for r in mq.ok("consumers", "-g", "G", "--json", extra_env=SCALED).json_lines()}
        assert rows[a_id]["state"] == "expired" and rows[a_id]["queues"] == [], rows
        assert rows[b_id]["state"] == "live" and [q["queueId"] for q in rows[b_id]["queues"]] == [0, 1, 2, 3]
        table = mq.ok("consumers", "-g", "G", extra_env=SCALED).out
        assert table.splitlines()[0].split()[-1] == "STATE" and " expired" in table, table
        progress = mq.ok("progress", "-g", "G", "--json", extra_env=SCALED).json_lines()
        assert {r["owner"] for r in progress if r["topic"] == "T"} == {b_id}, progress
        said = mq.ok("progress", "-g", "G", extra_env=SCALED).stderr
        assert "1 live member (1 more expired" in said, said
        [snap] = [json.loads(ln) for ln in mq.ok("top", "--once", "--json", "-g", "G", extra_env=SCALED).out.splitlines()]
        members = {m["clientId"]: m for g in snap["groups"] for m in g["members"]}
        assert members[a_id]["state"] == "expired" and members[a_id]["queues"] == [], members
        assert [q["queueId"] for q in members[b_id]["queues"]] == [0, 1, 2, 3]
        assert {q["owner"] for g in snap["groups"] for q in g["queues"] if q["topic"] == "T"} == {b_id}
        rebalance = mq.ok("rebalance", "T", "-g", "G", "--json", extra_env=SCALED).json_lines()
        assert [(r["clientId"], r["holds"]) for r in rebalance] == [(b_id, [0, 1, 2, 3])]
    finally:
        a.signal(signal.SIGCONT)
    assert a.stop() == 0 and b.stop() == 0


@pytest.mark.slow
def test_a_stopped_exec_member_starts_no_handler_on_the_queue_it_lost(mq: MQ, tmp_path: Path) -> None:
    """``--exec`` with one handler at a time: when the member is stopped, a batch already handed
    out waits for the handler slot. Once the member runs again, that batch's queue is another
    member's: the batch is handed back, not started (it started: a message the new owner had
    handled already ran again). Only the handler running when the member was stopped, whose
    outcome the new owner never saw, may run twice."""
    mq.ok("topic", "create", "T", "--queues", "1")
    _send(mq, 0, [f"m{i}" for i in range(40)])
    log = tmp_path / "runs"
    handler = tmp_path / "h.sh"
    handler.write_text(f'b=$(cat); echo "$1 $b $(date +%s.%N)" >> {log}; sleep 0.3\n')

    def start(name: str) -> Proc:
        return _consumer(mq, "--exec", f"sh {handler} {name}", "--threads", "1")

    def runs() -> list[tuple[str, str, float]]:
        return [(w[0], w[1], float(w[2])) for w in (ln.split() for ln in log.read_text().splitlines())]

    a = start("A")
    wait_for(lambda: log.exists() and sum(r[0] == "A" for r in runs()) >= 2, what="A to run handlers")
    b = start("B")
    wait_for(lambda: len(mq.members("G")) == 2, what="both members to join")
    a.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: sum(r[0] == "B" for r in runs()) >= 3, timeout=90, what="B to take the queue over")
    finally:
        resumed = time.time()   # (A starts nothing while stopped: its last start before this was in flight)
        a.signal(signal.SIGCONT)
    wait_for(lambda: "lost the lock on queue T:0 of group G" in a.stderr(), timeout=60, what="A to notice")
    wait_for(lambda: {r[1] for r in runs()} >= {f"m{i}" for i in range(40)}, timeout=60, what="every message")
    assert a.stop() == 0 and b.stop() == 0
    done = runs()
    in_flight = max((r for r in done if r[0] == "A" and r[2] < resumed), key=lambda r: r[2])[1]
    twice = [m for m, n in collections.Counter(r[1] for r in done).items() if n > (2 if m == in_flight else 1)]
    assert twice == [], f"run twice: {twice}\n{log.read_text()}\n{a.stderr()}"
