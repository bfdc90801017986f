"""store/log/commitlog.py: segments, the BLANK trailer at a roll, read and scan."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from store.errors import MessageTooLargeError
from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.logappend import LogAppender
from store.log.record import RecordError, encode
from tests.log.storetestutil import all_messages, draft, open_store

SEG = 4096


def rec_at(phys: int, body: bytes, qoff: int = 0) -> bytes:
    return encode(b"T", body, b"", 0, qoff, phys, 1700000000000 + qoff, 1700000000000, 1)


def append(log: CommitLog, bodies: list[bytes]) -> list[int]:
    """Append records through a LogAppender, as the store does; returns their offsets."""
    app = LogAppender(log, log.end())
    offs = []
    for i, b in enumerate(bodies):
        size = len(rec_at(0, b))
        phys = app.place(size)
        app.add(rec_at(phys, b, i))
        offs.append(phys)
    app.flush()
    return offs


def test_empty_log(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    assert log.segments() == [] and log.end() == 0 and log.min_offset() == 0
    assert list(log.scan(0)) == []


def test_segment_roll_writes_a_blank_trailer_and_names_segments_by_offset(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    bodies = [bytes([i % 251]) * (300 + i) for i in range(40)]   # ~15 KiB: rolls 3-4 times
    offs = append(log, bodies)
    segs = log.segments()
    assert len(segs) >= 4
    assert segs == [i * SEG for i in range(len(segs))]
    assert sorted(os.listdir(log.dir)) == [f"{b:020d}" for b in segs]
    for base in segs[:-1]:
        data = log.segment_path(base).read_bytes()
        # records of this segment end where a blank trailer starts; its TOTALSIZE is what is left
        last_end = max(o + len(rec_at(o, bodies[i])) for i, o in enumerate(offs) if log.segment_of(o) == base)
        pos = last_end - base
        assert len(data) == pos + 8, "a finished segment ends right after its trailer"
        left, magic = F.BLANK_TRAILER.unpack_from(data, pos)
        assert magic == F.BLANK_MAGIC and left == SEG - pos
        assert left >= 8
    # no record spans two segments
    for i, o in enumerate(offs):
        size = len(rec_at(o, bodies[i]))
        assert log.segment_of(o) == log.segment_of(o + size - 1)
        assert o + size + 8 <= log.segment_of(o) + SEG
    assert log.end() == offs[-1] + len(rec_at(offs[-1], bodies[-1]))


def test_a_record_that_fills_a_segment_exactly_leaves_room_for_the_trailer(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    size0 = len(rec_at(0, b""))
    # one record of exactly SEG - 8 bytes: fits; the next one goes to the next segment
    big = b"x" * (SEG - 8 - size0)
    offs = append(log, [big, b"y"])
    assert offs == [0, SEG]
    assert log.segment_path(0).stat().st_size == SEG  # record + 8-byte trailer
    with pytest.raises(MessageTooLargeError):
        append(log, [b"z" * (SEG - size0)])


def test_read_every_record_and_refuse_non_record_offsets(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    bodies = [f"message {i}".encode() * (i % 30 + 1) for i in range(60)]
    offs = append(log, bodies)
    for i, o in enumerate(offs):
        m = log.read(o)
        assert (m.body, m.commitlog_offset, m.queue_offset) == (bodies[i], o, i)
        size = m.size
        assert log.read(o, size).body == bodies[i]
    for bad in (1, offs[1] - 1, offs[3] + 4, log.end(), log.end() + 10 * SEG):
        with pytest.raises(RecordError):
            log.read(bad)
    log.close()


def test_read_of_a_record_whose_header_claims_another_offset_is_refused(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    log.dir.mkdir()
    # a valid record, but written at 0 while claiming offset 4096
    log.segment_path(0).write_bytes(rec_at(4096, b"moved"))
    with pytest.raises(RecordError, match="claims offset"):
        log.read(0)


def test_scan_walks_every_segment_and_stops_at_the_first_bad_record(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    bodies = [bytes([65 + i % 26]) * (200 + 13 * i) for i in range(50)]
    offs = append(log, bodies)
    got = list(log.scan(0))
    assert [o for o, m, e in got] == offs and all(e is None for _, _, e in got)
    assert [m.body for _, m, _ in got] == bodies
    # from the middle: starts exactly there
    assert [o for o, _, _ in log.scan(offs[17])] == offs[17:]
    # damage a record in the third segment: scan yields everything before it, then the error
    k = next(i for i, o in enumerate(offs) if log.segment_of(o) == 2 * SEG) + 1
    path = log.segment_path(2 * SEG)
    data = bytearray(path.read_bytes())
    data[offs[k] - 2 * SEG + 90] ^= 0xFF
    path.write_bytes(bytes(data))
    got = list(log.scan(0))
    assert [o for o, m, _ in got if m is not None] == offs[:k]
    assert got[-1][0] == offs[k] and got[-1][1] is None and "CRC" in got[-1][2].reason


def test_scan_reports_a_torn_tail(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    offs = append(log, [b"a" * 100, b"b" * 100, b"c" * 100])
    end = log.end()
    os.truncate(log.segment_path(0), end - 7)
    got = list(log.scan(0))
    assert [o for o, m, _ in got if m is not None] == offs[:2]
    assert got[-1][0] == offs[2] and got[-1][2].torn


def test_scan_reads_records_larger_than_its_chunk(tmp_path: Path) -> None:
    """scan() reads 4 MiB at a time; a record crossing a chunk boundary must still be read."""
    seg = 16 * 1024 * 1024
    log = CommitLog(tmp_path / "commitlog", seg)
    bodies = [os.urandom(1_500_000) for _ in range(6)]  # 9 MB: crosses two chunk boundaries
    offs = append(log, bodies)
    got = list(log.scan(0))
    assert [o for o, _, _ in got] == offs
    assert [m.body for _, m, _ in got] == bodies


def test_undo_cuts_a_batch_back_including_new_segments(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    append(log, [b"keep" * 100])
    end = log.end()
    app = LogAppender(log, end)
    for i in range(20):
        b = b"drop" * 100
        phys = app.place(len(rec_at(0, b)))
        app.add(rec_at(phys, b, i))
    app.flush()
    assert len(log.segments()) > 1
    app.undo()
    assert log.segments() == [0] and log.end() == end


def test_store_rolls_segments_and_serves_every_message(root: Path) -> None:
    s = open_store(root, commitlog_segment_size=SEG, max_message_size=1000)
    bodies = [f"{i:05d}".encode() * (i % 150 + 1) for i in range(300)]
    res = s.put([draft("T", b, queue_id=i % 3) for i, b in enumerate(bodies)])
    res2 = s.put_bodies("T", bodies, queue_id=1)
    assert len(s.commitlog.segments()) > 10
    got = {m.commitlog_offset: m.body for m in all_messages(s, "T")}
    assert len(got) == 600
    for r, b in zip(res, bodies):
        assert got[r.commitlog_offset] == b
    for p, b in zip(res2.commitlog_offsets, bodies):
        assert got[p] == b
    assert s.check().problems == []
    s.close()


def test_big_bodies_written_from_parts_roll_segments_too(root: Path) -> None:
    """Bodies of 2 KiB and more are written with pwritev from the body objects: segment
    rolls, blank trailers and small records in between must come out the same."""
    s = open_store(root, commitlog_segment_size=64 * 1024, max_message_size=16 * 1024)
    sizes = [5000, 10, 16 * 1024, 3000, 100, 2048, 2047, 9000] * 12
    bodies = [bytes([i % 256]) * n for i, n in enumerate(sizes)]
    for i in range(0, len(bodies), 17):
        s.put_bodies("T", bodies[i:i + 17], properties={"KEYS": "k"})
    assert len(s.commitlog.segments()) >= 7
    got = sorted(all_messages(s, "T"), key=lambda m: m.commitlog_offset)
    assert [m.body for m in got] == bodies
    assert s.check().problems == []
    s.close()


def test_pwritev_short_writes_are_finished(tmp_path: Path, monkeypatch) -> None:
    from store.log import logappend as cl
    real = os.pwritev
    monkeypatch.setattr(cl.os, "pwritev", lambda fd, bufs, pos: real(fd, [bytes(bufs[0])[:3]], pos))
    log = CommitLog(tmp_path / "commitlog", SEG)
    log.dir.mkdir()
    fd = os.open(log.segment_path(0), os.O_RDWR | os.O_CREAT)
    try:
        cl._pwritev_all(fd, [b"abcdef", b"ghij", memoryview(b"klm")] * 500, 10)
    finally:
        os.close(fd)
    assert log.segment_path(0).read_bytes() == bytes(10) + b"abcdefghijklm" * 500


def test_big_batches_are_written_a_piece_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """No write call carries much more than ``_WRITE_PIECE``: one call of tens of MB costs the
    kernel several times the copy (large page-cache folios); the bytes land the same."""
    from store.log import logappend as cl
    monkeypatch.setattr(cl, "_WRITE_PIECE", 1000)
    sizes: list[int] = []
    real_v, real_w = os.pwritev, cl.pwrite_all

    def pwritev(fd: int, bufs: list, pos: int) -> int:
        sizes.append(sum(map(len, bufs)))
        return real_v(fd, bufs, pos)

    def pwrite_all(fd: int, data, pos: int) -> None:
        sizes.append(len(data))
        real_w(fd, data, pos)

    monkeypatch.setattr(cl.os, "pwritev", pwritev)
    monkeypatch.setattr(cl, "pwrite_all", pwrite_all)
    parts = [bytes([i]) * 300 for i in range(40)]
    data = bytes(range(256)) * 20
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        cl._pwritev_all(fd, parts, 0)
        cl._pwrite_pieces(fd, data, 12000)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"".join(parts) + data
    assert len(sizes) > 10 and max(sizes) <= 1000 + 300, sizes


def test_a_replaced_segment_is_read_from_its_new_file(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "commitlog", SEG)
    append(log, [b"old record"])
    assert log.read(0).body == b"old record"
    log.segment_path(0).unlink()
    other = CommitLog(tmp_path / "commitlog", SEG)   # another process writes the segment anew
    append(other, [b"new record"])
    assert log.read(0).body == b"new record"
    log.segment_path(0).unlink()
    with pytest.raises(RecordError):
        log.read(0)
