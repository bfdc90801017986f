"""The asyncio clients (``store.AsyncProducer``, ``store.AsyncConsumer``) on a real store, beside
real ``mqctl`` processes: each test runs its own event loop (``asyncio.run``, and uvloop's
where it is installed). Blocking helpers (CLI runs, ``wait_for``) run in a thread
(``asyncio.to_thread``) so the consumers driven by the loop go on meanwhile; every wait is
bounded."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Coroutine

import pytest

import store
from store.client import aio_shared
from store.inotify import inotify_available
from tests.procs import MQ, wait_for  # noqa: F401  (mq is a fixture)

LOOPS = ["asyncio", "uvloop"]


@pytest.fixture
def path(mq: MQ) -> str:
    return str(mq.root)


def arun(main: Callable[[], Coroutine[Any, Any, Any]], loop: str = "asyncio") -> Any:
    """Run ``main()`` on a new loop of the kind asked for (the coroutine is made only once the
    loop is there: a skipped uvloop run leaves no coroutine never awaited)."""
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())


async def until(cond: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Await until ``cond()`` is truthy (the loop runs meanwhile); AssertionError after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def envelopes(raw: bytes) -> list[dict[str, Any]]:
    """The whole lines of a running consumer's output (its last may be half written)."""
    return [json.loads(line) for line in raw[: raw.rfind(b"\n") + 1].splitlines() if line.strip()]


def one_queue_topic(path: str, topic: str = "Q") -> None:
    store.Admin(path).create_topic(topic, queues=1)


@pytest.mark.parametrize("loop", LOOPS)
def test_round_trip_producer_iterator_and_push(mq: MQ, path: str, loop: str) -> None:
    async def main() -> tuple[list[Any], list[str], list[str]]:
        async with store.AsyncProducer(path, flush="sync") as p:
            one = await p.send("T", b"first", tags="a", keys=["k1"], properties={"src": "web"})
            many = await p.send_many("T", [f"m{i}" for i in range(99)], tags="b")
            both = [one, *many]
        got: list[str] = []
        async with store.AsyncConsumer("T", "iter", path, start_from="first") as c:
            async for m in c.messages(exit_at_end=True):
                got.append(m.msg_id)
        pushed: list[str] = []

        async def handler(m: store.Message) -> None:
            await asyncio.sleep(0)
            pushed.append(m.msg_id)
        async with store.AsyncConsumer("T", "push", path, start_from="first") as c:
            await c.run(handler, concurrency=8, exit_at_end=True)
        return both, got, pushed

    results, got, pushed = arun(main, loop)
    ids = [r.msg_id for r in results]
    assert sorted(got) == sorted(ids) and sorted(pushed) == sorted(ids)
    assert mq.committed_total("iter", "T") == 100 and mq.committed_total("push", "T") == 100
    # the CLI sees what the async producer sent, as it was sent
    (first,) = [e for e in mq.drain("T", "cli") if e["msgId"] == ids[0]]
    assert first["body"] == "first" and first["tags"] == "a" and first["keys"] == ["k1"]
    assert first["properties"]["src"] == "web"


