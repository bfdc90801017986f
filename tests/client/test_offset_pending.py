"""Members' commits merged into one write of the group offset table (``offsetpending.py``):
members waiting for the table's lock are written by whoever holds it next, a member stops
waiting once the table's snapshot holds its offsets, and a publication left by a member that
died is merged once, within its reset epochs, and removed."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

from store.layout import Layout, lock_beside
from store.log import offsetjournal, offsetpending, offsettable
from store.log.offsets import ClusterOffsetStore
from tests.procs import MQ, finish, python, wait_for

# One member's commit from its own process: offsets published as client ``cid``.
COMMIT = """
    import sys
    from pathlib import Path
    from store.layout import Layout
    from store.log.offsets import ClusterOffsetStore
    root, group, topic, qid, offset, cid = sys.argv[1:]
    ClusterOffsetStore(Layout(Path(root))).commit(group, {(topic, int(qid)): int(offset)}, publish_as=cid)
"""


def journal_records(layout: Layout) -> int:
    return len(offsetjournal.Journal(layout.consumer_offset_log).read(None).records)


def pending_files(layout: Layout) -> list[str]:
    d = layout.consumer_offset_pending_dir
    return sorted(os.listdir(d)) if d.exists() else []


class TableLock:
    """The offset table's lock held by the test, as a member writing the table holds it."""

    def __init__(self, layout: Layout) -> None:
        self.fd = os.open(lock_beside(layout.consumer_offset_json), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        os.close(self.fd)


def test_members_waiting_for_the_table_are_written_by_one_write(layout: Layout) -> None:
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 1, ("T", 1): 1})
    before = journal_records(layout)
    lock = TableLock(layout)
    try:
        a = python(COMMIT, layout.root, "g", "T", 0, 500, "host@1", stderr=subprocess.PIPE)
        wait_for(lambda: len(pending_files(layout)) == 1)
        b = python(COMMIT, layout.root, "g", "T", 1, 700, "host@2", stderr=subprocess.PIPE)
        wait_for(lambda: len(pending_files(layout)) == 2)
    finally:
        lock.release()
    finish(a, b)
    assert store.read_group("g") == {("T", 0): 500, ("T", 1): 700}
    # the first to get the lock wrote both; the other found its offset there and wrote nothing
    assert journal_records(layout) == before + 1
    assert pending_files(layout) == []


def test_a_waiting_member_stops_waiting_once_the_snapshot_holds_its_offsets(layout: Layout) -> None:
    ClusterOffsetStore(layout).commit("g", {("T", 0): 1})
    lock = TableLock(layout)
    try:
        a = python(COMMIT, layout.root, "g", "T", 0, 500, "host@1", stderr=subprocess.PIPE)
        wait_for(lambda: len(pending_files(layout)) == 1)
        # another member writes the table (under the lock this test holds) with a's offset
        loaded = offsettable.load(layout)
        loaded.table.put("T", "g", 0, 500)
        offsettable.write(layout, loaded, set(loaded.table.lost), loaded.table.applied, sync=False)
        finish(a)   # done without the lock, which is still held
    finally:
        lock.release()
    assert pending_files(layout) == []


def test_a_dead_members_publication_is_merged_once_within_its_reset_epochs(layout: Layout) -> None:
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 10, ("U", 0): 10})
    # published by a member that died before its commit: T as loaded, U loaded before a reset
    finish(python("""
        import sys
        from pathlib import Path
        from store.layout import Layout
        from store.log import offsetpending
        offsetpending.publish(Layout(Path(sys.argv[1])), "g", "host@1", {("T", 0): 40, ("U", 0): 40}, {})
    """, layout.root, stderr=subprocess.PIPE))
    store.reset("g", "U", {0: 5})
    layout.consumer_offset_pending("garbage").write_bytes(b"")   # a power cut's empty file
    assert len(pending_files(layout)) == 2

    store.commit("h", {("T", 0): 3}, publish_as="host@2")   # another group's member writes the table

    assert store.read_group("g") == {("T", 0): 40, ("U", 0): 5}   # the reset not undone
    assert store.read_group("h") == {("T", 0): 3}
    assert pending_files(layout) == []


def test_a_dead_members_first_commit_is_not_merged_into_a_topic_made_anew(mq: MQ) -> None:
    """A member killed in its first commit (its start, published, never written) left a
    publication for a queue the table has no offset of; the topic is deleted (no offsets of
    the group to drop, so no reset epoch to move) and made anew. Another group's commit must
    not write that start into the new topic: the group would skip its first messages."""
    layout = Layout(mq.root)
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", [f"old{i}" for i in range(5)])

    def published() -> bool:
        return any(json.loads(p.read_bytes())["offsets"].get("T", {}).get("0") == 5
                   for p in layout.consumer_offset_pending_dir.glob("*.json"))
    lock = TableLock(layout)
    try:
        member = mq.start("consume", "T", "-g", "G", "--from", "last")
        wait_for(published, what="the member's start published")   # (waiting for the lock this test holds)
        member.kill9()
    finally:
        lock.release()
    assert mq.offsets("G") == {}
    mq.ok("topic", "delete", "T", "--yes")
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["new0", "new1"])
    mq.send_lines("U", ["u"])
    mq.drain("U", "H")   # another group's member writes the table

    assert [m["body"] for m in mq.drain("T", "G")] == ["new0", "new1"]
    assert pending_files(layout) == []


def test_a_publication_never_moves_an_offset_back(layout: Layout) -> None:
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 50})
    path = offsetpending.publish(layout, "g", "host@1", {("T", 0): 20}, {})
    assert path is not None and path.exists()
    store.commit("h", {("T", 0): 1}, publish_as="host@2")
    assert store.read("g", "T", 0) == 50
    assert pending_files(layout) == []


def test_orderly_and_plain_commits_publish_nothing(layout: Layout) -> None:
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 5}, increase_only=False, publish_as="host@1")
    store.commit("g", {("T", 1): 5})
    assert not Path(layout.consumer_offset_pending_dir).exists()
    assert store.read_group("g") == {("T", 0): 5, ("T", 1): 5}


def test_a_temporary_file_of_a_member_killed_before_its_rename_is_removed_by_the_next_write(
        layout: Layout) -> None:
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 1})
    dead = python("pass", stderr=subprocess.PIPE)
    finish(dead)   # (its pid is free now: no process has it until it is reused)
    d = layout.consumer_offset_pending_dir
    d.mkdir(parents=True, exist_ok=True)
    stale = d / f".{'ab' * 12}.json.{dead.pid}.tmp"
    live = d / f".{'cd' * 12}.json.{os.getpid()}.tmp"   # a member between its write and rename
    stale.write_bytes(b"{")
    live.write_bytes(b"{")

    store.commit("g", {("T", 0): 2}, publish_as="host@1")

    assert not stale.exists()
    assert live.exists()
