"""A long-lived ``Producer(flush="sync")`` sending one message at a time: what a
send repeats, and what it may take from the previous batch instead of asking the files again.

A steady send looks at its topic's config (one ``stat``, under the lock: the API's own checks
of the route run there too) and at nothing else by path: the commit log's end comes from the segment it appends to, the key
index's newest file from the one it has mapped. Each of those facts is checked on every batch
against what other processes may have done meanwhile: a writer killed mid-batch (its records
past the checkpoint, in the same segment or a new one), an index file filled and a new one
begun, the index rebuilt by ``store recover``, the topic given more queues.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

import store
from store.log import checkpoint as ckpt
from store.log import filestat
from store.log.messagestore import Store
from store.log.record import java_hash
from tests.log.storetestutil import all_messages, open_store
from tests.procs import KILLED, mqctl


def _count_calls(monkeypatch: pytest.MonkeyPatch, calls: Counter[str], *names: str) -> None:
    """Count each call of ``os.NAME`` (by name, and by name and path for path lookups); a
    writer's looks through ``filestat`` (two fields of an fstat or stat, in C where built)
    count as the ``fstat`` and ``stat`` they are; its looks without a timestamp as ``untimed``."""
    for module, name, as_name in [(os, n, n) for n in names if n != "untimed"] + [(filestat, "links_size", "fstat"),
                                                                 (filestat, "stamp", "stat"),
                                                                 (filestat, "untimed", "untimed")]:
        if as_name not in names:
            continue
        real: Callable[..., Any] = getattr(module, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, _name: str = as_name, **kw: Any) -> Any:
            calls[_name] += 1
            if args and isinstance(args[0], (str, os.PathLike)):
                calls[f"{_name} {os.fspath(args[0])}"] += 1
            return _real(*args, **kw)
        monkeypatch.setattr(module, name, counted)


def test_a_steady_sync_send_looks_up_only_its_topic_config_by_path(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    open_store(root, default_queues=4).close()
    with store.Producer(root, flush="sync") as p:
        for i in range(12):   # every queue written once: its segment is kept open
            p.send("T", b"warm %d" % i)
        calls: Counter[str] = Counter()
        _count_calls(monkeypatch, calls, "stat", "lstat", "listdir", "scandir", "fdatasync", "fsync", "fstat",
                     "untimed")
        unpack = ckpt.unpack
        monkeypatch.setattr(ckpt, "unpack", lambda raw: calls.update(["unpack"]) or unpack(raw))
        n = 20
        for i in range(n):
            p.send("T", b"m %d" % i)
        monkeypatch.undo()
    config = os.fspath(root / "config" / "topics" / "T.json")
    assert calls[f"stat {config}"] == n, calls   # under the lock only
    assert calls["stat"] == n, calls              # nothing else: no directory, no segment
    assert calls["lstat"] == calls["listdir"] == calls["scandir"] == 0, calls
    assert calls["fdatasync"] == n and calls["fsync"] == 0, calls   # one sync of the log per send
    # One look at each kept descriptor per send, at the batch's start (checkpoint, the log's
    # segment, the queue's segment, the index file); the writes that follow under the same
    # hold of the lock trust it, and the log is synced through the descriptor it was written with.
    # None asks for a timestamp (``filestat.untimed``): on Linux >= 6.13 that would make the
    # next write of the file dirty its inode, and the log's fdatasync wait for a journal commit.
    assert calls["untimed"] == 4 * n, calls
    assert calls["fstat"] == 0, calls
    assert calls["unpack"] == 0, "the checkpoint each send finds is the one it wrote last: taken as is"
    s = Store.open(root)
    try:
        assert sorted(m.body for m in all_messages(s, "T")) == sorted(
            [b"warm %d" % i for i in range(12)] + [b"m %d" % i for i in range(n)])
        assert s.check().problems == []
    finally:
        s.close()


@pytest.mark.parametrize("roll", [False, True], ids=["same-segment", "into-a-new-segment"])
def test_a_writer_killed_mid_batch_is_recovered_before_a_kept_producers_next_send(tmp_path: Path,
                                                                                  roll: bool) -> None:
    """The killed writer's records lie past the checkpoint, in the segment the producer
    appends to or (``roll``) in a new one after that segment's end trailer: the producer's
    next batch recovers them first, and lands after them."""
    root = tmp_path / "s"
    open_store(root, default_queues=1, commitlog_segment_size=4096).close()
    with store.Producer(root, flush="sync") as p:
        first = p.send("T", b"a0")
        p.send("T", b"a1")
        # a line of ~300 bytes: 4 of them stay in the first segment, 14 cannot
        lines = [b"late %02d " % i + b"x" * 290 for i in range(14 if roll else 4)]
        res = mqctl(root, "send", "T", input=b"\n".join(lines) + b"\n", failpoints="put-after-log")
        assert res.returncode == KILLED, res
        segments = sorted(os.listdir(root / "commitlog"))
        assert len(segments) == (2 if roll else 1), segments
        last = p.send("T", b"a2")
    assert last.commitlog_offset > first.commitlog_offset
    s = Store.open(root)
    try:
        got = [m.body for m in s.iter_queue("T", 0, 0)]
        assert got == [b"a0", b"a1", *lines, b"a2"]
        assert s.get(last.commitlog_offset).body == b"a2"
        assert s.check().problems == []
    finally:
        s.close()


def test_a_kept_index_file_filled_by_another_writer_is_not_written_again(tmp_path: Path) -> None:
    """The producer's mapped index file is filled by another handle, which begins the next
    file: the producer's next keys go to that one (all found by key afterwards)."""
    root = tmp_path / "s"
    a = open_store(root, default_queues=2)
    b = Store.open(root)
    try:
        # a file's count starts at 1; each message adds 2 entries (its unique key, its key)
        a.index.max_entries = b.index.max_entries = 9
        a.put_bodies("T", [b"a0"], properties={"KEYS": "ka0"})   # maps the first index file
        b.put_bodies("T", [b"b%d" % i for i in range(3)], properties={"KEYS": "kb"})   # fills it
        assert len(b.index.files()) == 1
        b.put_bodies("T", [b"b3"], properties={"KEYS": "kb"})   # begins the next file
        assert len(b.index.files()) == 2
        a.put_bodies("T", [b"a1"], properties={"KEYS": "ka1"})
        assert len(a.index.files()) == 2, "the file b began took a's keys: no third file"
        for s in (a, b):
            assert [m.body for m in s.query_key("T", "ka0")] == [b"a0"]
            assert [m.body for m in s.query_key("T", "ka1")] == [b"a1"]
            assert sorted(m.body for m in s.query_key("T", "kb")) == [b"b0", b"b1", b"b2", b"b3"]
    finally:
        a.close()
        b.close()
    s = Store.open(root)
    try:
        assert s.check().problems == []
    finally:
        s.close()


