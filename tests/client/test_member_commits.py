"""A group member's offset commit is one record appended to the offsets journal
(``store/log/offsetview.py``): readers and other members see it at once, the snapshot
(``consumerOffset.json``) follows now and then, and neither a crash nor a damaged journal makes
a commit land where readers do not look."""
from __future__ import annotations

import fcntl
import json
import os
import zlib
from pathlib import Path

import pytest

from store.layout import Layout
from store.log import offsetjournal as oj
from store.log import offsetview
from store.log.offsets import ClusterOffsetStore
from tests.procs import MQ, wait_for


@pytest.fixture
def no_snapshot_by_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow machine must not see a snapshot written because a second went by."""
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 3600.0)


def records(layout: Layout) -> list[dict]:
    return oj.Journal(layout.consumer_offset_log).read(None).records


def snapshot_offsets(root: Path, group: str) -> dict[tuple[str, int], int]:
    """The group's offsets in ``consumerOffset.json`` alone (no journal applied)."""
    table = json.loads((root / "config" / "consumerOffset.json").read_text())["offsetTable"]
    return {(key.rpartition("@")[0], int(q)): o for key, queues in table.items()
            if key.rpartition("@")[2] == group for q, o in queues.items()}


def test_a_members_commit_is_one_record_seen_at_once_and_the_snapshot_stays(
        layout: Layout, no_snapshot_by_age: None) -> None:
    a, b = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    a.commit("g", {("T", 0): 0, ("T", 1): 0})   # the table's first write: its snapshot
    snap = layout.consumer_offset_json.read_bytes()
    ino = layout.consumer_offset_json.stat().st_ino
    n = len(records(layout))
    assert a.commit("g", {("T", 0): 5}, expected_epochs={}, journal_only=True) == set()
    assert b.commit("g", {("T", 1): 7}, expected_epochs={}, journal_only=True) == set()
    assert a.commit("g", {("T", 0): 9}, expected_epochs={}, journal_only=True) == set()
    assert records(layout)[n:] == [{"set": {"T@g": {"0": 5}}}, {"set": {"T@g": {"1": 7}}},
                                   {"set": {"T@g": {"0": 9}}}]
    assert layout.consumer_offset_json.read_bytes() == snap
    assert layout.consumer_offset_json.stat().st_ino == ino
    assert ClusterOffsetStore(layout).read_group("g") == {("T", 0): 9, ("T", 1): 7}
    # forward only, against what the other member appended
    assert b.commit("g", {("T", 0): 3}, expected_epochs={}, journal_only=True) == set()
    assert len(records(layout)) == n + 3   # (nothing changed: nothing appended)
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 9


def test_an_old_snapshot_is_rewritten_for_records_it_misses_not_for_a_fresh_commit(layout: Layout) -> None:
    """A commit that finds the snapshot old writes it only when records it does not hold were
    appended before by another process (theirs may be as old as the snapshot); its own record
    waits for the next commit or the member's settle: a one-shot consume writes one snapshot,
    not one at each commit."""
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 0})   # the table's first write: its snapshot
    old = layout.consumer_offset_json.stat().st_mtime - 60
    os.utime(layout.consumer_offset_json, (old, old))
    other = ClusterOffsetStore(layout)   # another process's first commit
    other.commit("g", {("T", 0): 4}, expected_epochs={}, journal_only=True)
    assert layout.consumer_offset_json.stat().st_mtime == old
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 0}
    fresh = ClusterOffsetStore(layout)   # the record before its commit is another's: its age unknown
    fresh.commit("g", {("T", 0): 5}, expected_epochs={}, journal_only=True)
    assert layout.consumer_offset_json.stat().st_mtime > old
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 5}


