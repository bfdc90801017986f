"""store/client/groupcommit.py: the ``--flush sync`` producer's fsync thread — one request at a time,
its error handed to the sender, a stop that waits for the running request."""
from __future__ import annotations

import threading

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
