"""Offset commits in the commit log (store/log/offsetcommits.py): an exactly-once stage's
batch is whole or gone after a crash, the offset table reads every commit, keeps only durable
ones, honours reset epochs, and comes back from the log when its files are lost."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.atomicbatch import open_batch
from store.log.offsetcommits import OffsetCommit
from store.log.offsets import ClusterOffsetStore
from store.log.schedule import delay_draft, deliver_due
from tests.log.storetestutil import all_messages, draft, open_store


def _source(root: Path, n: int = 6):
    s = open_store(root)
    s.put([draft("A", f"a{i}", queue_id=0) for i in range(n)])
    return s


def _stage_batch(s, outputs: list[str], offset: int, epoch: int = 0):
    return s.put([draft("B", o) for o in outputs],
                 commit=OffsetCommit("g", {("A", 0): offset}, {"A": epoch}))


def _killed_inside_last_batch(root: Path, batch_start: int, keep_bytes: int) -> None:
    """What a writer killed inside its write leaves: the log holding the batch's first
    ``keep_bytes`` bytes, and a checkpoint that still ends where the batch began."""
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    ckpt.write(root / "checkpoint", replace(cp, written_end=batch_start))
    seg = sorted((root / "commitlog").iterdir())[-1]
    os.truncate(seg, batch_start - int(seg.name) + keep_bytes)


def test_records_of_a_batch_carry_the_atomic_flags(tmp_path: Path) -> None:
    s = _source(tmp_path)
    res = _stage_batch(s, ["x", "y"], 2)
    flags = [s.get(r.commitlog_offset).sysflag for r in res]
    assert flags == [F.ATOMIC_BATCH, F.ATOMIC_BATCH, F.ATOMIC_BATCH | F.ATOMIC_END]
    assert [r.topic for r in res] == ["B", "B", "RMQ_SYS_OFFSET_COMMIT"]
    s.close()


def test_a_batch_cut_inside_is_removed_whole_by_recovery(tmp_path: Path) -> None:
    s = _source(tmp_path)
    _stage_batch(s, ["b0"], 1)
    res = _stage_batch(s, ["b1", "b2", "b3"], 4)
    start = res[0].commitlog_offset
    two_records = res[2].commitlog_offset - start   # b1 and b2 whole, b3 and the commit gone
    s.close()
    _killed_inside_last_batch(tmp_path, start, two_records)
    s = open_store(tmp_path)
    assert [m.body for m in all_messages(s, "B")] == [b"b0"]
    assert s.commitlog.end() == start
    assert ClusterOffsetStore(s.layout).read_group("g") == {("A", 0): 1}
    s.put([draft("B", "after")])   # the log goes on from the cut
    assert sorted(m.body for m in all_messages(s, "B")) == [b"after", b"b0"]
    s.close()


def test_a_whole_batch_whose_queue_entries_were_lost_is_dispatched_again(tmp_path: Path) -> None:
    s = _source(tmp_path)
    res = _stage_batch(s, ["b1", "b2"], 2)
    end = s.commitlog.end()
    s.close()
    # killed after the log write, before its consume-queue entries: the whole batch is there
    for topic in ("B", "RMQ_SYS_OFFSET_COMMIT"):
        for f in (tmp_path / "consumequeue" / topic).glob("*/0*"):
            f.unlink()
    _killed_inside_last_batch(tmp_path, res[0].commitlog_offset, end - res[0].commitlog_offset)
    s = open_store(tmp_path)
    assert sorted(m.body for m in all_messages(s, "B")) == [b"b1", b"b2"]
    assert ClusterOffsetStore(s.layout).read_group("g") == {("A", 0): 2}
    s.close()


def test_the_offsets_file_takes_only_durable_commits(tmp_path: Path) -> None:
    s = _source(tmp_path)
    offsets = ClusterOffsetStore(s.layout)
    _stage_batch(s, ["b1"], 3)
    assert offsets.read_group("g") == {("A", 0): 3}            # readers see it at once
    offsets.absorb()                                           # not synced yet: not in the file
    table = json.loads(s.layout.consumer_offset_json.read_text()) if s.layout.consumer_offset_json.exists() else {}
    assert "A@g" not in table.get("offsetTable", {})
    offsets.absorb(s.sync_written())
    table = json.loads(s.layout.consumer_offset_json.read_text())
    assert table["offsetTable"]["A@g"] == {"0": 3} and table["commitsApplied"] == 1
    _stage_batch(s, [], 5)
    assert offsets.read_group("g") == {("A", 0): 5}
    s.close()


def test_a_commit_made_before_a_reset_never_undoes_it(tmp_path: Path) -> None:
    s = _source(tmp_path)
    offsets = ClusterOffsetStore(s.layout)
    _stage_batch(s, ["b1"], 3)
    assert offsets.reset("g", "A", {0: 0}) == 1
    _stage_batch(s, ["late"], 4, epoch=0)   # a member that has not seen the reset yet
    assert offsets.read_group("g") == {("A", 0): 0}
    offsets.absorb(s.sync_written())
    assert offsets.read_group("g") == {("A", 0): 0}
    _stage_batch(s, ["b1"], 2, epoch=1)
    assert offsets.read_group("g") == {("A", 0): 2}
    s.close()


def test_offsets_of_stages_come_back_from_the_log_when_the_table_is_lost(tmp_path: Path) -> None:
    s = _source(tmp_path)
    _stage_batch(s, ["b1"], 2)
    _stage_batch(s, ["b2"], 5)
    ClusterOffsetStore(s.layout).absorb(s.sync_written())
    for p in s.layout.consumer_offset_json.parent.glob("consumerOffset*"):
        p.unlink()
    assert ClusterOffsetStore(s.layout).read_group("g") == {("A", 0): 5}
    s.close()


def test_the_tail_rule_follows_a_batch_across_windows() -> None:
    A, E = F.ATOMIC_BATCH, F.ATOMIC_BATCH | F.ATOMIC_END
    phys = np.arange(0, 400, 100)
    assert open_batch(np.array([0, 0, 0, 0]), phys, -1) == -1
    assert open_batch(np.array([0, A, A, E]), phys, -1) == -1
    assert open_batch(np.array([0, E, A, A]), phys, -1) == 200       # a batch opened at 200
    assert open_batch(np.array([A, A, A, A]), phys + 400, 200) == 200  # still open in the next window
    assert open_batch(np.array([A, E, 0, 0]), phys + 800, 200) == -1   # and closed in the one after
    assert open_batch(np.array([A, A, A, A]), phys, -1) == 0


def test_a_scheduler_killed_after_delivering_delivers_nothing_twice(tmp_path: Path) -> None:
    # RocketMQ's scheduler (and this one before) delivered again after a crash between the
    # copies and its saved offset: an exactly-once stage's retries would then come back twice
    s = open_store(tmp_path)
    now = int(time.time() * 1000)
    s.put([delay_draft(draft("T", f"d{i}"), (0, 10), s, now_ms=now - 1000) for i in range(3)])
    s.close()
    code = ("import sys; from store.log.messagestore import Store; from store.log.schedule import deliver_due; "
            "deliver_due(Store.open(sys.argv[1]))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                       env={**os.environ, "MQCTL_FAILPOINTS": "schedule-after-deliver"})
    assert p.returncode == -9, p.stderr
    s = open_store(tmp_path)
    assert deliver_due(s) == 0
    assert sorted(m.body for m in all_messages(s, "T")) == [b"d0", b"d1", b"d2"]
    s.close()


def test_a_scheduler_pass_records_its_change_not_its_whole_state(tmp_path: Path) -> None:
    # One late message at the head of the free-duration queue keeps every later one in the
    # "delivered out of order" list; a progress record holding that whole list grew with it
    # (past the store's message limit: every consumer's scheduler pass then failed)
    s = open_store(tmp_path)
    now = int(time.time() * 1000)
    s.put([delay_draft(draft("T", "late"), (0, 3_600_000), s, now_ms=now)])
    for rnd in range(3):
        s.put([delay_draft(draft("T", f"d{rnd}-{i}"), (0, 10), s, now_ms=now - 1000) for i in range(300)])
        assert deliver_due(s) == 300
        body = s.pull("RMQ_SYS_DELAY_PROGRESS", 0, rnd, 1).messages[0].body
        assert len(body) < 100, body
    assert len(all_messages(s, "T")) == 900
    s.close()
