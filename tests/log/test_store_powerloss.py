"""What a power cut can leave, made by hand, and what the next opener must make of it.

A power cut loses whatever was not fsynced, in any order: a file may come back shorter, with
zeros where pages were lost, or as an older version. Here each state is built by byte
surgery, then the checkpoint is given another boot id (what the store sees after a restart).
``tests/power/`` checks the same promises with real cuts on LazyFS.
"""
from __future__ import annotations

import os
from pathlib import Path

from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import offsetview
from store.log.messagestore import Store
from store.log.offsets import ClusterOffsetStore
from store.log.record import java_hash
from tests.log.storetestutil import draft, open_store

OTHER_BOOT = bytes(range(16))


def restarted(root: Path, *, synced: int | None = None, derived: int | None = None) -> None:
    """Make the checkpoint say it was written before a restart, with the durable ends given
    (default: what it says now)."""
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    s = cp.synced_end if synced is None else synced
    d = cp.derived_end if derived is None else derived
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(cp.written_end, cp.last_store_ts, s, OTHER_BOOT, d, 1))


def problems(s: Store) -> list[str]:
    rep = s.check()
    return [p.reason for p in rep.problems or []]


def test_an_empty_key_index_file_after_a_cut_is_rebuilt_at_open(root: Path) -> None:
    """Issue A: the index file was created and filled without an fsync; after the cut it is
    empty, and every command failed with an mmap error."""
    s = open_store(root)
    res = s.put([draft("T", f"m{i}", properties={"KEYS": f"k{i}"}) for i in range(20)])
    s.close()
    (idx,) = (root / "index").iterdir()
    os.truncate(idx, 0)
    restarted(root, synced=0, derived=0)
    s = Store.open(root)
    assert [m.body for m in s.query_key("T", "k7")] == [b"m7"]
    assert s.find(res[3].uniq_key).body == b"m3"
    s.put([draft("T", "after", properties={"KEYS": "k-after"})])
    assert [m.body for m in s.query_key("T", "k-after")] == [b"after"]
    assert problems(s) == []
    s.close()


def test_a_short_index_file_without_a_restart_is_rebuilt_too(root: Path) -> None:
    """F1: a writer killed while making an index file (the old code wrote it in place)."""
    s = open_store(root)
    s.put([draft("T", "a", properties={"KEYS": "ka"})])
    s.close()
    (idx,) = (root / "index").iterdir()
    os.truncate(idx, 1000)
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(0, cp.last_store_ts, 0, cp.boot_id))  # dirty
    (root / "index" / ".00000000000000000000.123.tmp").write_bytes(b"half")
    s = Store.open(root)
    assert [m.body for m in s.query_key("T", "ka")] == [b"a"]
    assert not list((root / "index").glob(".*.tmp"))
    assert problems(s) == []
    s.close()


def test_index_slots_lost_in_a_cut_are_found_and_rebuilt(root: Path) -> None:
    """The header and entries survived but the slot table page did not: lookups would miss
    keys with exit 0. Recovery after a restart reads the index whole."""
    s = open_store(root)
    s.put([draft("T", f"m{i}", properties={"KEYS": f"k{i}"}) for i in range(50)])
    s.close()
    (idx,) = (root / "index").iterdir()
    with open(idx, "r+b") as fh:
        fh.seek(F.INDEX_HEADER_SIZE)
        fh.write(bytes(F.INDEX_SLOTS * 4))
    s = Store.open(root, recover=False)
    assert any("key index" in p for p in problems(s)), "store check must see the lost slots"
    s.close()
    restarted(root, derived=0)
    s = Store.open(root)
    assert [m.body for m in s.query_key("T", "k42")] == [b"m42"]
    assert problems(s) == []
    s.close()


