"""What a full recovery reads past damage, through the owners: the commit log's search for the
next valid record after a damaged one (``CommitLog.find_record_after``, a window at a time),
and the consume queue's hole filling (``queuerebuild.fill_holes``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.messagestore import Store
from store.log.record import Draft, RecordError, decode
from store.log.settings import StoreSettings

SEG = 8192


def _whole_file_search(log: CommitLog, after: int) -> int | None:
    """The search as recovery wrote it before the owner had it: each segment read whole."""
    magic = F.MAGIC_V1.to_bytes(4, "big")
    for base in log.segments():
        if base + log.segment_size <= after:
            continue
        data = log.segment_path(base).read_bytes()
        pos = max(after + 1 - base, 0)
        while True:
            i = data.find(magic, pos + 4)
            if i < 0:
                break
            cand = i - 4
            try:
                if decode(data, cand, len(data)).commitlog_offset == base + cand:
                    return base + cand
            except RecordError:
                pass
            pos = cand + 1
    return None


def _damaged_store(root: Path) -> tuple[Store, list[int]]:
    """Queue T/0 of 60 records over several 8 KiB segments; records 10, 11 and 40 damaged
    (a body byte, a header's size, a magic). Returns the store and every record's offset."""
    s = Store.open(root, create=True, warn=lambda _m: None, settings=StoreSettings(
        max_message_size=1024, commitlog_segment_size=SEG, cq_segment_entries=20))
    s.create_topic("T", 1)
    for i in range(0, 60, 5):
        s.put([Draft("T", f"m{i + j:03d}-{'x' * (150 + 37 * j)}".encode(), queue_id=0) for j in range(5)])
    q = s.queue("T", 0)
    phys = [q.entry(k)[0] for k in range(60)]
    log = s.commitlog

    def poke(off: int, data: bytes) -> None:
        base = log.segment_of(off)
        with open(log.segment_path(base), "r+b") as fh:
            fh.seek(off - base)
            fh.write(data)
    poke(phys[10] + 120, b"!")                   # a body byte: CRC mismatch
    poke(phys[11], (9999).to_bytes(4, "big"))    # the size: reaches past the segment
    poke(phys[40] + 4, b"\0\0\0\0")               # the magic
    return s, phys


@pytest.mark.parametrize("window", [16, 61, 700, 1 << 20])
def test_the_windowed_search_finds_what_the_whole_file_search_found(root: Path, window: int) -> None:
    s, phys = _damaged_store(root)
    try:
        log = s.commitlog
        end = log.end()
        for after in [*range(-1, end + 2, 97), *(p + d for p in phys for d in (-5, -1, 0, 1, 4))]:
            assert log.find_record_after(after, window) == _whole_file_search(log, after), (after, window)
        assert log.find_record_after(phys[9], window) == phys[12]   # (10 and 11 damaged)
        assert log.find_record_after(phys[39], window) == phys[41]
        assert log.find_record_after(phys[59], window) is None
    finally:
        s.close()


def test_a_full_recovery_fills_a_hole_with_the_damaged_range(root: Path) -> None:
    """Entry 10 zeroed (a hole) over a damaged record: the full recovery points it at the
    damaged range up to the next valid record, reports it, and readers skip it."""
    s, phys = _damaged_store(root)
    try:
        q = s.queue("T", 0)
        q.write_entry(10, bytes(F.CQ_ENTRY_SIZE))
        s.close_queues()
        rep = s.recover(full=True)
        q = s.queue("T", 0)
        assert q.entry(10) == (phys[10], phys[12] - phys[10], 0)
        holes = [d for d in rep.damage if "has no valid record" in d[2]]
        assert holes == [(str(q.segment_path(0)), 10 * F.CQ_ENTRY_SIZE,
                          "entry 10 has no valid record (damaged or removed); readers skip it")]
        got = [m.queue_offset for m in s.iter_queue("T", 0, 0)]
        assert 10 not in got and 11 not in got and 40 not in got and got[-1] == 59
    finally:
        s.close()


def test_check_names_the_file_and_byte_of_a_wrong_entry_in_a_later_segment(root: Path) -> None:
    """``store check`` reads entries through the queue's owner (``queuerebuild.entries_array``,
    ``entry_place``): a wrong tag code in entry 25 (the second 20-entry file) is named by that
    file and the byte of the entry's tag code."""
    s, phys = _damaged_store(root)
    try:
        q = s.queue("T", 0)
        p, size, tags = q.entry(25)
        q.write_entry(25, F.CQ_ENTRY.pack(p, size, tags + 1))
        s.close_queues()
        found = [(pr.file, pr.offset) for pr in s.check().problems if "tag code" in pr.reason]
        assert found == [(str(q.segment_path(20 * F.CQ_ENTRY_SIZE)), 5 * F.CQ_ENTRY_SIZE + 12)]
    finally:
        s.close()
