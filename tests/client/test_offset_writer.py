"""The offsets' writer thread (store/client/offset_writer.py): one commit at a time, its
outcome taken in the loop's thread, a failure raised there once, the thread ended by close(),
by the writer's collection, or at the interpreter's exit after the commit out."""
from __future__ import annotations

import gc
import subprocess
import sys
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
    threads = [t for t in threading.enumerate() if t.name == "mq-offsets"]
    w.close()
    assert threads and not any(t.is_alive() for t in threads)


def test_an_abandoned_writer_s_thread_ends() -> None:
    """A writer dropped without close() (its consumer abandoned): its idle thread holds
    nothing of it, and ends once it is collected."""
    before = {t for t in threading.enumerate() if t.name == "mq-offsets"}
    w = OffsetWriter(lambda offsets, increase_only: set(), lambda: None)
    w.submit({("t", 0): 1}, False)
    assert w.take(wait=True) == ({("t", 0): 1}, set())
    (thread,) = {t for t in threading.enumerate() if t.name == "mq-offsets"} - before
    del w
    gc.collect()
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_the_commit_out_is_written_before_the_interpreter_exits(tmp_path: object) -> None:
    """A program that ends with a commit out (no close()) still writes it, as it did with a
    thread pool's worker; an idle writer thread does not keep it from ending."""
    code = ("import sys, time\n"
            "from store.client.offset_writer import OffsetWriter\n"
            "def commit(offsets, increase_only):\n"
            "    time.sleep(0.2)\n"
            "    print('written', flush=True)\n"
            "    return set()\n"
            "idle = OffsetWriter(lambda o, i: set(), lambda: None)\n"
            "idle.submit({('t', 0): 1}, False)\n"
            "idle.take(wait=True)\n"
            "w = OffsetWriter(commit, lambda: None)\n"
            "w.submit({('t', 0): 1}, False)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "written\n", (p.stdout, p.stderr)


def test_a_quick_commit_is_written_at_once_and_one_that_is_not_by_the_thread() -> None:
    """A commit that ``quick`` writes (the table's lock free, a record alone) is done when
    submit() returns, in the caller's thread; one it declines (None) goes to the thread."""
    where: list[str] = []
    quick_says: list[set[str] | None] = [{"reset"}, None]

    def quick(offsets: dict[tuple[str, int], int], increase_only: bool) -> set[str] | None:
        where.append(f"quick:{threading.current_thread().name}")
        return quick_says.pop(0)

    def commit(offsets: dict[tuple[str, int], int], increase_only: bool) -> set[str]:
        where.append(f"commit:{threading.current_thread().name}")
        return set()

    done: list[str] = []
    w = OffsetWriter(commit, lambda: done.append(threading.current_thread().name), quick)
    before = {t for t in threading.enumerate() if t.name == "mq-offsets"}
    w.submit({("t", 0): 5}, True)
    assert w.written and done == ["MainThread"]
    assert not {t for t in threading.enumerate() if t.name == "mq-offsets"} - before
    assert w.take(wait=False) == ({("t", 0): 5}, {"reset"})
    w.submit({("t", 0): 9}, True)
    assert w.take(wait=True) == ({("t", 0): 9}, set())
    assert where == ["quick:MainThread", "quick:MainThread", "commit:mq-offsets"]
    assert done == ["MainThread", "mq-offsets"]
    w.close()
