"""store/log/recovery.py and store/log/check.py, by byte surgery on real store files.

Each test names, as a sentence, the damage it does and what must hold afterwards.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from store.errors import MessageNotFoundError
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.messagestore import Store
from tests.log.storetestutil import all_messages, draft, open_store
from tests.procs import KILLED, mqctl


def fill(root: Path, n: int = 12, queues: int = 3, **settings) -> tuple[list, list[bytes]]:
    """A store with ``n`` messages round-robin over ``queues`` queues, keys on each, in a few
    batches of 4 and the last message alone; returns (put results, bodies) in log order."""
    s = open_store(root, **settings)
    s.create_topic("T", queues)
    bodies = [f"message {i} ".encode() * (i % 4 + 1) for i in range(n)]
    res = []
    for i in range(0, n, 4):   # a few batches
        res += s.put([draft("T", b, queue_id=j % queues, properties={"KEYS": f"k{j}"})
                      for j, b in enumerate(bodies[i:min(i + 4, n - 1)], i)])
    res += s.put([draft("T", bodies[-1], queue_id=(n - 1) % queues, properties={"KEYS": f"k{n - 1}"})])
    s.close()
    return res, bodies


def served(s: Store) -> dict[int, bytes]:
    return {m.commitlog_offset: m.body for m in all_messages(s, "T")}


def segment0(root: Path) -> Path:
    return root / "commitlog" / F.segment_name(0)


def clean(s: Store) -> list:
    return s.check().problems


# -- torn tails -------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def restore(root: Path, snap: dict[Path, bytes]) -> None:
    """Put every file back as it was (cheaper than copying the tree for each case)."""
    for p in [p for p in root.rglob("*") if p.is_file() and p not in snap]:
        p.unlink()
    for p, data in snap.items():
        try:
            if p.read_bytes() == data:
                continue
        except FileNotFoundError:
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.mark.slow
def test_cutting_the_last_record_at_every_byte_drops_only_that_record(root: Path) -> None:
    res, bodies = fill(root)
    snap = snapshot(root)
    last = res[-1]
    end = segment0(root).stat().st_size
    assert end - last.commitlog_offset > 100
    for cut in range(last.commitlog_offset, end):
        restore(root, snap)
        os.truncate(segment0(root), cut)
        s = Store.open(root)
        got = served(s)
        assert got == {r.commitlog_offset: b for r, b in zip(res[:-1], bodies[:-1])}, f"cut at {cut}"
        assert s.commitlog.end() == last.commitlog_offset, "the torn bytes are cut off"
        assert s.max_offset("T", last.queue_id) == last.queue_offset, "its consume-queue entry is dropped"
        assert clean(s) == [], f"cut at {cut}"
        assert s.query_key("T", f"k{len(res) - 1}") == []
        # the store takes new writes where the torn record was, and stays clean
        r = s.put([draft("T", "after", queue_id=last.queue_id)])[0]
        assert (r.commitlog_offset, r.queue_offset) == (last.commitlog_offset, last.queue_offset)
        assert s.find(r.msg_id).body == b"after" and clean(s) == []
        s.close()


def test_cutting_the_log_back_by_whole_records_drops_their_queue_entries(root: Path) -> None:
    res, bodies = fill(root, n=12)
    os.truncate(segment0(root), res[8].commitlog_offset)   # records 8..11 are gone
    s = Store.open(root)
    assert served(s) == {r.commitlog_offset: b for r, b in zip(res[:8], bodies[:8])}
    assert sum(s.max_offset("T", q) for q in range(3)) == 8
    assert clean(s) == []
    s.close()


def test_a_torn_tail_in_a_new_segment_after_a_roll(tmp_path: Path) -> None:
    root = tmp_path / "s"
    res, bodies = fill(root, n=40, commitlog_segment_size=4096, max_message_size=1000)
    s = Store.open(root)
    segs = s.commitlog.segments()
    s.close()
    assert len(segs) >= 2
    last_seg = root / "commitlog" / F.segment_name(segs[-1])
    first_in_last = min(r.commitlog_offset for r in res if r.commitlog_offset >= segs[-1])
    # cut inside the first record of the newest segment: the previous segment's records stay,
    # but for the head of the batch of 4 that record belongs to (atomic: it goes whole)
    os.truncate(last_seg, first_in_last - segs[-1] + 30)
    s = Store.open(root)
    k = [r.commitlog_offset for r in res].index(first_in_last)
    batch_start = res[k - k % 4].commitlog_offset if k < len(res) - 1 else first_in_last
    assert batch_start < segs[-1] == first_in_last   # (the batch spans the roll)
    want = {r.commitlog_offset: b for r, b in zip(res, bodies) if r.commitlog_offset < batch_start}
    assert served(s) == want
    assert clean(s) == []
    r = s.put([draft("T", "after")])[0]
    assert s.find(r.msg_id).body == b"after" and clean(s) == []
    s.close()


def test_a_segment_left_empty_by_a_crash_is_harmless(tmp_path: Path) -> None:
    root = tmp_path / "s"
    res, bodies = fill(root, n=8)
    end = segment0(root).stat().st_size
    s = Store.open(root)
    seg = s.commitlog.segment_size
    s.close()
    (root / "commitlog" / F.segment_name(seg)).write_bytes(b"")   # created, never written
    s = Store.open(root)
    assert served(s) == dict(zip((r.commitlog_offset for r in res), bodies))
    assert clean(s) == []
    r = s.put([draft("T", "after")])[0]
    assert r.commitlog_offset in (end, seg)
    assert s.find(r.msg_id).body == b"after" and clean(s) == []
    s.close()


# -- damage in the middle ---------------------------------------------------------------------

def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_middle_record_is_reported_and_never_served(root: Path) -> None:
    res, bodies = fill(root, n=9)
    bad = res[4]
    flip(segment0(root), bad.commitlog_offset + 95)   # inside the body
    # store check names the file and the record's offset, and exits 1
    p = mqctl(root, "store", "check")
    assert p.returncode == 1, p.stderr
    assert f"{segment0(root)}:{bad.commitlog_offset}:" in p.out and "CRC" in p.out
    pj = mqctl(root, "store", "check", "--json")
    assert pj.returncode == 1 and f'"offset":{bad.commitlog_offset}' in pj.out.replace(" ", "")
    # a pull skips it and says so; every other message is served
    s = Store.open(root)
    pr = s.pull("T", bad.queue_id, 0, 32)
    assert bad.queue_offset in [q for q, _ in pr.damaged]
    assert bad.commitlog_offset not in [m.commitlog_offset for m in pr.messages]
    assert pr.next_offset == s.max_offset("T", bad.queue_id)
    want = {r.commitlog_offset: b for r, b in zip(res, bodies) if r is not bad}
    assert served(s) == want
    with pytest.raises(MessageNotFoundError):
        s.find(bad.msg_id)
    s.close()


def test_full_recovery_keeps_valid_records_after_damage(root: Path) -> None:
    res, bodies = fill(root, n=9)
    bad = res[4]
    end = segment0(root).stat().st_size
    flip(segment0(root), bad.commitlog_offset + 40)   # inside the header (born timestamp)
    p = mqctl(root, "store", "recover", "--json")
    assert p.returncode == 0, p.stderr
    assert segment0(root).stat().st_size == end, "recovery must not truncate valid later records"
    s = Store.open(root)
    want = {r.commitlog_offset: b for r, b in zip(res, bodies) if r is not bad}
    assert served(s) == want
    # the messages after the damage are still found by key and id
    for i in range(5, 9):
        assert [m.body for m in s.query_key("T", f"k{i}")] == [bodies[i]]
        assert s.find(res[i].uniq_key).body == bodies[i]
    # new writes go after the last valid record, not over it
    r = s.put([draft("T", "after")])[0]
    assert r.commitlog_offset == end
    s.close()


def test_recovery_after_a_crash_resumes_past_damage_in_its_scan(root: Path) -> None:
    """A writer died (stale checkpoint) and the scan from the checkpoint meets a bad record
    followed by good ones: the bad one is reported, the good ones are recovered."""
    res, bodies = fill(root, n=9)
    cp = ckpt.read(root / "checkpoint")
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(res[2].commitlog_offset, cp.last_store_ts,
                                                    cp.synced_end, cp.boot_id))
    flip(segment0(root), res[4].commitlog_offset + 95)
    s = Store.open(root, recover=False)
    with s.write_lock():
        rep = s.recover()
    assert rep.start == res[2].commitlog_offset
    assert [d[1] for d in rep.damage] == [res[4].commitlog_offset]
    assert rep.end == segment0(root).stat().st_size
    assert len(served(s)) == 8
    s.close()


# -- derived files ----------------------------------------------------------------------------

def test_consume_queue_entries_pointing_past_the_end_are_dropped(root: Path) -> None:
    res, bodies = fill(root, n=6, queues=1)
    q = root / "consumequeue" / "T" / "0" / F.segment_name(0)
    # entries for records that never made it into the log (and a torn half entry)
    with open(q, "ab") as fh:
        fh.write(F.CQ_ENTRY.pack(10_000, 150, 0) + F.CQ_ENTRY.pack(10_150, 150, 0) + b"\x00\x01\x02")
    cp = ckpt.read(root / "checkpoint")
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(cp.written_end, cp.last_store_ts, cp.synced_end, bytes(16)))
    s = Store.open(root)   # a "restart": recovery runs
    assert s.max_offset("T", 0) == 6
    assert q.stat().st_size == 6 * 20
    assert served(s) == dict(zip((r.commitlog_offset for r in res), bodies))
    assert clean(s) == []
    s.close()


def test_store_recover_rebuilds_deleted_consume_queues_and_index(root: Path) -> None:
    res, bodies = fill(root, n=12)
    shutil.rmtree(root / "consumequeue" / "T")
    shutil.rmtree(root / "index")
    s = Store.open(root, recover=False)   # (a handle that changes nothing: readers would repair the queues)
    assert served(s) == {}
    s.close()
    p = mqctl(root, "store", "recover")
    assert p.returncode == 0, p.stderr
    s = Store.open(root)
    assert served(s) == dict(zip((r.commitlog_offset for r in res), bodies))
    for r in res:
        m = s.find(r.uniq_key)
        assert (m.queue_id, m.queue_offset) == (r.queue_id, r.queue_offset)
    assert [m.body for m in s.query_key("T", "k7")] == [bodies[7]]
    assert clean(s) == []
    s.close()


def test_a_truncated_consume_queue_is_rebuilt_by_store_recover(root: Path) -> None:
    res, bodies = fill(root, n=12, queues=1)
    q = root / "consumequeue" / "T" / "0" / F.segment_name(0)
    os.truncate(q, 5 * 20 + 7)
    assert mqctl(root, "store", "recover").returncode == 0
    s = Store.open(root)
    assert s.max_offset("T", 0) == 12
    assert [m.body for m in s.iter_queue("T", 0, 0)] == bodies
    s.close()


@pytest.mark.parametrize("point", ["put-after-log", "put-after-cq", "put-after-index"])
def test_a_writer_killed_between_steps_is_completed_by_the_next_opener(root: Path, point: str) -> None:
    """The log is written first; a kill before the consume queue, index or checkpoint are
    written leaves work that the next opener finishes from the log."""
    res, bodies = fill(root, n=4, queues=1)
    p = mqctl(root, "send", "T", "--json", "--keys", "late", input=b"x1\nx2\nx3\n", failpoints=point)
    assert p.returncode == KILLED, p.stderr
    assert p.stdout == b"", "nothing is reported as sent before the batch is complete"
    s = Store.open(root)
    assert [m.body for m in s.iter_queue("T", 0, 0)] == bodies + [b"x1", b"x2", b"x3"]
    assert [m.body for m in s.query_key("T", "late")] == [b"x3", b"x2", b"x1"]
    assert clean(s) == []
    s.close()


def test_after_a_restart_queue_entries_below_the_synced_end_are_rebuilt_too(root: Path) -> None:
    """The log was synced further than the consume queues: entries of durable records were
    lost in the cut. Recovery re-dispatches from the derived end, not the log's synced end."""
    res, bodies = fill(root, n=12, queues=1)
    cp = ckpt.read(root / "checkpoint")
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(cp.written_end, cp.last_store_ts, res[9].commitlog_offset,
                                                    bytes(range(16)), res[2].commitlog_offset, 1))
    os.truncate(root / "consumequeue" / "T" / "0" / F.segment_name(0), 3 * 20)
    s = Store.open(root)
    assert [m.body for m in s.iter_queue("T", 0, 0)] == bodies
    new = ckpt.read(root / "checkpoint")
    assert new.derived_end == new.synced_end == new.written_end
    s.close()


