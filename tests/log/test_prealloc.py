"""Segments a ``--flush sync`` writer writes zeros ahead into: the zeros after the
last record are no part of the log (``commitlog.written_length``), for the writer, for every
other writer appending after them, and for every reader, check, recovery and rebuild.

Each test here fails on the code before it: either the zeros are taken for damage or a torn
tail (warned about, cut, reported by ``store check``), or the test asserts that the sync
writer left zeros ahead, which the code before never did.
"""
from __future__ import annotations

import json
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

import store
from store.log import checkpoint as ckpt
from store.log.commitlog import PREALLOC_STEP
from store.log.messagestore import Store
from store.log.stats import commitlog_bytes
from tests.log.storetestutil import all_messages, open_store
from tests.procs import mqctl, python, wait_for


def _segments(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def _sync_sends(root: Path, bodies: list[bytes], **kw) -> list[store.SendResult]:
    with store.Producer(root, flush="sync") as p:
        return [p.send("T", b, **kw) for b in bodies]


def _clean(root: Path) -> None:
    """``store check`` exits 0 and says OK: no damage, no torn tail, nothing pending."""
    res = mqctl(root, "store", "check", "--json")
    assert res.returncode == 0, f"{res.out}\n{res.stderr}"
    assert res.json_lines()[-1]["status"] == "OK", res.out


def test_sync_sends_write_zeros_ahead_that_no_reader_counts_as_the_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    open_store(root, default_queues=2).close()
    sent = _sync_sends(root, [b"m%03d" % i for i in range(40)], keys=["k"])
    [seg] = _segments(root)
    warnings: list[str] = []
    s = open_store(root, warnings)
    try:
        end = s.commitlog.end()
        assert seg.stat().st_size == PREALLOC_STEP > end   # (the code before: the size is the end)
        assert seg.read_bytes()[end:] == bytes(PREALLOC_STEP - end)
        cp = ckpt.read(root / "checkpoint")
        assert cp is not None and cp.written_end == cp.synced_end == end
        assert sorted(m.body for m in all_messages(s, "T")) == [b"m%03d" % i for i in range(40)]
        assert len(s.query_key("T", "k")) == 40
        assert commitlog_bytes(s) == end   # (the progress of check and recover: records only)
        assert s.check().problems == []
        assert warnings == []
    finally:
        s.close()
    _clean(root)
    assert seg.stat().st_size == PREALLOC_STEP   # nothing opened it as damage, nothing cut it
    # An async writer (another process) appends where the records end, over the zeros.
    res = mqctl(root, "send", "T", "after", "--json", "--flush", "async")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert json.loads(res.stdout)["commitLogOffset"] == end
    got = mqctl(root, "consume", "T", "-g", "g", "--from", "first", "-e", "--json")
    assert got.returncode == 0 and got.stderr == "", got.stderr
    assert sorted(m["body"] for m in got.json_lines()) == sorted([f"m{i:03d}" for i in range(40)] + ["after"])
    res = mqctl(root, "msg", "show", sent[7].msg_id, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["body"] == "m007", res.out
    res = mqctl(root, "msg", "query", "--topic", "T", "--key", "k", "--json")
    assert res.returncode == 0 and len(res.json_lines()) == 40, res.out


def test_a_zero_tail_after_the_last_record_is_not_damage(tmp_path: Path) -> None:
    """A store written without zeros ahead, then given a zero tail as a sync writer leaves it:
    opened by writers and readers, checked and recovered, nothing is warned about or cut.
    (The code before took the zeros for a torn tail: recovery cut them with a warning.)"""
    root = tmp_path / "s"
    s = open_store(root, default_queues=1)
    try:
        s.put_bodies("T", [b"a%d" % i for i in range(5)])
        end = s.commitlog.end()
    finally:
        s.close()
    [seg] = _segments(root)
    with open(seg, "ab") as fh:
        fh.write(bytes(300_000))
    _clean(root)
    res = mqctl(root, "topic", "list", "--json")   # (any command that opens the store)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert seg.stat().st_size == end + 300_000
    res = mqctl(root, "send", "T", "b", "--flush", "async", "--json")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert json.loads(res.stdout)["queueOffset"] == 5
    s = Store.open(root)
    try:
        msgs = all_messages(s, "T")
        assert [m.body for m in msgs] == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b"]
        assert msgs[-1].commitlog_offset == end
    finally:
        s.close()
    res = mqctl(root, "store", "recover", "--json")   # a full rebuild of queues and index
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout.splitlines()[-1])
    assert rep["damage"] == [] and rep["truncatedBytes"] == 0, rep
    _clean(root)


def test_a_writer_killed_inside_a_record_written_over_zeros_loses_that_record_only(tmp_path: Path) -> None:
    """Every prefix of a record written over the zeros ahead, the checkpoint before it (a
    sync writer killed inside its write): the next open cuts the torn record and nothing
    else; the next send takes its place."""
    root = tmp_path / "s"
    open_store(root, default_queues=1).close()
    _sync_sends(root, [b"ok%d" % i for i in range(10)])
    end = Store.open(root).commitlog.end()
    snap = tmp_path / "snap"
    shutil.copytree(root, snap)
    _sync_sends(root, [b"torn " * 40])
    [seg] = _segments(root)
    record = seg.read_bytes()[end:Store.open(root).commitlog.end()]
    assert seg.stat().st_size > end + len(record)   # written over zeros (the code before: appended)
    for keep in sorted({1, 4, 7, 8, 9, 30, len(record) // 2, len(record) - 20, len(record) - 1}):
        shutil.rmtree(root)
        shutil.copytree(snap, root)
        with open(seg, "r+b") as fh:
            fh.seek(end)
            fh.write(record[:keep])
        s = Store.open(root)
        try:
            assert [m.body for m in all_messages(s, "T")] == [b"ok%d" % i for i in range(10)], keep
            assert s.commitlog.end() == end, keep
            assert s.check().problems == [], keep
        finally:
            s.close()
        r = _sync_sends(root, [b"next"])[0]
        assert r.queue_offset == 10, keep
        _clean(root)


SENDER = """
import sys
import store
root, tag, flush, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with store.Producer(root, flush=flush) as p:
    for i in range(count):
        p.send("T", b"%s-%06d" % (tag.encode(), i))
        print(f"{tag}-{i:06d}", flush=True)
"""


@pytest.mark.slow
def test_sync_senders_killed_at_random_keep_every_acknowledged_send(tmp_path: Path) -> None:
    """Real processes sending one message at a time with ``flush="sync"`` into zeros they
    wrote ahead, killed with SIGKILL at random moments (mid-record, mid-zeros, between):
    every send that returned is there once, the queue offsets are dense, the store is clean."""
    root = tmp_path / "s"
    open_store(root, default_queues=2).close()
    rng = random.Random(26)
    acked: list[str] = []
    for r in range(6):
        outs = [tmp_path / f"r{r}-{k}.out" for k in range(2)]
        kids = [python(SENDER, root, f"r{r}k{k}", "sync", 100000, stdout=open(out, "w"))
                for k, out in enumerate(outs)]
        wait_for(lambda outs=outs: all(out.read_text().count("\n") >= 5 for out in outs), 60,
                 what="sends acknowledged")
        time.sleep(rng.uniform(0.0, 0.3))
        for kid in kids:
            kid.send_signal(signal.SIGKILL)
            kid.wait()
        for out in outs:
            acked += [line for line in out.read_text().split("\n")[:-1]]
    assert (root / "commitlog").exists() and _segments(root)[-1].stat().st_size % PREALLOC_STEP == 0
    s = Store.open(root)
    try:
        msgs = all_messages(s, "T")
        bodies = [m.body.decode() for m in msgs]
        assert len(bodies) == len(set(bodies))
        assert set(acked) <= set(bodies), sorted(set(acked) - set(bodies))[:5]
        for q in (0, 1):
            offs = sorted(m.queue_offset for m in msgs if m.queue_id == q)
            assert offs == list(range(len(offs)))
        assert s.check().problems == []
    finally:
        s.close()
    _clean(root)


def test_sync_and_async_writers_on_one_store_append_where_the_records_end(tmp_path: Path) -> None:
    """A sync writer (zeros ahead) and an async one (none), each its own process, sending at
    once to the same queue: the async one appends at the records' end, not the file's, so
    the log has no hole of zeros, every message is there once, and offsets are dense."""
    root = tmp_path / "s"
    open_store(root, default_queues=1).close()
    outs = {flush: tmp_path / f"{flush}.out" for flush in ("sync", "async")}
    kids = [python(SENDER, root, flush, flush, 2000 if flush == "async" else 400, stdout=open(out, "w")) for flush, out in outs.items()]
    for kid in kids:
        assert kid.wait(timeout=120) == 0
    acked = [line for out in outs.values() for line in out.read_text().split("\n")[:-1]]
    [seg] = _segments(root)
    s = Store.open(root)
    try:
        assert seg.stat().st_size > s.commitlog.end()   # zeros ahead of a sync writer remain
        msgs = all_messages(s, "T")
        bodies = [m.body.decode() for m in msgs]
        assert len(bodies) == len(set(bodies)) and set(acked) <= set(bodies)
        assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
        kinds = [b.split("-")[0] for b in bodies]
        switches = sum(a != b for a, b in zip(kinds, kinds[1:]))
        assert switches >= 2, "the two writers did not take turns"   # (they ran at once)
        assert s.check().problems == []
    finally:
        s.close()
    _clean(root)


def test_segments_roll_past_zeros_written_ahead(tmp_path: Path) -> None:
    """With small segments a sync writer writes each one full of zeros at its first send;
    the records roll to the next segment with a BLANK trailer before the zeros as before.
    Reading, checking, recovering after a kill, and rebuilding every queue and the key index
    (``store recover``) see every message once."""
    root = tmp_path / "s"
    seg_size = 73728
    res = mqctl(root, "init", "--segment-size", str(seg_size), "--max-message-size", "4096")
    assert res.returncode == 0, res.stderr
    bodies = [b"%04d" % i + b"r" * 3000 for i in range(100)]
    sent = _sync_sends(root, bodies, keys=["roll"])
    segs = _segments(root)
    assert len(segs) >= 4
    assert all(p.stat().st_size == seg_size for p in segs)   # (the code before: trailer-long files)
    _clean(root)
    # killed inside a record that begins a new segment, over its zeros
    s = Store.open(root)
    end = s.commitlog.end()
    s.close()
    base = end - end % seg_size
    last = _segments(root)[-1]
    assert int(last.name) == base
    data = last.read_bytes()
    with open(last, "r+b") as fh:   # a copy of the segment's first record, torn, after its last
        fh.seek(end - base)
        fh.write(data[:1500])
    s = Store.open(root)
    try:
        assert sorted(m.body for m in all_messages(s, "T")) == bodies
        assert s.commitlog.end() == end
    finally:
        s.close()
    more = _sync_sends(root, [b"after-%d" % i + b"x" * 3000 for i in range(30)], keys=["roll"])
    res = mqctl(root, "store", "recover", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["damage"] == []
    _clean(root)
    s = Store.open(root)
    try:
        assert sorted(m.body for m in all_messages(s, "T")) == sorted(
            bodies + [b"after-%d" % i + b"x" * 3000 for i in range(30)])
        assert len(s.query_key("T", "roll", limit=1000)) == 130
    finally:
        s.close()
    res = mqctl(root, "msg", "show", more[-1].msg_id, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["body"].startswith("after-29"), res.out
    assert sent[0].queue_offset == 0


def test_sync_sends_go_on_when_the_zeros_ahead_do_not_fit(tmp_path: Path) -> None:
    """Zeros ahead are for speed only: a file-size limit (or a full disk) that leaves room for
    the records but not for a MiB of zeros fails no send (the zeros stop at the limit)."""
    import resource
    import subprocess
    import sys
    root = tmp_path / "s"
    open_store(root, default_queues=1).close()
    limit = 768 * 1024   # (room for the key index file, 513 KiB, not for a MiB of zeros)

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    cp = subprocess.run([sys.executable, "-c", SENDER, root, "lim", "sync", "50"], preexec_fn=set_limit,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("\n") == 50
    [seg] = _segments(root)
    assert seg.stat().st_size <= limit
    s = Store.open(root)
    try:
        assert sorted(m.body for m in all_messages(s, "T")) == [b"lim-%06d" % i for i in range(50)]
        assert s.check().problems == []
    finally:
        s.close()
