"""What the iterator of :meth:`store.Consumer.messages` keeps read ahead: a few MiB in all,
shared by the queues it holds, not RocketMQ's 1000 messages a queue (which at 64 KiB a
message was the whole backlog, every page of it faulted in afresh)."""
from __future__ import annotations

from pathlib import Path

import pytest

import store
from store.client import consumer as consumer_mod
from store.client.pulling import PULL_MIN_BYTES
from store.log.messagestore import Store

SMALL = 16 * 1024
BIG = 600 * 1024    # more than a queue's share on its own: still delivered, one at a time


def test_the_iterator_reads_ahead_within_its_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    with store.Admin(root) as admin:
        admin.create_topic("Q", queues=2)
    bodies = [(f"{i:05d}".encode() * (BIG if i % 97 == 5 else SMALL))[:BIG if i % 97 == 5 else SMALL]
              for i in range(300)]
    with store.Producer(root) as p:
        for i in range(0, len(bodies), 50):
            p.send_many("Q", bodies[i:i + 50])
    monkeypatch.setattr(consumer_mod, "ITER_CACHE_BYTES", 2 * PULL_MIN_BYTES)
    share = PULL_MIN_BYTES   # each of the 2 queues
    most = 0
    got: dict[int, list[int]] = {}
    with store.Consumer("Q", "G", root, start_from="first") as c:
        pqs = c.runtime.held.pqs
        for m in c.messages(exit_at_end=True):
            most = max(most, sum(pq.bytes for pq in list(pqs.values())))
            got.setdefault(m.queue_id, []).append(m.queue_offset)
            assert m.body == bodies[int(m.body[:5])]
    # a queue's pulls stop once its share is reached: at most the share and the record that reached it
    assert 0 < most <= 2 * (share + BIG)
    assert {q: offs == list(range(len(offs))) for q, offs in got.items()} == {0: True, 1: True}
    assert sum(map(len, got.values())) == len(bodies)
    with store.Consumer("Q", "G", root) as c:
        assert list(c.messages(exit_at_end=True)) == []   # all of it committed


def test_the_async_iterator_reads_ahead_within_the_same_budget(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncConsumer.messages is the same iterator: its pulls keep the same budget, not 1000
    messages a queue (200 bodies of 64 KiB here: the whole backlog, 12.5 MiB)."""
    from store.client import aio_consumer as aio_mod
    root = tmp_path / "s"
    with store.Admin(root) as admin:
        admin.create_topic("Q", queues=1)
    body = 64 * 1024
    with store.Producer(root) as p:
        for i in range(0, 200, 50):
            p.send_many("Q", [f"{k:05d}".encode() * (body // 5) for k in range(i, i + 50)])
    monkeypatch.setattr(consumer_mod, "ITER_CACHE_BYTES", 2 * PULL_MIN_BYTES)
    monkeypatch.setattr(aio_mod, "ITER_CACHE_BYTES", 2 * PULL_MIN_BYTES)

    async def main() -> tuple[int, list[int]]:
        most, offs = 0, []
        async with store.AsyncConsumer("Q", "G", root, start_from="first") as c:
            async for m in c.messages(exit_at_end=True):
                rt = c._rt
                assert rt is not None
                most = max(most, sum(pq.bytes for pq in list(rt.held.pqs.values())))
                offs.append(m.queue_offset)
        return most, offs

    import asyncio
    most, offs = asyncio.run(main())
    assert offs == list(range(200))
    # the one queue's pulls stop once the budget is reached: at most it and one pull's record past it
    assert 0 < most <= 2 * PULL_MIN_BYTES + body


def test_a_pull_across_several_windows_delivers_each_message_once(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A queue's pull served by several windows of a shared read (its share of the read-ahead
    spans more of the interleaved log than one window) is put as one run: every message once,
    in queue order, a damaged record in a later window skipped and named, the rest committed."""
    root = tmp_path / "s"
    with store.Admin(root) as admin:
        admin.create_topic("Q", queues=4)
    n, size = 12_000, 1500   # ~5 MB of each queue's records, interleaved over ~20 MB of log
    with store.Producer(root) as p:
        for i in range(0, n, 1000):
            p.send_many("Q", [f"{k:06d}".encode().ljust(size, b".") for k in range(i, i + 1000)])
    s = Store.open(root)
    try:
        # queue 1's record 700: ~4.6 MB into the log, the third window of the queue's first pull
        bad_phys = s.pull_records("Q", 1, 700, 1).phys[0]
        seg = s.engine.commitlog.segment_size
    finally:
        s.close()
    log = root / "commitlog" / f"{bad_phys - bad_phys % seg:020d}"
    with open(log, "r+b") as fh:
        fh.seek(bad_phys % seg + 100)
        fh.write(b"X")
    got: dict[int, list[int]] = {}
    with store.Consumer("Q", "G", root, start_from="first") as c:
        for m in c.messages(exit_at_end=True):
            got.setdefault(m.queue_id, []).append(m.queue_offset)
            assert m.body == f"{int(m.body[:6]):06d}".encode().ljust(size, b".")
    want = {q: list(range(n // 4)) for q in range(4)}
    want[1].remove(700)
    assert got == want
    assert "damaged" in caplog.text and "Q/1@700" in caplog.text
    with store.Consumer("Q", "G", root) as c:
        assert list(c.messages(exit_at_end=True)) == []   # all of it committed
