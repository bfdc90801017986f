"""A writing handle keeps files open between batches (each queue's last consume-queue segment,
the commit-log segment it appends to, the checkpoint, the segment it fsyncs): what another
handle does to those files meanwhile — appending, deleting a topic and making it anew,
removing the checkpoint, replacing a segment — must never send a batch into a stale file."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from store.log import checkpoint as ckpt
from store.log.commitlog import CommitLog
from store.log.engine import MAX_OPEN_TAILS
from store.log.messagestore import Store
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


def test_a_log_cut_back_by_recovery_still_keeps_the_segment_it_fsyncs_open(tmp_path: Path, monkeypatch) -> None:
    """A cut (recovery's ``truncate_to``, run when a store is made or a writer died) drops the
    log's descriptors but leaves the log open: the ``--flush sync`` batches after it keep one
    descriptor for their fsyncs, not an open and a close of the segment per batch."""
    log = CommitLog(tmp_path / "log", 1 << 20)
    try:
        os.pwrite(log.write_fd(0), b"abcdef", 0)
        log.truncate_to(3)
        opened: list[str] = []
        real_open = os.open

        def counting_open(path, flags, *args, **kw):  # type: ignore[no-untyped-def]
            opened.append(str(path))
            return real_open(path, flags, *args, **kw)

        monkeypatch.setattr(os, "open", counting_open)
        for i in range(3):
            os.pwrite(log.write_fd(0), b"x", 3 + i)
            log.datasync(0)
        monkeypatch.undo()
        assert opened.count(str(log.segment_path(0))) == 2, opened   # one to append, one kept to fsync
        assert log.segment_path(0).read_bytes() == b"abcxxx"
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


def test_a_batch_whose_next_segment_cannot_be_made_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """A batch crossing into a new segment that cannot be created (a full disk): the part
    already written to the old segment is cut back, none of the batch is visible."""
    import errno

    from store.errors import StoreError
    from store.log import commitlog as commitlog_mod
    s = open_store(tmp_path / "s", commitlog_segment_size=1 << 20)
    try:
        s.put_bodies("T", [b"x" * 1000] * 800)           # most of segment 0
        end, before = s.commitlog.end(), sorted(m.body for m in all_messages(s, "T"))
        real = commitlog_mod.open_private

        def full_disk(path, flags):
            if str(path).endswith(f"{1 << 20:020d}"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, flags)

        monkeypatch.setattr(commitlog_mod, "open_private", full_disk)
        try:
            s.put_bodies("T", [b"y" * 1000] * 200)       # crosses into segment 1 << 20
        except StoreError:
            pass
        else:
            raise AssertionError("the batch was stored without its second segment")
        monkeypatch.undo()
        assert s.commitlog.end() == end
        assert sorted(m.body for m in all_messages(s, "T")) == before
        s.put_bodies("T", [b"z"] * 3)
        assert sorted(m.body for m in all_messages(s, "T")) == sorted(before + [b"z"] * 3)
    finally:
        s.close()


def test_appends_outside_a_writers_batches_keep_nothing_open(tmp_path: Path) -> None:
    """Recovery appends to every queue it repairs (``ConsumeQueue.append`` without ``keep``):
    those files are closed again, or a store with many damaged queues runs out of them."""
    from store.log import format as F
    from store.log.consumequeue import ConsumeQueue, pack_entry
    queues = [ConsumeQueue(tmp_path / "cq" / str(i)) for i in range(50)]
    before = len(os.listdir("/proc/self/fd"))
    for q in queues:
        q.append(0, pack_entry(0, F.RECORD_FIXED_SIZE + 20, 0) * 3)
        q.append(1, pack_entry(0, F.RECORD_FIXED_SIZE + 20, 0))   # a fix in place
    assert len(os.listdir("/proc/self/fd")) == before
    assert [q.max_offset() for q in queues] == [3] * 50


def test_close_does_not_wait_for_a_background_fsync(tmp_path: Path, monkeypatch) -> None:
    """An async writer's background flush fsyncs the log in its own thread, and promised
    nothing: closing the log while that fsync runs returns at once (it used to wait for the
    disk), and the flush closes the descriptor it synced through itself."""
    log = CommitLog(tmp_path / "log", 1 << 20)
    os.pwrite(log.write_fd(0), b"abc", 0)
    entered, release = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow(fd: int) -> None:
        entered.set()
        release.wait()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    flusher = threading.Thread(target=log.datasync, args=(0,))
    closer = threading.Thread(target=log.close)
    try:
        flusher.start()
        assert entered.wait(60)
        closer.start()
        closer.join(60)
        assert not closer.is_alive(), "close() waited for the fsync"
    finally:
        release.set()
        flusher.join(60)
        closer.join(60)
    segment = str(log.segment_path(0))
    left = [fd for fd in os.listdir("/proc/self/fd") if _target(fd) == segment]
    assert left == [], "the flush kept its descriptor after close()"


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
