"""The offsets' writer thread (store/client/offset_writer.py): one commit at a time, its
outcome taken in the loop's thread, a failure raised there once, the thread ended by close()."""
from __future__ import annotations

import threading

import pytest

from store.client.offset_writer import OffsetWriter


def test_a_commit_is_written_in_its_thread_and_taken_once() -> None:
    seen: list[tuple[dict[tuple[str, int], int], bool, str]] = []
    woken = threading.Event()

    def commit(offsets: dict[tuple[str, int], int], increase_only: bool) -> set[str]:
        seen.append((offsets, increase_only, threading.current_thread().name))
        return {"gone"}

    w = OffsetWriter(commit, woken.set)
    assert not w.busy and w.take(wait=False) is None and w.offsets_out() == {}
    w.submit({("t", 0): 5}, True)
    assert w.busy and w.offsets_out() == {("t", 0): 5}
    assert w.take(wait=True) == ({("t", 0): 5}, {"gone"})
    assert woken.is_set() and seen == [({("t", 0): 5}, True, "mq-offsets")]
    assert not w.busy and w.take(wait=True) is None
    w.close()
    w.close()   # (twice: nothing left to end)


def test_a_failed_commit_raises_once_and_the_thread_writes_on() -> None:
    calls = []

    def commit(offsets: dict[tuple[str, int], int], increase_only: bool) -> set[str]:
        calls.append(offsets)
        if len(calls) == 1:
            raise OSError("disk full")
        return set()

    w = OffsetWriter(commit, lambda: None)
    w.submit({("t", 0): 1}, False)
    with pytest.raises(OSError, match="disk full"):
        w.take(wait=True)
    assert not w.busy
    w.submit({("t", 0): 2}, False)
    assert w.take(wait=True) == ({("t", 0): 2}, set())
    thread = w._thread
    w.close()
    assert thread is not None and not thread.is_alive()