def test_a_stale_checkpoint_from_another_boot_recovers_from_the_derived_end(root: Path) -> None:
    res, bodies = fill(root, n=12, queues=1)
    synced = res[5].commitlog_offset
    cp = ckpt.read(root / "checkpoint")
    other_boot = bytes(range(16))
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(cp.written_end, cp.last_store_ts, synced, other_boot, synced, 1))
    # what a power cut could do: the consume queue lost entries written after the sync
    q = root / "consumequeue" / "T" / "0" / F.segment_name(0)
    os.truncate(q, 7 * 20)
    s = open_store(root.parent / "scratch")   # any handle gives us this machine's boot id
    s.close()
    s = Store.open(root, recover=False)
    with s.write_lock():
        rep = s.recover()
    assert rep.start == synced and "restarted" in rep.reason
    assert rep.cq_entries_written == 12 - 7
    new = ckpt.read(root / "checkpoint")
    assert new.boot_id == ckpt.current_boot_id() and new.synced_end == new.written_end == rep.end
    assert [m.body for m in s.iter_queue("T", 0, 0)] == bodies
    s.close()


def test_a_stale_checkpoint_triggers_recovery_on_open(root: Path) -> None:
    res, bodies = fill(root, n=12, queues=1)
    cp = ckpt.read(root / "checkpoint")
    ckpt.write(root / "checkpoint", ckpt.Checkpoint(cp.written_end, cp.last_store_ts,
                                                    res[3].commitlog_offset, bytes(range(16)),
                                                    res[3].commitlog_offset, 1))
    os.truncate(root / "consumequeue" / "T" / "0" / F.segment_name(0), 4 * 20)
    s = Store.open(root)
    assert s.max_offset("T", 0) == 12
    assert ckpt.read(root / "checkpoint").boot_id == ckpt.current_boot_id()
    s.close()