def test_a_group_offset_past_the_shortened_queue_comes_back_to_its_end(root: Path) -> None:
    """Issue B: the group read and committed messages that the cut took away; new messages
    take those queue offsets again and must be delivered."""
    s = open_store(root)
    s.create_topic("T", 1)
    s.put([draft("T", f"m{i}") for i in range(6)])
    s.put([draft("T", f"m{i}") for i in range(6, 10)])   # (a batch: lost whole or kept whole)
    ClusterOffsetStore(s.layout).reset("g", "T", {0: 10})
    # the cut: the last four records were never durable
    cut_at = s.queue("T", 0).entry(6)
    assert cut_at is not None
    s.close()
    seg = root / "commitlog" / F.segment_name(0)
    os.truncate(seg, cut_at[0])
    restarted(root, synced=cut_at[0], derived=0)
    warnings: list[str] = []
    s = Store.open(root, warn=warnings.append)
    assert s.max_offset("T", 0) == 6
    assert ClusterOffsetStore(s.layout).read("g", "T", 0) == 6
    assert any("offset 10 -> 6" in w for w in warnings)
    s.put([draft("T", "new")])
    assert [m.body for m in s.iter_queue("T", 0, ClusterOffsetStore(s.layout).read("g", "T", 0))] == [b"new"]
    assert problems(s) == []
    s.close()


def test_a_members_journal_commit_past_the_shortened_queue_is_moved_back(root: Path, monkeypatch) -> None:
    """A member's commit is a journal record alone (not fsynced: it may survive a cut), here
    of messages the cut took: recovery moves it back to the queue's new end like a commit in
    the snapshot, and the messages that take those offsets again are delivered."""
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 3600.0)   # (no snapshot by age on a slow machine)
    s = open_store(root)
    s.create_topic("T", 2)
    s.put([draft("T", f"m{i}", queue_id=0) for i in range(6)])
    s.put([draft("T", f"m{i}", queue_id=0) for i in range(6, 10)])   # (the batch the cut takes)
    ClusterOffsetStore(s.layout).commit("g", {("T", 0): 1, ("T", 1): 0})   # (the snapshot)
    before = (s.layout.consumer_offset_json).read_bytes()
    ClusterOffsetStore(s.layout).commit("g", {("T", 0): 10}, journal_only=True)
    assert s.layout.consumer_offset_json.read_bytes() == before, "the commit wrote the snapshot"
    cut_at = s.queue("T", 0).entry(6)
    assert cut_at is not None
    s.close()
    os.truncate(root / "commitlog" / F.segment_name(0), cut_at[0])
    restarted(root, synced=cut_at[0], derived=0)
    s = Store.open(root)
    assert s.max_offset("T", 0) == 6
    assert ClusterOffsetStore(s.layout).read("g", "T", 0) == 6
    s.put([draft("T", "new", queue_id=0)])
    assert [m.body for m in s.iter_queue("T", 0, ClusterOffsetStore(s.layout).read("g", "T", 0))] == [b"new"]
    s.close()


def test_a_topic_created_after_lost_data_keeps_its_next_messages(root: Path) -> None:
    """Issue C: ``createdOffset`` was the log's end including data the cut took away; new
    messages landed below it and recovery skipped them as older than their topic."""
    s = open_store(root)
    s.put([draft("A", "durable")])
    durable_end = s.commitlog.end()
    s.put([draft("A", "lost " * 50)])
    s.create_topic("T", 1)
    s.close()
    os.truncate(root / "commitlog" / F.segment_name(0), durable_end)
    restarted(root, synced=durable_end, derived=durable_end)
    s = Store.open(root)
    assert s.topic("T").created_offset <= s.commitlog.end()
    s.put([draft("T", "acknowledged")], sync=True)
    s.close()
    restarted(root, derived=0)   # a second cut: everything is re-dispatched from the start
    for q in (root / "consumequeue" / "T" / "0").iterdir():
        q.unlink()
    s = Store.open(root)
    assert [m.body for m in s.iter_queue("T", 0, 0)] == [b"acknowledged"]
    assert problems(s) == []
    s.close()


