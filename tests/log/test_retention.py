"""Retention (store/log/retention.py, ``mqctl store clean``): what may be deleted, what must stay,
and that a crash at any step of a clean leaves a store that opens and reads correctly."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqctl.app import app
from store.layout import Layout
from store.log import logstart
from store.log.broadcastoffsets import BroadcastOffsetStore
from store.log.messagestore import Store
from store.log.offsets import ClusterOffsetStore
from store.log.record import Draft
from store.log.retention import DEFAULT_RETENTION_MS, clean, plan_clean
from store.log.settings import StoreSettings

SEG = 8192
DAY = 86_400_000


def settings(**kw: int) -> StoreSettings:
    return StoreSettings(max_message_size=1024, commitlog_segment_size=SEG,
                         cq_segment_entries=kw.pop("cq_segment_entries", 300_000), **kw)


def open_store(root: Path, **kw: int) -> Store:
    return Store.open(root, create=True, settings=settings(**kw), warn=lambda _m: None)


@pytest.fixture
def store_settings() -> StoreSettings:
    """``store`` (tests/conftest.py) with small segments, so retention has files to delete."""
    return settings(cq_segment_entries=20)


def fill(store: Store, topic: str = "T", n: int = 200, queue: int = 0, size: int = 180) -> None:
    store.create_topic(topic, 2) if not store.has_topic(topic) else None
    for i in range(0, n, 10):
        store.put([Draft(topic, (f"{topic}-{i + j:05d}-" + "x" * size).encode(), queue_id=queue)
                   for j in range(min(10, n - i))])


def age_all(store: Store, ms: int = 4 * DAY) -> None:
    """Make every file of the store look ``ms`` old."""
    t = time.time() - ms / 1000
    for dirpath, _dirs, names in os.walk(store.root):
        for n in names:
            os.utime(os.path.join(dirpath, n), (t, t))


def segments(store: Store) -> list[int]:
    return store.commitlog.segments()


def commit(store: Store, group: str, topic: str, offsets: dict[int, int]) -> None:
    ClusterOffsetStore(store.layout).reset(group, topic, offsets)


# -- what goes and what stays ------------------------------------------------------------------

def test_a_fresh_or_single_segment_store_has_nothing_to_clean(store: Store) -> None:
    assert plan_clean(store, 0).files == []
    store.create_topic("T", 1)
    store.put([Draft("T", b"x", queue_id=0)])
    age_all(store)
    assert clean(store, 0).files == [], "the last (active) segment is never deleted"
    assert len(segments(store)) == 1


def test_only_segments_older_than_the_retention_go(store: Store) -> None:
    fill(store)
    segs = segments(store)
    assert len(segs) >= 5
    assert plan_clean(store).commitlog == [], "fresh segments stay under the default 72 h"
    # Age the first two segments only: the prefix stops at the first young one.
    t = time.time() - 4 * DAY / 1000
    for base in segs[:2]:
        os.utime(store.commitlog.segment_path(base), (t, t))
    os.utime(store.commitlog.segment_path(segs[3]), (t, t))
    plan = clean(store)
    assert [a.path.name for a in plan.commitlog] == [f"{b:020d}" for b in segs[:2]]
    assert segments(store) == segs[2:]
    assert store.commitlog.min_offset() == segs[2]


def test_no_reader_means_everything_but_the_last_segment_goes(store: Store) -> None:
    fill(store)
    segs = segments(store)
    age_all(store)
    plan = clean(store, DEFAULT_RETENTION_MS)
    assert len(plan.commitlog) == len(segs) - 1
    assert segments(store) == segs[-1:]
    assert store.min_offset("T", 0) <= store.max_offset("T", 0)
    assert store.check().problems == []


def test_a_lagging_group_holds_segments_back_unless_forced(store: Store) -> None:
    fill(store)
    segs = segments(store)
    commit(store, "G", "T", {0: 100, 1: 0})
    phys = store.queue("T", 0).entry(100)[0]
    age_all(store)
    plan = plan_clean(store, DEFAULT_RETENTION_MS)
    assert all(int(a.path.name) + SEG <= phys for a in plan.commitlog)
    assert plan.new_min_offset == store.commitlog.segment_of(phys)
    assert plan.held and plan.held[0].who == "group G" and plan.held[0].queue_offset == 100
    assert "`mqctl offsets reset -g G --topic T ...`" in plan.held[0].remedy, plan.held[0].remedy
    assert plan.held_files == len(segs) - 1 - len(plan.commitlog)
    clean(store, DEFAULT_RETENTION_MS)
    assert store.min_offset("T", 0) <= 100, "the group can still read from its offset"
    assert [m.queue_offset for m in store.pull("T", 0, 100, 1).messages] == [100]
    # --force: older than the retention goes even though G has not read it.
    plan = clean(store, DEFAULT_RETENTION_MS, force=True)
    assert plan.overridden and plan.overridden[0].who == "group G"
    assert segments(store) == segs[-1:]
    assert store.min_offset("T", 0) > 100


def test_a_group_that_consumed_everything_holds_nothing(store: Store) -> None:
    fill(store)
    commit(store, "G", "T", {0: 200, 1: 0})
    age_all(store)
    plan = clean(store)
    assert plan.held == [] and plan.overridden == []
    assert len(segments(store)) == 1


def test_a_queue_without_offset_counts_from_the_first_message(store: Store) -> None:
    fill(store, queue=0)
    fill(store, queue=1, n=20)
    # G committed queue 0 to the end, but never queue 1, whose messages are in the first segment.
    ClusterOffsetStore(store.layout).commit("G", {("T", 0): 200})
    age_all(store)
    plan = plan_clean(store)
    first_q1 = store.queue("T", 1).entry(0)[0]
    assert plan.new_min_offset <= first_q1
    assert any(n.topic == "T" and n.queue_id == 1 for n in plan.held)


def test_an_offset_below_the_log_start_does_not_hold_anything(store: Store) -> None:
    fill(store)
    age_all(store)
    clean(store, force=True)
    commit(store, "G", "T", {0: 3, 1: 0})  # already removed: reading resumes at the min offset
    fill(store, n=100)
    age_all(store)
    plan = plan_clean(store)
    lo = store.min_offset("T", 0)
    assert lo > 3
    assert plan.held and plan.held[0].queue_offset == lo


def test_broadcast_clients_hold_segments(store: Store, root: Path) -> None:
    fill(store)
    b = BroadcastOffsetStore(store.layout, "host@1", "B")
    b.update("T", 0, 50)
    b.persist({("T", 0)})
    age_all(store)
    plan = plan_clean(store)
    assert plan.held and plan.held[0].who == "broadcast client host@1 of group B"
    assert plan.new_min_offset <= store.queue("T", 0).entry(50)[0]
    store.close()
    code, _out, err = run(root, "store", "clean", "--dry-run")
    assert code == 0 and "mqctl offsets delete -g B --client-id host@1" in err, err


def test_pending_delayed_messages_hold_segments(store: Store, root: Path) -> None:
    from store.log.schedule import delay_draft, deliver_due
    store.create_topic("T", 2)
    store.put([delay_draft(Draft("T", b"later", queue_id=0), (0, 3_600_000), store)])
    fill(store)
    age_all(store)
    plan = plan_clean(store)
    assert plan.commitlog == [] and plan.held[0].who == "delay scheduler"
    # The hint says what frees it: the messages' own time, not a reset of a group it is not.
    code, _out, err = run(root, "store", "clean", "--dry-run")
    assert code == 0 and "delay scheduler" in err and "when they are due" in err, err
    assert "reset" not in err, err
    # Once delivered (the scheduler's offset moves past it) the segment may go.
    assert deliver_due(store, now_ms=int(time.time() * 1000) + 7_200_000) == 1
    age_all(store)
    assert plan_clean(store).commitlog


def test_unresolved_transactions_hold_segments(store: Store) -> None:
    from store.tx.transaction import end_transaction, send_half
    store.create_topic("T", 2)
    half = send_half(store, "T", b"pending", {})
    fill(store)
    age_all(store)
    plan = plan_clean(store)
    assert plan.commitlog == []
    assert plan.held[0].who == f"transaction {half.tx_id}"
    end_transaction(store, half.tx_id, commit=True)
    age_all(store)
    plan = clean(store)
    assert plan.commitlog, "a resolved transaction holds nothing back"
    # The committed message is still readable if it lies in a kept segment; either way the
    # store stays consistent.
    assert store.check().problems == []


def test_parked_transactions_hold_segments_until_resolved(store: Store, root: Path) -> None:
    """A transaction parked after its last check (TRANS_CHECK_MAX_TIME_TOPIC) is unresolved and
    ``tx commit`` still resolves it: its half copy and parked copy stay, as a pending one's do."""
    from store.tx.check import check_pass, parked
    from store.tx.transaction import COMMITTED, end_transaction, load, send_half
    fill(store, "U")   # segments before the transaction: they may go
    half = send_half(store, "T", b"parked", {})
    for _ in range(2):   # checked once (UNKNOWN), then parked
        check_pass(store, lambda _m, _n: "UNKNOWN", timeout_ms=0, max_checks=1)
    assert [p.tx_id for p in parked(store)] == [half.tx_id]
    fill(store)
    age_all(store)
    plan = plan_clean(store)
    assert plan.commitlog and plan.new_min_offset <= parked(store)[0].half.commitlog_offset
    assert plan.held_files > 0 and [n.who for n in plan.held] == [f"parked transaction {half.tx_id}"]
    store.close()
    code, _out, err = run(root, "store", "clean", "--older-than", "0")
    assert code == 0 and f"parked transaction {half.tx_id}" in err and "tx commit" in err, err
    reopened = open_store(root, cq_segment_entries=20)
    try:
        reopened.recover(full=True)   # derived files rebuilt from what the log kept: still parked
        assert [p.tx_id for p in parked(reopened)] == [half.tx_id]
        end_transaction(reopened, half.tx_id, commit=True)
        assert load(reopened, half.tx_id).state == COMMITTED
        age_all(reopened)
        assert clean(reopened).commitlog, "a resolved parked transaction holds nothing back"
        assert parked(reopened) == []
    finally:
        reopened.close()


