"""Closing a ``store.Consumer`` from inside its own consumption, and a close that lands while
:meth:`run` (or :meth:`messages`) starts, on a real store with real threads.

A handler that closed its consumer hung: close() stopped the run and waited for it to return,
and the run waited for that handler call. Now close() from a handler call stops the run and
returns at once; the call's message counts as consumed if it returns normally, and run()
returns normally, once the member has left. Each closing program runs in a child process: a
close that hangs would hang it, and the child's time limit makes that a failure instead of a
hung suite (faulthandler says where it was stuck). Races are made deterministic with events,
the close landing at a step the child holds run() at (no sleeps)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.client import closing
from tests.client.closing import left_cleanly
from tests.procs import MQ

# The child's prologue: the store, a one-queue topic "Q" of five messages m0..m4.
PROLOGUE = closing.SYNC_START + """
    def report(**extra):
        print(json.dumps(dict(started=started, handled=handled, **extra)))
"""


def child(path: str, mode: str, body: str) -> dict[str, Any]:
    return closing.child(PROLOGUE, path, mode, body)


@pytest.fixture
def path(mq: MQ) -> str:
    return closing.one_queue_of_five(mq)


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
@pytest.mark.parametrize("how", ["run() alone", "in a with block", "run() in another thread"])
def test_a_handler_may_close_its_consumer(mq: MQ, path: str, mode: str, how: str) -> None:
    """close() from a handler call returns at once (the run stopped: no further handler call);
    the call's message counts once it returns; run() returns normally once the member left.
    Leaving a ``with`` block meanwhile (another thread) waits for that, as a close from
    outside the handlers does."""
    out = child(path, mode, f"""
    c = consumer()
    closed, go = threading.Event(), threading.Event()
    returned = []

    def handler(msg):
        started.append(msg.text)
        c.close()           # (returns at once: the run is stopped, not waited for)
        closed.set()
        go.wait(60)
        handled.append(msg.text)

    def run():
        # (one thread: with two, the second could take m1 before m0's handler closes)
        c.run(handler, threads=1)
        returned.append(True)
    if {how == "run() alone"!r}:
        go.set()
        run()
    elif {how == "in a with block"!r}:
        go.set()
        with c:
            run()
    else:
        with c:
            t = threading.Thread(target=run)
            t.start()
            closed.wait(60)
            go.set()
        # (the block's close waited for run() to leave: nothing of the member is left now)
        t.join(60)
    report(closed=repr(c).endswith("closed)"), returned=returned)
    """)
    assert out["closed"] and out["returned"] == [True]
    assert out["started"] == out["handled"] == ["m0"]
    left_cleanly(mq, out["handled"])


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
def test_a_signal_handler_in_the_thread_of_run_may_close_it(mq: MQ, path: str, mode: str) -> None:
    """``signal.signal(SIGTERM, lambda *a: consumer.close())`` around a ``run()`` in the main
    thread: the close ran in run()'s own thread and waited for run() to return. It stops the
    run there; run() returns once the handler call in flight (which waits for the close) has."""
    out = child(path, mode, """
    import os, signal
    c = consumer()
    closed = threading.Event()

    def on_term(*_):
        c.close()
        closed.set()
    signal.signal(signal.SIGTERM, on_term)

    def handler(msg):
        started.append(msg.text)
        os.kill(os.getpid(), signal.SIGTERM)   # (its handler runs in the main thread: run()'s)
        closed.wait(60)
        handled.append(msg.text)
    c.run(handler, threads=1)
    report(closed=repr(c).endswith("closed)"))
    """)
    assert out["closed"] and out["started"] == out["handled"] == ["m0"]
    left_cleanly(mq, out["handled"])


def test_a_handler_that_closes_and_raises_fails_its_message(mq: MQ, path: str) -> None:
    """(Concurrent mode.) The message of a call that closed and then raised is not consumed:
    it goes to the retry topic, as any failed message; run() still returns normally."""
    out = child(path, "concurrently", """
    c = consumer()

    def handler(msg):
        started.append(msg.text)
        c.close()
        raise ValueError("after the close")
    c.run(handler, threads=1)
    report()
    """)
    assert out["started"] == ["m0"]
    assert mq.offsets("G", "Q") == {("Q", 0): 1}   # (m0 went to %RETRY%G, as a failure does)
    assert mq.members("G") == [] and mq.locks("G") == []
    assert [e["body"] for e in mq.drain("Q", "G")] == ["m1", "m2", "m3", "m4"]


@pytest.mark.parametrize("how", ["for loop", "in a with block"])
def test_closing_inside_the_loop_body_ends_the_loop(mq: MQ, path: str, how: str) -> None:
    """``for msg in c.messages(): ...; c.close()``: the loop gives nothing more and ends; the
    message in hand is not committed (close() never commits it: see its docstring), so it
    is delivered again; the member left."""
    out = child(path, "concurrently", f"""
    c = consumer()

    def loop():
        for msg in c.messages():
            started.append(msg.text)
            c.close()
    if {how == "in a with block"!r}:
        with c:
            loop()
    else:
        loop()
    report(closed=repr(c).endswith("closed)"))
    """)
    assert out["closed"] and out["started"] == ["m0"]
    left_cleanly(mq, [])


GATE = """
    reached, proceed = threading.Event(), threading.Event()

    class Gate(datetime.timedelta):
        # (a retry_delay that holds run() at its start, after its check that the consumer
        # is open, until the close has landed)
        def total_seconds(self):
            reached.set()
            proceed.wait(60)
            return super().total_seconds()

    class GateTimeout(float):
        # (a timeout that holds messages() likewise)
        def __lt__(self, other):
            reached.set()
            proceed.wait(60)
            return float(self) < other
"""


@pytest.mark.parametrize("joined", [False, True])
@pytest.mark.parametrize("what", ["run", "messages"])
def test_a_close_that_lands_while_run_starts_makes_it_return(mq: MQ, path: str, what: str, joined: bool) -> None:
    """A close from another thread that landed while run() started (after its check that the
    consumer is open) made it raise UsageError "this consumer is closed". Now run() returns
    normally, as for a close a moment later (it had run, and stopped); a messages() loop
    ends with nothing. run() or messages() called after the close still raise."""
    out = child(path, "concurrently", GATE + f"""
    c = consumer()
    outcome = []

    def start():
        try:
            if {what == "run"!r}:
                c.run(lambda msg: handled.append(msg.text), threads=1, retry_delay=Gate(seconds=1))
            else:
                handled.extend(m.text for m in c.messages(timeout=GateTimeout(30)))
            outcome.append("returned")
        except store.UsageError as exc:
            outcome.append(f"raised: {{exc}}")
    if {joined}:
        c.__enter__()
    t = threading.Thread(target=start)
    t.start()
    reached.wait(60)
    c.close()        # (lands while the call starts)
    proceed.set()
    t.join(60)
    try:
        c.run(lambda msg: None) if {what == "run"!r} else c.messages()
        outcome.append("a call after the close went on")
    except store.UsageError as exc:
        outcome.append(f"raised: {{exc}}")
    report(outcome=outcome)
    """)
    assert out["outcome"] == ["returned", "raised: this consumer is closed"]
    assert out["handled"] == []
    left_cleanly(mq, [])
