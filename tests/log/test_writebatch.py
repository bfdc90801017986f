"""store/log/writebatch.py: one write batch places, commits and undoes every kind of put."""
from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from store.errors import BadInputError, StoreIOError
from store.log import checkpoint as ckpt
from store.log import writebatch
from store.log.framing import frame_bodies
from store.log.messagestore import Store
from store.log.record import PROP_UNIQ_KEY
from store.log.writebatch import WriteBatch
from tests.log.storetestutil import all_messages, draft, open_store
from tests.procs import MQ


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(tmp_path / "s", default_queues=2)
    yield s
    s.close()


def _state(s: Store) -> tuple[int, list[int], bytes]:
    return (s.commitlog.end(), [s.max_offset("T", q) for q in range(2)],
            s.layout.checkpoint.read_bytes())


def test_drafts_and_raw_bodies_share_one_batch_with_dense_offsets(store: Store) -> None:
    store.put([draft("T", "before", queue_id=0)])
    with store.write_lock():
        batch = WriteBatch(store.engine, sync=False)
        a = batch.put_drafts([draft("T", "d0", queue_id=0), draft("U", "u0"), draft("T", "d1", queue_id=1)])
        b = frame_bodies(batch, "T", [b"r0", b"r1", b"r2"], {"TAGS": "x"}, 0, None)
        c = batch.put_drafts([draft("T", "d2", queue_id=0, properties={"KEYS": "k"})])
        batch.commit()
    assert [r.queue_offset for r in a] == [1, 0, 0]
    assert b.queue_offsets == [2, 3, 4] and c[0].queue_offset == 5
    got = {(m.queue_id, m.queue_offset): m.body for m in all_messages(store, "T")}
    assert got == {(0, 0): b"before", (0, 1): b"d0", (1, 0): b"d1", (0, 2): b"r0", (0, 3): b"r1",
                   (0, 4): b"r2", (0, 5): b"d2"}
    # one batch: every record in log order, the index covering both encoders' records
    assert a[0].commitlog_offset < b.commitlog_offsets[0] < c[0].commitlog_offset
    assert store.find(b.uniq_keys[1]).body == b"r1"
    assert [m.body for m in store.query_key("T", "k")] == [b"d2"]
    assert store.last_write == (a[0].commitlog_offset, store.commitlog.end())


def test_a_batch_abandoned_before_its_commit_writes_nothing(store: Store) -> None:
    store.put([draft("T", "x", queue_id=0)])
    before = _state(store)
    with pytest.raises(BadInputError):
        store.put([draft("T", "ok", queue_id=0), draft("T", "bad", properties={"p": "a\x01b"})])
    assert _state(store) == before
    assert [m.body for m in all_messages(store, "T")] == [b"x"]


@pytest.mark.parametrize("fail_in", ["queue", "index"])
def test_a_failed_commit_is_undone_in_every_file(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                 fail_in: str) -> None:
    store.put([draft("T", "x", queue_id=0)])
    store.put_bodies("T", [b"y"] * 3, queue_id=1)
    before = _state(store)

    def fail(*_a: object, **_k: object) -> None:
        raise StoreIOError("injected")

    if fail_in == "index":
        monkeypatch.setattr(store.index, "add_hashes", fail)
    else:   # the second queue the batch writes to fails, after the first one was written
        calls = []
        for qid in (0, 1):
            q = store.queue("T", qid)

            def second_fails(first: int, entries: bytes, keep: bool = False, checked: bool = False,
                             real=q.append) -> list[tuple[str, int]]:
                calls.append(first)
                if len(calls) == 2:
                    fail()
                return real(first, entries, keep, checked)
            monkeypatch.setattr(q, "append", second_fails)
    with pytest.raises(StoreIOError):
        store.put_bodies("T", [b"a", b"b", b"c", b"d"])
    monkeypatch.undo()
    assert _state(store) == before
    # the next batch takes the same places, and every record reads back
    res = store.put_bodies("T", [b"a", b"b", b"c", b"d"], properties={"KEYS": "kk"})
    assert res.commitlog_offsets[0] == before[0]
    assert sorted(m.body for m in all_messages(store, "T")) == sorted([b"x", b"y", b"y", b"y", b"a", b"b", b"c", b"d"])
    assert len(store.query_key("T", "kk")) == 4


def test_a_batch_of_drafts_keeps_given_unique_keys(store: Store) -> None:
    res = store.put([draft("T", "m", properties={PROP_UNIQ_KEY: "AB" * 16}, queue_id=1)])
    assert res[0].uniq_key == "AB" * 16 and store.find("AB" * 16).body == b"m"


def test_every_framing_path_can_follow_another_in_one_batch(store: Store) -> None:
    """Records framed as parts (small bodies: pwritev), then by the per-record loop (sharding
    keys), then as drafts, then as parts again: each lands after the one before, none lost."""
    with store.write_lock():
        batch = WriteBatch(store.engine, sync=False)
        frame_bodies(batch, "T", [b"s0", b"s1"], {}, 0, None)
        frame_bodies(batch, "T", [b"k0", b"k1"], {}, -1, ["a", "a"])
        batch.put_drafts([draft("T", "d0", queue_id=0)])
        frame_bodies(batch, "T", [b"s2"], {}, 0, None)
        batch.commit()
    got = sorted(all_messages(store, "T"), key=lambda m: m.commitlog_offset)
    assert [m.body for m in got] == [b"s0", b"s1", b"k0", b"k1", b"d0", b"s2"]
    assert store.commitlog.end() == got[-1].commitlog_offset + got[-1].size


