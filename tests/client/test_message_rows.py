"""A pull's rows (:class:`MessageRows`) as the consumer caches and hands them out: the messages
they build are the ones built from records, and a process queue of rows hands out, releases
and commits as a process queue of messages does."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import store
from store.client.message import Message, MessageRows
from store.client.process_queue import MAX_CHUNKS, ProcessQueue
from store.log.messagestore import Store
from tests.procs import wait_for


@pytest.fixture()
def filled(tmp_path: Path) -> Store:
    root = tmp_path / "s"
    with store.Producer(root) as p:
        for i in range(0, 600, 50):
            p.send_many("T", [f"m{j}" * (1 + j % 5) for j in range(i, i + 50)], tags=f"t{i % 3}")
        p.send("T", "keyed", keys=["k1", "k2"], properties={"a": "b"}, queue=1)
    return Store.open(root)


def _rows(s: Store, q: int) -> MessageRows:
    c = s.pull_records("T", q, 0, 1000)
    return MessageRows("T", q, c.offsets, [bytes(b) for b in c.bodies], c.born, c.stored, c.phys, c.reconsume,
                       c.props)


def test_rows_build_the_messages_records_give(filled: Store) -> None:
    q = 1
    rows = _rows(filled, q)
    eager = [Message.from_record(m) for m in filled.pull("T", q, 0, 1000).messages]
    assert len(rows) == len(eager) > 50
    assert list(rows) == eager
    assert [repr(m) for m in rows] == [repr(m) for m in eager]
    assert rows[0] == eager[0] and rows[-1] == eager[-1] and rows[0] is not rows[0]   # built per read
    keyed = rows[-1]
    assert (keyed.text, keyed.keys, keyed.properties, keyed.msg_id) == ("keyed", ["k1", "k2"], {"a": "b"},
                                                                         eager[-1].msg_id)
    part = rows[3:9] + rows[20:22]
    assert isinstance(part, MessageRows) and part.offsets == rows.offsets[3:9] + rows.offsets[20:22]
    assert list(part) == eager[3:9] + eager[20:22]
    walk = iter(range(len(part)))
    got = next(part.walk(walk))   # a walk built one message, and its range says how far it got
    assert got == eager[3] and list(walk) == list(range(1, 8))
    with pytest.raises(IndexError):
        rows[len(rows)]


def _queue_of_rows(offsets: list[int], size: int = 1) -> MessageRows:
    n = len(offsets)
    return MessageRows("T", 0, list(offsets), [b"x" * size] * n, [1] * n, [2] * n, list(offsets), [0] * n,
                       [b""] * n)


def _put(pq: ProcessQueue, rows: MessageRows) -> int:
    return pq.put_rows(rows, sum(map(len, rows.bodies)))


def test_a_queue_of_rows_hands_out_releases_and_commits_in_order() -> None:
    pq = ProcessQueue("T", 0)
    assert _put(pq, _queue_of_rows(list(range(10)))) == 10
    assert pq.cached() == 10 and pq.bytes == 10
    a, b = pq.next_batch(3), pq.next_batch(3)
    assert isinstance(a, MessageRows) and isinstance(b, MessageRows)
    assert [m.queue_offset for m in list(a) + list(b)] == [0, 1, 2, 3, 4, 5]
    pq.release(a)                                   # handed back: out again before what follows
    again = pq.next_batch(4)
    assert [m.queue_offset for m in again] == [0, 1, 2, 6]
    assert pq.remove(b) == 0                        # 0..2 and 6 still out: the commit waits
    c = pq.next_batch(10)
    assert [m.queue_offset for m in c] == [7, 8, 9]
    assert pq.remove(c) == 0
    assert pq.remove(again[:2]) == 2 and pq.bytes == 2
    assert pq.remove([again[3], again[2]]) == 10    # single messages too, any order
    assert pq.cached() == 0 and pq.bytes == 0 and not pq.in_flight and not pq.chunks
    _put(pq, _queue_of_rows([10, 11, 12]))
    first = pq.next_batch(1)
    assert pq.remove(first) == 11 and pq.remove(pq.next_batch(5)) == 13


def test_rows_of_offsets_cached_already_are_left_out() -> None:
    pq = ProcessQueue("T", 0)
    _put(pq, _queue_of_rows([0, 1, 2, 3]))
    out = pq.next_batch(2)
    assert _put(pq, _queue_of_rows([2, 3, 4, 5], size=2)) == 2   # (a pull again from 2)
    assert pq.bytes == 4 + 2 * 2
    rest = pq.next_batch(10)
    assert [(m.queue_offset, m.body) for m in rest] == [(2, b"x"), (3, b"x"), (4, b"xx"), (5, b"xx")]
    assert pq.remove(rest) == 0 and pq.remove(out) == 6 and pq.bytes == 0


def test_messages_put_into_a_queue_of_rows_turn_it_into_one_of_messages() -> None:
    pq = ProcessQueue("T", 0)
    rows = _queue_of_rows([0, 1, 2, 3])
    _put(pq, rows)
    out = pq.next_batch(1)
    pq.put(list(_queue_of_rows([4, 5])))
    assert not pq.chunks
    rest = pq.next_batch(10)
    assert isinstance(rest, list) and rest == list(rows)[1:] + list(_queue_of_rows([4, 5]))
    assert pq.remove(out) == 1 and pq.remove(rest) == 6 and pq.bytes == 0
    _put(pq, _queue_of_rows([6, 7]))   # empty again: rows from here on
    whole = pq.next_batch(5)
    assert pq.chunks and isinstance(whole, MessageRows) and [m.queue_offset for m in whole] == [6, 7]
    assert pq.remove(whole) == 8 and not pq.chunks


def test_a_message_held_back_keeps_few_chunks() -> None:
    """A slow message (in flight) holds the commit back; the chunks of what was consumed after
    it are not all kept: the queue keeps at most MAX_CHUNKS of them, rebuilt as one."""
    pq = ProcessQueue("T", 0)
    slow = None
    for start in range(0, 100, 10):
        _put(pq, _queue_of_rows(list(range(start, start + 10))))
        batch = pq.next_batch(10)
        if slow is None:
            slow, batch = batch[:1], batch[1:]
        assert pq.remove(batch) == 0
        assert len(pq.chunks) <= MAX_CHUNKS
    assert sum(len(c) for c in pq.chunks) < 40 and pq.cached() == 1
    assert slow is not None and [m.queue_offset for m in pq.next_batch(5)] == []
    assert pq.remove(slow) == 100 and not pq.chunks


def test_the_iterator_over_a_backlog_commits_up_to_the_message_in_hand(tmp_path: Path) -> None:
    """Batches of rows, a loop left in the middle of one: normally, the message in hand is
    committed; by an exception, it comes again; nothing before it does."""
    root = tmp_path / "s"
    with store.Admin(root) as admin:
        admin.create_topic("Q", queues=2)
    with store.Producer(root) as p:
        for i in range(0, 5000, 500):
            p.send_many("Q", [f"m{j}" for j in range(i, i + 500)])
    seen: list[str] = []
    with store.Consumer("Q", "G", root, start_from="first") as c:
        for m in c.messages(exit_at_end=True):
            seen.append(m.text)
            if len(seen) == 1700:
                break
    with pytest.raises(RuntimeError):
        with store.Consumer("Q", "G", root) as c:
            for m in c.messages(exit_at_end=True):
                seen.append(m.text)
                if len(seen) == 3300:
                    raise RuntimeError("the loop body failed")
    with store.Consumer("Q", "G", root) as c:
        rest = [m.text for m in c.messages(exit_at_end=True)]
    assert seen[-1] in rest                             # the one in hand when the body raised
    assert sorted(seen[:-1] + rest, key=lambda t: int(t[1:])) == [f"m{i}" for i in range(5000)]   # once each


def test_rows_of_chunks_that_interleave_are_picked_by_offset() -> None:
    """A pull that overlapped the cache leaves chunks whose offsets interleave; a batch takes
    each offset's row from the chunk that has it."""
    pq = ProcessQueue("T", 0)
    _put(pq, _queue_of_rows([0, 3, 5]))
    first = pq.next_batch(2)
    _put(pq, MessageRows("T", 0, [2, 3], [b"two", b"3"], [0, 0], [0, 0], [2, 3], [0, 0], [b"", b""]))
    pq.release(first[:1])                            # 0 back, 3 still out
    batch = pq.next_batch(10)
    assert [(m.queue_offset, m.body) for m in batch] == [(0, b"x"), (2, b"two"), (5, b"x")]
    assert pq.remove(first[1:]) == 0 and pq.remove(batch) == 6 and pq.bytes == 0 and not pq.chunks


def test_a_slow_handler_gets_a_backlog_in_small_batches(tmp_path: Path) -> None:
    """run() hands a backlog over in batches, a batch's offsets committed once it is through;
    with a slow handler a batch is a few messages (what it gets through in about 50 ms), so
    the committed offset moves while the backlog is consumed, not only at its end."""
    root = tmp_path / "s"
    with store.Admin(root) as admin:
        admin.create_topic("Q", queues=1)
    n = 400
    with store.Producer(root) as p:
        p.send_many("Q", [f"m{i}" for i in range(n)])
    handled: list[int] = []

    def handler(m: store.Message) -> None:
        time.sleep(0.005)
        handled.append(m.queue_offset)

    with store.Consumer("Q", "G", root, start_from="first") as c, store.Admin(root) as admin:
        t = threading.Thread(target=c.run, args=(handler,), kwargs={"threads": 1, "exit_at_end": True},
                             daemon=True)
        t.start()
        try:
            wait_for(lambda: (admin.lag("G", "Q")[0].consumer_offset or 0) >= n // 4, what="commits")
            assert len(handled) < n
        finally:
            t.join(timeout=60)
    assert sorted(handled) == list(range(n))
