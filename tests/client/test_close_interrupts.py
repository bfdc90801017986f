"""A ``store.Consumer`` closed by a signal, or interrupted (Ctrl-C), at the awkward moments of
its :meth:`run`, and closed from a thread a handler started; each program in a child process
(``closing.py``), on a real store. The moment is made exact with a real signal the child
sends itself at that step (no sleeps)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.client import closing
from tests.client.closing import left_cleanly
from tests.procs import MQ

PROLOGUE = closing.SYNC_START + """
    def locks():
        # the group's queue locks: (queue, whether a live process holds it)
        from store.client.locktable import list_locks
        from store.layout import Layout
        return [[lk.queueId, lk.alive] for lk in list_locks(Layout(pathlib.Path(path)), "G")]

    def after_handlers():
        # (the handler threads end once their calls did: joined, the calls' ends are all done)
        for t in [t for t in threading.enumerate() if t.name.startswith("handler")]:
            t.join(60)

    def report(**extra):
        # (and the group's live members, seen from here: once this process has exited, the
        # record of a member it left behind no longer counts as live)
        from store.client.members import live_members
        from store.layout import Layout
        members = [m.clientId for m in live_members(Layout(pathlib.Path(path)), "G")]
        print(json.dumps(dict(started=started, handled=handled, members=members, **extra)))

    def signal_after(cls, name, sig=signal.SIGTERM):
        # (the signal at that step: its Python handler runs as the kill returns, in this thread)
        original = getattr(cls, name)

        def hooked(*args, **kwargs):
            result = original(*args, **kwargs)
            os.kill(os.getpid(), sig)
            return result
        setattr(cls, name, hooked)

    def signal_before(cls, name, sig=signal.SIGTERM):
        # (the signal as that step begins, once)
        original = getattr(cls, name)

        def hooked(*args, **kwargs):
            setattr(cls, name, original)
            os.kill(os.getpid(), sig)
            return original(*args, **kwargs)
        setattr(cls, name, hooked)
