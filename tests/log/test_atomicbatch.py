"""Atomic batches (store/log/atomicbatch.py): every batch of several records that one write
appends is flagged, its last record its end, on every framing path; recovery cuts a batch
whose end never reached the log, whole, and nothing before it, never a finished one; the end
of a producer's batch is never taken for an offset commit."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from store.log import arrayframing
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import framing as framing_module
from store.log.atomicbatch import END, INSIDE
from store.log.messagestore import Store
from store.log.offsetcommits import OffsetCommit, read_after
from store.log.offsets import ClusterOffsetStore
from tests.log.storetestutil import all_messages, draft, open_store


def _flags(s: Store, offsets: list[int]) -> list[int]:
    """Each record's SYSFLAG, read with every CRC checked."""
    return [s.commitlog.read(o, verify=True).sysflag for o in offsets]


def _framed_as(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path != "native":
        monkeypatch.setattr(framing_module, "_frame_native", None)
    monkeypatch.setattr(arrayframing, "_ARRAYS_MIN_BATCH", 1 if path == "arrays" else 10 ** 9)
    monkeypatch.setattr(arrayframing, "_ARRAYS_AFTER", 0)
    if path == "loop":
        monkeypatch.setattr(framing_module, "_frame_small", lambda *a: None)
    else:
        monkeypatch.setattr(framing_module, "_SMALL_FROM", 1)


@pytest.mark.parametrize("path", ["native", "arrays", "small", "loop"])
@pytest.mark.parametrize("sizes,keys", [
    ([100] * 40, False),                        # small bodies, one part per record or one buffer
    ([3000, 20, 70_000, 5, 40_000] * 8, False),   # big ones: copied, or written from themselves
    ([100, 3000, 40_000] * 10, True),           # a sharding key each (the general loop)
    ([200_000] * 12, False),                    # across segments (1 MiB)
])
def test_every_record_of_a_batch_is_flagged_and_its_last_is_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, sizes: list[int], keys: bool) -> None:
    if path == "native" and framing_module._frame_native is None:
        pytest.skip("the C module is not built")
    _framed_as(path, monkeypatch)
    s = open_store(tmp_path / "s", commitlog_segment_size=1 << 20)
    try:
        sent: list[bytes] = []
        for b in range(2):   # (the second batch: a handle's later batches take the same way)
            bodies = [bytes([65 + (b + i) % 26]) * n for i, n in enumerate(sizes)]
            res = s.put_bodies("T", bodies, properties={"TAGS": "t"},
                               sharding_keys=[f"k{i % 3}" for i in range(len(bodies))] if keys else None)
            assert _flags(s, res.commitlog_offsets) == [INSIDE] * (len(bodies) - 1) + [END]
            sent += bodies
        assert sorted(m.body for m in all_messages(s, "T")) == sorted(sent)
        assert s.check().problems == []
    finally:
        s.close()


