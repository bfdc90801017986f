"""The Python iterator's commits while it is inside a batch (``Consumer.messages()``,
``AsyncConsumer.messages()``): what the loop consumed reaches the group's offsets (and, with
``to=``, the outputs reach the stage's topic) while the rest of the batch is still in hand,
so a ``kill -9`` hands again only the message in hand and what follows.

The consumer is a child process that takes one more message per line on its stdin, so the
test knows exactly what was consumed; every wait is bounded (``wait_for``).
"""
from __future__ import annotations

import asyncio
import inspect
import subprocess

import pytest

import store
from tests.procs import MQ, python, wait_for  # noqa: F401  (mq is a fixture)

N = 600          # messages on the one queue: a few batches' worth, read ahead in hand
CONSUMED = 300   # the loop asks for the message after this many: the next one is in hand

_STEPPED = """
    import asyncio, sys
    import store
    path, mode, to = sys.argv[1], sys.argv[2], sys.argv[3] or None

    def told() -> None:   # the test's go-ahead for the next message
        if not sys.stdin.readline():
            raise SystemExit(1)

    if mode == "sync":
        with store.Consumer("T", "G", path, start_from="first") as c:
            for m in c.messages(**({"to": to} if to else {})):
                if to:
                    c.commit_with(f"out {m.text}")
                print(m.queue_offset, flush=True)
                told()
    else:
        async def main() -> None:
            async with store.AsyncConsumer("T", "G", path, start_from="first") as c:
                async for m in c.messages(**({"to": to} if to else {})):
                    if to:
                        c.commit_with(f"out {m.text}")
                    print(m.queue_offset, flush=True)
                    await asyncio.get_running_loop().run_in_executor(None, told)
        asyncio.run(main())
"""


def _committed(path: str) -> int:
    with store.Admin(path) as admin:
        rows = [r for r in admin.lag("G", "T") if r.topic == "T"]
    return rows[0].consumer_offset if rows else 0


def _count(path: str, topic: str) -> int:
    with store.Admin(path) as admin:
        return sum(q.messages for q in admin.topic_status(topic))


def _in_hand_after(child: subprocess.Popen[str], consumed: int) -> int:
    """Let the child consume ``consumed`` messages; the offset of the one then in its hand."""
    assert child.stdin is not None and child.stdout is not None
    offsets = [int(child.stdout.readline())]
    for _ in range(consumed):
        child.stdin.write("\n")
        child.stdin.flush()
        offsets.append(int(child.stdout.readline()))
    assert offsets == list(range(consumed + 1))
    return offsets[-1]


