"""The sync iterator's pulls run in the iterating thread (``handoff.feed``) while it walks a
backlog, and what must go on while the loop body runs stays with the member's own thread: its
queue locks renewed and the group rebalanced while the loop body sleeps, what the loop
consumed committed, a ``close()`` from another thread in the middle of it.

Every wait is bounded (``wait_for``); nothing is timed.
"""
from __future__ import annotations

import subprocess
import threading
import time

import pytest

import store
from store.client import consumer as consumer_mod
from store.client import runtime as runtime_mod
from store.client.pulling import Puller
from tests.procs import MQ, python, wait_for  # noqa: F401  (mq is a fixture)


def _setup(path: str, n: int, queues: int = 2, queue: int | None = None) -> None:
    with store.Admin(path) as admin:
        admin.create_topic("T", queues=queues)
    with store.Producer(path) as p:
        for i in range(0, n, 500):
            p.send_many("T", [f"m{k}".ljust(200, ".") for k in range(i, min(n, i + 500))], queue=queue)


def _committed(path: str, group: str = "G") -> dict[int, int]:
    with store.Admin(path) as admin:
        return {r.queue_id: r.consumer_offset for r in admin.lag(group, "T") if r.topic == "T"}


def test_the_iterating_thread_pulls_the_backlog_itself(mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    # small batches, two out at most: the member's thread cannot read the backlog ahead alone
    monkeypatch.setattr(consumer_mod, "ITER_BATCH", 100)
    monkeypatch.setattr(consumer_mod, "PREFETCH", 2)
    path = str(mq.root)
    n = 3000
    _setup(path, n)
    pulled: list[str] = []
    pull_all = Puller.pull_all

    def spy(self: Puller) -> bool:   # (the real pulls; who ran the ones that found something)
        got = pull_all(self)
        if got:
            pulled.append(threading.current_thread().name)
        return got
    monkeypatch.setattr(Puller, "pull_all", spy)
    me = threading.current_thread().name
    with store.Consumer("T", "G", path, start_from="first") as c:
        got = [(m.queue_id, m.queue_offset) for m in c.messages(exit_at_end=True)]
    assert sorted(got) == sorted((q, o) for q in range(2) for o in range(n // 2))
    assert len(got) == n
    assert me in pulled, pulled   # (main: every pull in the member's thread, mq-G)
    # most of the backlog came through this thread's own pulls, not a hand-over per batch
    assert pulled.count(me) >= len(pulled) // 2, pulled
    assert _committed(path) == {0: n // 2, 1: n // 2}


def test_locks_are_renewed_while_the_loop_body_sleeps(mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    # renewals due every 0.2 s (RocketMQ's 20 s): the member's thread renews them while this
    # thread is in the loop body, pulling nothing
    monkeypatch.setattr(runtime_mod, "RENEW_INTERVAL_S", 0.2)
    monkeypatch.setattr(runtime_mod, "IDLE_RENEW_S", 0.4)
    path = str(mq.root)
    _setup(path, 1000)
    seen = 0

    def renewed_meanwhile(c: store.Consumer) -> None:
        locks = c.runtime.held.locks
        before = {k: lock.renewed_at for k, lock in list(locks.items()) if k[0] == "T"}
        assert len(before) == 2
        wait_for(lambda: all(locks[k].renewed_at > t for k, t in before.items() if k in locks),
                 timeout=60, interval=0.05, what="the queue locks renewed while the loop body sleeps")
        assert set(before) <= set(locks)   # still held: nothing dropped
    with store.Consumer("T", "G", path, start_from="first") as c:
        for _m in c.messages(exit_at_end=True):
            seen += 1
            if seen == 1:
                renewed_meanwhile(c)
    assert seen == 1000
    assert _committed(path) == {0: 500, 1: 500}


def test_a_member_joins_while_the_loop_body_sleeps(mq: MQ) -> None:
    # A ("a") holds queues 0-3 and walks queue 0's messages; B ("b") joins while A's loop
    # body sleeps on its first message: A's member thread gives queues 2 and 3 (empty, nothing
    # of them out) to B then, and keeps 0 and 1 (averagely: a's is the first half)
    path = str(mq.root)
    _setup(path, 2000, queues=4, queue=0)

    def held(c: store.Consumer) -> list[int]:
        return sorted(q for t, q in list(c.runtime.held.locks) if t == "T")
    seen = 0
    with store.Consumer("T", "G", path, start_from="first", client_id="a") as a:
        for m in a.messages(exit_at_end=True):
            seen += 1
            if m.queue_offset == 0:
                assert held(a) == [0, 1, 2, 3]
                with store.Consumer("T", "G", path, start_from="first", client_id="b") as b:
                    assert list(b.messages(timeout=0)) == []   # (B's member loop runs on)
                    wait_for(lambda: held(b) == [2, 3], timeout=60, interval=0.05,
                             what="B holding queues 2 and 3 while A's loop body sleeps")
                    assert held(a) == [0, 1]
    assert seen == 2000
    assert _committed(path).get(0) == 2000


def test_close_from_another_thread_while_the_loop_pulls(mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_mod, "ITER_BATCH", 50)
    monkeypatch.setattr(consumer_mod, "PREFETCH", 1)
    path = str(mq.root)
    n = 4000
    _setup(path, n)
    got: list[tuple[int, int]] = []
    c = store.Consumer("T", "G", path, start_from="first")
    closer = threading.Timer(0.0, c.close)
    for m in c.messages():
        got.append((m.queue_id, m.queue_offset))
        if len(got) == 1000:
            closer.start()   # closed mid-backlog, while this loop pulls batch after batch
    closer.join()
    assert len(got) < n
    assert len(set(got)) == len(got)
    committed = _committed(path)
    # at-least-once: what is committed was delivered, in queue order; the rest comes again
    for q in range(2):
        mine = sorted(o for qq, o in got if qq == q)
        assert mine == list(range(len(mine)))
        assert committed.get(q, 0) <= len(mine)
    with store.Consumer("T", "G", path) as again:
        rest = [(m.queue_id, m.queue_offset) for m in again.messages(exit_at_end=True)]
    assert sorted(set(got) | set(rest)) == sorted((q, o) for q in range(2) for o in range(n // 2))


_CLOSED_BY_A_SIGNAL = """
    import faulthandler, os, signal, sys, threading, time
    faulthandler.dump_traceback_later(90, exit=True)   # (a deadlock: a traceback, exit 1)
    import store
    from store.client import consumer as consumer_mod
    from store.client.pulling import Puller
    consumer_mod.ITER_BATCH = 100
    c = store.Consumer("T", "G", sys.argv[1], start_from="first")
    signal.signal(signal.SIGUSR1, lambda *_a: c.close())   # a handler that closes the consumer
    pull_all, fired = Puller.pull_all, []

    def pulls(self):   # the signal comes while this thread runs the pulls (under the turns' lock)
        if not fired and c.runtime.held.pqs and c.runtime.dispatcher.futures == {}:
            if threading.current_thread().name == "MainThread" and fired.append(1) is None:
                os.kill(os.getpid(), signal.SIGUSR1)
                # (time for another thread to take the signal, were it to: its handler would
                # then run here, in the middle of the pulls, and close() would wait for ever)
                time.sleep(0.5)
        return pull_all(self)
    Puller.pull_all = pulls
    if sys.argv[2:] == ["other-thread"]:   # a thread of the program's own, taking signals
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    n = sum(1 for _m in c.messages())
    print(n, bool(fired), flush=True)
"""


@pytest.mark.parametrize("threads", ["", "other-thread"])
def test_a_signal_handler_closes_the_consumer_while_the_loop_pulls(mq: MQ, threads: str) -> None:
    # the handler runs once the pulls are done, not inside them: it joins the member's thread,
    # which waits for the lock the pulls hold (a deadlock, were it run in the middle). Where
    # another thread of the program takes the signal, its handler runs in the middle of the
    # pulls all the same: its close() is then done when they end.
    path = str(mq.root)
    _setup(path, 2000)
    child = python(_CLOSED_BY_A_SIGNAL, path, *([threads] if threads else []),
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err
    n, fired = out.split()
    assert fired == "True" and int(n) < 2000


_SIGNAL_WHILE_A_TURN_RUNS = """
    import faulthandler, os, signal, sys, threading
    faulthandler.dump_traceback_later(90, exit=True)
    import store
    from store.client import consumer as consumer_mod
    consumer_mod.ITER_BATCH = 100
    c = store.Consumer("T", "G", sys.argv[1], start_from="first")
    handled, taken, seen = threading.Event(), threading.Event(), []
    signal.signal(signal.SIGUSR1, lambda *_a: handled.set())
    main = threading.get_ident()

    def long_turn():   # a turn of the member's thread that takes long (a group's mutex, a disk)
        with c.runtime.turn_lock:
            taken.set()
            for _ in range(2000):   # until the iterator waits for this lock in its feed
                frames = sys._current_frames()[main]
                names = []
                while frames is not None:
                    names.append(frames.f_code.co_name)
                    frames = frames.f_back
                if "feed" in names:
                    break
                handled.wait(0.01)
            os.kill(os.getpid(), signal.SIGUSR1)
            seen.append(handled.wait(20))   # (its handler runs while this turn goes on)
    n = 0
    for _m in c.messages(exit_at_end=True):
        n += 1
        if n == 1:
            t = threading.Thread(target=long_turn)
            t.start()
            taken.wait()
    t.join()
    c.close()
    print(n, seen[0], flush=True)
"""


def test_a_signal_is_handled_while_the_feed_waits_for_a_turn(mq: MQ) -> None:
    # the feed waits for a turn of the member's thread with signals let in (it masks them only
    # once it holds the lock): a Ctrl-C is not held back for as long as that turn takes
    path = str(mq.root)
    _setup(path, 1000)
    child = python(_SIGNAL_WHILE_A_TURN_RUNS, path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.split() == ["1000", "True"]


@pytest.mark.slow   # (~12 s: the member's thread's timers run out before its long sleep)
def test_a_message_stored_while_the_iterator_turns_to_wait_is_pulled(mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    # The iterator's own pulls found nothing; a message is stored, and the member's thread
    # takes its turn for it before the iterator says it waits (so it leaves the pulls to the
    # iterator) and goes to sleep: the iterator's wait must wake it, or the message waits for
    # the member's next timer (a lock renewal, 40 s)
    from store.client.handoff import IteratorSink
    path = str(mq.root)
    _setup(path, 10, queues=1)
    get, late = IteratorSink.get, []
    c = store.Consumer("T", "G", path, start_from="first")

    def spy(self: IteratorSink, timeout: float | None) -> object:
        item = get(self, timeout)
        rt = c.runtime
        if item is None and timeout == 0 and self.fed and not late and threading.current_thread() is threading.main_thread():
            wait_for(lambda: not rt.keeper.dirty and not rt.dispatcher.futures, timeout=60, interval=0.05,
                     what="the 10 messages committed")
            before = rt.asleep_until
            with store.Producer(path) as p:
                late.append(p.send("T", "late"))
            # the member's turn for it (it pulls nothing: the iterator pulls for itself), then a long sleep
            wait_for(lambda: rt.asleep_until != before and rt.asleep_until > time.monotonic() + 10,
                     timeout=60, interval=0.05, what="the member's thread asleep after its turn")
            return get(self, 0)
        return item
    monkeypatch.setattr(IteratorSink, "get", spy)
    got = []
    with c:
        for m in c.messages(timeout=15):
            got.append(m.body)
            if m.body == b"late":
                break
    assert late and got[-1] == b"late", got
