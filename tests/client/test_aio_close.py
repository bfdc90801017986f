"""Closing a ``store.AsyncConsumer`` (leaving ``async with``, ``await consumer.close()``) while
its :meth:`run` is in flight in another task, on a real store: the close stops the run, waits
(asynchronously: the loop goes on) for the handler calls in flight, whose outcomes count, and
then leaves: offsets committed, queue locks released, the member gone. The closing program
runs in a child process: a close that blocked the loop's thread for good would hang it, and
the child's time limit makes that a failure instead of a hung suite (faulthandler says where
it was stuck)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.client import closing
from tests.client.closing import left_cleanly
from tests.procs import MQ

# The child's prologue: the store, a one-queue topic "Q" of five messages m0..m4, and a handler
# that says when a call has started and sleeps (awaits) a while before it counts as handled.
PROLOGUE = """
    import asyncio, faulthandler, json, sys
    import store
    faulthandler.dump_traceback_later(90, exit=True)   # (a hung loop: its stacks, then exit)
    path, orderly = sys.argv[1], sys.argv[2] == "orderly"
    started, handled = [], []
    first = None

    async def handler(msg):
        started.append(msg.text)
        first.set()
        await asyncio.sleep(0.3)
        handled.append(msg.text)

    def consumer():
        return store.AsyncConsumer("Q", "G", path, start_from="first", orderly=orderly)

    def report(**extra):
        print(json.dumps(dict(started=started, handled=handled, **extra)))