def test_a_kept_producer_indexes_into_the_files_store_recover_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "s"
    open_store(root, default_queues=2).close()
    with store.Producer(root, flush="sync") as p:
        p.send("T", b"before", keys="k1")
        res = mqctl(root, "store", "recover")   # removes every index file and writes them anew
        assert res.returncode == 0, res
        sent = p.send("T", b"after", keys="k2")
    s = Store.open(root)
    try:
        assert [m.body for m in s.query_key("T", "k1")] == [b"before"]
        assert [m.body for m in s.query_key("T", "k2")] == [b"after"]
        assert s.find(sent.msg_id).body == b"after"
        assert s.check().problems == []
    finally:
        s.close()


def test_a_kept_producer_routes_by_a_queue_count_another_process_changed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    open_store(root, default_queues=2).close()
    key = next(k for k in (f"k{i}" for i in range(1000))
               if len({abs(java_hash(k)) % n for n in (2, 8, 16)}) == 3)
    with store.Producer(root, flush="sync") as p:
        assert p.send("T", b"old", sharding_key=key).queue_id == abs(java_hash(key)) % 2
        res = mqctl(root, "topic", "update", "T", "--queues", "8")
        assert res.returncode == 0, res
        assert p.send("T", b"new", sharding_key=key).queue_id == abs(java_hash(key)) % 8
        # send_bodies looks at the topic only under the write lock
        res = mqctl(root, "topic", "update", "T", "--queues", "16")
        assert res.returncode == 0, res
        assert p.send_bodies("T", [b"newer"], sharding_keys=[key]).queue_ids == [abs(java_hash(key)) % 16]