def _setup(path: str, to: str | None = None) -> None:
    with store.Admin(path) as admin:
        admin.create_topic("T", queues=1)
        if to is not None:
            admin.create_topic(to, queues=1)
    with store.Producer(path) as p:
        p.send_many("T", [f"m{i}" for i in range(N)])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_what_the_loop_consumed_is_committed_inside_a_batch(mq: MQ, mode: str) -> None:
    path = str(mq.root)
    _setup(path)
    child = python(_STEPPED, path, mode, "", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        in_hand = _in_hand_after(child, CONSUMED)
        # persisted within about half a second, though the batch is not done: the messages
        # before the one in hand, and not that one (at-least-once)
        wait_for(lambda: _committed(path) >= in_hand, timeout=60, interval=0.1,
                 what=f"the committed offset to reach {in_hand} while the batch is in hand")
        assert _committed(path) == in_hand
    finally:
        child.kill()   # SIGKILL: no close, no last commit
        child.wait(timeout=30)
    with store.Consumer("T", "G", path) as c:
        again = [m.queue_offset for m in c.messages(exit_at_end=True)]
    assert again == list(range(in_hand, N))   # the message in hand first, nothing before it


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_commit_with_outputs_reach_the_stage_inside_a_batch(mq: MQ, mode: str) -> None:
    path = str(mq.root)
    _setup(path, to="D")
    child = python(_STEPPED, path, mode, "D", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        in_hand = _in_hand_after(child, CONSUMED)
        wait_for(lambda: _count(path, "D") >= in_hand, timeout=60, interval=0.1,
                 what=f"{in_hand} outputs in D while the batch is in hand")
        assert (_count(path, "D"), _committed(path)) == (in_hand, in_hand)
    finally:
        child.kill()   # SIGKILL: no close, no last commit
        child.wait(timeout=30)
    with store.Consumer("T", "G", path) as c:
        again = []
        for m in c.messages(exit_at_end=True, to="D"):
            again.append(m.queue_offset)
            c.commit_with(f"out {m.text}")
    assert again == list(range(in_hand, N))
    with store.Consumer("D", "check", path, start_from="first") as c:
        assert [m.text for m in c.messages(exit_at_end=True)] == [f"out m{i}" for i in range(N)]


def test_async_iterator_is_an_exactly_once_stage_as_the_sync_one(mq: MQ) -> None:
    """``AsyncConsumer.messages(to=, flush=)`` and ``commit_with`` mirror ``Consumer``'s: the
    outputs of a message left in hand by an exception are not written, nor is its offset."""
    path = str(mq.root)
    _setup(path, to="D")
    assert (inspect.signature(store.AsyncConsumer.messages).parameters.keys()
            == inspect.signature(store.Consumer.messages).parameters.keys())

    async def stage(stop_at: int | None) -> list[int]:
        seen = []
        async with store.AsyncConsumer("T", "G", path, start_from="first") as c:
            with pytest.raises(store.UsageError):
                c.commit_with("no message in hand")
            async for m in c.messages(exit_at_end=True, to="D", flush="sync"):
                seen.append(m.queue_offset)
                c.commit_with([f"out {m.text}", {"body": "x", "keys": [m.text]}])
                if m.queue_offset == stop_at:
                    raise RuntimeError("the loop body failed")
        return seen

    with pytest.raises(RuntimeError):
        asyncio.run(stage(stop_at=250))
    assert asyncio.run(stage(stop_at=None)) == list(range(250, N))
    with store.Consumer("D", "check", path, start_from="first") as c:
        bodies = [m.text for m in c.messages(exit_at_end=True)]
    assert bodies == [b for i in range(N) for b in (f"out m{i}", "x")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_commit_with_an_output_an_ordered_topic_refuses_raises_in_the_loop(mq: MQ, mode: str) -> None:
    """An output without a sharding key for an ordered topic, from a concurrent iterator, is
    refused at the ``commit_with`` that gave it (UsageError): the loop used to end normally
    with nothing written and the offsets left where they were (a warning at exit only)."""
    mq.ok("topic", "create", "S", "--queues", "2")
    mq.ok("topic", "create", "O", "--queues", "2", "--order")
    mq.send_lines("S", ["a", "b"])
    path = str(mq.root)

    def sync() -> None:
        with store.Consumer("S", "G", path, start_from="first") as c:
            for m in c.messages(exit_at_end=True, to="O"):
                c.commit_with([m.body])

    async def aio() -> None:
        async with store.AsyncConsumer("S", "G", path, start_from="first") as c:
            async for m in c.messages(exit_at_end=True, to="O"):
                c.commit_with([m.body])

    with pytest.raises(store.UsageError, match="ordered"):
        sync() if mode == "sync" else asyncio.run(aio())
    with store.Consumer("S", "G2", path, start_from="first") as c:   # keyed outputs are taken
        for m in c.messages(exit_at_end=True, to="O"):
            c.commit_with([{"body": m.body, "sharding_key": m.text}])
    assert sorted(mq.ok("consume", "O", "--no-group", "-o", "beginning", "-e").out.split()) == ["a", "b"]


def test_commit_with_twice_for_one_message_is_refused(mq: MQ) -> None:
    """One message's outputs are given once: a second ``commit_with`` for the message in hand
    raises UsageError (it used to replace the first call's outputs without a word); the first
    call's outputs are written, and the next message may be given its own."""
    mq.ok("topic", "create", "A", "--queues", "1")
    mq.ok("send", "A", input="a\nb\n")
    path = str(mq.root)
    with store.Consumer("A", "G", path, start_from="first") as c:
        for m in c.messages(exit_at_end=True, to="B"):
            c.commit_with(f"first {m.text}")
            with pytest.raises(store.UsageError, match="already called"):
                c.commit_with(f"second {m.text}")

    async def again() -> None:
        async with store.AsyncConsumer("A", "G2", path, start_from="first") as ac:
            async for m in ac.messages(exit_at_end=True, to="C"):
                ac.commit_with(f"first {m.text}")
                with pytest.raises(store.UsageError, match="already called"):
                    ac.commit_with(f"second {m.text}")
    asyncio.run(again())
    for out in ("B", "C"):
        with store.Consumer(out, "check", path, start_from="first") as c:
            assert sorted(m.text for m in c.messages(exit_at_end=True)) == ["first a", "first b"]


def test_an_unknown_output_field_is_named_with_the_python_spellings(mq: MQ) -> None:
    """``commit_with``/``run(to=)`` outputs are dicts with Python keys (``sharding_key``,
    ``queue_id``): the error for an unknown one lists those (it once listed only the CLI
    JSON's ``shardingKey``, ``queueId``), and nothing of the message is committed."""
    _setup(str(mq.root), to="D")
    with pytest.raises(store.UsageError) as info:
        with store.Consumer("T", "G", mq.root, start_from="first") as c:
            for m in c.messages(exit_at_end=True, to="D"):
                c.commit_with({"body": m.body, "tag": "x"})
    message = str(info.value)
    assert "unknown output field(s) tag" in message
    assert "sharding_key" in message and "queue_id" in message
    assert message.index("sharding_key") < message.index("shardingKey")
    assert [r.offset for r in store.Admin(mq.root).offsets("G")] == [0]
