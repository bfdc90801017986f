"""When a Python consumer (``store.Consumer``, ``store.AsyncConsumer``) joins its group and when it
leaves it, and what happens to the message in hand then: on a real store, membership checked
with ``mqctl consumers`` and what a ``mqctl consume`` member of the group gets (a member that
never leaves keeps its share of the queues, which nobody reads)."""
from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import threading
from typing import Any

import pytest

import store
from store.client import aio_shared
from store.inotify import inotify_available
from tests.procs import MQ, finish, python, wait_for

LINES = [f"m{i}" for i in range(8)]


@pytest.fixture
def path(mq: MQ) -> str:
    return str(mq.root)


def members(mq: MQ, group: str) -> list[str]:
    """The group's members as ``mqctl consumers -g GROUP --json`` lists them (none: a group
    nothing ever joined or committed is unknown, exit 3)."""
    res = mq.run("consumers", "-g", group, "--json")
    if res.returncode == 3 and "does not exist" in res.stderr:
        return []
    assert res.returncode == 0, res
    return [json.loads(line)["clientId"] for line in res.stdout.splitlines() if line.strip()]


def cli_gets(mq: MQ, topic: str, group: str) -> list[str]:
    """What a ``mqctl consume TOPIC -g GROUP -e`` member gets of the topic (all of it when it
    is the group's only member)."""
    return sorted(e["body"] for e in mq.drain(topic, group))


# -- AsyncConsumer: a join that is cancelled ---------------------------------------------------

@pytest.mark.skipif(not inotify_available(), reason="the loop's commit thread needs a shared inotify instance")
@pytest.mark.parametrize("how", ["async with", "run"])
def test_an_async_consumer_cancelled_while_it_joins_leaves_once_the_join_is_done(
        mq: MQ, path: str, how: str) -> None:
    """``asyncio.timeout`` around ``async with AsyncConsumer(...)`` cancelled ``__aenter__``
    while the member joined on the loop's commit thread: ``__aexit__`` never ran, the join
    finished anyway, and the member stayed in the group for the rest of the process, holding
    its share of the queues (a CLI member of the group got 4 of 8). Here the join is held
    back (the commit thread busy) until the cancellation is in: the member leaves as soon as
    it has joined, before the cancellation reaches the task."""
    mq.send_lines("T", LINES)   # (8 queues, one message each)
    assert len(mq.offsets("G")) == 0

    async def main() -> None:
        gate, busy = threading.Event(), threading.Event()

        def hold_the_commit_thread() -> None:
            busy.set()
            gate.wait(60)
        holding = asyncio.ensure_future(aio_shared.off_loop(hold_the_commit_thread))
        await asyncio.to_thread(busy.wait, 60)
        c = store.AsyncConsumer("T", "G", path, start_from="first")

        async def consume() -> None:
            if how == "run":
                await c.run(lambda m: None)
                return
            async with c:
                async for _m in c.messages():
                    pass
        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0)   # (its first step: it waits for its join, queued behind the gate)
        task.cancel()
        gate.set()                  # the join goes on, after the cancellation
        with pytest.raises(asyncio.CancelledError):
            await task
        await holding
        await aio_shared.off_loop(lambda: None)   # (after the join, on the same thread)
    asyncio.run(main())
    assert members(mq, "G") == []
    assert cli_gets(mq, "T", "G") == LINES


# -- Consumer: joined when first used, left when closed or dropped -----------------------------

def one_queue(mq: MQ, path: str, lines: list[str] = LINES, topic: str = "Q") -> None:
    store.Admin(path).create_topic(topic, queues=1)
    mq.send_lines(topic, lines)


@pytest.mark.parametrize("bad", [{"threads": 0}, {"max_reconsume": -1}, {"retry_delay": -1},
                                 {"flush": "never"}, {"to": "bad name"}])
def test_a_consumer_refuses_bad_run_arguments_before_it_joins(mq: MQ, path: str, bad: dict[str, Any]) -> None:
    """``Consumer(...).run(handler, threads=0)``: the UsageError came after the consumer had
    joined its group (when it was made), and nothing left it: a CLI member of the group got
    half of the messages, the other half waited for a member that reads nothing."""
    mq.send_lines("T", LINES)
    with pytest.raises(store.UsageError):
        store.Consumer("T", "G", path, start_from="first").run(lambda m: None, **bad)
    assert members(mq, "G") == []
    assert cli_gets(mq, "T", "G") == LINES


