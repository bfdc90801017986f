"""When a Python consumer (``store.Consumer``, ``store.AsyncConsumer``) joins its group and when it
leaves it, and what happens to the message in hand then: on a real store, membership checked
with ``mqctl consumers`` and what a ``mqctl consume`` member of the group gets (a member that
never leaves keeps its share of the queues, which nobody reads)."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest

import store
from store.client import aio_shared
from store.inotify import inotify_available
from tests.procs import MQ  # noqa: F401  (mq is a fixture)

LINES = [f"m{i}" for i in range(8)]


@pytest.fixture
def path(mq: MQ) -> str:
    return str(mq.root)


def members(mq: MQ, group: str) -> list[str]:
    """The group's members as ``mqctl consumers -g GROUP --json`` lists them."""
    out = mq.ok("consumers", "-g", group, "--json").stdout
    return [json.loads(line)["clientId"] for line in out.splitlines() if line.strip()]


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