"""


def child(path: str, mode: str, body: str) -> dict[str, Any]:
    return closing.child(PROLOGUE, path, mode, body)


@pytest.fixture
def path(mq: MQ) -> str:
    return closing.one_queue_of_five(mq)


# where the start is when the SIGTERM comes: run() or messages() past their look at whether the
# consumer is closed, not yet joined (staged: its exactly-once stage set up, or not); the member
# record just written (joining); or run() joined and not yet consuming (exit_at_end's look at
# where the queues end)
STEPS = {"staged": "store.Consumer, '_stage'",
         "joining": "store.client.members.Membership, 'join'",
         "joined": "store.client.runtime.ConsumerRuntime, 'snapshot_ends'"}
USES = {"run": "c.run(lambda msg: handled.append(msg.text), threads=2, exit_at_end=True)",
        "messages": "handled.extend(m.text for m in c.messages(exit_at_end=True))",
        "with": "with c:\n        pass"}


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
@pytest.mark.parametrize(("use", "step"), [("run", "staged"), ("run", "joining"), ("run", "joined"),
                                           ("messages", "staged"), ("messages", "joining"), ("with", "joining")])
def test_a_sigterm_handler_that_closes_while_the_consumer_starts(mq: MQ, path: str, mode: str, use: str,
                                                                  step: str) -> None:
    """``signal.signal(SIGTERM, lambda *_: consumer.close())`` and the SIGTERM while run(), in the
    same thread, joins the group or sets out (or messages(), or a ``with`` block, joins): the
    close ran in the middle of that start and left a member whose start then went on, on a
    closed store (run() then failed, its member record left behind); and one that came before
    the join (staged) made the join raise UsageError("this consumer is closed"). Now the close
    stops it there: the start is finished (not joining, when it came before), the member leaves
    at its end, and run() returns at once (a messages() loop gives nothing)."""
    out = child(path, mode, f"""
    import store.client.members, store.client.runtime
    c = consumer()
    closes = []
    signal.signal(signal.SIGTERM, lambda *_: (c.close(), closes.append(True)))
    signal_after({STEPS[step]})
    {USES[use]}
    report(closed=repr(c).endswith("closed)"), closes=closes)
    """)
    assert out["closed"] and out["closes"] == [True] and out["handled"] == [] and out["members"] == []
    left_cleanly(mq, out["handled"])


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
@pytest.mark.parametrize("when", ["waiting for the handlers", "consuming"])
def test_ctrl_c_while_handlers_run_leaves_and_raises(mq: MQ, path: str, mode: str, when: str) -> None:
    """Ctrl-C (KeyboardInterrupt in run()'s thread) while handler calls run: m0 handled, the
    calls after it held. While run() waited for them (a stop() came first) the interrupt left
    the member record and the queue lock behind, for the lock's lease to end; and m0 counted
    only if its outcome had been collected already. Now run() waits no more, commits what
    finished, leaves, and raises KeyboardInterrupt (the held calls' messages come again).
    But the queue's lock stays held until the held calls end (it was released with the
    member's leave, and another member took the queue while this one still handled m1):
    held while the group has no member left, gone once the handler threads ended."""
    out = child(path, mode, f"""
    import store.client.dispatch
    c = consumer()
    held, go = threading.Semaphore(0), threading.Event()
    first = threading.Event()

    def handler(msg):
        started.append(msg.text)
        if msg.text == "m0":
            handled.append(msg.text)
            first.set()
            return
        held.release()
        go.wait(60)
        handled.append(msg.text)

    def interrupt():
        first.wait(60)
        held.acquire(timeout=60)   # (m1's call held)
        if {when == "consuming"}:
            os.kill(os.getpid(), signal.SIGINT)   # (run() is in its loop)
        else:
            # (run() stops; the SIGINT as it begins to wait for the calls in flight)
            signal_before(store.client.dispatch.Dispatcher, "finish", signal.SIGINT)
            c.stop()
    threading.Thread(target=interrupt).start()
    try:
        c.run(handler, threads=1 if orderly else 2)
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    handled_then, locks_then = list(handled), locks()
    go.set()
    after_handlers()
    report(outcome=outcome, handled_then=handled_then, locks_then=locks_then, locks_after=locks())
    """)
    assert out["outcome"] == "KeyboardInterrupt" and out["members"] == []
    assert out["locks_then"] == [[0, True]] and out["locks_after"] == []
    left_cleanly(mq, out["handled_then"])
    assert out["handled_then"] == ["m0"]


def test_ctrl_c_starts_no_further_call_of_a_batch(mq: MQ, path: str) -> None:
    """Ctrl-C while a handler call of a batch of several messages runs (concurrent mode: m0
    timed the handler, so the backlog after m1 goes out as one batch): the thread running that
    batch called the handler for the batch's next messages once the call in hand returned,
    after the member had left (the stop was never set). Now no call starts after the
    interrupt; the rest of the batch comes again, and the queue's lock is released once the
    call in hand has ended."""
    out = child(path, "concurrently", """
    c = consumer()
    held, go = threading.Event(), threading.Event()

    def handler(msg):
        started.append(msg.text)
        if msg.text == "m3":
            held.set()
            go.wait(60)
        handled.append(msg.text)

    def interrupt():
        held.wait(60)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt).start()
    try:
        c.run(handler, threads=1)
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    started_then, locks_then = list(started), locks()
    go.set()
    after_handlers()
    report(outcome=outcome, started_then=started_then, locks_then=locks_then, locks_after=locks())
    """)
    assert out["outcome"] == "KeyboardInterrupt" and out["members"] == []
    assert out["started_then"] == ["m0", "m1", "m2", "m3"] and out["started"] == out["started_then"]
    assert out["locks_then"] == [[0, True]] and out["locks_after"] == []
    committed = mq.offsets("G", "Q").get(("Q", 0), 0)
    assert 1 <= committed <= 3
    assert [e["body"] for e in mq.drain("Q", "G")] == [f"m{i}" for i in range(committed, 5)]


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
def test_a_thread_a_handler_starts_may_close(mq: MQ, path: str, mode: str) -> None:
    """A handler call starts a thread that closes the consumer, and returns (it does not wait
    for that thread). The thread is no handler call: its close stops the run and waits for it
    to return, which leaves; by the time close() returns the member has left, and run()
    returns normally. (Checked, not changed: a handler that waited for that thread would wait
    for itself, as with any thread that closes while that call runs.)"""
    out = child(path, mode, """
    from store.client.members import live_members
    from store.layout import Layout
    import pathlib
    c = consumer()
    after_close, threads = [], []

    def closing():
        c.close()
        after_close.append([m.clientId for m in live_members(Layout(pathlib.Path(path)), "G")])

    def handler(msg):
        started.append(msg.text)
        if msg.text == "m0":
            threads.append(threading.Thread(target=closing))
            threads[0].start()
        handled.append(msg.text)
    c.run(handler, threads=1)
    threads[0].join(60)
    report(closed=repr(c).endswith("closed)"), after_close=after_close)
    """)
    assert out["closed"] and out["after_close"] == [[]] and out["started"] == out["handled"]
    left_cleanly(mq, out["handled"])
