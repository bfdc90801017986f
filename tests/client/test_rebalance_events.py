"""A group member rebalances on changes, not on timers.

The member's loop (:meth:`store.client.runtime.ConsumerRuntime.turns`) is driven by hand here, turn
by turn, so what it waits for is read off what it yields: nothing is timed. Real processes:
a group of 16 ``mqctl consume`` members started together, then one more joining.
"""
from __future__ import annotations

import math
import threading
from typing import Callable, Generator, Iterator

import pytest

from store import Store
from store.client import runtime as runtime_mod
from store.client.configwatch import BUSY_COMMITS, TOPICS_LOOK_S
from store.client.options import ConsumeOptions
from store.client.qlocks import QueueLock, renew_all
from store.client.runtime import ConsumerRuntime
from store.layout import lock_beside
from store.log.offsets import ClusterOffsetStore, exclusive
from store.log.record import Draft
from tests.procs import MQ, wait_for


@pytest.fixture
def topic(store: Store) -> Store:
    store.create_topic("T", 2)
    return store


def member(store: Store, warn: Callable[[str], None] = lambda _m: None, **kw: object) -> ConsumerRuntime:
    # (a persist interval short enough for settle() to wait out its first look at the offsets)
    opts = ConsumeOptions(topic="T", group="G", client_id="m1", install_signals=False,  # type: ignore[arg-type]
                          persist_interval_s=0.2, **kw)
    rt = ConsumerRuntime(store, opts, warn=warn)
    rt.setup()
    return rt


def settle(rt: ConsumerRuntime, turns: Generator[float | None, bool, None], due: float | None) -> float:
    """Run turns until the member waits over a second with nothing it watches changed (what
    is due sooner, such as a first delay-scheduler pass, is waited for): the wait it asks."""
    for _ in range(200):
        if due is None:
            due = turns.send(False)
        elif rt.wake.wait(0):
            due = turns.send(True)
        elif due < 1.0:
            due = turns.send(rt.wake.wait(due))
        else:
            return due
    raise AssertionError("the member never came to wait")


@pytest.fixture
def rt(topic: Store) -> Iterator[ConsumerRuntime]:
    r = member(topic)
    yield r
    r.shutdown(wait_handlers=False)


def test_an_idle_member_waits_for_a_change_and_only_its_lock_renewal(rt: ConsumerRuntime) -> None:
    turns = rt.turns()
    due = settle(rt, turns, next(turns))
    assert set(rt.held.pqs) == {("T", 0), ("T", 1)}
    assert rt.wake.backend == "inotify" and not rt.wake.polls
    # no rebalance, membership look, offsets look or delay pass on a timer: the next thing
    # due is the renewal of its queue locks for the store lease
    assert due > runtime_mod.RENEW_INTERVAL_S, due
    rt.store.put([Draft(topic="T", body=b"x", queue_id=0)])   # (a change still wakes it)
    assert rt.wake.wait(5.0)
    turns.close()


@pytest.mark.slow
def test_a_queue_added_while_the_member_runs_is_read_from_its_first_message(rt: ConsumerRuntime) -> None:
    """``--from last`` (the default) starts a queue the group has no offset for at its end:
    right for the queues there when the member started, wrong for one a ``topic update`` adds
    later, all of whose messages are newer than the member. One sent to the new queue before
    the member took it up (a resize, then a send at once) was skipped."""
    got: list[bytes] = []

    class Collect:
        raw = False

        def consume(self, batch: list) -> None:
            got.extend(m.body for m in batch)

        def write_raw(self, bodies: list) -> None:
            got.extend(bytes(b) for b in bodies)
    rt.set_sink(Collect())
    turns = rt.turns()
    settle(rt, turns, next(turns))
    rt.store.update_topic("T", 3)
    rt.store.put([Draft(topic="T", body=b"first on the new queue", queue_id=2)])
    settle(rt, turns, turns.send(rt.wake.wait(5.0)))
    assert ("T", 2) in rt.held.pqs and got == [b"first on the new queue"]
    turns.close()


@pytest.mark.parametrize("kw", [{"broadcast": True}, {"no_group": True, "broadcast": True}],
                         ids=["broadcast", "no-group"])
def test_a_member_without_locks_waits_without_a_timer(topic: Store, kw: dict) -> None:
    """No lock to renew, nothing on a timer. ``consume --no-group`` (made as the command line
    makes it) has no membership to look at either: its idle loop once waited 0 s (the look it
    never takes stayed due), a core spinning while nothing came."""
    r = member(topic, **kw)
    try:
        turns = r.turns()
        assert settle(r, turns, next(turns)) == math.inf
        turns.close()
    finally:
        r.shutdown(wait_handlers=False)