def test_a_consumer_joins_when_first_used_and_leaves_when_closed(mq: MQ, path: str) -> None:
    """As an AsyncConsumer: made, it is no member yet (its arguments, store and topic are
    checked); entering ``with`` (or ``messages()``, ``run()``) joins; closing leaves."""
    mq.send_lines("T", LINES)
    c = store.Consumer("T", "G", path, start_from="first", client_id="py")
    assert members(mq, "G") == []
    with c:
        assert members(mq, "G") == ["py"]
    assert members(mq, "G") == []
    c = store.Consumer("T", "G", path, start_from="first", client_id="py")
    got = sorted(m.text for m in c.messages(exit_at_end=True))
    assert members(mq, "G") == ["py"]
    c.close()
    assert members(mq, "G") == []
    assert got == LINES


def test_a_consumer_dropped_unclosed_leaves_what_it_consumed_committed(mq: MQ, path: str) -> None:
    """A consumer the program dropped without closing it (an early return, a factory whose
    result was thrown away) stayed a member for the rest of the process: its share of the
    queues went unread. Once collected it now leaves, as a close() would, but for the message
    in hand, which is delivered again (nothing said it was handled)."""
    one_queue(mq, path)

    def take_three() -> list[str]:
        c = store.Consumer("Q", "G", path, start_from="first")
        it = c.messages()
        return [next(it).text for _ in range(3)]   # m0, m1 consumed; m2 in hand
    assert take_three() == ["m0", "m1", "m2"]
    gc.collect()
    wait_for(lambda: members(mq, "G") == [], what="the dropped consumer to leave")
    assert [e["body"] for e in mq.drain("Q", "G")] == LINES[2:]