def test_an_unreadable_checkpoint_means_a_full_recovery(root: Path) -> None:
    res, bodies = fill(root, n=6, queues=1)
    (root / "checkpoint").write_bytes(b"garbage")
    shutil.rmtree(root / "consumequeue" / "T")
    s = Store.open(root)
    assert [m.body for m in s.iter_queue("T", 0, 0)] == bodies
    assert ckpt.read(root / "checkpoint") is not None
    assert clean(s) == []
    s.close()


@pytest.mark.parametrize("damage", [b"", b"garbage"])
def test_an_unreadable_checkpoint_of_a_store_with_no_records_is_rewritten_by_the_next_open(
        root: Path, damage: bytes) -> None:
    """A power cut before the first send used to leave the checkpoint empty; opens took the
    store for a new one and left it so, and ``store check`` failed on it for good. It is
    derived state: the next open rebuilds it (at most one line said), the check is clean."""
    assert mqctl(root, "init").returncode == 0
    assert mqctl(root, "topic", "create", "T", "--queues", "2").returncode == 0
    (root / "checkpoint").write_bytes(damage)
    assert mqctl(root, "store", "check").returncode == 1   # (check only reads: it reports it)
    opened = mqctl(root, "topic", "list")
    assert opened.returncode == 0, str(opened)
    assert len(opened.stderr.splitlines()) <= 1, opened.stderr
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None and cp.written_end == 0 and cp.boot_id == ckpt.current_boot_id()
    assert mqctl(root, "store", "check").returncode == 0
    assert mqctl(root, "send", "T", "after").returncode == 0
    got = mqctl(root, "consume", "T", "-g", "G", "--from", "first", "-e")
    assert got.returncode == 0 and got.stdout.split() == [b"after"], str(got)


def test_check_reports_a_consume_queue_entry_pointing_nowhere(root: Path) -> None:
    res, bodies = fill(root, n=6, queues=1)
    q = root / "consumequeue" / "T" / "0" / F.segment_name(0)
    data = bytearray(q.read_bytes())
    data[20 * 2:20 * 2 + 8] = (res[2].commitlog_offset + 1).to_bytes(8, "big")
    q.write_bytes(bytes(data))
    s = Store.open(root)
    probs = clean(s)
    assert [(p.file, p.offset) for p in probs] == [(str(q), 40)]
    s.close()
    assert mqctl(root, "store", "check").returncode == 1


def test_check_is_read_only(root: Path) -> None:
    fill(root, n=6)
    flip(segment0(root), 200)
    os.truncate(segment0(root), segment0(root).stat().st_size - 3)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}
    s = Store.open(root, recover=False)
    assert clean(s)
    s.close()
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}
    assert after == before
