"""store/client/producer.py's batch path: results built fast are SendResults like any other,
and a batch of plain bodies goes through the raw-body framing with the same outcome."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

import store
from store.client.producer import Body, body_list
from store.client.sendresult import SendResult, send_results
from store.log.record import offset_msg_id


def _batch() -> list[SendResult]:
    return send_results("T", ["A" * 32, "B" * 32], [3, 1], [7, 0], [0, 4242], 1_700_000_000_123)


def _want() -> list[SendResult]:
    return [SendResult("A" * 32, "T", 3, 7, offset_msg_id(0), 0, 1_700_000_000_123),
            SendResult("B" * 32, "T", 1, 0, offset_msg_id(4242), 4242, 1_700_000_000_123)]


def test_batch_results_are_the_dataclass_itself() -> None:
    got, want = _batch(), _want()
    assert got == want and [type(r) for r in got] == [SendResult, SendResult]
    assert list(map(hash, got)) == list(map(hash, want)) and list(map(repr, got)) == list(map(repr, want))
    assert got[1].deliver_timestamp is None and got[1].to_json() == want[1].to_json()
    assert {got[0]: 1}[want[0]] == 1 and got[0] != got[1]


@pytest.mark.parametrize("read", [
    lambda r: r.offset_msg_id, repr, hash, dataclasses.astuple, dataclasses.asdict, SendResult.to_json,
    lambda r: dataclasses.replace(r, queue_id=5).offset_msg_id, copy.copy, copy.deepcopy,
    lambda r: pickle.loads(pickle.dumps(r)),
], ids=["attr", "repr", "hash", "astuple", "asdict", "to_json", "replace", "copy", "deepcopy", "pickle"])
def test_a_batch_result_reads_as_a_constructed_one_whichever_way_it_is_read_first(read: object) -> None:
    got, want = _batch()[1], _want()[1]
    assert read(got) == read(want)   # type: ignore[operator]
    assert got == want and got.offset_msg_id == offset_msg_id(4242)


def test_a_send_result_is_immutable_and_has_only_its_fields() -> None:
    r = _batch()[0]
    assert [f.name for f in dataclasses.fields(r)] == [f.name for f in dataclasses.fields(SendResult)]
    for name, value in (("queue_id", 9), ("offset_msg_id", "x"), ("extra", 1)):
        with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
            setattr(r, name, value)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = r.nope
    assert not hasattr(r, "__dict__") and r.queue_id == 3 and r.offset_msg_id == offset_msg_id(0)


def test_body_list_keeps_a_list_of_bytes_and_converts_the_rest() -> None:
    bodies = [b"a", b"b"]
    assert body_list(bodies) is bodies
    mixed: list[Body] = [b"a", "é", bytearray(b"c"), memoryview(b"d")]
    assert body_list(iter(mixed)) == [b"a", "é".encode(), b"c", b"d"]


def test_send_many_results_point_at_the_stored_messages(tmp_path: Path) -> None:
    with store.Producer(tmp_path / "s") as p:
        res = p.send_many("T", [b"m%d" % i for i in range(600)] + ["text"], tags="tg")
    with store.Consumer("T", group="G", path=tmp_path / "s", start_from="first") as c:
        got = {m.msg_id: m for m in c.messages(exit_at_end=True)}
    assert len(res) == 601 and len({r.msg_id for r in res}) == 601
    for i, r in enumerate(res):
        m = got[r.msg_id]
        assert (m.queue_id, m.queue_offset, m.body) == (r.queue_id, r.queue_offset, b"m%d" % i if i < 600 else b"text")
        assert r.offset_msg_id == offset_msg_id(r.commitlog_offset) and r.topic == "T"


@pytest.mark.parametrize("keys", [False, True], ids=["round-robin", "sharding-keys"])
def test_a_batch_of_more_bodies_than_the_key_counter_has_values_keeps_every_msg_id_unique(
        tmp_path: Path, keys: bool) -> None:
    """A unique key is host, pid, random, millisecond and a 16-bit counter: a batch shares one
    millisecond, so past 65,536 bodies its counter came round again (the same ids twice in one
    send). The next batch, made in the same millisecond, must not reuse them either."""
    n = 65536 + 3000
    bodies = [b"%d" % i for i in range(n)]
    with store.Producer(tmp_path / "s") as p:
        res = p.send_many("T", bodies, **({"sharding_key": "k"} if keys else {}))
        res += p.send_many("T", [b"after"] * 600)
    ids = [r.msg_id for r in res]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    with store.Consumer("T", group="G", path=tmp_path / "s", start_from="first") as c:
        got = {m.msg_id: m.body for m in c.messages(exit_at_end=True)}
    assert [got[i] for i in ids] == bodies + [b"after"] * 600


@pytest.mark.parametrize("big", [False, True], ids=["small", "64KiB"])
def test_send_bodies_takes_a_memoryview_of_wider_items_by_its_bytes(tmp_path: Path, big: bool) -> None:
    """A memoryview of ``array('i')`` counts items in ``len()``: its record must still say
    its length in bytes (the log stays framed) and its size be checked in bytes."""
    import array
    n = 16384 if big else 5
    wide = memoryview(array.array("i", range(n)))
    bodies = [wide, memoryview(b"plain"), wide[1:3]]
    with store.Producer(tmp_path / "s") as p:
        p.send_bodies("T", bodies, queue=0)
        p.send_many("T", [b"after"], queue=0)
    with store.Consumer("T", group="G", path=tmp_path / "s", start_from="first") as c:
        got = [m.body for m in c.messages(exit_at_end=True)]
    assert got == [wide.tobytes(), b"plain", wide[1:3].tobytes(), b"after"]
    with store.Admin(tmp_path / "s") as a:
        assert not a.check().problems
    store.create_store(tmp_path / "t", store.StoreSettings(max_message_size=1024))
    with store.Producer(tmp_path / "t") as p, pytest.raises(store.errors.MessageTooLargeError):
        p.send_bodies("T", [memoryview(array.array("i", range(300)))])   # 1,200 bytes in 300 items


@pytest.mark.parametrize("case", ["wide-after-bytes", "2d", "array", "strided"])
def test_send_bodies_frames_every_buffer_by_its_bytes_wherever_it_stands(tmp_path: Path, case: str) -> None:
    """Not only the first body: a wide or 2-D memoryview after a bytes body, an ``array('i')``
    itself, a strided view: each record says its length in bytes, the log stays framed."""
    import array
    wide = memoryview(array.array("i", range(5)))
    bodies: list[Any] = {"wide-after-bytes": [b"first", wide],
                         "2d": [b"first", memoryview(b"abcdef").cast("B", shape=[2, 3])],
                         "array": [b"first", array.array("i", range(5))],
                         "strided": [b"first", memoryview(b"abcdef")[::2]]}[case]
    with store.Producer(tmp_path / "s") as p:
        p.send_bodies("T", bodies, queue=0)
        p.send_many("T", [b"after"], queue=0)
    with store.Consumer("T", group="G", path=tmp_path / "s", start_from="first") as c:
        got = [m.body for m in c.messages(exit_at_end=True)]
    assert got == [bytes(memoryview(b).tobytes()) for b in bodies] + [b"after"]
    with store.Admin(tmp_path / "s") as a:
        assert not a.check().problems


@pytest.mark.parametrize("flush", ["async", "sync-group"])
def test_a_resend_keeps_the_id_it_is_given(tmp_path: Path, flush: str) -> None:
    """``msg_id=`` (``msg_ids=`` per body, in every send call and the asyncio producer): the
    message keeps the id of the one it repeats; the others get new ones; the id is checked."""
    import asyncio
    kw: dict[str, Any] = {"flush": "sync", "group_commit": True} if flush == "sync-group" else {}
    with store.Producer(tmp_path, **kw) as p:
        first = p.send("T", b"a")
        again = p.send("T", b"a", msg_id=first.msg_id.lower())
        many = p.send_many("T", [b"b", b"c"], msg_ids=[None, first.msg_id])
        late = p.send("T", b"d", msg_id=first.msg_id, delay=1)
        drafts = p.send_drafts([store.Draft("T", b"e"), store.Draft("T", b"f")], msg_ids=[first.msg_id, None])
        for bad in ["zz", "G" * 32, first.offset_msg_id, 7]:
            with pytest.raises(store.BadInputError, match="message id|offset message id"):
                p.send("T", b"x", msg_id=bad)   # type: ignore[arg-type]
        with pytest.raises(store.BadInputError):
            p.send_many("T", [b"x", b"y"], msg_ids=[None, "nothex"])
        with pytest.raises(store.UsageError, match="one id"):
            p.send_many("T", [b"x", b"y"], msg_ids=[first.msg_id])
    assert again.msg_id == first.msg_id and many[1].msg_id == first.msg_id and many[0].msg_id != first.msg_id
    assert late.msg_id == first.msg_id and drafts[0].msg_id == first.msg_id != drafts[1].msg_id

    async def aio() -> list[str]:
        async with store.AsyncProducer(tmp_path) as ap:
            one = await ap.send("T", b"g", msg_id=first.msg_id)
            two = await ap.send_many("T", [b"h", b"i"], msg_ids=[first.msg_id, None])
        return [one.msg_id, two[0].msg_id, two[1].msg_id]
    got = asyncio.run(aio())
    assert got[:2] == [first.msg_id] * 2 and got[2] != first.msg_id
    from store.log.messagestore import Store
    s = Store.open(tmp_path)
    try:
        keys = [m.uniq_key for q in s.queue_ids("T") for m in s.iter_queue("T", q, 0)]
    finally:
        s.close()
    # of a a b c e f g h i, six carry the first id (d is parked until due)
    assert keys.count(first.msg_id) == 6 and len(keys) == 9