def test_single_sends_carry_no_flag_and_a_drafts_own_flags_are_not_kept(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")
    try:
        one = s.put_bodies("T", [b"alone"]).commitlog_offsets
        d = s.put([draft("T", "draft", sysflag=INSIDE)])   # (an atomic flag of a lone draft: dropped)
        several = s.put([draft("T", "a", sysflag=END), draft("U", "b"), draft("T", "c")])
        assert _flags(s, one + [d[0].commitlog_offset]) == [0, 0]
        assert _flags(s, [r.commitlog_offset for r in several]) == [INSIDE, INSIDE, END]
        commit = s.put([], commit=OffsetCommit("g", {("T", 0): 1}))   # a commit alone is a batch
        assert _flags(s, [commit[0].commitlog_offset]) == [END]
    finally:
        s.close()


def _killed_inside_batch(root: Path, batch_start: int, keep: int) -> None:
    """What a writer killed inside its batch's write leaves: the log holding the batch's first
    ``keep`` bytes, the checkpoint still ending where the batch began."""
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    ckpt.write(root / "checkpoint", replace(cp, written_end=batch_start))
    seg = sorted((root / "commitlog").iterdir())[-1]
    os.truncate(seg, batch_start - int(seg.name) + keep)


def test_a_producer_batch_cut_anywhere_inside_is_removed_whole_and_nothing_before_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = open_store(root)
    s.create_topic("T", 2)
    before = s.put_bodies("T", [b"whole-%d" % i for i in range(5)]).commitlog_offsets
    single = s.put_bodies("T", [b"single"]).commitlog_offsets
    derived_before = {p: p.read_bytes() for d in ("consumequeue", "index") for p in (root / d).rglob("*")
                      if p.is_file()}
    res = s.put_bodies("T", [b"torn-%d " % i * (i + 1) for i in range(6)]).commitlog_offsets
    end = s.commitlog.end()
    s.close()
    snap = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    log_bytes = next(data for p, data in snap.items() if p.parent.name == "commitlog")
    start = res[0]
    # every record boundary inside the batch, and bytes inside its first, middle and last records
    cuts = sorted({*(o - start for o in res[1:]), 1, 30, res[3] - start + 50, end - start - 1, end - start - 20})
    for keep in cuts:
        for p in [p for p in root.rglob("*") if p.is_file() and p not in snap]:
            p.unlink()
        for p, data in snap.items():
            p.write_bytes(data)
        _killed_inside_batch(root, start, keep)
        if not log_bytes[start:start + keep].strip(b"\0"):
            # Only the zero top bytes of its first TOTALSIZE landed: nothing tells them from
            # zeros written ahead (commitlog.written_length), and nothing needs to, since a
            # writer stopped inside its log write wrote no entry or key either: the next
            # writes over them.
            for p, data in derived_before.items():
                p.write_bytes(data)
        s = Store.open(root)
        try:
            got = sorted(m.commitlog_offset for m in all_messages(s, "T"))
            assert got == before + single, f"kept {keep} bytes of the batch"
            assert s.commitlog.end() == start
            assert s.check().problems == []
            r = s.put_bodies("T", [b"next-1", b"next-2"])   # the log goes on from the cut
            assert r.commitlog_offsets[0] == start
        finally:
            s.close()


def test_a_finished_batch_at_the_tail_is_kept_when_only_its_derived_files_are_missing(tmp_path: Path) -> None:
    """Killed after the log write, before the consume-queue entries: the batch is whole, with
    its end, and recovery dispatches all of it (what readers see only after the log write)."""
    root = tmp_path / "s"
    s = open_store(root)
    s.put_bodies("T", [b"first"], queue_id=0)
    res = s.put_bodies("T", [b"b%d" % i for i in range(8)], queue_id=0).commitlog_offsets
    end = s.commitlog.end()
    s.close()
    for f in (root / "consumequeue" / "T").glob("*/0*"):
        f.unlink()
    _killed_inside_batch(root, res[0], end - res[0])
    s = Store.open(root)
    try:
        assert [m.body for m in all_messages(s, "T")] == [b"first"] + [b"b%d" % i for i in range(8)]
        assert s.commitlog.end() == end
    finally:
        s.close()


def test_the_end_of_a_producer_batch_is_no_offset_commit(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")
    try:
        s.put([draft("A", "a%d" % i, queue_id=0) for i in range(4)])
        s.put([draft("B", "out")], commit=OffsetCommit("g", {("A", 0): 2}))
        s.put_bodies("A", [b"x", b"y"], queue_id=0)
        s.put([draft("A", "z", queue_id=0), draft("A", "w", queue_id=0)])
        pending = read_after(s.layout, 0)
        assert [c.offsets for c, _end, _at in pending.commits] == [{("A", 0): 2}]
        assert ClusterOffsetStore(s.layout).read_group("g") == {("A", 0): 2}
        assert ClusterOffsetStore(s.layout).groups() == ["g"]
    finally:
        s.close()


def test_recovery_after_a_restart_cuts_a_batch_a_power_cut_kept_part_of(tmp_path: Path) -> None:
    """A power cut that kept whole records of a batch but not its end (another writer's fsync
    made them durable while it was being written): the batch goes, the one before stays."""
    root = tmp_path / "s"
    s = open_store(root)
    kept = s.put_bodies("T", [b"durable-1", b"durable-2"], sync=True).commitlog_offsets
    res = s.put_bodies("T", [b"part-%d" % i for i in range(5)]).commitlog_offsets
    s.close()
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    ckpt.write(root / "checkpoint", replace(cp, boot_id=b"\0" * 16, synced_end=res[0], derived_end=0))
    os.truncate(root / "commitlog" / F.segment_name(0), res[3])   # three records whole, two gone
    s = Store.open(root)
    try:
        assert sorted(m.commitlog_offset for m in all_messages(s, "T")) == kept
        assert s.commitlog.end() == res[0] and s.check().problems == []
    finally:
        s.close()


_SEG = 1 << 20   # segments of 1 MiB: five records of 200 KB each


def _spanning(root: Path, batches: list[int]) -> tuple[list[int], list[list[int]]]:
    """A store of 1 MiB segments holding two small messages, then one batch of 200 KB records
    per entry of ``batches`` (their sizes): the small ones' offsets, and each batch's."""
    s = open_store(root, commitlog_segment_size=_SEG)
    try:
        before = s.put_bodies("T", [b"x" * 100, b"y" * 100], properties={"KEYS": "before"}).commitlog_offsets
        res = [s.put_bodies("T", [bytes([65 + i]) * 200_000 for i in range(n)],
                            properties={"KEYS": f"batch-{b}"}).commitlog_offsets for b, n in enumerate(batches)]
    finally:
        s.close()
    return before, res


def _damage_last_segment(root: Path, how: str, last_record: int) -> None:
    """The log's last segment cut inside or before the record at ``last_record``, to nothing, or gone."""
    seg = sorted((root / "commitlog").iterdir())[-1]
    assert int(seg.name) < last_record
    if how == "removed":
        seg.unlink()
    else:
        keep = {"torn": last_record - int(seg.name) + 100, "whole": last_record - int(seg.name), "empty": 0}[how]
        os.truncate(seg, keep)


def _reopened(root: Path, kept: list[int], end: int, gone_keys: list[str]) -> None:
    """The store, opened (and so recovered), holds the messages at ``kept`` and ends at
    ``end``; its key index has none of ``gone_keys``; a store check finds nothing; the log goes
    on from ``end``, and the next open finds it so."""
    s = Store.open(root)
    try:
        assert sorted(m.commitlog_offset for m in all_messages(s, "T")) == kept
        assert s.commitlog.end() == end
        assert [m for k in gone_keys for m in s.query_key("T", k)] == []
        assert s.check().problems == []
        nxt = s.put_bodies("T", [b"next-1", b"next-2"]).commitlog_offsets
        assert nxt[0] == end
    finally:
        s.close()
    s = Store.open(root)
    try:
        assert sorted(m.commitlog_offset for m in all_messages(s, "T")) == kept + nxt
        assert s.check().problems == []
    finally:
        s.close()


@pytest.mark.parametrize("how", ["torn", "whole", "empty", "removed"])
@pytest.mark.parametrize("records", [8, 12])   # across two segments, across three
def test_a_batch_across_segments_whose_last_segment_is_cut_or_lost_is_removed_whole(
        tmp_path: Path, how: str, records: int) -> None:
    """The checkpoint then reaches past the log's end and the scan begins at the base of the
    last segment left: the batch's records in the segments before it go too (its first
    segment cut there), and everything before the batch stays."""
    root = tmp_path / "s"
    before, (res,) = _spanning(root, [records])
    assert F.segment_name(0) < F.segment_name(res[-1] - res[-1] % _SEG) and res[0] < _SEG   # (it spans)
    _damage_last_segment(root, how, res[-1])
    _reopened(root, before, res[0], ["batch-0"])
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == [F.segment_name(0)]


@pytest.mark.parametrize("how", ["torn", "whole", "empty", "removed"])
def test_a_finished_batch_across_segments_stays_whole_when_the_next_batch_is_cut(tmp_path: Path, how: str) -> None:
    """Batch 0 spans segments 0 and 1 and ends in 1; batch 1 begins in segment 1 and ends in
    segment 2, which is cut: batch 1 goes (from inside segment 1), batch 0 stays whole."""
    root = tmp_path / "s"
    before, (done, cut) = _spanning(root, [8, 4])
    assert done[0] < _SEG <= done[-1] < cut[0] < 2 * _SEG <= cut[-1]
    _damage_last_segment(root, how, cut[-1])
    _reopened(root, before + done, cut[0], ["batch-1"])
    s = Store.open(root)
    try:
        assert sorted(m.commitlog_offset for m in s.query_key("T", "batch-0")) == done
    finally:
        s.close()


def test_the_look_back_for_a_batch_across_segments_stops_at_the_flushed_point(tmp_path: Path) -> None:
    """The store was made durable up to the batch's first record (the checkpoint's derived
    end, a point between batches): the look back reads no further, and still cuts the batch
    there whole."""
    root = tmp_path / "s"
    before, (res,) = _spanning(root, [12])
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    ckpt.write(root / "checkpoint", replace(cp, synced_end=res[0], derived_end=res[0]))
    _damage_last_segment(root, "torn", res[-1])
    _reopened(root, before, res[0], ["batch-0"])


def test_recovery_after_a_restart_keeps_a_synced_batch_whose_end_record_is_damaged(tmp_path: Path) -> None:
    """A batch made durable (``sync``) whose end record was then damaged is finished: only
    that record is lost (left in place, never served), never the batch's intact records."""
    root = tmp_path / "s"
    s = open_store(root)
    res = s.put_bodies("T", [b"durable-%d" % i for i in range(6)], queue_id=0, sync=True).commitlog_offsets
    end = s.commitlog.end()
    s.close()
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None and cp.synced_end == end
    ckpt.write(root / "checkpoint", replace(cp, boot_id=b"\0" * 16, derived_end=0))
    seg = root / "commitlog" / F.segment_name(0)
    data = bytearray(seg.read_bytes())
    data[data.rindex(b"durable-5")] ^= 1
    seg.write_bytes(bytes(data))
    s = Store.open(root)
    try:
        assert sorted(m.commitlog_offset for m in all_messages(s, "T")) == res[:5]
        assert s.commitlog.end() == end and s.max_offset("T", 0) == 6
        assert [p.offset for p in s.check().problems if "commitlog" in p.file] == [res[5]]
        nxt = s.put_bodies("T", [b"next"], queue_id=0).commitlog_offsets
        assert nxt == [end] and [m.body for m in all_messages(s, "T")][-1] == b"next"
    finally:
        s.close()
