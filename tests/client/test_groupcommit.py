"""store/client/groupcommit.py: the ``--flush sync`` producer's fsync thread — one request at a time,
its error handed to the sender, a stop that waits for the running request."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pytest

from store.client.groupcommit import SyncThread


def test_requests_run_one_at_a_time_and_errors_reach_the_sender() -> None:
    release = threading.Event()
    ran: list[tuple[int, int]] = []

    def sync(start: int, end: int) -> None:
        assert release.wait(30)
        ran.append((start, end))
        if start < 0:
            raise OSError(5, "Input/output error")

    t = SyncThread(sync)
    t.start(0, 10)
    assert not t.done()
    with pytest.raises(RuntimeError):
        t.start(10, 20)              # one fsync in flight at most
    release.set()
    t.wait()
    assert t.done() and ran == [(0, 10)]
    t.start(-1, 5)
    with pytest.raises(OSError):
        t.wait()
    t.start(10, 20)                  # the error was handed over once; the thread goes on
    t.wait()
    t.stop()
    assert ran == [(0, 10), (-1, 5), (10, 20)]


def test_stop_waits_for_the_running_request() -> None:
    release = threading.Event()
    ran: list[int] = []

    def sync(start: int, end: int) -> None:
        assert release.wait(30)
        ran.append(end)

    t = SyncThread(sync)
    t.start(0, 1)
    threading.Timer(0.05, release.set).start()
    t.stop()
    assert ran == [1]


def test_an_acknowledgement_that_raises_leaves_none_of_its_group_unacknowledged(tmp_path: Path) -> None:
    """An fsync covers several batches; the first one's ``ack`` raises (``send --json`` whose
    stdout failed: its error counts what was stored). The others still run (each counts its
    batch, prints nothing), then the error: none dropped, so the count is every message stored."""
    from store import Draft, open_store
    from store.client.groupcommit import GroupCommit
    s = open_store(tmp_path / "s", create=True)
    s.create_topic("T", 1)
    release = threading.Event()
    real = s.sync_log

    def gated(start: int, end: int) -> None:
        assert release.wait(30)
        real(start, end)

    s.sync_log = gated   # type: ignore[method-assign]  # (the fsync held until the batches are written)
    acked: list[int] = []

    def ack(n: int) -> Callable[[], None]:
        def run() -> None:
            acked.append(n)
            if n == 1:
                raise OSError(28, "No space left on device")
        return run

    commits = GroupCommit(s)
    for n in range(4):
        s.put([Draft("T", b"x")])
        commits.written(ack(n))   # 0 alone in the first fsync, 1-3 wait for the next
    release.set()
    with pytest.raises(OSError):
        commits.settle()
    commits.close()
    s.close()
    assert acked == [0, 1, 2, 3]


def test_a_group_commit_producer_used_by_a_second_thread_meanwhile_refuses_before_writing(tmp_path: Path) -> None:
    """A ``Producer(flush="sync", group_commit=True)`` shared by threads raised a bare
    ``AssertionError`` or ``RuntimeError('one fsync at a time')`` after writing (sends that
    raised were stored all the same). A call made while another thread's is under way (here:
    held in its ``on_durable``) is a UsageError naming the rule, and writes nothing; the
    owning thread itself may still send from its callback."""
    import store
    path = tmp_path / "s"
    store.Admin(path).create_topic("T", queues=1)
    producer = store.Producer(path, flush="sync", group_commit=True)
    inside, leave = threading.Event(), threading.Event()
    nested: list[object] = []

    def held(_result: object) -> None:
        nested.append(producer.send("T", b"nested"))   # (its own thread: re-entered)
        inside.set()
        assert leave.wait(60)

    def owner() -> None:
        producer.send_bodies("T", [b"first"], on_durable=held)
        producer.settle()   # runs held(), which holds the producer

    thread = threading.Thread(target=owner)
    thread.start()
    try:
        assert inside.wait(60)
        for call in (lambda: producer.send("T", b"second"), lambda: producer.send_many("T", [b"x", b"y"]),
                     lambda: producer.send_bodies("T", [b"z"]), producer.settle, producer.close):
            with pytest.raises(store.UsageError, match="in use by another thread.*give each thread its own"):
                call()
    finally:
        leave.set()
        thread.join(60)
    producer.close()
    with store.Consumer("T", "G", path, start_from="first") as c:
        assert [m.text for m in c.messages(exit_at_end=True)] == ["first", "nested"]
    assert len(nested) == 1