def test_a_process_own_records_past_an_old_snapshot_wait_until_the_first_is_old(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's commits past a snapshot older than SNAPSHOT_S (a one-shot consume's: its
    join's commit, then its batches') do not write it for the snapshot's age: their first
    record is what a power cut may take, and it is young. Once that record is SNAPSHOT_S old
    (0 here), the next commit writes it."""
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 0})   # the table's first write: its snapshot
    old = layout.consumer_offset_json.stat().st_mtime - 60
    os.utime(layout.consumer_offset_json, (old, old))
    fresh = ClusterOffsetStore(layout)
    for offset in (4, 5, 6):
        fresh.commit("g", {("T", 0): offset}, expected_epochs={}, journal_only=True)
        assert layout.consumer_offset_json.stat().st_mtime == old
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 0}
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 6
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 0.0)   # its first record is old now
    fresh.commit("g", {("T", 0): 7}, expected_epochs={}, journal_only=True)
    assert layout.consumer_offset_json.stat().st_mtime > old
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 7}
    # the snapshot written, the next record past it is again the first
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 1.0)
    os.utime(layout.consumer_offset_json, (old, old))
    fresh.commit("g", {("T", 0): 8}, expected_epochs={}, journal_only=True)
    fresh.commit("g", {("T", 0): 9}, expected_epochs={}, journal_only=True)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 7}
    fresh.settle(0.0)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 9}


def test_a_commit_computed_before_a_reset_is_skipped_by_every_member(
        layout: Layout, no_snapshot_by_age: None) -> None:
    a, b = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    a.commit("g", {("T", 0): 10})
    assert b.commit("g", {("T", 0): 20}, expected_epochs={}, journal_only=True) == set()
    assert ClusterOffsetStore(layout).reset("g", "T", {0: 2}) == 1
    assert a.commit("g", {("T", 0): 30}, expected_epochs={}, journal_only=True) == {"T"}
    assert b.commit("g", {("T", 0): 40}, expected_epochs={}, journal_only=True) == {"T"}
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 2
    assert a.commit("g", {("T", 0): 4}, expected_epochs={"T": 1}, journal_only=True) == set()
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 4


def test_members_follow_compactions_and_the_journal_stays_bounded(
        layout: Layout, no_snapshot_by_age: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oj, "COMPACT_BYTES", 2048)
    members = [ClusterOffsetStore(layout) for _ in range(3)]
    members[0].commit("g", {("T", q): 0 for q in range(3)})
    bases = set()
    for i in range(1, 301):
        q = i % 3
        members[q].commit("g", {("T", q): i}, expected_epochs={}, journal_only=True)
        assert layout.consumer_offset_log.stat().st_size < 2048 + 1024
        bases.add(oj.Journal(layout.consumer_offset_log).read(None).base)
    assert len(bases) > 3, "the journal was never compacted"
    assert ClusterOffsetStore(layout).read_group("g") == {("T", 0): 300, ("T", 1): 298, ("T", 2): 299}


def test_a_quick_commit_is_written_only_with_the_lock_free_and_no_snapshot_due(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """``try_commit`` (a member's commit in its loop's thread) appends its record when the
    table's lock is free and no snapshot (an fsync) is due; otherwise it writes nothing and
    says so (None): the commit is then made by one that may wait."""
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 3600.0)
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 0})   # the table's first write: its snapshot
    n = len(records(layout))
    fd = os.open(member.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)   # another process committing
        assert member.try_commit("g", {("T", 0): 3}, True, {}) is None
    finally:
        os.close(fd)
    assert len(records(layout)) == n
    assert member.try_commit("g", {("T", 0): 4}, True, {}) == set()
    assert records(layout)[n:] == [{"set": {"T@g": {"0": 4}}}]
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 0}
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 0.5)
    old = layout.consumer_offset_json.stat().st_mtime - 60   # a record older than SNAPSHOT_S waits
    os.utime(layout.consumer_offset_json, (old, old))
    assert member.try_commit("g", {("T", 0): 5}, True, {}) is None
    assert len(records(layout)) == n + 1 and snapshot_offsets(layout.root, "g") == {("T", 0): 0}
    assert member.commit("g", {("T", 0): 5}, expected_epochs={}, journal_only=True) == set()
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 5}


def test_a_snapshot_never_names_a_journal_end_past_what_was_synced(
        layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every snapshot that names a ``journalEnd`` comes after an fdatasync of the journal
    that far: after a power cut the journal on disk reaches it."""
    synced: list[int] = []
    sync = oj.Journal.sync

    def recording(self: oj.Journal) -> None:
        sync(self)
        synced.append(self.path.stat().st_size - oj.HEADER.size)

    monkeypatch.setattr(oj.Journal, "sync", recording)
    monkeypatch.setattr(offsetview, "SNAPSHOT_S", 0.0)   # every commit writes the snapshot
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 0})
    for i in range(1, 6):
        member.commit("g", {("T", 0): i}, expected_epochs={}, journal_only=True)
        end = json.loads(layout.consumer_offset_json.read_text())["journalEnd"]
        assert synced and synced[-1] >= end, (synced, end)
    assert len(synced) >= 5


