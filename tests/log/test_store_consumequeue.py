"""store/log/consumequeue.py: fixed-width entries, segments, torn tails, truncation."""
from __future__ import annotations

import os
from pathlib import Path

from store.log import format as F
from store.log.consumequeue import NO_LIMIT, ConsumeQueue, cut_entries, pack_entry, take_entries


def entries(first: int, n: int) -> bytes:
    return b"".join(pack_entry(1000 * i, 100 + i, i - 5) for i in range(first, first + n))


def test_empty_queue(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "T" / "0", 10)
    assert (q.min_offset(), q.max_offset(), q.segments()) == (0, 0, [])
    assert q.read_entries(0, 5) == [] and q.entry(0) is None and q.last_entry() is None


def test_append_and_read_across_segments(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "T" / "0", 10)   # 10 entries (200 bytes) per segment
    q.append(0, entries(0, 7))
    q.append(7, entries(7, 18))
    assert q.max_offset() == 25
    assert q.segments() == [0, 200, 400]
    assert sorted(os.listdir(q.dir)) == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    assert [p.stat().st_size for p in map(q.segment_path, q.segments())] == [200, 200, 100]
    # reads stop at a segment end; the caller asks again
    assert [e[0] for e in q.read_entries(8, 100)] == [8000, 9000]
    assert q.read_entries(10, 3) == [(10000, 110, 5), (11000, 111, 6), (12000, 112, 7)]
    assert q.entry(24) == (24000, 124, 19)
    assert q.entry(25) is None
    assert q.last_entry() == (24000, 124, 19)
    assert q.entry(3) == (3000, 103, -2)  # negative tags codes survive


def test_a_torn_partial_entry_is_ignored_by_readers(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 3))
    with open(q.segment_path(0), "ab") as fh:
        fh.write(pack_entry(3000, 103, 0)[:11])   # a writer died mid-entry
    assert q.max_offset() == 3
    assert len(q.read_entries(0, 10)) == 3
    assert q.entry(3) is None


def test_zero_filled_entries_end_a_read(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 2) + bytes(20) + entries(3, 2))
    assert [e[0] for e in q.read_entries(0, 10)] == [0, 1000]


def test_truncate_to_drops_later_entries_and_segments(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 25))
    q.truncate_to(12)
    assert q.max_offset() == 12 and q.segments() == [0, 200]
    q.truncate_to(10)
    assert q.max_offset() == 10 and q.segments() == [0]
    q.truncate_to(0)
    assert q.max_offset() == 0
    # a re-append after truncation reads back the new entries, not stale cached ones
    q.append(0, entries(50, 12))
    assert q.entry(11) == (61000, 161, 56)


def test_append_returns_an_undo_list(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 8))
    undo = q.append(8, entries(8, 5))
    assert undo == [(str(q.segment_path(0)), 160), (str(q.segment_path(200)), 0)]
    for path, size in reversed(undo):
        os.truncate(path, size)
    # the new segment is left empty: the queue still ends at 8, not at the empty file's base
    assert q.segments() == [0, 200]
    assert q.max_offset() == 8
    q.append(8, entries(8, 3))
    assert [e[0] for e in q.read_entries(8, 2)] == [8000, 9000] and q.entry(10) == (10000, 110, 5)
    assert q.max_offset() == 11


def test_min_offset_follows_the_first_segment(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 30))
    q.segment_path(0).unlink()   # retention removed the oldest segment
    assert q.min_offset() == 10 and q.max_offset() == 30
    assert q.entry(10) == (10000, 110, 5)
    assert F.CQ_ENTRY_SIZE == 20


def test_a_replaced_segment_is_read_from_its_new_file(tmp_path: Path) -> None:
    """A reader's cached descriptor must not keep reading a deleted segment's old inode."""
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 5))
    assert q.entry(4) == (4000, 104, -1)
    q.segment_path(0).unlink()
    q2 = ConsumeQueue(tmp_path / "q", 10)   # another process rebuilds the queue
    q2.append(0, entries(100, 7))
    assert q.entry(4) == (104000, 204, 99)
    assert q.entry(6) == (106000, 206, 101)


def test_an_append_that_fails_in_its_second_segment_cuts_back_its_first(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import pytest

    from store.errors import StoreIOError
    from store.log import consumequeue
    q = ConsumeQueue(tmp_path / "T" / "0", 10)
    q.append(0, entries(0, 7))
    real = consumequeue.pwrite_all
    calls = []

    def second_fails(fd: int, data, pos: int) -> None:  # noqa: ANN001
        calls.append(pos)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(fd, data, pos)
    monkeypatch.setattr(consumequeue, "pwrite_all", second_fails)
    with pytest.raises(StoreIOError):
        q.append(7, entries(7, 8))   # 3 entries fit in segment 0, 5 go to segment 200
    monkeypatch.undo()
    assert q.max_offset() == 7
    assert q.segment_path(0).stat().st_size == 7 * F.CQ_ENTRY_SIZE
    q.append(7, entries(7, 8))
    assert [e[0] for e in q.read_entries(0, 10)] == [1000 * i for i in range(10)]


def test_cut_entries_takes_the_prefix_a_window_serves(tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path / "q", 10)
    q.append(0, entries(0, 4) + bytes(20) + entries(5, 9))
    with open(q.segment_path(10 * F.CQ_ENTRY_SIZE), "ab") as fh:
        fh.write(pack_entry(14000, 114, 0)[:7])   # a writer died mid-entry
    for cut in (cut_entries, take_entries):
        for offset, count in ((0, 10), (5, 100), (10, 100), (12, 1), (14, 5)):
            assert cut(q.read_raw(offset, count), 0, NO_LIMIT, NO_LIMIT, False)[0] == q.read_entries(offset, count)
        raw = q.read_raw(0, 10)
        assert [e[0] for e in cut(raw, 0, NO_LIMIT, NO_LIMIT, False)[0]] == [0, 1000, 2000, 3000]  # zeros end it
        raw = q.read_raw(5, 100)   # entries 5..9: phys 1000 * i, size 100 + i
        assert cut(raw, 0, NO_LIMIT, NO_LIMIT, True) == (q.read_entries(5, 100), 9109, 535)
        assert cut(raw, 0, 7107, NO_LIMIT, True) == (q.read_entries(5, 3), 7107, 318)   # the window's end
        assert cut(raw, 0, 7106, NO_LIMIT, True)[0] == q.read_entries(5, 2)
        assert cut(raw, 0, NO_LIMIT, 211, True)[0] == q.read_entries(5, 2)   # after the one reaching max_bytes
        assert cut(raw, 0, NO_LIMIT, 212, True)[0] == q.read_entries(5, 3)
        assert cut(raw, 5001, NO_LIMIT, NO_LIMIT, True) == ([], 5001, 0)     # before the window: none
        assert cut(raw, 5001, NO_LIMIT, NO_LIMIT, False)[0] == q.read_entries(5, 100)
        back = pack_entry(5000, 105, 0) + pack_entry(6000, 106, 0) + pack_entry(6050, 10, 0)
        assert len(cut(back, 0, NO_LIMIT, NO_LIMIT, True)[0]) == 2   # overlapping its predecessor: not in order
        assert len(cut(back, 0, NO_LIMIT, NO_LIMIT, False)[0]) == 3
