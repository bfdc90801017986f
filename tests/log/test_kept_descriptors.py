"""A writing handle keeps files open between batches (each queue's last consume-queue segment,
the commit-log segment it appends to, the checkpoint, the segment it fsyncs): what another
handle does to those files meanwhile — appending, deleting a topic and making it anew,
removing the checkpoint, replacing a segment — must never send a batch into a stale file."""
from __future__ import annotations

import os
from pathlib import Path

from store.log import checkpoint as ckpt
from store.log.broker import MAX_OPEN_TAILS, Store
from store.log.commitlog import CommitLog
from tests.log.storetestutil import all_messages, open_store


def _by_queue(s: Store, topic: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for m in sorted(all_messages(s, topic), key=lambda m: (m.queue_id, m.queue_offset)):
        assert m.queue_offset == len(out.setdefault(m.queue_id, [])), "queue offsets are dense"
        out[m.queue_id].append(m.body)
    return out


def test_batches_of_two_handles_interleave_in_every_queue(tmp_path: Path) -> None:
    a = open_store(tmp_path / "s", default_queues=4)
    b = Store.open(tmp_path / "s")
    try:
        for i in range(5):
            a.put_bodies("T", [b"a%d" % i] * 4, queue_id=-1)
            b.put_bodies("T", [b"b%d" % i] * 4, queue_id=-1)
        got = _by_queue(b, "T")
        assert sorted(len(v) for v in got.values()) == [10] * 4
        assert sorted(x for v in got.values() for x in v) == sorted([b"a%d" % i for i in range(5)] * 4
                                                                   + [b"b%d" % i for i in range(5)] * 4)
    finally:
        a.close()
        b.close()


def test_a_topic_deleted_and_made_anew_by_another_handle_gets_the_next_batch(tmp_path: Path) -> None:
    a = open_store(tmp_path / "s", default_queues=4)
    b = Store.open(tmp_path / "s")
    try:
        a.put_bodies("T", [b"old"] * 8)        # a keeps each queue's segment open
        b.delete_topic("T")
        b.put_bodies("T", [b"new"] * 4)        # made anew: new files under the same names
        a.put_bodies("T", [b"next"] * 8)
        got = _by_queue(b, "T")
        assert sorted(x for v in got.values() for x in v) == [b"new"] * 4 + [b"next"] * 8
        assert all(v[0] == b"new" for v in got.values())
        a.close()
        a = Store.open(tmp_path / "s")         # and it reads back the same from the files
        assert _by_queue(a, "T") == got
    finally:
        a.close()
        b.close()


def test_a_removed_checkpoint_is_written_anew(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")
    try:
        s.put_bodies("T", [b"x"] * 3)
        s.layout.checkpoint.unlink()
        s.put_bodies("T", [b"y"] * 3)
        cp = ckpt.read(s.layout.checkpoint)
        assert cp is not None and cp.written_end == s.commitlog.end()
        assert sorted(m.body for m in all_messages(s, "T")) == [b"x"] * 3 + [b"y"] * 3
    finally:
        s.close()


def test_a_segment_replaced_under_the_log_is_opened_anew(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "log", 1 << 20)
    try:
        fd = log.write_fd(0)
        os.pwrite(fd, b"old", 0)
        log.datasync(0)
        path = log.segment_path(0)
        path.unlink()
        path.write_bytes(b"")                  # (recovery removed a torn segment; a writer made it again)
        fd2 = log.write_fd(0)
        os.pwrite(fd2, b"new", 0)
        log.datasync(0)
        assert path.read_bytes() == b"new"
        path.unlink()
        log.datasync(0)                        # gone: nothing to sync, no error
    finally:
        log.close()


def test_a_writer_to_many_queues_keeps_a_bounded_number_open(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", default_queues=1)
    try:
        before = len(os.listdir("/proc/self/fd"))
        for i in range(MAX_OPEN_TAILS + 40):
            s.put_bodies(f"T{i}", [b"x"])
        opened = len(os.listdir("/proc/self/fd")) - before
        assert opened <= MAX_OPEN_TAILS + 8, opened
        assert [m.body for m in all_messages(s, "T0")] == [b"x"]
        s.put_bodies("T0", [b"y"])             # its segment was closed: opened again
        assert [m.body for m in all_messages(s, "T0")] == [b"x", b"y"]
    finally:
        s.close()