def test_a_released_lock_wakes_the_member_waiting_for_it(topic: Store) -> None:
    other = QueueLock(topic.layout, "G", "T", 1, "someone-else")
    assert other.try_acquire()
    r = member(topic)
    try:
        turns = r.turns()
        due = next(turns)
        for _ in range(50):   # its first turns: it takes queue 0 and waits for queue 1
            due = turns.send(due is not None and r.wake.wait(0))
        assert set(r.held.pqs) == {("T", 0)} and r.rebalancer.waiting_for == {("T", 1)}
        assert due is not None and due <= 0.5   # (it also looks again on a short timer)
        lock_file = topic.layout.queue_lock("G", "T", 1)
        assert lock_file in r.wake.paths
        while r.wake.wait(0):
            turns.send(True)
        other.release()
        # the release itself wakes it (a wait without a timeout returns on it)
        assert r.wake.wait(None) and lock_file in r.wake.changed
        settle(r, turns, turns.send(True))
        assert set(r.held.pqs) == {("T", 0), ("T", 1)} and not r.rebalancer.waiting_for
        assert lock_file in r.wake.paths   # now as one of its own (a deletion is noticed at once)
        turns.close()
    finally:
        other.release()
        r.shutdown(wait_handlers=False)


def test_a_member_its_allocation_saw_alive_is_looked_for_again(topic: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead member can look alive to one probe just after the change that announced its
    death: the kernel queues the event of its lock file's close before it drops the flock,
    and a survivor pruning the dead member's files holds its lock meanwhile. A member whose
    look at the membership came before that, and whose allocation after it split the queues
    with the dead one, waited with nothing more to change in the group's directory (seen in
    a three-member group after a kill -9: two queues held by no one for good)."""
    from store.client import members as members_mod
    real = members_mod.live_members
    ghost = members_mod.MemberInfo(group="G", clientId="a-dead", pid=None, host=None, startedAt=None,
                                   record={"topics": ["T"], "queues": []})
    fooled = []   # armed: the next look through live_members also sees the dead member

    def live_members(layout, group, *, prune=False, counted_only=False):   # type: ignore[no-untyped-def]
        got = real(layout, group, prune=prune, counted_only=counted_only)
        if fooled and not fooled[-1]:
            fooled[-1] = True
            return [ghost, *got]
        return got
    monkeypatch.setattr(members_mod, "live_members", live_members)
    r = member(topic)
    other = members_mod.Membership(topic.layout, "G", "m2", {"topics": ["T"], "mode": "clustering", "queues": []})
    try:
        turns = r.turns()
        settle(r, turns, next(turns))
        other.join()
        assert r.wake.wait(5.0)
        settle(r, turns, turns.send(True))
        assert set(r.held.pqs) == {("T", 0)}   # (m2 holds no lock: queue 1 is simply unheld)
        fooled.append(False)
        other.leave()
        assert r.wake.wait(5.0)
        settle(r, turns, turns.send(True))
        assert fooled == [True], "the allocation never saw the dead member"
        assert set(r.held.pqs) == {("T", 0), ("T", 1)}
        turns.close()
    finally:
        other.leave()
        r.shutdown(wait_handlers=False)


def test_an_idle_member_renews_its_locks(rt: ConsumerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = rt.turns()
    settle(rt, turns, next(turns))
    monkeypatch.setattr(runtime_mod, "RENEW_INTERVAL_S", 0.0)   # (the leases as if 40 s passed)
    monkeypatch.setattr(runtime_mod, "IDLE_RENEW_S", 0.0)
    lock = rt.held.locks[("T", 0)]
    before = lock.renewed_at
    assert before is not None

    def renewed() -> bool:
        turns.send(False)   # (the wait timed out)
        return lock.renewed_at != before
    wait_for(renewed, 10, what="the lease renewed")
    assert lock.is_valid()
    turns.close()


def test_renew_all_renews_under_one_mutex_and_names_the_lost(topic: Store) -> None:
    locks = [QueueLock(topic.layout, "G", "T", q, "m1") for q in (0, 1)]
    assert all(lock.try_acquire() for lock in locks)
    topic.layout.queue_lock("G", "T", 1).unlink()   # (mqctl unlock --force)
    assert renew_all(locks) == [locks[1]]
    assert locks[0].is_valid() and not locks[1].held
    locks[0].release()


def test_a_lag_commit_does_not_wait_behind_another_commit(rt: ConsumerRuntime) -> None:
    turns = rt.turns()
    settle(rt, turns, next(turns))
    keeper = rt.keeper
    # a pool sink's (--exec) commit for lag, made in the loop's thread (an inline sink's is
    # handed to the writer thread: tests/client/test_commit_off_path.py)
    keeper.pace(inline=False, every_s=0.0)
    keeper.advance(("T", 0), keeper.lag + 5)
    assert keeper.urgent
    done = threading.Event()
    with exclusive(lock_beside(rt.layout.consumer_offset_json)):   # another process committing
        th = threading.Thread(target=lambda: (keeper.persist_lagging(1e9), done.set()), daemon=True)
        th.start()
        wait_for(done.is_set, 20, what="the lag commit to return while the table is locked")
        assert keeper.dirty and keeper.put_off == 1
    keeper.persist_lagging(1e9)
    assert not keeper.dirty and keeper.put_off == 0
    assert ClusterOffsetStore(rt.layout).read_group("G")[("T", 0)] == keeper.lag + 5
    turns.close()


def _woken_by(rt: ConsumerRuntime, turns: Generator[float | None, bool, None], change: Callable[[], object]) -> bool:
    """Whether ``change`` (a file written now, its inotify event queued before it returns)
    wakes the member; the wake is handed to its turns as its driver does."""
    change()
    if not rt.wake.wait(0):
        return False
    turns.send(True)
    return True


@pytest.mark.slow
def test_other_members_commits_put_the_offsets_watch_to_sleep_until_the_persist_look(topic: Store) -> None:
    """Every offset commit of every group replaces the offsets table, which a member watches
    only for resets: 16 busy members woke each other ~200 times a second each (half of their
    CPU). After a few such wake-ups the member stops watching the table until its next persist
    look, which watches it again and takes up a reset it missed; meanwhile it looks at the
    topic table every TOPICS_LOOK_S: a topic resized is taken up then."""
    warned: list[str] = []
    rt = member(topic, warn=warned.append)
    try:
        turns = rt.turns()
        settle(rt, turns, next(turns))
        own = rt.keeper.offset_store   # its own commits (what the writer thread writes) do not count
        assert all(_woken_by(rt, turns, lambda i=i: own.commit("G", {("T", 1): i})) for i in range(1, 6))
        table = ClusterOffsetStore(rt.layout)
        woken = [_woken_by(rt, turns, lambda i=i: table.commit("H", {("T", 0): i})) for i in range(1, 11)]
        assert woken == [True] * BUSY_COMMITS + [False] * (10 - BUSY_COMMITS)
        # asleep, it looks at the topic table every TOPICS_LOOK_S: the wait it asks is no
        # longer, and a resize is taken up then (a message sent to a new queue meanwhile is
        # not left behind)
        assert rt.layout.topics_epoch not in rt.wake.paths
        due = turns.send(False)
        assert due is not None and due <= TOPICS_LOOK_S
        topic.update_topic("T", 3)
        for _ in range(400):
            if ("T", 2) in rt.held.pqs:
                break
            due = turns.send(rt.wake.wait(due))
        assert ("T", 2) in rt.held.pqs
        # a forced reset of its own group, missed while asleep, is taken up at the persist look
        # (one that moves the offset: the member goes on with a queue a reset left where it was)
        table.reset("G", "T", {0: 1})
        for _ in range(400):
            if any("offsets of T/0 were reset" in w for w in warned):
                break
            due = turns.send(rt.wake.wait(due))
        assert any("offsets of T/0 were reset" in w for w in warned), warned
        settle(rt, turns, due)
        assert _woken_by(rt, turns, lambda: table.commit("H", {("T", 0): 21}))   # watched again
        turns.close()
    finally:
        rt.shutdown(wait_handlers=False)


def test_sixteen_members_started_together_settle_and_a_joiner_gets_its_share(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "16")
    procs = [mq.start("consume", "T", "-g", "G", "--from", "first") for _ in range(16)]
    split = mq.wait_balanced("G", "T", 16, 16, timeout=120)
    pids = {p.pid for p in procs}
    owners = {lk.queueId: lk.pid for lk in mq.locks("G") if lk.alive}
    assert set(owners) == set(range(16)) and set(owners.values()) == pids, owners
    assert all(len(qs) == 1 for qs in split.values())
    procs[0].signal(15)
    assert procs[0].wait() == 0
    mq.wait_balanced("G", "T", 15, 16, timeout=120)
    joiner = mq.start("consume", "T", "-g", "G", "--from", "first")
    split = mq.wait_balanced("G", "T", 16, 16, timeout=120)
    assert any(cid.endswith(f"@{joiner.pid}") for cid in split)
    for p in procs[1:] + [joiner]:
        p.signal(15)
    assert all(p.wait() == 0 for p in procs[1:] + [joiner])


def test_a_reset_to_the_committed_offset_is_taken_up_by_a_member_that_read_further(topic: Store) -> None:
    """A member that committed 3 of T/0 and consumed on to 7 (not committed yet) is reset to 3:
    the table's offset did not move, but the member's did. It must start T/0 again from 3 (and
    say so), not commit 7 over the reset (the replay the reset asked for silently skipped)."""
    warned: list[str] = []
    rt = member(topic, warn=warned.append)
    try:
        turns = rt.turns()
        settle(rt, turns, next(turns))
        keeper = rt.keeper
        keeper.pace(inline=False, every_s=0.0)
        keeper.advance(("T", 0), 3)
        keeper.persist()
        table = ClusterOffsetStore(rt.layout)
        assert table.read_group("G")[("T", 0)] == 3
        keeper.advance(("T", 0), 7)   # consumed on, its commit not made yet
        table.reset("G", "T", {0: 3})
        keeper.check_reset()
        assert any("offsets of T/0 were reset" in w for w in warned), warned
        keeper.persist()
        assert ClusterOffsetStore(rt.layout).read_group("G")[("T", 0)] == 3
        turns.close()
    finally:
        rt.shutdown(wait_handlers=False)