def test_a_journal_shorter_than_the_snapshot_names_is_started_again_not_appended_to(
        layout: Layout, no_snapshot_by_age: None) -> None:
    """Damage (the journal cut below the snapshot's ``journalEnd``): a record appended there
    would lie below where readers start, and the commit would be lost to them."""
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 1})
    for i in range(2, 6):
        member.commit("g", {("T", 0): i}, expected_epochs={}, journal_only=True)
    ClusterOffsetStore(layout).settle(0.0)   # (nothing of its own: a look)
    member.settle(0.0)                       # the snapshot now names the journal's end
    end = json.loads(layout.consumer_offset_json.read_text())["journalEnd"]
    assert end == layout.consumer_offset_log.stat().st_size - oj.HEADER.size
    os.truncate(layout.consumer_offset_log, oj.HEADER.size + end - 20)
    fresh = ClusterOffsetStore(layout)
    assert fresh.commit("g", {("T", 0): 6}, expected_epochs={}, journal_only=True) == set()
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 6
    assert oj.Journal(layout.consumer_offset_log).read(None).base >= end
    # and a member whose view read the journal before the damage notices it too
    assert fresh.commit("g", {("T", 0): 7}, expected_epochs={}, journal_only=True) == set()
    fresh.settle(0.0)
    os.truncate(layout.consumer_offset_log, oj.HEADER.size)
    assert fresh.commit("g", {("T", 0): 8}, expected_epochs={}, journal_only=True) == set()
    assert ClusterOffsetStore(layout).read("g", "T", 0) == 8