def test_a_segment_that_lost_its_tail_ends_the_log_after_a_restart(root: Path) -> None:
    """F2: segment 0 lost its last records and trailer, segment 1 survived (unsynced data
    is written back in any order). Nothing after the gap was durable: the log ends at it,
    and the queues stay dense instead of holding zero-filled holes."""
    s = open_store(root, commitlog_segment_size=F.MAX_MESSAGE_SIZE + 65536 + 4096)
    s.create_topic("T", 1)
    body = b"x" * 60_000
    res = []
    while len({r.commitlog_offset // s.commitlog.segment_size for r in res}) < 2:
        res += s.put([draft("T", body)])
    s.put([draft("T", body)])
    s.close()
    seg0 = [r for r in res if r.commitlog_offset < s.commitlog.segment_size]
    keep = seg0[:-2]
    os.truncate(root / "commitlog" / F.segment_name(0), seg0[-2].commitlog_offset)  # a record boundary
    restarted(root, synced=res[1].commitlog_offset, derived=0)
    s = Store.open(root)
    assert s.max_offset("T", 0) == len(keep)
    assert [m.queue_offset for m in s.iter_queue("T", 0, 0)] == list(range(len(keep)))
    assert s.commitlog.segments() == [0]
    s.put([draft("T", "next")])
    assert s.max_offset("T", 0) == len(keep) + 1
    assert problems(s) == []
    s.close()


def test_a_zeroed_queue_entry_is_read_from_the_log_never_waited_on(root: Path) -> None:
    """F3: a zero-filled entry below the queue's end read as the end of the queue, so a
    consumer waited there for ever and never saw the messages after it. Its record is
    intact: it is found in the log and delivered, not skipped."""
    s = open_store(root)
    s.create_topic("T", 1)
    s.put([draft("T", f"m{i}") for i in range(5)])
    s.close()
    with open(root / "consumequeue" / "T" / "0" / F.segment_name(0), "r+b") as fh:
        fh.seek(2 * F.CQ_ENTRY_SIZE)
        fh.write(bytes(F.CQ_ENTRY_SIZE))
    s = Store.open(root, recover=False)
    res = s.pull("T", 0, 2)
    assert res.next_offset == 3 and not res.damaged and [m.body for m in res.messages] == [b"m2"]
    bodies = s.pull_bodies("T", 0, 2)
    assert bodies.next_offset == 3 and not bodies.damaged and list(bodies.bodies) == [b"m2"]
    warnings: list[str] = []
    s.warn = warnings.append
    assert [m.body for m in s.iter_queue("T", 0, 0)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert not warnings
    assert any("entry 2" in p for p in problems(s))
    s.close()


def test_a_wrong_tag_code_is_reported_by_check_and_fixed_by_recover(root: Path) -> None:
    """F7: a tag consumer silently never got a message whose entry had a wrong tag code."""
    s = open_store(root)
    s.create_topic("T", 1)
    s.put([draft("T", "tagged", properties={"TAGS": "paid"})])
    s.close()
    with open(root / "consumequeue" / "T" / "0" / F.segment_name(0), "r+b") as fh:
        fh.seek(12)
        fh.write((java_hash("other") & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big"))
    s = Store.open(root)
    assert any("tag code" in p for p in problems(s))
    with s.write_lock():
        s.recover(full=True)
    assert problems(s) == []
    assert s.queue("T", 0).entry(0)[2] == java_hash("paid")
    s.close()


def test_sync_makes_the_whole_log_prefix_durable_and_records_it(root: Path) -> None:
    """``sync_log`` syncs from the last durable point, not only the batch it acknowledges,
    and the next checkpoint carries the new durable ends."""
    s = open_store(root)
    s.put([draft("T", "async")])
    s.put([draft("T", "sync")])
    start, end = s.last_write
    s.sync_log(start, end)
    s.flush_durable()
    s.put([draft("T", "later")])
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None and cp.synced_end >= end and cp.derived_end >= end
    s.close()