# -- derived files -----------------------------------------------------------------------------

def test_consume_queue_and_index_files_that_only_point_below_the_log_go(root: Path) -> None:
    from store.log.index import KeyIndex
    s = open_store(root, cq_segment_entries=20)
    s.engine.index = KeyIndex(s.layout.index_dir, slots=64, entries=40)  # small index files
    try:
        fill(s)
        q = s.queue("T", 0)
        cq_before = q.segments()
        idx_before = s.index.files()
        assert len(cq_before) == 10 and len(idx_before) > 3
        age_all(s)
        cq_last = {b: q.read_entries(b // 20 + 19, 1)[0][0] for b in cq_before[:-1]}
        idx_end = {b: s.index.header(b)[3] for b in idx_before}
        plan = clean(s)
        new_min = s.commitlog.min_offset()
        assert {a.kind for a in plan.files} == {"commitlog", "consumequeue", "index"}
        cq_after = q.segments()
        assert cq_after[-1] == cq_before[-1], "a queue's last segment stays"
        assert 0 < len(cq_after) < len(cq_before)
        gone = [b for b in cq_before if b not in cq_after]
        assert gone == cq_before[:len(gone)], "oldest first"
        assert all(cq_last[b] < new_min for b in gone)
        if cq_after[0] in cq_last:
            assert cq_last[cq_after[0]] >= new_min, "a segment that still points into the log stays"
        idx_after = s.index.files()
        assert idx_after[-1] == idx_before[-1] and len(idx_after) < len(idx_before)
        assert all(idx_end[b] < new_min for b in idx_before if b not in idx_after)
        assert all(idx_end[b] >= new_min for b in idx_after[:-1])
        # Readers are unaffected: min offset, pull, key lookups of what is left.
        lo = s.min_offset("T", 0)
        assert [m.queue_offset for m in s.pull("T", 0, lo, 1).messages] == [lo]
        assert s.max_offset("T", 0) == 200
    finally:
        s.close()


# -- crash safety --------------------------------------------------------------------------------

def test_a_crash_at_any_step_leaves_an_openable_consistent_store(root: Path, tmp_path: Path) -> None:
    s = open_store(root, cq_segment_entries=20)
    fill(s)
    fill(s, queue=1, n=60)
    commit(s, "G", "T", {0: 150, 1: 60})
    age_all(s)
    plan = plan_clean(s)
    s.close()
    files = plan.files
    assert len(files) >= 3
    for k in range(len(files) + 1):
        copy = tmp_path / f"crash{k}"
        shutil.copytree(root, copy)
        if k:   # (clean records where the log will begin before it deletes a segment)
            logstart.record(Layout(copy), max(int(a.path.name) for a in plan.commitlog) + SEG)
        for action in files[:k]:  # the deletion order of clean(): oldest first, log first
            os.unlink(copy / action.path.relative_to(root))
        c = Store.open(copy, warn=lambda _m: None)
        try:
            assert c.check().problems == [], f"after {k} deletions"
            assert c.max_offset("T", 0) == 200 and c.max_offset("T", 1) == 60
            lo = c.min_offset("T", 0)
            got = [m.queue_offset for m in c.iter_queue("T", 0, 0)]
            assert got == list(range(lo, 200)), f"after {k} deletions"
            assert lo <= 150, "what G has not read is still there"
            # The next clean finishes the job.
            rest = clean(c)
            assert len(rest.files) == len(files) - k
            assert c.check().problems == []
        finally:
            c.close()


# -- the command ---------------------------------------------------------------------------------

def run(root: Path, *args: str):  # type: ignore[no-untyped-def]
    from store.errors import StoreError
    r = CliRunner().invoke(app, ["--store", str(root), *args], env={"NO_COLOR": "1"})
    code = r.exception.exit_code if isinstance(r.exception, StoreError) else r.exit_code
    return code, r.stdout, r.stderr


def test_store_clean_command(root: Path) -> None:
    s = open_store(root)
    fill(s)
    commit(s, "G", "T", {0: 120, 1: 0})
    age_all(s)
    n_before = len(segments(s))
    s.close()
    code, out, err = run(root, "store", "clean", "--dry-run", "--json")
    assert code == 0
    rows = [json.loads(x) for x in out.splitlines()]
    summary = rows[-1]
    assert summary["status"] == "DRY_RUN" and summary["heldBack"][0]["who"] == "group G"
    assert all(r["action"] == "would-delete" for r in rows[:-1]) and len(rows) - 1 == summary["commitlogSegments"] + summary["consumeQueueFiles"] + summary["indexFiles"]
    assert "still needs" in err and "--force" in err
    s = open_store(root)
    assert len(segments(s)) == n_before
    s.close()
    code, out, err = run(root, "store", "stats", "--json")
    stats = {r["part"]: r for r in map(json.loads, out.splitlines())}
    assert stats["reclaimable"]["bytes"] == summary["bytes"] and stats["held-back"]["files"] > 0
    code, out, err = run(root, "store", "clean")
    assert code == 0 and "deleted" in err
    assert out.splitlines()[0].split()[:2] == ["KIND", "FILE"]
    code, out, err = run(root, "store", "clean", "--older-than", "0", "--force", "--json")
    assert code == 0 and json.loads(out.splitlines()[-1])["overridden"]
    s = open_store(root)
    assert len(segments(s)) == 1
    s.close()


def test_store_clean_bad_duration(root: Path) -> None:
    open_store(root).close()
    assert run(root, "store", "clean", "--older-than", "soon")[0] == 2


def test_the_record_of_the_logs_start_never_moves_back_and_a_damaged_one_is_named(store: Store) -> None:
    lay = store.layout
    assert logstart.read(lay) == 0, "a new store's log begins at 0"
    logstart.record(lay, 3 * SEG)
    logstart.record(lay, SEG)
    assert logstart.read(lay) == 3 * SEG
    lay.commitlog_start_json.write_text('{"start": 1}\n')   # (no crc: edited)
    assert [p.file for p in store.check().problems] == [str(lay.commitlog_start_json)]
    store.recover(full=True)
    assert logstart.read(lay) == 0 and store.check().problems == []
