"""The read side's fast paths give what the general ones give: messages built from a pull's
columns (lazy properties) equal the ones built from decoded records, a shared read of several
queues (``pull_many``) equals each queue's own pull, and the process queue's slice bookkeeping
hands out, releases and commits as the per-message one did."""
from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path

import pytest

import store
from store.client.message import Message, MessageRows
from store.client.process_queue import ProcessQueue
from store.log.messagestore import Store

np = pytest.importorskip("numpy")   # loaded: runs of 128 and more are checked as arrays


def _rows(*columns: object) -> list[Message]:
    return list(MessageRows(*columns))  # type: ignore[arg-type]


@pytest.fixture()
def filled(tmp_path: Path) -> Store:
    """A topic of 4 queues whose records are interleaved in the log, with properties."""
    root = tmp_path / "s"
    s = Store.open(root, create=True)
    s.create_topic("T", queues=4)
    s.close()
    with store.Producer(root) as p:
        for i in range(0, 2000, 50):
            p.send_many("T", [f"m{j}" * (1 + j % 7) for j in range(i, i + 50)], tags=f"t{i % 3}")
        p.send("T", "keyed", keys=["k1", "k2"], properties={"a": "b"}, queue=2)
    return Store.open(root)


def test_messages_from_columns_equal_those_from_records(filled: Store) -> None:
    for q in range(4):
        c = filled.pull_records("T", q, 0, 1000)
        exact = filled.pull_columns("T", q, 0, 1000, with_phys=True)   # the record-by-record loop
        assert (c.offsets, c.bodies, c.born, c.stored, c.phys, c.reconsume, c.props) == \
            (exact.offsets, exact.bodies, exact.born, exact.stored, exact.phys, exact.reconsume, exact.props)
        lazy = _rows("T", q, c.offsets, c.bodies, c.born, c.stored, c.phys, c.reconsume, c.props)
        eager = [Message.from_record(m) for m in filled.pull("T", q, 0, 1000).messages]
        assert lazy == eager and len(lazy) > 400
        for a, b in zip(lazy, eager):
            assert (a.msg_id, a.tags, a.keys, a.properties, a.offset_msg_id) == \
                (b.msg_id, b.tags, b.keys, b.properties, b.offset_msg_id)
            assert hash(a) == hash(b)
    keyed = [m for m in _rows("T", 2, *_cols(filled, 2)) if m.text == "keyed"][0]
    assert (keyed.keys, keyed.properties) == (["k1", "k2"], {"a": "b"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        keyed.body = b"x"   # type: ignore[misc]
    assert pickle.loads(pickle.dumps(keyed)) == keyed == copy.copy(keyed)
    assert dataclasses.asdict(keyed)["msg_id"] == keyed.msg_id
    assert type(keyed) is store.Message


def test_a_messages_properties_cannot_be_changed_through_it(filled: Store) -> None:
    """``Message`` is frozen, and so are its properties: changing them through one reader's
    message would change what every later reader of that message sees. They stay a ``dict``
    (as the API says: JSON, ``dict(...)``, pickling and ``asdict`` work); a copy may be changed."""
    keyed = [m for m in _rows("T", 2, *_cols(filled, 2)) if m.text == "keyed"][0]
    eager = Message.from_record(filled.pull("T", 2, keyed.queue_offset, 1).messages[0])
    made = Message("T", 0, 0, "id", b"x", properties={"a": "b"})
    plain = [m for m in _rows("T", 0, *_cols(filled, 0))][0]
    for m in (keyed, eager, made, plain):
        with pytest.raises(TypeError):
            m.properties["a"] = "changed"
        for change in ("update", "setdefault", "pop", "clear", "popitem"):
            with pytest.raises(TypeError):
                getattr(m.properties, change)(*(("a", "z") if change in ("setdefault",) else
                                                ("a",) if change == "pop" else
                                                ({"a": "z"},) if change == "update" else ()))
        with pytest.raises(TypeError):   # (nor filled again, the shared empty one neither)
            m.properties.__init__(x="1")
        assert isinstance(m.properties, dict)
    assert Message("T", 0, 0, "id", b"x").properties == {}
    assert keyed.properties == eager.properties == made.properties == {"a": "b"} and plain.properties == {}
    copied = dict(keyed.properties)
    copied["a"] = "mine"
    assert keyed.properties == {"a": "b"}
    assert json.dumps(keyed.properties) == '{"a": "b"}'
    assert pickle.loads(pickle.dumps(keyed)).properties == {"a": "b"}
    assert dataclasses.asdict(keyed)["properties"] == {"a": "b"}


def _cols(s: Store, q: int) -> tuple[list[int], list[bytes], list[int], list[int], list[int], list[int], list[bytes]]:
    c = s.pull_records("T", q, 0, 1000)
    return c.offsets, c.bodies, c.born, c.stored, c.phys, c.reconsume, c.props


@pytest.mark.parametrize("full", [True, False])
def test_a_shared_read_equals_each_queues_own_pull(filled: Store, full: bool) -> None:
    offsets = {q: 0 for q in range(4)}
    got: dict[int, list[bytes]] = {q: [] for q in range(4)}
    props: dict[int, list[bytes]] = {q: [] for q in range(4)}
    while True:
        runs = filled.pull_many("T", [(q, offsets[q], 120, 4096) for q in range(4) if offsets[q] < 501], full)
        if not runs:
            break
        for q, c in runs.items():
            assert c.offsets == list(range(offsets[q], c.next_offset))
            got[q] += c.bodies
            props[q] += c.props
            offsets[q] = c.next_offset
    for q in range(4):
        own = filled.pull_records("T", q, 0, offsets[q])
        assert got[q] == own.bodies and offsets[q] >= 400
        assert props[q] == (own.props if full else [])


def test_a_shared_read_stops_at_what_the_queues_index(filled: Store) -> None:
    """Each run ends at its queue's end: nothing past an indexed record is served."""
    ends = {q: filled.max_offset("T", q) for q in range(4)}
    runs = filled.pull_many("T", [(q, ends[q] - 3, 1000, 1 << 20) for q in range(4)], True)
    assert {q: c.next_offset for q, c in runs.items()} == {q: ends[q] for q in runs}


def test_process_queue_hands_out_releases_and_commits_in_order() -> None:
    pq = ProcessQueue("T", 0)
    msgs = _rows("T", 0, list(range(10)), [b"x"] * 10, [0] * 10, [0] * 10, list(range(10)), [0] * 10,
                        [b""] * 10)
    assert pq.put_run(list(range(10)), msgs, 10) == 10
    a, b = pq.next_batch(3), pq.next_batch(3)
    assert [m.queue_offset for m in a + b] == [0, 1, 2, 3, 4, 5]
    pq.release(a)                                   # handed back: out again before what follows
    assert [m.queue_offset for m in pq.next_batch(4)] == [0, 1, 2, 6]
    assert pq.remove(b) == 0                        # 0..2 and 6 still out: the commit waits
    c = pq.next_batch(10)
    assert [m.queue_offset for m in c] == [7, 8, 9]
    assert pq.remove(c) == 0
    assert pq.remove([m for m in msgs if m.queue_offset in (0, 1, 2, 6)]) == 10
    assert pq.cached() == 0 and pq.bytes == 0 and not pq.in_flight
    more = _rows("T", 0, [10, 11], [b"y", b"z"], [0, 0], [0, 0], [0, 0], [0, 0], [b"", b""])
    pq.put_run([10, 11], more, 2)
    first = pq.next_batch(1)
    assert pq.remove(first) == 11 and pq.remove(pq.next_batch(5)) == 12


def test_a_raw_read_hands_big_bodies_out_as_views(tmp_path: Path) -> None:
    """Raw bodies of 1 KiB and more come as views into the read (a raw consumer writes them
    out without copying each first), from a shared read and from one queue's own pull when
    asked for; smaller ones, full reads and plain pulls give bytes."""
    root = tmp_path / "s"
    with store.Producer(root) as p:
        p.send_many("T", [bytes([65 + i % 26]) * (2048 + i) for i in range(1600)])
        p.send_many("U", [b"small %d" % i for i in range(1600)])
    s = Store.open(root)
    n = 8   # the default of an auto-created topic
    for topic, kind in (("T", memoryview), ("U", bytes)):
        own = {q: s.pull_records(topic, q, 0, 1000).bodies for q in range(n)}
        assert all(len(b) >= 150 for b in own.values())
        for full in (False, True):
            runs = s.pull_many(topic, [(q, 0, 1000, 1 << 30) for q in range(n)], full)
            assert runs and all(c.bodies == own[q][:len(c.bodies)] for q, c in runs.items())
            assert {type(b) for c in runs.values() for b in c.bodies} == {kind if not full else bytes}
        for views in (True, False):
            r = s.pull_bodies(topic, 3, 0, 1000, views=views)
            assert r.bodies == own[3]
            assert {type(b) for b in r.bodies} == {kind if views else bytes}