def test_a_member_that_stops_leaves_its_last_commit_in_the_snapshot(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", [f"m{i}" for i in range(30)])
    assert len(mq.ok("consume", "T", "-g", "G", "--from", "first", "-e").out.split()) == 30
    assert snapshot_offsets(mq.root, "G") == mq.offsets("G", "T")
    assert sum(snapshot_offsets(mq.root, "G").values()) == 30


@pytest.mark.slow
def test_an_idle_members_commits_reach_the_snapshot(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    proc = mq.start("consume", "T", "-g", "G", "--from", "first")
    mq.send_lines("T", ["a", "b", "c"])
    assert wait_for(lambda: proc.lines() == [b"a", b"b", b"c"], timeout=60), proc.stderr()
    assert wait_for(lambda: mq.offsets("G", "T") == {("T", 0): 3}, timeout=60)   # seen at once
    assert wait_for(lambda: snapshot_offsets(mq.root, "G") == {("T", 0): 3}, timeout=60), \
        "the idle member's commit never reached consumerOffset.json"
    assert proc.stop() == 0


def test_a_member_killed_after_its_commit_hands_over_exactly_there(mq: MQ) -> None:
    """kill -9 right after a commit returned (the record in the page cache only): readers
    and the next member see it."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    first = mq.run("consume", "T", "-g", "G", "--from", "first", "--count", "4",
                   failpoints="offsets-after-persist")
    assert first.returncode in (-9, 137), first
    printed = first.out.split()
    shown = {r["queueId"]: r["offset"] for r in mq.ok("offsets", "show", "-g", "G", "--json").json_lines()}
    assert shown == {0: len(printed)}
    rest = mq.ok("consume", "T", "-g", "G", "-e").out.split()
    assert printed + rest == [f"m{i}" for i in range(10)]


@pytest.mark.slow
def test_a_member_idle_after_its_last_commits_still_wakes_to_settle_them(mq: MQ, no_snapshot_by_age: None) -> None:
    """A member with nothing to do waits for a change of the store. While commits of its own
    are in no snapshot (its commit wrote none: the last is younger than a second), that wait
    must end at its next persist look, which writes them in (not at its queue locks' renewal,
    40 s on: a power cut meanwhile would deliver them again). Driven as a driver
    drives the loop (``ConsumerRuntime.turns``), every wait told it timed out: no change, not even the
    member's own snapshot, wakes it for a look."""
    import time

    import store
    from store.client.sinks import ThreadPoolSink
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["a", "b", "c"])
    with store.Consumer("T", "G", mq.root, start_from="first") as consumer:
        rt = consumer.runtime
        rt.set_sink(ThreadPoolSink(lambda batch, topic: (True, ""), 1))
        turns = rt.turns()
        try:
            due = next(turns)
            while snapshot_offsets(mq.root, "G") != {("T", 0): 3}:
                # committed (in the journal) and the commit taken back by the loop before this
                # turn, and still in no snapshot after it: the wait the turn asks for must end by
                # the next persist look (a wait asked for while the commit was still out is
                # ended by its end, a wake-up)
                committed = mq.offsets("G", "T") == {("T", 0): 3} and not rt.keeper.committing
                time.sleep(0 if due is None else min(due, 0.05))   # (a batch out: its end would wake the loop)
                due = turns.send(False)
                if committed and due is not None and snapshot_offsets(mq.root, "G") != {("T", 0): 3}:
                    assert due <= rt.o.persist_interval_s + 1, \
                        f"the member would sleep {due:.0f} s with its last commits in no snapshot"
        finally:
            turns.close()


@pytest.mark.parametrize("damage", ["clean", "cut-record", "zeros-at-the-end", "zeros-then-records",
                                    "bit-rot-then-records", "bit-rot-at-the-end"])
def test_only_a_damaged_record_with_valid_ones_after_it_is_damage_in_the_middle(
        layout: Layout, no_snapshot_by_age: None, damage: str) -> None:
    """``store check`` reports a journal damaged in the middle (``Journal.damage``); what a crash
    or a power cut leaves (a record cut at the end, zeros: a later block written back before an
    earlier one) ends the journal as a torn tail, cut off by the next append, and is not reported."""
    member = ClusterOffsetStore(layout)
    member.commit("g", {("T", 0): 1})
    for i in range(2, 100):
        member.commit("g", {("T", 0): i}, expected_epochs={}, journal_only=True)
    path = layout.consumer_offset_log
    data = bytearray(path.read_bytes())
    assert len(data) > 3 * 512
    third = data.index(b'{"set":{"T@g":{"0":3}}}') - oj.FRAME.size   # a record with others after it
    if damage == "cut-record":
        data = data[:-5]
    elif damage == "zeros-at-the-end":
        data += bytes(100)
    elif damage == "zeros-then-records":   # a sector lost, the records of the next one kept
        data[512:1024] = bytes(512)
    elif damage == "bit-rot-then-records":
        data[third + oj.FRAME.size + 19] ^= 0x02
    elif damage == "bit-rot-at-the-end":
        data[-3] ^= 0x02
    path.write_bytes(bytes(data))
    found = oj.Journal(path).damage()
    if damage == "bit-rot-then-records":
        assert found == (third, len(data) - oj.HEADER.size)   # (the header's base is 0)
        assert ClusterOffsetStore(layout).read("g", "T", 0) == 2   # readers stop there: nothing skipped
    else:
        assert found is None
    # Below where the journal was synced (a snapshot's journalEnd) no power cut zeroes a sector
    synced = oj.Journal(path).damage(synced=len(data) - oj.HEADER.size)
    if damage == "zeros-then-records":   # (damage from the record the zeros begin in)
        assert synced is not None and synced[0] <= 512 and synced[1] == len(data) - oj.HEADER.size, synced
    else:
        assert synced == found


class _CountingJson:
    """``json`` for the offsets journal's module, counting the payloads decoded."""

    def __init__(self) -> None:
        self.decoded = 0

    def loads(self, text: bytes) -> object:
        self.decoded += 1
        return json.loads(text)

    def dumps(self, obj: object, **kw: object) -> str:
        return json.dumps(obj, **kw)  # type: ignore[arg-type]


def test_a_members_commit_decodes_none_of_the_records_other_members_append_for_their_queues(
        layout: Layout, no_snapshot_by_age: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 members of a group, a queue each: a commit reads the others' records appended since
    its last, but decodes none of them (their cost grew with the group); the snapshot a member
    writes applies them in the journal's order."""
    members = [ClusterOffsetStore(layout) for _ in range(16)]
    members[0].commit("g", {("T", q): 0 for q in range(16)})
    for q, m in enumerate(members):   # (each member's view loaded)
        m.commit("g", {("T", q): 1}, expected_epochs={}, journal_only=True)
    counting = _CountingJson()
    monkeypatch.setattr(oj, "json", counting)
    for i in range(2, 6):
        for q, m in enumerate(members):
            assert m.commit("g", {("T", q): 100 * q + i}, expected_epochs={}, journal_only=True) == set()
    assert counting.decoded == 0
    want = {("T", q): 100 * q + 5 for q in range(16)}
    assert ClusterOffsetStore(layout).read_group("g") == want
    members[3].settle(0.0)
    assert snapshot_offsets(layout.root, "g") == want


def test_a_commit_decodes_what_other_members_set_of_its_queues_and_stays_forward_only(
        layout: Layout, no_snapshot_by_age: None) -> None:
    """A record of another member that sets one of the queues a commit names is decoded
    before it (forward only against it), and the records waiting keep their order."""
    a, b, c = ClusterOffsetStore(layout), ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    a.commit("g", {("T", 0): 0, ("T", 1): 0, ("T", 2): 0})
    for i, m in enumerate((a, b, c)):   # (each member's view loaded)
        m.commit("g", {("T", 2): i + 1}, expected_epochs={}, journal_only=True)
    c.commit("g", {("T", 1): 9}, expected_epochs={}, journal_only=True)
    b.commit("g", {("T", 1): 6}, increase_only=False, expected_epochs={}, journal_only=True)   # (orderly)
    # a takes queue 1 over: forward only against the last value b and c set of it
    a.commit("g", {("T", 1): 8}, expected_epochs={}, journal_only=True)
    assert ClusterOffsetStore(layout).read_group("g") == {("T", 0): 0, ("T", 1): 8, ("T", 2): 3}
    a.commit("g", {("T", 0): 4}, expected_epochs={}, journal_only=True)
    c.commit("g", {("T", 2): 9}, expected_epochs={}, journal_only=True)
    b.commit("g", {("T", 2): 7}, increase_only=False, expected_epochs={}, journal_only=True)
    a.settle(0.0)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 4, ("T", 1): 8, ("T", 2): 7}


def test_a_reset_between_waiting_records_is_applied_after_them(layout: Layout, no_snapshot_by_age: None) -> None:
    a, b = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    a.commit("g", {("T", 0): 0, ("T", 1): 0})
    a.commit("g", {("T", 0): 1}, expected_epochs={}, journal_only=True)
    b.commit("g", {("T", 1): 50}, expected_epochs={}, journal_only=True)
    assert ClusterOffsetStore(layout).reset("g", "T", {1: 2}) == 1
    b.commit("g", {("T", 1): 3}, expected_epochs={"T": 1}, journal_only=True)
    assert a.commit("g", {("T", 0): 9}, expected_epochs={}, journal_only=True) == {"T"}
    assert a.commit("g", {("T", 0): 9}, expected_epochs={"T": 1}, journal_only=True) == set()
    a.settle(0.0)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 9, ("T", 1): 3}
    # a record that is not a commit's, with no snapshot after it (none to take): applied in order
    b.commit("g", {("T", 1): 70}, expected_epochs={"T": 1}, journal_only=True)
    journal = oj.Journal(layout.consumer_offset_log)
    journal.append({"epoch": {"T@g": 2}, "set": {"T@g": {"1": 5}}}, journal.read(None).end)
    assert a.commit("g", {("T", 0): 10}, expected_epochs={"T": 1}, journal_only=True) == {"T"}
    assert a.commit("g", {("T", 0): 10}, expected_epochs={"T": 2}, journal_only=True) == set()
    a.settle(0.0)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 10, ("T", 1): 5}