"""


def child(path: str, mode: str, body: str) -> dict[str, Any]:
    return closing.child(PROLOGUE, path, mode, body)


@pytest.fixture
def path(mq: MQ) -> str:
    return closing.one_queue_of_five(mq)


@pytest.mark.parametrize("mode", ["concurrently", "orderly"])
@pytest.mark.parametrize("how", ["async with", "close()"])
def test_closing_while_run_is_in_flight_waits_for_its_handlers_and_leaves(mq: MQ, path: str, mode: str,
                                                                          how: str) -> None:
    out = child(path, mode, f"""
    async def main():
        global first
        first = asyncio.Event()
        async with consumer() as c:
            task = asyncio.create_task(c.run(handler, concurrency=1))
            await asyncio.wait_for(first.wait(), 60)
            if {how == "close()"}:
                await asyncio.wait_for(c.close(), 60)   # (the handler in flight awaits meanwhile)
        await asyncio.wait_for(task, 60)   # run() returned: stopped by the close
        report(left=True, closed_after=list(handled))
    asyncio.run(main())
    """)
    assert out["left"] and out["started"] == out["handled"] == out["closed_after"] == ["m0"]
    left_cleanly(mq, out["handled"])


def test_an_exception_beside_run_in_async_with_comes_out(mq: MQ, path: str) -> None:
    out = child(path, "concurrently", """
    async def main():
        global first
        first = asyncio.Event()

        async def other():
            await first.wait()
            raise ValueError("boom")
        try:
            async with consumer() as c:
                await asyncio.wait_for(asyncio.gather(c.run(handler, concurrency=1), other()), 60)
        except ValueError as exc:
            report(raised=str(exc))
    asyncio.run(main())
    """)
    assert out["raised"] == "boom"
    assert out["started"] == out["handled"] == ["m0"]
    left_cleanly(mq, out["handled"])


@pytest.mark.parametrize("how", ["run awaited", "async with", "through wait_for", "through a task group"])
def test_a_handler_may_close_its_consumer(mq: MQ, path: str, how: str) -> None:
    # (close does not wait for the call it is made from: run() returns once that call has,
    # and the member leaves then; leaving an async with block meanwhile waits for that)
    out = child(path, "orderly", f"""
    async def main():
        c = consumer()
        closed = asyncio.Event()

        async def closing(msg):
            started.append(msg.text)
            if {how == "through wait_for"}:   # (a task of its own: the close waited for the call)
                await asyncio.wait_for(c.close(), 60)
            elif {how == "through a task group"}:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(c.close())
            else:
                await c.close()
            closed.set()
            await asyncio.sleep(0.3)
            handled.append(msg.text)
        if {how != "async with"}:
            await asyncio.wait_for(c.run(closing), 60)
            returned = True
        else:
            async with c:
                task = asyncio.create_task(c.run(closing))
                await asyncio.wait_for(closed.wait(), 60)
            returned = task.done()
        report(closed=repr(c).endswith("closed)"), returned=returned)
    asyncio.run(main())
    """)
    assert out["closed"] and out["returned"] and out["started"] == out["handled"] == ["m0"]
    left_cleanly(mq, out["handled"])


def test_a_close_that_lands_while_run_joins_makes_it_return(mq: MQ, path: str) -> None:
    """``task = create_task(c.run(h))`` then ``await c.close()`` in another task while run()
    was joining (its first use) made run() raise UsageError "this consumer is closed". Now it
    returns, as for a close a moment later; run() called after the close still raises. (The
    join is held back, the loop's commit thread busy, until the close is in.)"""
    out = child(path, "concurrently", """
    import threading
    from store.client import aio_shared

    async def main():
        gate, busy = threading.Event(), threading.Event()

        def hold_the_commit_thread():
            busy.set()
            gate.wait(60)
        holding = asyncio.ensure_future(aio_shared.off_loop(hold_the_commit_thread))
        await asyncio.to_thread(busy.wait, 60)
        c = consumer()
        task = asyncio.ensure_future(c.run(handler))
        await asyncio.sleep(0)   # (its first step: it waits for its join, queued behind the gate)
        closing = asyncio.ensure_future(c.close())
        await asyncio.sleep(0)   # (the close is in: it waits for the join)
        gate.set()
        await asyncio.wait_for(closing, 60)
        await holding
        outcome = []
        for call in (lambda: task, lambda: c.run(handler)):
            try:
                await asyncio.wait_for(call(), 60)
                outcome.append("returned")
            except store.UsageError as exc:
                outcome.append(f"raised: {exc}")
        report(outcome=outcome)
    asyncio.run(main())
    """)
    assert out["outcome"] == ["returned", "raised: this consumer is closed"]
    assert out["started"] == []
    assert mq.members("G") == [] and mq.locks("G") == []
    assert [e["body"] for e in mq.drain("Q", "G")] == [f"m{i}" for i in range(5)]


@pytest.mark.parametrize("how", ["run()", "async with"])
def test_a_use_from_another_loop_raises_and_closes_nothing(mq: MQ, path: str, how: str) -> None:
    """An AsyncConsumer that is a member in a loop (another thread's) used from a second loop:
    run() or ``async with`` there raised the UsageError, but closed the member of the first
    loop on the way out, from the wrong thread (the first loop then consumed nothing). Now the
    UsageError comes out and nothing else happens: the member stays in its loop, which goes
    on consuming and leaves when it is done."""
    out = child(path, "concurrently", f"""
    import threading
    from store.client.members import live_members
    from store.layout import Layout
    import pathlib
    c = consumer()
    joined, tried = threading.Event(), threading.Event()
    seen = []

    async def member():
        global first
        first = asyncio.Event()
        async with c:
            joined.set()
            await asyncio.to_thread(tried.wait, 60)
            seen.append([m.clientId for m in live_members(Layout(pathlib.Path(path)), "G")])
            await c.run(handler, concurrency=1, exit_at_end=True)
    first_loop = threading.Thread(target=asyncio.run, args=(member(),))
    first_loop.start()
    joined.wait(60)

    async def elsewhere():
        if {how == "run()"}:
            await c.run(handler)
        else:
            async with c:
                pass
    try:
        asyncio.run(elsewhere())
        outcome = "returned"
    except Exception as exc:
        outcome = f"{{type(exc).__name__}}: {{exc}}"
    tried.set()
    first_loop.join(60)
    report(outcome=outcome, members=seen, client_id=c.client_id)
    """)
    assert out["outcome"].startswith("UsageError: this AsyncConsumer is a member in another event loop")
    assert out["members"] == [[out["client_id"]]]
    assert out["handled"] == [f"m{i}" for i in range(5)]
    left_cleanly(mq, out["handled"])


@pytest.mark.parametrize("when", ["waiting for the handlers", "consuming"])
def test_ctrl_c_while_handlers_run_leaves(mq: MQ, path: str, when: str) -> None:
    """Ctrl-C under ``asyncio.run`` (it cancels the main task, then raises KeyboardInterrupt)
    while handler calls run (m0 handled, m1's call held), as run() consumes or after a stop()
    as it waits for them: the calls are cancelled (m1 comes again), what finished is committed,
    the member leaves before KeyboardInterrupt comes out."""
    out = child(path, "concurrently", f"""
    import os, signal, pathlib
    from store.client import aio_sinks
    from store.client.members import live_members
    from store.layout import Layout
    seen = []

    async def main():
        c = consumer()
        held = asyncio.Event()

        async def handler(msg):
            started.append(msg.text)
            if msg.text != "m0":
                held.set()
                await asyncio.Event().wait()   # (never set: only a cancellation ends it)
            handled.append(msg.text)

        async def interrupt():
            await held.wait()
            if {when == "consuming"}:
                os.kill(os.getpid(), signal.SIGINT)
                return
            drain = aio_sinks.TaskSink.drain

            async def interrupted(self):   # (the SIGINT as run() begins to wait for the calls)
                aio_sinks.TaskSink.drain = drain
                os.kill(os.getpid(), signal.SIGINT)
                await drain(self)
            aio_sinks.TaskSink.drain = interrupted
            c.stop()
        asyncio.get_running_loop().create_task(interrupt())
        try:
            await c.run(handler, concurrency=2)
        finally:
            seen.append([m.clientId for m in live_members(Layout(pathlib.Path(path)), "G")])
    try:
        asyncio.run(main())
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    report(outcome=outcome, members=seen)
    """)
    assert out["outcome"] == "KeyboardInterrupt" and out["members"] == [[]]
    assert out["handled"] == ["m0"]
    left_cleanly(mq, out["handled"])
