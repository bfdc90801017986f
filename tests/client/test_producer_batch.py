"""store/client/producer.py's batch path: results built fast are SendResults like any other,
and a batch of plain bodies goes through the raw-body framing with the same outcome."""
from __future__ import annotations

from pathlib import Path

import store
from store.client.message import SendResult
from store.client.producer import batch_results, body_list
from store.log.record import offset_msg_id


def test_batch_results_are_the_dataclass_itself() -> None:
    got = batch_results("T", ["A" * 32, "B" * 32], [3, 1], [7, 0], [0, 4242], 1_700_000_000_123)
    want = [SendResult("A" * 32, "T", 3, 7, offset_msg_id(0), 0, 1_700_000_000_123),
            SendResult("B" * 32, "T", 1, 0, offset_msg_id(4242), 4242, 1_700_000_000_123)]
    assert got == want and [type(r) for r in got] == [SendResult, SendResult]
    assert list(map(hash, got)) == list(map(hash, want)) and list(map(repr, got)) == list(map(repr, want))
    assert got[1].deliver_timestamp is None and got[1].to_json() == want[1].to_json()


def test_body_list_keeps_a_list_of_bytes_and_converts_the_rest() -> None:
    bodies = [b"a", b"b"]
    assert body_list(bodies) is bodies
    assert body_list(iter([b"a", "é", bytearray(b"c"), memoryview(b"d")])) == [b"a", "é".encode(), b"c", b"d"]


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