def test_a_consumer_left_open_at_exit_leaves_with_its_offsets(mq: MQ, path: str) -> None:
    """A program that ends with its consumer still open (a global, never closed) leaves as a
    close() would: what it consumed is committed (the message in hand is not)."""
    one_queue(mq, path)
    out = finish(python("""
        import sys, store
        consumer = store.Consumer("Q", "G", sys.argv[1], start_from="first")
        it = consumer.messages()
        print(" ".join(next(it).text for _ in range(3)))
        """, path, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert out == ["m0 m1 m2\n"]
    assert [e["body"] for e in mq.drain("Q", "G")] == LINES[2:]


def test_a_closed_consumer_cannot_be_entered_again(mq: MQ, path: str) -> None:
    """``with`` on a closed Consumer returned it silently (and a second ``async with`` on a
    closed AsyncConsumer too); it is a UsageError, as messages() and run() on it are."""
    mq.send_lines("T", LINES)
    c = store.Consumer("T", "G", path)
    with c:
        pass
    with pytest.raises(store.UsageError, match="closed"), c:
        pass

    async def main() -> None:
        a = store.AsyncConsumer("T", "G", path)
        async with a:
            pass
        with pytest.raises(store.UsageError, match="closed"):
            async with a:
                pass
    asyncio.run(main())
    assert members(mq, "G") == []


# -- close(): the message in hand --------------------------------------------------------------

@pytest.mark.parametrize("caught", [False, True])
def test_close_after_the_loop_body_raised_delivers_its_message_again(mq: MQ, path: str, caught: bool) -> None:
    """``try: for m in c.messages(): …raise… finally: c.close()``: a generator cannot tell a
    raise from a ``break``, and ``close()`` committed the message in hand, so a message whose
    handling failed was never delivered again. Only the loop asking for the next one, or a
    ``with`` block left normally, counts it consumed."""
    mq.ok("topic", "create", "Q", "--queues", "1")
    mq.send_lines("Q", [f"m{i}" for i in range(5)])
    c = store.Consumer("Q", group="G", path=path, start_from="first")
    try:
        for m in c.messages():
            if m.text == "m2":
                raise ValueError("handling m2 failed")
    except ValueError:
        if not caught:
            c.close()   # (in the handler, as the exception is handled)
    finally:
        c.close()
    assert [e["body"] for e in mq.drain("Q", "G")] == ["m2", "m3", "m4"]


def test_async_close_does_not_count_the_message_in_hand(mq: MQ, path: str) -> None:
    mq.ok("topic", "create", "Q", "--queues", "1")
    mq.send_lines("Q", [f"m{i}" for i in range(3)])

    async def main() -> None:
        c = store.AsyncConsumer("Q", group="G", path=path, start_from="first")
        try:
            async for m in c.messages():
                if m.text == "m1":
                    raise ValueError("handling m1 failed")
        except ValueError:
            pass
        finally:
            await c.close()

    asyncio.run(main())
    assert [e["body"] for e in mq.drain("Q", "G")] == ["m1", "m2"]


def test_run_refuses_an_async_handler_before_it_joins(mq: MQ, path: str) -> None:
    """An ``async def`` handler's call returns a coroutine that nobody awaits: every message
    counted consumed, the handler never run (a RuntimeWarning only)."""
    mq.send_lines("T", LINES)

    async def handler(m: store.Message) -> None:
        raise AssertionError("never awaited")

    class Handler:
        async def __call__(self, m: store.Message) -> None:
            raise AssertionError("never awaited")

    for h in (handler, Handler()):
        c = store.Consumer("T", group="G", path=path, start_from="first")
        with pytest.raises(store.UsageError, match="AsyncConsumer"):
            c.run(h, exit_at_end=True)  # type: ignore[arg-type]
        c.close()
    assert members(mq, "G") == [] and cli_gets(mq, "T", "G") == sorted(LINES)


# -- AsyncConsumer: dropped unclosed, its loop ended, the process exiting ----------------------

_TAKE_THREE = """
    import asyncio, sys, store
    path, how = sys.argv[1], sys.argv[2]

    async def take_three(c):
        got = []
        async for m in c.messages():
            got.append(m.text)
            if len(got) == 3:
                return got   # m0, m1 consumed; m2 in hand

    if how == "dropped":        # collected when main returns, its loop still running
        async def main():
            return await take_three(store.AsyncConsumer("Q", "G", path, start_from="first"))
        print(*asyncio.run(main()))
    elif how == "loop ended":   # still referenced when asyncio.run ends its loop
        consumer = store.AsyncConsumer("Q", "G", path, start_from="first")
        print(*asyncio.run(take_three(consumer)))
    else:                       # its loop neither ended nor closed: left at the process's exit
        consumer = store.AsyncConsumer("Q", "G", path, start_from="first")
        loop = asyncio.new_event_loop()
        print(*loop.run_until_complete(take_three(consumer)))
"""


@pytest.mark.parametrize("how", ["dropped", "loop ended", "exit"])
def test_an_async_consumer_left_open_leaves_with_its_offsets_as_the_sync_one(mq: MQ, path: str, how: str) -> None:
    """An AsyncConsumer never closed saved no offsets and never left its group while its
    process lived (its queues held until its heartbeat expired): it now leaves as a sync
    Consumer does, what it handled committed, the message in hand delivered again."""
    one_queue(mq, path)
    out = finish(python(_TAKE_THREE, path, how, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert out == ["m0 m1 m2\n"]
    assert members(mq, "G") == []
    assert [r.offset for r in store.Admin(path).offsets("G")] == [2]
    assert [e["body"] for e in mq.drain("Q", "G")] == LINES[2:]


def test_an_async_consumer_dropped_in_a_running_loop_leaves_while_it_runs(mq: MQ, path: str) -> None:
    one_queue(mq, path)

    async def take_three() -> list[str]:
        c = store.AsyncConsumer("Q", "G", path, start_from="first", client_id="dropped")
        got = []
        async for m in c.messages():
            got.append(m.text)
            if len(got) == 3:
                break
        return got

    async def main() -> None:
        assert await take_three() == ["m0", "m1", "m2"]
        gc.collect()
        for _ in range(400):   # (the loop goes on meanwhile)
            if members(mq, "G") == []:
                break
            await asyncio.sleep(0.05)
        assert members(mq, "G") == []
        assert [r.offset for r in store.Admin(path).offsets("G")] == [2]

    asyncio.run(main())
    assert [e["body"] for e in mq.drain("Q", "G")] == LINES[2:]


def test_an_async_consumer_whose_loop_ended_joins_again_in_the_next(mq: MQ, path: str) -> None:
    """``asyncio.run(drain()); asyncio.run(drain())`` failed with a RuntimeError (an
    ``asyncio.Event`` bound to a different event loop): the member left when its first loop
    ended, and joins again in the next one, from the offsets it left; a loop that has not
    ended keeps it (UsageError in another)."""
    one_queue(mq, path)
    consumer = store.AsyncConsumer("Q", "G", path, start_from="first", client_id="twice")

    async def drain(stop_after: int | None = None) -> list[str]:
        got = []
        async for m in consumer.messages(exit_at_end=True):
            got.append(m.text)
            if len(got) == stop_after:
                break
        return got

    assert asyncio.run(drain(3)) == LINES[:3]
    assert members(mq, "G") == []
    assert asyncio.run(drain()) == LINES[2:]   # m2 was in hand
    mq.send_lines("Q", ["n0"])
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(drain()) == ["n0"]
        assert members(mq, "G") == ["twice"]
        with pytest.raises(store.UsageError, match="another event loop"):
            asyncio.run(drain())
    finally:
        first.close()   # (closed, its tasks not cancelled: the next loop's use leaves it first)
    assert asyncio.run(drain()) == []

    async def close() -> None:
        await consumer.close()
    asyncio.run(close())
    assert members(mq, "G") == []
    with pytest.raises(store.UsageError, match="closed"):
        asyncio.run(drain())
