"""One message on its own (``store/log/sendone.py``, behind ``Producer.send``): the very bytes
``framing.py`` writes for a batch of that one body, and sends that interleave with other
writers' (another handle with its own kept descriptors, a ``mqctl send`` process) as batches
do."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import store
from store.errors import BadInputError, UsageError
from store.log import writebatch
from store.log.sendone import put_one
from tests.log.storetestutil import all_messages, open_store
from tests.procs import mqctl

CASES = [
    ({}, None, -1),
    ({"TAGS": "paid"}, None, 2),
    ({"TAGS": "t", "KEYS": "k1 k2", "x": "y"}, None, -1),
    ({"a": "b"}, "order-7", -1),
    ({}, "", -1),
]


@pytest.mark.parametrize("props,key,queue", CASES)
def test_one_message_is_framed_as_a_batch_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 props: dict[str, str], key: str | None, queue: int) -> None:
    monkeypatch.setattr(writebatch.time, "time", lambda: 1_700_000_000.25)
    raws = []
    for name, one in (("batch", False), ("one", True)):
        s = open_store(tmp_path / name, default_queues=4)
        try:
            uk = s.uniq_keys
            uk.prefix, uk.month_start_ms, uk.counter = "0A0B0C0D00010E0F1011", 1_699_000_000_000, 0xFFFF
            s.engine.writer.round_robin["T"] = 1
            body = b"payload \x00\x01\x02 %d" % len(props)
            if one:
                r = put_one(s, "T", body, dict(props), queue, key)
                where = (r.queue_id, r.queue_offset, r.commitlog_offset, r.uniq_key)
            else:
                b = s.put_bodies("T", [body], properties=dict(props), queue_id=queue,
                                 sharding_keys=None if key is None else [key])
                where = (b.queue_ids[0], b.queue_offsets[0], b.commitlog_offsets[0], b.uniq_keys[0])
            raws.append((where, s.commitlog.read_bytes(0, 1 << 12), s.check().problems))
            (m,) = all_messages(s, "T")
            assert m.body == body and m.uniq_key == where[3]
            if "KEYS" in props:
                assert [x.body for x in s.query_key("T", "k2")] == [body]
            assert s.find(where[3]).body == body
        finally:
            s.close()
    assert raws[0] == raws[1]
    assert raws[1][2] == []


def test_refusals_leave_nothing(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", default_queues=2)
    try:
        s.create_topic("O", 2, order=True)
        with pytest.raises(BadInputError):
            put_one(s, "T", b"x", {"TAGS": "a\x01b"})
        with pytest.raises(BadInputError):
            put_one(s, "T", b"x", {}, sharding_key="k\x02")
        with pytest.raises(UsageError):
            put_one(s, "O", b"x", {})
        with pytest.raises(UsageError):
            put_one(s, "O", b"x", {}, queue_id=2)
        assert s.commitlog.end() == 0 and not s.has_topic("T")
    finally:
        s.close()


def test_producers_in_turn_on_one_store_keep_dense_offsets(tmp_path: Path) -> None:
    """Two producers (each its own handle: descriptors, checkpoint, queue tails kept between
    sends) and a ``mqctl send`` process take turns on one queue: each send starts where the
    last one, by whichever writer, ended."""
    root = tmp_path / "s"
    open_store(root, default_queues=1).close()
    sent = []
    with store.Producer(root, flush="sync") as a, store.Producer(root, flush="sync") as b:
        for i in range(6):
            for name, p in (("a", a), ("b", b)):
                r = p.send("T", f"{name}{i}".encode(), keys=[f"{name}{i}"])
                sent.append((f"{name}{i}", r.queue_offset))
            res = mqctl(root, "send", "T", f"c{i}", "--json", "--flush", "sync")
            assert res.returncode == 0, res.stderr
            sent.append((f"c{i}", json.loads(res.stdout)["queueOffset"]))
    assert [off for _, off in sent] == list(range(len(sent)))
    s = open_store(root)
    try:
        got = {m.queue_offset: m.body.decode() for m in all_messages(s, "T")}
        assert got == {off: body for body, off in sent}
        assert [m.body for m in s.query_key("T", "b3")] == [b"b3"]
        assert s.check().problems == []
    finally:
        s.close()


def test_a_sync_send_whose_fdatasync_fails_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The consume-queue and index entries are written while the log's fdatasync runs; when
    it fails, the send fails and every file is cut back: nothing of it is served or indexed,
    and the next send takes its place."""
    import errno
    import os

    from store.errors import StoreIOError
    s = open_store(tmp_path / "s", default_queues=1)
    try:
        put_one(s, "T", b"first", {"KEYS": "k"}, sync=True)
        real = os.fdatasync

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "injected")
        monkeypatch.setattr(os, "fdatasync", failing)
        with pytest.raises(StoreIOError):
            put_one(s, "T", b"lost", {"KEYS": "k"}, sync=True)
        monkeypatch.setattr(os, "fdatasync", real)
        assert [m.body for m in all_messages(s, "T")] == [b"first"]
        assert [m.body for m in s.query_key("T", "k")] == [b"first"]
        r = put_one(s, "T", b"second", {"KEYS": "k"}, sync=True)
        assert r.queue_offset == 1
        assert [m.body for m in all_messages(s, "T")] == [b"first", b"second"]
        assert [m.body for m in s.query_key("T", "k")] == [b"second", b"first"]
        assert s.check().problems == []
    finally:
        s.close()
