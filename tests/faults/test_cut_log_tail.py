"""A commit log cut short in a store flushed asynchronously (the default), with real ``mqctl``
processes and real files.

Its consume queues and checkpoint were written after records the log no longer has (a power
cut before the flush may lose them legitimately, so may a file cut by hand). The next command
repairs the store, cutting the queues back, as before; but no longer without a word: the
process that repairs says once, on stderr, where the log ends, how far the queues reached and
how many messages are gone — and ``store check`` run before the repair reports the same line.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.procs import MQ

N = 100
CUT = 8000
GONE = "past its end are gone (a power cut before their flush, or a cut file)"


def _cut_store(tmp_path: Path) -> MQ:
    mq = MQ(tmp_path / "store", tmp_path)
    # batches of 10: the one the cut is in goes whole (an unfinished batch), the others stay
    mq.ok("send", "t", "--batch-size", "10", input="".join(f"{i}\n" for i in range(N)))
    seg = mq.root / "commitlog" / f"{0:020d}"
    assert seg.stat().st_size > CUT
    with open(seg, "r+b") as fh:
        fh.truncate(CUT)
    return mq


def _kept(mq: MQ) -> int:
    return len(mq.ok("consume", "t", "-g", "g", "-o", "first", "-e").stdout.split())


def test_check_before_the_repair_reports_the_messages_gone(tmp_path: Path) -> None:
    mq = _cut_store(tmp_path)
    # (where the log ends: one past its last non-zero byte, commitlog.written_length; the cut
    # record's bytes kept before CUT may end with zeros of its own)
    end = len((mq.root / "commitlog" / f"{0:020d}").read_bytes().rstrip(b"\0"))
    assert CUT - 64 < end <= CUT
    res = mq.run("store", "check")
    assert res.returncode == 1, res
    lines = [ln for ln in res.out.splitlines() if GONE in ln]
    assert len(lines) == 1 and f"the commit log ends at offset {end}, but the consume queues reach" in lines[0], res


def test_the_repair_warns_once(tmp_path: Path) -> None:
    mq = _cut_store(tmp_path)
    res = mq.ok("topic", "list")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mqctl: warning: the commit log ends at offset ") and \
        "but the consume queues reach " in lines[0] and GONE in lines[0], res
    kept = _kept(mq)   # (what the cut batch's records before the cut were counted with)
    assert 0 < kept < N and kept % 10 == 0 and f": {N - kept} messages {GONE}" in lines[0], (kept, res)
    res = mq.ok("topic", "list")
    assert res.stderr == "", res
    mq.check_clean()


def test_of_processes_opening_the_cut_store_at_once_one_warns(tmp_path: Path) -> None:
    mq = _cut_store(tmp_path)
    procs = [subprocess.Popen(mq.argv("topic", "list"), env=mq.environ(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    assert sum(e.count(GONE) for e in errs) == 1, errs
    mq.check_clean()
