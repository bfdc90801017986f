"""The vectorised bodies read of store/log/columns.py (numpy, big backlogs only) serves exactly what
the per-record loop serves, and hands any damaged run to the loop, which names the damage."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.log import columns
from tests.log.storetestutil import open_store

pytest.importorskip("numpy")
pytestmark = pytest.mark.usefixtures("python_loop")   # the array check is the C loop's fallback

def _drain(s, topic: str, q: int, per_pull: int = 1000,
           max_bytes: int = 4 << 20) -> tuple[list[tuple[int, bytes]], list, int]:
    out, damaged, pulls, off = [], [], 0, 0
    while True:
        r = s.pull_bodies(topic, q, off, per_pull, max_bytes)
        if r.next_offset == off:
            return out, damaged, pulls
        out += list(zip(r.offsets, r.bodies))
        damaged += r.damaged
        off, pulls = r.next_offset, pulls + 1


@pytest.mark.parametrize("queues,size,max_bytes", [
    (2, 100, 4 << 20), (8, 100, 4 << 20), (8, 1024, 4 << 20), (8, 4096, 4 << 20), (1, 3000, 4 << 20),
    (8, 4096, 100_000),    # sparse runs (interleaved with other queues): the loop
    (8, 20000, 100_000),   # sparse runs of big records: the loop
])
def test_vector_path_serves_what_the_loop_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 queues: int, size: int, max_bytes: int) -> None:
    s = open_store(tmp_path / "s", commitlog_segment_size=1 << 18 if max_bytes > 1 << 20 else 1 << 22)
    s.create_topic("T", queues)
    n = 4000 if size < 4000 else 1500 if size < 10000 else 400
    bodies = [(b"%06d" % i) + bytes([i % 251]) * (size - 6 + i % 5) for i in range(n)]
    for i in range(0, n, 700):
        s.put_bodies("T", bodies[i:i + 700])
    calls = []
    real = columns._vector_run

    def spy(*a, **kw):
        got = real(*a, **kw)
        calls.append(got)
        return got

    monkeypatch.setattr(columns, "_VECTOR_MIN_RUN", 16)
    for q in range(queues):
        monkeypatch.setattr(columns, "VECTOR_MIN_BACKLOG", 10 ** 12)
        monkeypatch.setattr(columns, "_vector_run", lambda *a, **kw: False)
        want, wd, _ = _drain(s, "T", q, max_bytes=max_bytes)
        monkeypatch.setattr(columns, "VECTOR_MIN_BACKLOG", 0)
        monkeypatch.setattr(columns, "_vector_run", spy)
        got, gd, _ = _drain(s, "T", q, max_bytes=max_bytes)
        assert got == want and not wd and not gd
    assert len(s.commitlog.segments()) > 1
    # put_bodies writes each call's bodies queue by queue: with a big enough window a queue's
    # run is dense, and dense runs of small records take the vector path
    if size <= 1024 and max_bytes > 1 << 20:
        assert any(calls)
    s.close()


def test_a_damaged_record_falls_back_to_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "VECTOR_MIN_BACKLOG", 0)
    s = open_store(tmp_path / "s")
    s.create_topic("T", 1)
    res = s.put_bodies("T", [b"m%05d" % i + b"." * 90 for i in range(600)])
    victim = res.commitlog_offsets[300]
    path = s.commitlog.segment_path(0)
    with open(path, "r+b") as fh:      # flip a body byte: only the record CRC tells
        fh.seek(victim + 88 + 3)
        b = fh.read(1)
        fh.seek(victim + 88 + 3)
        fh.write(bytes([b[0] ^ 0x20]))
    got, damaged, _ = _drain(s, "T", 0)
    assert [o for o, _ in got] == [i for i in range(600) if i != 300]
    assert [o for o, _ in damaged] == [300] and "CRC" in damaged[0][1]
    s.close()
