"""Bulk reads of big bodies (store/log/columns.py): handed out as views into the read's
buffers, never copied, and still checked record by record as :meth:`Store.pull` checks them;
the vectorised check of a dense run finds damage in every field it covers."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.log import format as F
from store.log.columns import _VECTOR_MIN_RUN, _VIEW_MIN_SIZE
from store.log.messagestore import Store
from tests.log.storetestutil import open_store


def body(i: int, size: int) -> bytes:
    return (b"%06d" % i) + bytes([65 + i % 26]) * (size - 6)


def pull_all(s: Store, q: int, views: bool, count: int) -> tuple[list[bytes | memoryview], list[int], list[int]]:
    bodies: list[bytes | memoryview] = []
    offsets: list[int] = []
    damaged: list[int] = []
    off = 0
    while off < s.max_offset("T", q):
        r = s.pull_bodies("T", q, off, count, max_bytes=1 << 20, views=views)
        assert r.next_offset > off
        bodies += r.bodies
        offsets += r.offsets
        damaged += [d for d, _ in r.damaged]
        off = r.next_offset
    return bodies, offsets, damaged


def flip(s: Store, commitlog_offset: int, at: int) -> None:
    """Flip one byte of the record at ``commitlog_offset`` (``at`` bytes into it)."""
    base = s.commitlog.segment_of(commitlog_offset)
    seg = s.commitlog.segment_path(base)
    data = bytearray(seg.read_bytes())
    data[commitlog_offset - base + at] ^= 0x01
    seg.write_bytes(bytes(data))


@pytest.mark.parametrize("queues", [1, 3])
def test_big_bodies_of_the_exact_read_are_views_checked_like_pull(tmp_path: Path, queues: int) -> None:
    # one queue: its records are one span; three interleaved with big records: read one by one
    s = open_store(tmp_path / "s", max_message_size=200_000)
    s.create_topic("T", queues)
    sizes = [40, _VIEW_MIN_SIZE // 2, _VIEW_MIN_SIZE + 600, 70_000, 5000, 100]
    sent = [body(i, sizes[i % len(sizes)]) for i in range(60)]
    for i, b in enumerate(sent):
        s.put_bodies("T", [b], queue_id=i % queues)
    count = _VECTOR_MIN_RUN - 1   # below a vectorised run: the exact loop reads them
    for q in range(queues):
        want = [m.body for m in s.iter_queue("T", q, 0)]
        got, offsets, damaged = pull_all(s, q, True, count)
        assert [bytes(b) for b in got] == want and not damaged
        assert offsets == list(range(len(want)))
        for b in got:   # big bodies are not copied out of the read, small ones are bytes
            assert isinstance(b, memoryview) == (len(b) > _VIEW_MIN_SIZE), len(b)
        plain, _, _ = pull_all(s, q, False, count)
        assert all(type(b) is bytes for b in plain) and plain == want
    # a flipped byte in a big body: that record is skipped as damaged, with or without views
    victim = s.pull("T", 0, 3, 1).messages[0]
    assert len(victim.body) == 70_000
    flip(s, victim.commitlog_offset, F.RECORD_HEADER_SIZE + 30_000)
    for views in (True, False):
        got, offsets, damaged = pull_all(s, 0, views, count)
        assert damaged == [3] and 3 not in offsets
        assert [bytes(b) for b in got] == [m.body for m in s.iter_queue("T", 0, 0)]
    r = s.pull_bodies("T", 0, 3, 1, views=True)
    assert "CRC" in r.damaged[0][1]
    s.close()


def test_vectorised_check_of_a_dense_run_finds_damage_in_every_field(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    s = open_store(tmp_path / "s")
    s.create_topic("T", 1)
    n = _VECTOR_MIN_RUN + 72
    s.put_bodies("T", [body(i, 900 + i % 7 * 150) for i in range(n)], queue_id=0)
    want = [m.body for m in s.iter_queue("T", 0, 0)]
    got, offsets, damaged = pull_all(s, 0, True, 1000)
    assert [bytes(b) for b in got] == want and offsets == list(range(n)) and not damaged
    msgs = s.pull("T", 0, 0, n).messages
    topic_at = F.RECORD_HEADER_SIZE + len(msgs[40].body) + 1   # the topic's first byte
    # a header field (the queue offset), the topic, a CRC digit, a body byte
    hits = {20: 20, 40: topic_at, 60: msgs[60].size - 3, 80: F.RECORD_HEADER_SIZE + 5}
    for q, at in hits.items():
        flip(s, msgs[q].commitlog_offset, at)
    got, offsets, damaged = pull_all(s, 0, True, 1000)
    assert damaged == sorted(hits)
    assert offsets == [q for q in range(n) if q not in hits]
    assert [bytes(b) for b in got] == [want[q] for q in offsets]
    s.close()


def test_rows_are_the_bytes_at_each_offset() -> None:
    np = pytest.importorskip("numpy")
    from store.log.arrays import rows
    span = bytes(range(256)) * 40
    at = np.array([0, 1, 7, 255, 1000, len(span) - 88], np.int64)
    got = rows(span, at, 88)
    assert got.shape == (len(at), 88) and got.dtype == np.uint8
    assert [bytes(r) for r in got] == [span[a:a + 88] for a in at.tolist()]
    assert rows(span, at[:0], 9).shape == (0, 9)
    with pytest.raises(IndexError):   # past the end: an error, never bytes from elsewhere
        rows(span, np.array([len(span) - 87], np.int64), 88)