def test_an_async_burst_is_not_flushed_under_its_own_writes(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The volume flush of an async writer waits until the oldest write it would cover is
    ``ASYNC_FLUSH_MIN_AGE_S`` old: a burst past the volume starts no fsync beside its own
    writes; the first batch after that age does, and the next burst waits again."""
    clock = [1000.0]
    monkeypatch.setattr(writebatch, "_monotonic", lambda: clock[0])
    monkeypatch.setattr(writebatch, "ASYNC_FLUSH_BYTES", 64 * 1024)
    flushes: list[int] = []
    monkeypatch.setattr(store.engine.durability, "flush_in_background",
                        lambda: (flushes.append(store.commitlog.end()), setattr(store.engine.hints, "flush_due", False)))
    body = b"x" * 40_000
    for _ in range(5):   # 200 KB at once: past the volume, younger than the age
        store.put_bodies("T", [body])
    assert flushes == []
    clock[0] += writebatch.ASYNC_FLUSH_MIN_AGE_S
    store.put_bodies("T", [body])
    assert flushes == [store.commitlog.end()]
    for _ in range(5):   # (the durable point did not move: the fake flush did nothing)
        store.put_bodies("T", [body])
    assert len(flushes) == 1
    clock[0] += writebatch.ASYNC_FLUSH_MIN_AGE_S
    store.put_bodies("T", [body])
    assert len(flushes) == 2


def test_a_handles_first_batch_counts_the_age_of_an_earlier_writers_burst(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oldest unflushed write may be another writer's (a sender that wrote a burst past the
    volume and exited before it was old enough to flush): the next handle's first batch finds
    it at least as old as the checkpoint's last batch, and flushes by volume then, not only
    after ``ASYNC_FLUSH_INTERVAL_S``."""
    monkeypatch.setattr(writebatch, "_monotonic", lambda: 1000.0)   # the burst never ages itself
    monkeypatch.setattr(writebatch, "ASYNC_FLUSH_BYTES", 64 * 1024)
    flushes: list[str] = []

    def spy(s: Store, name: str) -> None:
        monkeypatch.setattr(s.engine.durability, "flush_in_background",
                            lambda: (flushes.append(name), setattr(s.engine.hints, "flush_due", False)))

    spy(store, "first")
    for _ in range(5):   # 200 KB: past the volume, younger than the age
        store.put_bodies("T", [b"x" * 40_000])
    assert flushes == []
    last = ckpt.read(store.layout.checkpoint)
    assert last is not None
    while time.time() * 1000 < last.last_store_ts + writebatch.ASYNC_FLUSH_MIN_AGE_S * 1000:
        time.sleep(0.05)   # (the burst's age passes on the wall clock, which the checkpoint dates it by)
    later = Store.open(tmp_path / "s")
    try:
        spy(later, "later")
        later.put_bodies("T", [b"y"])
    finally:
        later.close()
    assert flushes == ["later"]


def _aged_derived_point(root: Path) -> ckpt.Checkpoint:
    """The checkpoint with its derived flush dated two intervals back: the next async batch
    finds a flush due."""
    cp = ckpt.read(root / "checkpoint")
    assert cp is not None
    cp = dataclasses.replace(cp, derived_at=cp.derived_at - 2 * int(writebatch.ASYNC_FLUSH_INTERVAL_S))
    (root / "checkpoint").write_bytes(cp.pack())
    return cp


def test_short_async_senders_move_the_durable_point_of_derived_files(tmp_path: Path) -> None:
    """A short ``mqctl send`` that finds the derived flush due finishes it before it exits (a
    small one), and the checkpoint says so: the recovery after a power cut starts there, not
    at the last flush a long-running writer made. (The flush used to run in a daemon thread
    that the process's exit always cut short, so a run of short sends never moved it.)"""
    root = tmp_path / "s"
    mq = MQ(root, tmp_path)
    mq.ok("send", "t", "first")
    for i in range(3):
        before = _aged_derived_point(root)
        mq.ok("send", "t", f"m{i}")
        after = ckpt.read(root / "checkpoint")
        assert after is not None and after.written_end > before.written_end
        assert after.derived_end == after.synced_end == after.written_end, (before, after)


@pytest.mark.parametrize("how", ["send", "send_many"])
def test_sync_senders_move_the_durable_point_of_derived_files(tmp_path: Path, how: str) -> None:
    """A ``flush="sync"`` producer (each batch fdatasynced under the lock, no group commit)
    that finds the derived flush due moves the durable point of the consume queues and key
    index too, as ``mqctl send --flush sync`` does every 2 s. It used to never move it: the
    recovery after a power cut re-dispatched everything such a producer ever wrote."""
    import store as api
    root = tmp_path / "s"
    with api.Producer(root, flush="sync") as producer:
        producer.send("t", b"first")
        before = _aged_derived_point(root)
        if how == "send":
            producer.send("t", b"second")
        else:
            producer.send_many("t", [b"second", b"third"])
    after = ckpt.read(root / "checkpoint")   # (close finishes the flush and records it)
    assert after is not None and after.written_end > before.written_end
    assert after.derived_end == after.synced_end == after.written_end, (before, after)


def test_a_big_background_flush_is_not_waited_for_at_close(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``CLOSE_FINISH_BYTES`` of the log to sync, close leaves the flush to die with the
    process (waiting would add a segment's fsync to the end of a big send)."""
    from store.log import flush
    monkeypatch.setattr(flush, "CLOSE_FINISH_BYTES", 10)
    release = threading.Event()
    durability = store.engine.durability
    monkeypatch.setattr(durability, "flush_durable", lambda end=None: release.wait())
    store.put_bodies("T", [b"x" * 100])
    durability.flush_in_background()
    try:
        durability.finish_flush()   # (returns at once: the flush is still waiting)
        assert durability._flusher is not None and durability._flusher.is_alive()
    finally:
        release.set()