def test_sync_flush_does_not_block_the_loop(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync of a sync send waits here until a ticker task on the loop has ticked: were
    the fsync run on the loop, the ticker could not tick and the send would fail."""
    ticks = 0
    fsyncs = 0
    real_sync = store.Store.sync_log

    def slow_sync(self: Any, start: int, end: int) -> None:
        nonlocal fsyncs
        seen = ticks
        wait_for(lambda: ticks >= seen + 3, timeout=20, what="the loop to tick during an fsync")
        fsyncs += 1
        real_sync(self, start, end)
    monkeypatch.setattr(store.Store, "sync_log", slow_sync)

    async def main() -> list[Any]:
        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)
        t = asyncio.get_running_loop().create_task(ticker())
        try:
            async with store.AsyncProducer(path, flush="sync") as p:
                # many tasks sending at once: they share fsyncs (group commit)
                return list(await asyncio.gather(*(p.send("T", f"m{i}") for i in range(20))))
        finally:
            t.cancel()
    results = arun(main)
    assert len({r.msg_id for r in results}) == 20
    assert 1 <= fsyncs < 20


def test_async_and_cli_members_share_the_group(mq: MQ, path: str) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    cli = mq.start("consume", "T", "-g", "G", "--from", "first", "--json", "--client-id", "cli-member")
    try:
        wait_for(lambda: "cli-member" in mq.member_queues("G"), what="the CLI member to join")

        async def main() -> tuple[list[store.Message], dict[str, set[int]], list[str]]:
            got: list[store.Message] = []
            async with store.AsyncConsumer("T", "G", path, start_from="first", client_id="aio-member") as c:
                async def iterate() -> None:
                    async for m in c.messages():
                        got.append(m)
                task = asyncio.get_running_loop().create_task(iterate())
                split = await asyncio.to_thread(mq.wait_balanced, "G", "T", 2, 8)
                async with store.AsyncProducer(path) as p:
                    ids = [r.msg_id for r in await p.send_many("T", [f"m{i}" for i in range(300)])]
                    ids += [(await p.send("T", f"one{i}")).msg_id for i in range(16)]
                await until(lambda: len(got) + len(envelopes(cli.stdout())) >= len(ids),
                            "both members to consume everything")
                await asyncio.sleep(0.3)   # anything handled twice would show up now
                c.stop()
                await task
            return got, split, ids
        got, split, ids = arun(main)
    finally:
        assert cli.stop() == 0
    cli_msgs = envelopes(cli.stdout())
    assert sorted([m.msg_id for m in got] + [e["msgId"] for e in cli_msgs]) == sorted(ids)
    assert got and cli_msgs
    assert {m.queue_id for m in got} <= split["aio-member"]
    assert {e["queueId"] for e in cli_msgs} <= split["cli-member"]
    assert mq.committed_total("G", "T") == len(ids)


@pytest.mark.parametrize(("loop", "how"), [("asyncio", "cancel"), ("uvloop", "cancel"), ("asyncio", "timeout")])
def test_cancelling_an_iterator_redelivers_the_message_in_hand(mq: MQ, path: str, loop: str, how: str) -> None:
    one_queue_topic(path)
    mq.send_lines("Q", ["m0", "m1", "m2"])

    async def main() -> list[str]:
        in_hand = asyncio.Event()
        seen: list[str] = []

        async def consume() -> None:
            async with store.AsyncConsumer("Q", "G", path, start_from="first", orderly=True) as c:
                async for m in c.messages():
                    seen.append(m.text)
                    if m.text == "m1":
                        in_hand.set()
                        await asyncio.Event().wait()   # handling m1 ... until cancelled
        if how == "timeout":
            # asyncio.timeout, made to expire once m1 is in hand (not after a guessed time)
            async def within_timeout() -> None:
                async with asyncio.timeout(None) as limit:
                    inner = asyncio.get_running_loop().create_task(consume())
                    await asyncio.wait_for(in_hand.wait(), 20)
                    limit.reschedule(asyncio.get_running_loop().time())
                    await inner
            with pytest.raises(TimeoutError):
                await within_timeout()
            return seen
        task = asyncio.get_running_loop().create_task(consume())
        await asyncio.wait_for(in_hand.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen
    assert arun(main, loop) == ["m0", "m1"]
    assert mq.offsets("G", "Q") == {("Q", 0): 1}          # m0 committed, m1 (in hand) not
    assert envelopes(mq.ok("consumers", "-g", "G", "--json").stdout) == []   # left the group
    assert mq.ok("locks", "-g", "G", "--json").stdout.strip() in (b"", b"[]")
    assert [e["body"] for e in mq.drain("Q", "G")] == ["m1", "m2"]   # m1 delivered again


def test_cancelling_run_commits_what_finished_and_redelivers_the_rest(mq: MQ, path: str) -> None:
    one_queue_topic(path)
    mq.send_lines("Q", [f"m{i}" for i in range(5)])

    async def main() -> list[str]:
        handled: list[str] = []
        stuck = asyncio.Event()

        async def handler(m: store.Message) -> None:
            if m.text == "m3":
                stuck.set()
                await asyncio.Event().wait()
            handled.append(m.text)
        async with store.AsyncConsumer("Q", "G", path, start_from="first", orderly=True) as c:
            task = asyncio.get_running_loop().create_task(c.run(handler))
            await asyncio.wait_for(stuck.wait(), 20)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return handled
    assert arun(main) == ["m0", "m1", "m2"]
    assert mq.offsets("G", "Q") == {("Q", 0): 3}
    assert [e["body"] for e in mq.drain("Q", "G")] == ["m3", "m4"]


def test_push_failures_go_through_the_retry_topic_to_the_dlq(mq: MQ, path: str) -> None:
    one_queue_topic(path)
    mq.send_lines("Q", ["ok1", "bad", "ok2"])
    calls: list[tuple[str, int, str]] = []

    async def main() -> None:
        async def handler(m: store.Message) -> None:
            calls.append((m.text, m.reconsume_times, m.topic))
            await asyncio.sleep(0)
            if m.text == "bad":
                raise ValueError("cannot handle it")

        def dead_lettered() -> bool:
            with mq.store() as s:
                return bool(s.has_topic("%DLQ%G") and s.max_offset("%DLQ%G", 0) == 1)
        async with store.AsyncConsumer("Q", "G", path, start_from="first") as c:
            task = asyncio.get_running_loop().create_task(
                c.run(handler, concurrency=2, max_reconsume=2, retry_delay=0))
            await until(dead_lettered, "the failed message to reach the DLQ")
            c.stop()
            await asyncio.wait_for(task, 20)
    arun(main)
    assert sorted(x for x in calls if x[0] != "bad") == [("ok1", 0, "Q"), ("ok2", 0, "Q")]
    assert [x[1:] for x in calls if x[0] == "bad"] == [(0, "Q"), (1, "Q"), (2, "Q")]
    (dead,) = mq.drain("%DLQ%G", "dlq-reader")
    assert dead["body"] == "bad" and dead["reconsumeTimes"] == 2


def test_idle_async_consumers_start_no_thread_each(mq: MQ, path: str) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    n = 100

    async def main() -> tuple[int, int, list[str]]:
        before = threading.active_count()
        consumers = [store.AsyncConsumer("T", f"g{i}", path, start_from="first") for i in range(n)]
        got: list[str] = []

        async def iterate(c: store.AsyncConsumer) -> None:
            async for m in c.messages():
                got.append(f"{c.group}:{m.text}")
        tasks = [asyncio.get_running_loop().create_task(iterate(c)) for c in consumers]
        # every member has joined and holds its queues once all of them got a message
        async with store.AsyncProducer(path) as p:
            await p.send("T", b"hello", queue=0)
        await until(lambda: len(got) == n, f"{n} consumers to get the message", timeout=60)
        during = threading.active_count()
        for c in consumers:
            c.stop()
        await asyncio.gather(*tasks)
        for c in consumers:
            await c.close()
        return before, during, got
    before, during, got = arun(main)
    assert sorted(got) == sorted(f"g{i}:hello" for i in range(n))
    assert during <= before + 2, f"{during - before} threads started for {n} consumers"



def _inotify_fds() -> int:
    """Inotify instances this process holds open."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or not inotify_available(), reason="needs Linux inotify")
@pytest.mark.slow
def test_200_async_consumers_share_one_inotify_instance(mq: MQ, path: str) -> None:
    """The kernel allows 128 inotify instances per user: one per AsyncConsumer ran out at
    the 129th (which then polled, and left the user's other processes none). The consumers
    of one loop now share one instance, every one is woken by it, and the last to close
    closes it."""
    mq.ok("topic", "create", "T", "--queues", "1")
    n = 200
    before = _inotify_fds()

    async def main() -> tuple[list[str], int, set[str]]:
        consumers = [store.AsyncConsumer("T", f"g{i}", path, start_from="first") for i in range(n)]
        got: list[str] = []

        async def iterate(c: store.AsyncConsumer) -> None:
            async for m in c.messages():
                got.append(f"{c.group}:{m.text}")
        tasks = [asyncio.get_running_loop().create_task(iterate(c)) for c in consumers]
        async with store.AsyncProducer(path) as p:
            await p.send("T", b"one")
            await until(lambda: len(got) == n, f"{n} consumers to get the first message", timeout=120)
            # all of them waiting now: the next message can only reach them through inotify
            await p.send("T", b"two")
            await until(lambda: len(got) == 2 * n, f"{n} consumers to get the second message", timeout=120)
        during = _inotify_fds() - before
        backends = {c._rt.wake.backend for c in consumers}
        for c in consumers:
            c.stop()
        await asyncio.gather(*tasks)
        for c in consumers:
            await c.close()
        return got, during, backends
    got, during, backends = arun(main)
    assert sorted(got) == sorted(f"g{i}:{b}" for i in range(n) for b in ("one", "two"))
    assert during == 1, f"{during} inotify instances for {n} consumers in one loop"
    assert backends == {"inotify"}, backends
    assert aio_shared.loop_instances() == 0
    wait_for(lambda: _inotify_fds() == before, 10, what="the shared instance to be closed")



@pytest.mark.skipif(not inotify_available(), reason="needs Linux inotify")
def test_a_shared_watcher_is_not_woken_again_by_what_it_read(tmp_path: Path) -> None:
    """The watchers of one loop share an inotify instance: whoever reads it hands each event
    to its watchers. A watcher that read its own events (an idle member's own lease renewals,
    read by its next wait) also wrote itself a wake, which ended its next wait for nothing: a
    second turn per renewal. Now only the others are told, once per look, and directly (the
    loop's waiter) where ``notify`` is set."""
    from store.inotify import Instance
    from store.watch import Watcher
    lock = tmp_path / "0.lock"
    lock.write_bytes(b"")
    inst = Instance()
    me, other, told = Watcher([(lock, "file")], lazy=True), Watcher([(lock, "file")], lazy=True), []
    try:
        me.share(inst, lambda: None)
        other.share(inst, lambda: None)
        other.notify = lambda: told.append(1)
        assert me.wait(0) and other.wait(0)   # (a first wait sets the watches up)
        for _ in range(3):
            with open(lock, "r+b") as f:   # a renewal: records rewritten in place
                f.write(b"{}")
        assert me.wait(0) and me.changed == {lock}
        assert not me.wait(0), "woken again by the events it read itself"
        assert told == [1]   # the other watcher: told once, not once per event
        assert other.wait(0) and other.changed == {lock}
        assert not other.wait(0)
    finally:
        me.close()
        other.close()
        inst.close()


def test_idle_async_consumers_of_a_loop_wake_together(mq: MQ, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each idle member of a loop woke for its lease renewal on a timer of its own, set to
    the millisecond from when it joined: a hundred members, a hundred wake-ups of the loop,
    each costing more than the renewal it was for. Their long waits now end on a shared grid
    (``TICK_S``), so the members of a loop renew in the same pass of the loop."""
    from store.client import aio_driver, runtime
    monkeypatch.setattr(runtime, "IDLE_RENEW_S", 6.0)   # (a renewal due soon; still a long wait)
    mq.ok("topic", "create", "T", "--queues", "2")
    long_timers: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        call_at = loop.call_at

        def spy(when: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> asyncio.TimerHandle:
            if when - loop.time() >= 5.0:
                long_timers.append(when)
            return call_at(when, callback, *args, **kw)
        loop.call_at = spy  # type: ignore[method-assign]
        consumers: list[store.AsyncConsumer] = []
        tasks = []
        for i in range(3):
            c = store.AsyncConsumer("T", f"g{i}", path, start_from="last")
            await c.__aenter__()   # joined, at different moments
            consumers.append(c)

            async def idle(c: store.AsyncConsumer = c) -> None:
                async for _m in c.messages():
                    pass
            tasks.append(loop.create_task(idle()))
        await until(lambda: len(long_timers) >= 3, "the members to wait for their renewals")
        for c in consumers:
            c.stop()
        await asyncio.gather(*tasks)
        for c in consumers:
            await c.close()
    arun(main)
    off_grid = [w for w in long_timers if abs(w / aio_driver.TICK_S - round(w / aio_driver.TICK_S)) > 1e-6]
    assert not off_grid, f"{len(off_grid)} of {len(long_timers)} long waits end off the shared grid"


def test_offset_commits_of_an_async_consumer_run_off_the_loop(
        mq: MQ, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An offset commit ends with an fsync. The commits of an AsyncConsumer ran on the event
    loop, stalling every task of it for the fsync: the end-of-turn ones, the commit of the
    start offsets computed for the queues a member takes (before anything of them is
    delivered), the last commit when it closes, and the one at the end of a run. They now
    run on the loop's commit thread: no fsync is called on the loop's thread from joining to
    leaving (what asyncio's debug mode reported as slow callbacks). And each is still made:
    the starts and the consumed offsets are in the table afterwards."""
    one_queue_topic(path, "T")
    mq.ok("send", "T", "m0")   # (before the table holds the groups: their starts are computed)
    on_loop: list[str] = []
    watching = threading.Event()
    loop_thread = threading.get_ident()

    def spy(real: Callable[[int], None]) -> Callable[[int], None]:
        def call(fd: int) -> None:
            if watching.is_set() and threading.get_ident() == loop_thread:
                on_loop.append(real.__name__)
            real(fd)
        return call
    monkeypatch.setattr(os, "fsync", spy(os.fsync))
    monkeypatch.setattr(os, "fdatasync", spy(os.fdatasync))

    def committed(group: str) -> list[int]:
        return [o.offset for o in store.Admin(path).offsets(group, "T")]

    async def main() -> tuple[list[str], list[str]]:
        got: list[str] = []
        ran: list[str] = []
        async with store.AsyncProducer(path) as p:
            async def send_after_the_start() -> None:
                # the start ("last": 1, past m0) is committed before anything is delivered
                await until(lambda: committed("g") == [1], "the computed start committed")
                for i in range(1, 6):
                    await p.send("T", f"m{i}".encode())
            async with store.AsyncConsumer("T", "g", path, start_from="last") as c:
                watching.set()   # from here on: joining, taking and committing, leaving
                sender = asyncio.get_running_loop().create_task(send_after_the_start())
                async for m in c.messages():
                    got.append(m.text)
                    if m.text == "m5":
                        break
                await sender
            # (left with m5 in hand: the close commits it)
            async with store.AsyncConsumer("T", "r", path, start_from="first") as r:
                async def handle(m: store.Message) -> None:
                    ran.append(m.text)
                await r.run(handle, exit_at_end=True)   # its start, and its last commit
            watching.clear()
        return got, ran
    got, ran = arun(main)
    assert got == [f"m{i}" for i in range(1, 6)]
    assert ran == [f"m{i}" for i in range(6)]
    assert on_loop == [], f"{len(on_loop)} fsyncs on the event loop's thread"
    assert committed("g") == [6] and committed("r") == [6]


def test_an_async_consumer_opens_the_store_and_joins_off_the_loop(
        mq: MQ, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a store that a writer left dirty recovers it (with fsyncs), and joining takes
    the group's mutex: an AsyncConsumer did both in its constructor, on the event loop. Now
    the constructor only checks its arguments, the store and the topic (reading, never
    recovering), and the member is made at its first await, on the loop's commit thread;
    the recovered message is delivered."""
    one_queue_topic(path, "T")
    mq.ok("send", "T", "m0")
    killed = mq.run("send", "T", "m1", failpoints="put-after-log")   # the log written, nothing after
    assert killed.returncode == -signal.SIGKILL, killed
    from store.log import recovery
    from store.log.messagestore import Store
    on_loop: list[str] = []
    recovered: list[bool] = []
    loop_thread = threading.get_ident()

    def spy(real: Callable[..., Any], name: str) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            if threading.get_ident() == loop_thread and kw.get("recover", True):
                on_loop.append(name)   # (the constructor's look at the topic opens without recovering)
            if name == "recover":
                recovered.append(True)
            return real(*args, **kw)
        return call
    monkeypatch.setattr(os, "fsync", spy(os.fsync, "fsync"))
    monkeypatch.setattr(os, "fdatasync", spy(os.fdatasync, "fdatasync"))
    monkeypatch.setattr(recovery, "recover", spy(recovery.recover, "recover"))
    monkeypatch.setattr(Store, "open", staticmethod(spy(Store.open, "Store.open")))

    async def main() -> tuple[list[str], str | None, str | None]:
        got: list[str] = []
        c = store.AsyncConsumer("T", "g", path, start_from="first")
        before = c.client_id   # (not joined yet: its default id is given on joining)
        async with c:
            async for m in c.messages(exit_at_end=True):
                got.append(m.text)
        return got, before, c.client_id
    got, before, joined_as = arun(main)
    assert on_loop == [], f"on the event loop's thread: {on_loop}"
    assert recovered and got == ["m0", "m1"]
    assert before is None and joined_as is not None and "@" in joined_as
    with pytest.raises(store.errors.TopicNotFoundError):   # when made, as store.Consumer
        store.AsyncConsumer("NOPE", "g", path)
    with pytest.raises(store.errors.StoreNotFoundError):
        store.AsyncConsumer("T", "g", mq.root.parent / "no-store-here")


def test_transactions_with_async_local_transactions_and_checks(mq: MQ, path: str) -> None:
    decided: dict[str, store.TxState] = {}

    async def main() -> dict[str, Any]:
        async def check(m: store.Message) -> store.TxState:
            await asyncio.sleep(0)
            return decided.get(m.keys[0], store.TxState.UNKNOWN)

        async def local(m: store.Message) -> store.TxState:
            await asyncio.sleep(0)
            return {"commit me": store.TxState.COMMIT, "roll me back": store.TxState.ROLLBACK}.get(
                m.text, store.TxState.UNKNOWN)

        async def boom(m: store.Message) -> store.TxState:
            raise RuntimeError("local transaction crashed")
        async with store.AsyncTransactionProducer(path, check=check) as tp:
            r = {body: await tp.send("pay", body.encode(), local_tx=local, keys=[key])
                 for key, body in [("o1", "commit me"), ("o2", "roll me back"), ("o3", "ask me later")]}
            r["crashed"] = await tp.send("pay", b"crashed", local_tx=boom, keys=["o4"])
            r["by hand"] = await tp.send("pay", b"by hand", keys=["o5"])
            assert r["commit me"].transaction_state == "COMMITTED"
            assert r["roll me back"].transaction_state == "ROLLED_BACK"
            assert r["crashed"].state is store.TxState.UNKNOWN
            assert set(await tp.pending()) == {r[b].tx_id for b in ("ask me later", "crashed", "by hand")}
            await tp.commit(r["by hand"].tx_id)
            with pytest.raises(store.TransactionStateError):
                await tp.rollback(r["by hand"].tx_id)
            decided.update(o3=store.TxState.COMMIT, o4=store.TxState.ROLLBACK)
            report = await tp.check_pending(timeout=0)
            assert {e.answer for e in report.events} == {"COMMIT", "ROLLBACK"}
            assert await tp.pending() == []
        return r
    r = arun(main)
    got = {e["msgId"]: e["body"] for e in mq.drain("pay", "G")}
    assert got == {r[b].tx_id: b for b in ("commit me", "ask me later", "by hand")}


def test_async_producer_takes_group_commit_as_producer_does(mq: MQ, path: str) -> None:
    """``AsyncProducer`` mirrors ``Producer`` parameter for parameter: ``group_commit`` too,
    with the same rules (``flush="sync"`` only, a bool); by default on with ``flush="sync"``
    (what it did already), and ``False`` gives each send its own fsync."""
    for bad, said in (({"flush": "async", "group_commit": True}, "group_commit applies to flush='sync'"),
                      ({"flush": "sync", "group_commit": "yes"}, "group_commit must be True or False")):
        with pytest.raises(store.UsageError, match=said):
            store.Producer(path, **bad)
        with pytest.raises(store.UsageError, match=said):
            store.AsyncProducer(path, **bad)

    async def send_all() -> list[bool]:
        shared = []
        for flush, group_commit in (("sync", None), ("sync", True), ("sync", False), ("async", None)):
            async with store.AsyncProducer(path, flush=flush, group_commit=group_commit) as ap:
                await asyncio.gather(*(ap.send("G", f"{flush}-{group_commit}-{i}") for i in range(5)))
                shared.append(ap.group_commit)
        return shared
    assert asyncio.run(send_all()) == [True, True, False, False]
    assert len(mq.ok("consume", "G", "--no-group", "--from", "first", "-e").stdout.split()) == 20


def test_a_cancel_in_the_turn_a_batch_arrives_is_not_lost() -> None:
    """``messages(timeout=...)`` waited for its next batch with ``asyncio.wait_for``, which on
    Python 3.11 returns the inner wait's result when the caller's cancel comes in the turn the
    wait ends, dropping the cancel: a consumer loop cancelled by its caller (or by an
    ``asyncio.timeout`` around it) went on consuming its share (seen 2-3 times in 60 rounds of
    a black-box test). The sink's wait is cancelled as its caller is, however the two meet."""
    from store.client.aio_sinks import AsyncIteratorSink

    async def rounds() -> int:
        lost = 0
        for _ in range(20):
            sink = AsyncIteratorSink(10, 1)
            waiting = asyncio.ensure_future(sink.get(5.0))
            for _ in range(2):
                await asyncio.sleep(0)   # (the wait is under way)
            sink.wake_reader()   # the wait ends in this turn ...
            waiting.cancel()     # ... and so does its caller
            try:
                await waiting
                lost += 1
            except asyncio.CancelledError:
                pass
        return lost

    assert asyncio.run(rounds()) == 0


def test_a_cancelled_transactional_send_cancels_its_local_transaction(mq: MQ, path: str) -> None:
    """``await asyncio.wait_for(tp.send(..., local_tx=...), 0.2)`` raised TimeoutError while the
    async local transaction went on in the background and committed the message later: a caller
    retrying after the timeout sent it twice, and ``tp.pending()`` waited for the detached
    transaction. Cancelled with its caller now: the transaction stays UNKNOWN, for the check
    service, and nothing is committed behind the caller's back."""
    ran: list[str] = []

    async def main() -> tuple[list[str], list[str]]:
        started = asyncio.Event()

        async def slow(m: store.Message) -> store.TxState:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                ran.append("cancelled")
                raise
            ran.append("finished")
            return store.TxState.COMMIT

        async with store.AsyncTransactionProducer(path) as tp:
            send = asyncio.ensure_future(tp.send("pay", b"once", local_tx=slow, keys=["o1"]))
            await started.wait()
            send.cancel()
            with pytest.raises(asyncio.CancelledError):
                await send
            pending = await asyncio.wait_for(tp.pending(), 20)   # (the worker is free again)
            return pending, await tp.pending()
    pending, again = arun(main)
    assert ran == ["cancelled"]
    assert len(pending) == 1 and again == pending   # UNKNOWN, left to the check service
    assert mq.drain("pay", "G") == []   # nothing committed


def test_a_transactional_send_cancelled_while_queued_stores_nothing(mq: MQ, path: str) -> None:
    """A send cancelled while it waited for the producer's worker (busy with another send)
    stored its half message once the worker got to it, after its caller had been told
    CancelledError: an orphan transaction, left to the check service, beside the caller's retry."""
    import threading as _threading
    release = _threading.Event()

    def holding(m: store.Message) -> store.TxState:   # (a plain function: runs in the worker)
        release.wait(30)
        return store.TxState.COMMIT

    async def main() -> list[str]:
        async with store.AsyncTransactionProducer(path) as tp:
            first = asyncio.ensure_future(tp.send("pay", b"first", local_tx=holding))
            await asyncio.sleep(0.05)
            queued = asyncio.ensure_future(tp.send("pay", b"queued", local_tx=holding))
            await asyncio.sleep(0.05)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            release.set()
            assert (await first).transaction_state == "COMMITTED"
            return await tp.pending()
    assert arun(main) == []
    assert [m["body"] for m in mq.drain("pay", "G")] == ["first"]