def test_a_member_takes_the_snapshot_another_wrote_instead_of_decoding_what_it_holds(
        layout: Layout, no_snapshot_by_age: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot another member wrote holds the records waiting in a member's view: its
    next snapshot decodes only what was appended after it."""
    members = [ClusterOffsetStore(layout) for _ in range(4)]
    members[0].commit("g", {("T", q): 0 for q in range(4)})
    for q, m in enumerate(members):
        m.commit("g", {("T", q): 1}, expected_epochs={}, journal_only=True)
    for q, m in enumerate(members):
        m.commit("g", {("T", q): 2}, expected_epochs={}, journal_only=True)
    members[1].settle(0.0)   # holds every record so far
    for q in (2, 3):
        members[q].commit("g", {("T", q): 3}, expected_epochs={}, journal_only=True)
    counting = _CountingJson()
    monkeypatch.setattr(oj, "json", counting)
    members[0].commit("g", {("T", 0): 3}, expected_epochs={}, journal_only=True)
    members[0].settle(0.0)
    assert counting.decoded == 2   # (the two records after members[1]'s snapshot)
    assert snapshot_offsets(layout.root, "g") == {("T", 0): 3, ("T", 1): 2, ("T", 2): 3, ("T", 3): 3}


# (a number of more digits than Python's int() reads, 4300 by default, is no JSON to json.loads)
@pytest.mark.parametrize("body", [b'{"set":{"T@g":{"1":00}}}', b'{"set":{"T@g":{"1":%s}}}' % (b"9" * 5000)],
                         ids=["leading-zero", "5000-digits"])
def test_a_record_in_a_commits_form_but_no_json_ends_the_journal_for_a_member_as_for_readers(
        layout: Layout, no_snapshot_by_age: None, body: bytes) -> None:
    """Records in a commit's form wait undecoded in a member's view: one whose CRC checks but
    that is no JSON object must not; the member's commit lands where readers stop, cutting it."""
    a, b = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    a.commit("g", {("T", 0): 0, ("T", 1): 0})
    a.commit("g", {("T", 0): 1}, expected_epochs={}, journal_only=True)
    b.commit("g", {("T", 1): 1}, expected_epochs={}, journal_only=True)
    with open(layout.consumer_offset_log, "ab") as fh:
        fh.write(oj.FRAME.pack(len(body), zlib.crc32(body)) + body)
    assert a.commit("g", {("T", 0): 5}, expected_epochs={}, journal_only=True) == set()
    assert ClusterOffsetStore(layout).read_group("g") == {("T", 0): 5, ("T", 1): 1}
    assert body not in layout.consumer_offset_log.read_bytes()


def test_a_running_member_commits_past_a_record_readers_cannot_read_where_they_see_it(mq: MQ) -> None:
    """A record appended by hand while a member runs, in a commit's form (CRC good) but with a
    number json cannot read: readers stop at it, so the member's next commits (of queues it
    does not name) must land there too, and the member must not fail on it when it stops."""
    import fcntl

    from store.layout import lock_beside
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", ["a0", "b0"], "-q", "0")
    mq.send_lines("T", ["a1", "b1"], "-q", "1")
    proc = mq.start("consume", "T", "-g", "G", "--from", "first")
    assert wait_for(lambda: mq.offsets("G", "T") == {("T", 0): 2, ("T", 1): 2}, timeout=60), proc.stderr()
    log = mq.root / "config" / "consumerOffset.log"
    body = b'{"set":{"T@G":{"1":%s}}}' % (b"9" * 5000)
    with open(lock_beside(mq.root / "config" / "consumerOffset.json"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # (no commit or snapshot meanwhile)
        with open(log, "ab") as fh:
            fh.write(oj.FRAME.pack(len(body), zlib.crc32(body)) + body)
    mq.send_lines("T", ["c0", "d0", "e0"], "-q", "0")
    assert wait_for(lambda: len(proc.lines()) == 7, timeout=60), proc.stderr()
    assert proc.stop() == 0, proc.stderr()
    assert mq.offsets("G", "T") == {("T", 0): 5, ("T", 1): 2}
    assert body not in log.read_bytes()
