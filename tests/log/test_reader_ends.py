"""A reader asks where each queue it holds ends and starts every turn: from what it knows
(the listings of the directories, the descriptors it reads by) while the files stay as they
were, and anew the moment another handle appends, cuts a file back in place, replaces a file
or removes segments (retention)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from store.log import checkpoint as ckpt
from store.log.messagestore import Store
from store.log.record import Draft
from store.log.retention import DEFAULT_RETENTION_MS, clean
from store.log.settings import StoreSettings

SEG = 8192


def _open(root: Path) -> Store:
    return Store.open(root, create=True, warn=lambda _m: None,
                      settings=StoreSettings(max_message_size=1024, commitlog_segment_size=SEG,
                                             cq_segment_entries=20))


def _fill(s: Store, n: int, tag: str = "m") -> None:
    for i in range(0, n, 10):
        s.put([Draft("T", f"{tag}{i + j:05d}-{'x' * 180}".encode(), queue_id=0) for j in range(min(10, n - i))])


def _age(*dirs: Path) -> None:
    """Directories untouched for a while: listings of them are trusted (SegmentListing)."""
    t = time.time_ns() - 10**9
    for d in dirs:
        os.utime(d, ns=(t, t))


def _dirs(s: Store) -> tuple[Path, Path]:
    return s.layout.queue_dir("T", 0), s.commitlog.dir


def _segment_stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of segment files that get a stat by name from now on."""
    seen: list[str] = []
    real = os.stat

    def stat(path: object, *a: object, **kw: object) -> os.stat_result:
        name = os.path.basename(os.fspath(path))  # type: ignore[call-overload]
        if len(name) == 20 and name.isdigit():
            seen.append(os.fspath(path))  # type: ignore[call-overload]
        return real(path, *a, **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(os, "stat", stat)
    return seen


def test_a_reader_asks_an_unchanged_queue_its_ends_without_a_stat_of_a_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = _open(tmp_path / "s")
    r = Store.open(tmp_path / "s")
    try:
        _fill(w, 25)
        _age(*_dirs(w))
        assert r.pull_records("T", 0, 20, 100).offsets[0] == 20   # reads (so opens) the last segment
        assert (r.min_offset("T", 0), r.max_offset("T", 0)) == (0, 25)
        stats = _segment_stats(monkeypatch)
        for _turn in range(3):
            assert (r.min_offset("T", 0), r.max_offset("T", 0)) == (0, 25)
        assert stats == []
        _fill(w, 2, "n")      # appended in place: the directory is as it was, the file grew
        assert r.max_offset("T", 0) == 27
        assert stats == []
    finally:
        w.close()
        r.close()


def test_a_handle_reads_the_checkpoint_once_for_the_looks_at_its_queues_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member joining looks at each of its queues' ends in turn (``queueends.py``), each
    against the checkpoint: read once while it stays as it was, again once it changed."""
    w = _open(tmp_path / "s")
    try:
        w.create_topic("Q", 8)
        w.put([Draft("Q", f"m{i}".encode(), queue_id=i % 8) for i in range(16)])
        reads: list[Path] = []
        real = ckpt.read

        def spy(path: Path) -> ckpt.Checkpoint | None:
            reads.append(path)
            return real(path)
        r = Store.open(tmp_path / "s")
        try:
            monkeypatch.setattr(ckpt, "read", spy)
            assert [r.max_offset("Q", q) for q in range(8)] == [2] * 8
            assert reads == [r.layout.checkpoint]
            w.put([Draft("Q", b"n", queue_id=0)])   # the checkpoint rewritten
            os.utime(r.layout.checkpoint, ns=(10**9, 10**9))   # (its times apart: not within one tick)
            r2 = Store.open(tmp_path / "s")
            r2.engine.ends_checkpoint = r.engine.ends_checkpoint   # (what r read before the put)
            reads.clear()
            assert r2.max_offset("Q", 0) == 3
            assert reads == [r.layout.checkpoint]
            r2.close()
        finally:
            r.close()
    finally:
        w.close()


def test_the_end_a_reader_knows_follows_appends_cuts_and_replaced_files(tmp_path: Path) -> None:
    w = _open(tmp_path / "s")
    r = Store.open(tmp_path / "s")
    try:
        _fill(w, 25)
        qdir, _log = _dirs(w)
        _age(qdir)
        assert r.pull_records("T", 0, 20, 100).offsets[0] == 20
        assert r.max_offset("T", 0) == 25
        assert r.max_offset("T", 0) == 25
        last = qdir / f"{20 * 20:020d}"
        os.truncate(last, 3 * 20)             # cut back in place (recovery's truncate_to)
        assert r.max_offset("T", 0) == 23
        _age(qdir)
        assert r.max_offset("T", 0) == 23
        # a file written anew under the same name (recovery, a queue made again)
        fresh = qdir / "new"
        fresh.write_bytes(last.read_bytes()[:20])
        os.replace(fresh, last)
        assert r.max_offset("T", 0) == 21
        _age(qdir)
        assert r.max_offset("T", 0) == 21
        last.unlink()                         # the last segment gone: the one before ends it
        assert r.max_offset("T", 0) == 20
        _age(qdir)
        w.close()
        w = _open(tmp_path / "s")
        # a new last segment, by a writer that first makes the queue list what the log still
        # holds of it (offsets 20-24, cut above by hand: queueends.py)
        _fill(w, 7, "n")
        assert r.max_offset("T", 0) == w.max_offset("T", 0) == 32
        got = [m.body[:6] for m in r.iter_queue("T", 0, 25)]
        assert got == [b"n%05d" % i for i in range(7)]
    finally:
        w.close()
        r.close()


def test_the_start_a_reader_knows_follows_retention(tmp_path: Path) -> None:
    w = _open(tmp_path / "s")
    r = Store.open(tmp_path / "s")
    try:
        _fill(w, 200)
        qdir, log = _dirs(w)
        _age(qdir, log)
        assert r.min_offset("T", 0) == 0
        assert r.min_offset("T", 0) == 0      # (known now)
        t = time.time() - 4 * 86_400
        for dirpath, _d, names in os.walk(w.root):
            for n in names:
                os.utime(os.path.join(dirpath, n), (t, t))
        clean(w, DEFAULT_RETENTION_MS)        # removes log segments (and the queue's first ones)
        fresh = Store.open(tmp_path / "s")
        try:
            lo = fresh.min_offset("T", 0)
        finally:
            fresh.close()
        assert lo > 0
        assert r.min_offset("T", 0) == lo
        _age(qdir, log)
        assert r.min_offset("T", 0) == lo
        assert next(r.iter_queue("T", 0, lo)).queue_offset == lo
    finally:
        w.close()
        r.close()
