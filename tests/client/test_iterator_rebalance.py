"""A Python iterator member (``Consumer.messages()``, ``AsyncConsumer.messages()``) gives away
the queues a member joining its group gets at once, however much it read ahead of them: the
batches it had not taken up are handed back, the batch in its hand is left after the message
in hand (consumed when the loop asks for the next one), and the new owner delivers the rest
from the committed offset. Nothing is lost, nothing delivered twice.

The iterator is a child process whose loop body waits for the test, so it keeps its backlog
while the joiner (``mqctl consume``) runs; every wait is on an event, bounded (``wait_for``).
"""
from __future__ import annotations

import json
import signal
import subprocess

import pytest

import store
from tests.procs import MQ, Proc, python, wait_for  # noqa: F401  (mq is a fixture)

# The iterator "A": prints "queueId offset" for each message it is given, then (while it
# steps) waits in its loop body for a line from the test: "go" lets it run freely; with
# "drop" as its third argument it waits instead, at its first message, until its member has
# given away queue 1 of T (and says "dropped"). It ends with "END" (exit_at_end).
_ITERATOR = """
    import asyncio, sys, time
    import store
    path, mode, how = sys.argv[1], sys.argv[2], sys.argv[3]
    stepping = how == "step"

    def body(c, m, first) -> None:
        global stepping
        print(m.queue_id, m.queue_offset, flush=True)
        if how == "drop" and first:
            deadline = time.monotonic() + 120
            while ("T", 1) not in c._rt.held.dropping:   # (the member's own thread drops it)
                assert time.monotonic() < deadline, "queue 1 was never given away"
                time.sleep(0.01)
            print("dropped", flush=True)
        while stepping:
            line = sys.stdin.readline()
            if not line:
                raise SystemExit(1)
            stepping = line.strip() != "go"
            if stepping:
                break

    if mode == "sync":
        with store.Consumer("T", "G", path, start_from="first", client_id="A") as c:
            first = True
            for m in c.messages(exit_at_end=True):
                body(c, m, first)
                first = False
    else:
        async def main() -> None:
            async with store.AsyncConsumer("T", "G", path, start_from="first", client_id="A") as c:
                first = True
                async for m in c.messages(exit_at_end=True):
                    if stepping or first:   # (a body that waits, off the loop: the member's turns go on)
                        await asyncio.get_running_loop().run_in_executor(None, body, c, m, first)
                    else:
                        body(c, m, first)
                    first = False
        asyncio.run(main())
    print("END", flush=True)
"""


def _iterator(path: str, mode: str, how: str) -> subprocess.Popen[str]:
    return python(_ITERATOR, path, mode, how, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the iterator ended early (exit {child.wait(timeout=60)})"
    return line.strip()


def _tell(child: subprocess.Popen[str], what: str) -> None:
    assert child.stdin is not None
    child.stdin.write(what + "\n")
    child.stdin.flush()


def _rest(child: subprocess.Popen[str]) -> list[tuple[int, int]]:
    """What the iterator prints until its END; it must then exit 0."""
    got = []
    while (line := _line(child)) != "END":
        q, o = line.split()
        got.append((int(q), int(o)))
    assert child.wait(timeout=60) == 0
    return got


def _joiner(mq: MQ) -> Proc:
    return mq.start("consume", "T", "-g", "G", "--from", "first", "--client-id", "B", "--json")


def _delivered(proc: Proc) -> list[tuple[int, int]]:
    """What ``proc`` (``--json``) wrote whole so far."""
    whole = proc.stdout().split(b"\n")[:-1]
    return [(r["queueId"], r["queueOffset"]) for r in map(json.loads, whole)]


def _send(path: str, queues: int, n: int, queue: int | None = None) -> None:
    with store.Admin(path) as admin:
        admin.create_topic("T", queues=queues)
    with store.Producer(path) as p:
        p.send_many("T", [f"m{i}" for i in range(n)], queue=queue)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_joiner_gets_its_queues_while_the_iterator_has_a_backlog(mq: MQ, mode: str) -> None:
    path = str(mq.root)
    n = 3000   # small messages: all read ahead by the iterator (its 8 MiB), 750 a queue
    _send(path, 4, n)
    a = _iterator(path, mode, "step")
    b: Proc | None = None
    try:
        first = _line(a).split()
        got_a = [(int(first[0]), int(first[1]))]   # in hand: the loop body waits
        b = _joiner(mq)
        # sorted client ids "A" < "B": A keeps queues 0 and 1, B gets 2 and 3 (averagely)
        if got_a[0][0] in (2, 3):   # (in hand: A's loop lets it go when it asks for the next one)
            wait_for(lambda: mq.member_queues("G", "T").get("B") == {2, 3} - {got_a[0][0]}, timeout=120,
                     what="B to hold the queue of {2, 3} not in A's hand")
            _tell(a, "")
            got_a.append(tuple(map(int, _line(a).split())))   # type: ignore[arg-type]
        wait_for(lambda: mq.member_queues("G", "T") == {"A": {0, 1}, "B": {2, 3}}, timeout=120,
                 what="A to give queues 2 and 3 to B while its loop has a backlog in hand")
        # B delivers every message of its queues (but what A consumed) while A's loop still waits
        want_b = {(q, o) for q in (2, 3) for o in range(n // 4)} - set(got_a)
        wait_for(lambda: set(_delivered(b)) >= want_b, timeout=120,
                 what="B to deliver queues 2 and 3 while A still has its backlog")
        _tell(a, "go")
        got_a += _rest(a)
        b.signal(signal.SIGTERM)
        assert b.wait(60) == 0, b.stderr()
        got_b = _delivered(b)
    finally:
        a.kill()
        a.wait(timeout=60)
    assert {q for q, _o in got_a[1:]} <= {0, 1}   # A gave none of B's queues after letting them go
    everything = got_a + got_b
    assert len(everything) == len(set(everything)) == n, "each message once"
    assert set(everything) == {(q, o) for q in range(4) for o in range(n // 4)}
    assert mq.committed_total("G", "T") == n


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_batch_in_hand_is_left_after_the_message_in_hand(mq: MQ, mode: str) -> None:
    path = str(mq.root)
    n = 600   # all on queue 1: one read-ahead batch in A's hand
    _send(path, 2, n, queue=1)
    a = _iterator(path, mode, "drop")
    b: Proc | None = None
    try:
        assert _line(a) == "1 0"   # in hand; the loop body waits until queue 1 is given away
        b = _joiner(mq)
        assert _line(a) == "dropped"
        # the loop asks for the next message: offset 0 is consumed, the rest of its batch (and
        # what A read ahead of queue 1 besides) goes to B, A's loop ends (queue 0 is empty)
        assert _rest(a) == []
        wait_for(lambda: len(_delivered(b)) >= n - 1, timeout=120, what="B to deliver the rest of queue 1")
        b.signal(signal.SIGTERM)
        assert b.wait(60) == 0, b.stderr()
    finally:
        a.kill()
        a.wait(timeout=60)
    assert _delivered(b) == [(1, o) for o in range(1, n)]   # the message in hand not again
    assert mq.offsets("G", "T")[("T", 1)] == n
