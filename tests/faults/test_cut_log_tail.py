"""A commit log cut short in a store flushed asynchronously (the default), with real ``mqctl``
processes and real files.

Its consume queues and checkpoint were written after records the log no longer has (a power
cut before the flush may lose them legitimately, so may a file cut by hand). The next command
repairs the store, cutting the queues back, as before; but no longer without a word: the
process that repairs says once, on stderr, where the log ends, how far the queues reached and
how many messages are gone — and ``store check`` run before the repair reports the same line.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.procs import MQ

N = 100
CUT = 8000
GONE = "past its end are gone (a power cut before their flush, or a cut file)"
BATCH_CUT = "an unfinished atomic batch at the end of the commit log was cut whole"


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
    """The repair cut the unfinished batch the file cut tore, with its whole records before
    the cut: the warning says so (it said the log ended there, as if found so)."""
    mq = _cut_store(tmp_path)
    was = len((mq.root / "commitlog" / f"{0:020d}").read_bytes().rstrip(b"\0"))   # (the log's end: see above)
    res = mq.ok("topic", "list")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    kept = _kept(mq)   # (what the cut batch's records before the cut were counted with)
    end = int(re.search(r"from offset (\d+) ", lines[0])[1])   # type: ignore[index]
    whole = int(re.search(r"so its (\d+) intact record", lines[0])[1])   # type: ignore[index]
    assert 0 < kept < N and kept % 10 == 0 and 0 <= whole < 10, (kept, res)
    assert lines == [
        "mqctl: warning: an unfinished atomic batch at the end of the commit log was cut whole: its end record "
        "is missing (the last of its records the log has is torn: a writer killed or a power cut inside the "
        "batch, or a cut file), and an atomic batch is kept whole or not at all, so its "
        f"{whole} intact record{'s' if whole != 1 else ''} from offset {end} ({was - end} bytes) went with "
        f"it; the log now ends at offset {end}; the {N - kept} messages the consume queues had past it are "
        f"gone ({N - kept - whole - 1} of them after the batch's records the log has: the log's bytes past "
        "them are gone)"], res
    res = mq.ok("topic", "list")
    assert res.stderr == "", res
    mq.check_clean()


def test_of_processes_opening_the_cut_store_at_once_one_warns(tmp_path: Path) -> None:
    mq = _cut_store(tmp_path)
    procs = [subprocess.Popen(mq.argv("topic", "list"), env=mq.environ(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    assert sum(e.count(BATCH_CUT) for e in errs) == 1, errs
    mq.check_clean()


def test_a_torn_last_record_says_its_whole_batch_was_cut(tmp_path: Path) -> None:
    """The tester's case: one batch of 1500 (stdin batching) over several segments, its last record torn: the next
    command cuts the whole batch, by the atomic batch rule, and warned "the commit log ends at
    offset 0, but the consume queues reach ...", as if the log had been found at 0. It says
    the batch was cut, how many intact records from which offset, and why."""
    mq = MQ(tmp_path / "store", tmp_path)
    mq.ok("init", "--max-message-size", "1KiB", "--segment-size", "70KiB")
    mq.ok("send", "t", input="".join(f"msg-{i:05d}\n" for i in range(1500)))
    segs = sorted((mq.root / "commitlog").iterdir())
    assert len(segs) > 2
    size = int(segs[-1].name) + len(segs[-1].read_bytes().rstrip(b"\0"))   # (the log's end)
    with open(segs[-1], "r+b") as fh:   # (the last record loses its last 20 bytes)
        fh.truncate(len(segs[-1].read_bytes().rstrip(b"\0")) - 20)
    res = mq.ok("consume", "t", "-g", "g", "-o", "first", "-e")
    assert res.stdout == b""
    assert res.stderr.splitlines() == [
        "mqctl: warning: an unfinished atomic batch at the end of the commit log was cut whole: its end record "
        "is missing (the last of its records the log has is torn: a writer killed or a power cut inside the "
        "batch, or a cut file), and an atomic batch is kept whole or not at all, so its 1499 intact records "
        f"from offset 0 ({size - 20} bytes) went with it; the log now ends at offset 0; the 1500 messages the "
        "consume queues had past it are gone"], res
    mq.check_clean()
