"""A stream's plan when a queue is no longer what it read (:mod:`store.spark.streamplan`, which
both readers ask): a topic's config rebuilt (its birth unknown, then rewritten) is the same
topic, a queue that lost its last messages reads on from its new end, a topic deleted and
made again is read from its first offsets. No Spark: the planner is plain Python."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store.errors import DataError
from store.log.messagestore import Store
from store.log.record import Draft
from store.spark import options as O
from store.spark import streamplan as sp
from store.spark.options import ReadOptions

pytestmark = pytest.mark.spark


def plan(root: Path, **options: str) -> ReadOptions:
    return ReadOptions.parse({"store": str(root), "topic": "t", "startingoffsets": "earliest", **options},
                             stream=True)


def mqctl_run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mqctl", "--store", str(root), *args],
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize("damage", ["lost", "garbage"])
def test_a_topic_config_rebuilt_and_recovered_is_not_a_topic_made_again(
        store: Store, root: Path, damage: str) -> None:
    """Both copies of a config lost or damaged: readers rebuild it with a birth of 0, and
    store recover writes the time then. Before: the next plan failed (deleted and made
    again), or with failOnDataLoss=false read the topic again from offset 0."""
    store.create_topic("t", 1)
    store.put([Draft("t", b"m") for _ in range(5)])
    for fail in ("true", "false"):
        opts = plan(root, failondataloss=fail)
        read_to = sp.next_end(store, opts, sp.initial(store, opts), None, None)
        assert read_to["t/0"] == 5
    store.close()
    for p in (root / "config/topics/t.json", root / "consumequeue/t/topic.json"):
        if damage == "lost":
            p.unlink()
        else:
            p.write_text("{garbage")
    s2 = Store.open(root)
    while_lost = sp.next_end(s2, opts, read_to, None, None)
    assert while_lost["t/0"] == 5 and while_lost["t"] == read_to["t"]   # a birth of 0 is unknown
    s2.close()
    r = mqctl_run(root, "store", "recover")
    assert r.returncode == 0, r.stderr
    s3 = Store.open(root)
    assert s3.topic("t").created_at not in (0, read_to["t"])   # the birth rewritten
    s3.put([Draft("t", b"after")])
    for fail in ("true", "false"):
        opts = plan(root, failondataloss=fail)
        for start in (read_to, while_lost):
            end = sp.next_end(s3, opts, start, None, None)
            assert end["t/0"] == 6
            assert [(r.start, r.end) for r in sp.batch_ranges(s3, opts, start, end)] == [(5, 6)]
    s3.close()


def test_a_queue_that_lost_its_tail_reads_on_from_its_new_end(
        store: Store, root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Same birth, a shorter queue (the store recovered after a power cut lost its last
    messages). Before: with failOnDataLoss=false the queue was read again from offset 0."""
    store.create_topic("t", 1)
    for i in range(10):
        store.put([Draft("t", b"m%d" % i)])
    read_to = sp.next_end(store, plan(root), sp.initial(store, plan(root)), None, None)
    assert read_to["t/0"] == 10
    store.close()
    cq = sorted((root / "consumequeue/t/0").glob("0*"))[-1]
    cut_at = int.from_bytes(cq.read_bytes()[7 * 20:7 * 20 + 8], "big")   # message 7's commit-log offset
    log = sorted((root / "commitlog").glob("0*"))[-1]
    os.truncate(log, cut_at - int(log.name))   # a power cut: the log's last 3 records never reached the disk
    os.truncate(cq, 7 * 20)
    s2 = Store.open(root)
    assert s2.max_offset("t", 0) == 7
    with pytest.raises(DataError, match=r"t/0 up to offset 10; they end t/0 at 7"):
        sp.next_end(s2, plan(root), read_to, None, None)
    opts = plan(root, failondataloss="false")
    end = sp.next_end(s2, opts, read_to, None, None)
    assert end["t/0"] == 7
    caplog.clear()
    assert sp.batch_ranges(s2, opts, read_to, end) == []
    assert sp.batch_ranges(s2, opts, read_to, end) == []   # (planned twice: said once)
    said = [r.getMessage() for r in caplog.records if (r.name, r.levelname) == ("store", "WARNING")]
    assert len(said) == 1 and "reading on from their new ends" in said[0], said
    s2.put([Draft("t", b"new")])
    nxt = sp.next_end(s2, opts, end, None, None)
    assert [(r.start, r.end) for r in sp.batch_ranges(s2, opts, end, nxt)] == [(7, 8)]
    s2.close()


def test_a_topic_made_again_with_more_messages_than_read_is_read_from_its_first_offset(
        store: Store, root: Path) -> None:
    """The birth's check above must still tell a topic deleted and made again past the
    offsets read: its messages were stored after its birth."""
    store.create_topic("t", 1)
    store.put([Draft("t", b"old") for _ in range(3)])
    opts = plan(root, failondataloss="false")
    read_to = sp.next_end(store, opts, sp.initial(store, opts), None, None)
    store.delete_topic("t")
    store.create_topic("t", 1)
    store.put([Draft("t", b"new") for _ in range(5)])
    assert store.topic("t").created_at != read_to["t"]
    end = sp.next_end(store, opts, read_to, None, None)
    assert [(r.start, r.end) for r in sp.batch_ranges(store, opts, read_to, end)] == [(0, 5)]
    with pytest.raises(DataError, match="deleted and made again"):
        sp.next_end(store, plan(root), read_to, None, None)


def test_next_end_reads_each_topics_birth_once(store: Store, root: Path) -> None:
    """Before, each topic's birth looked through every queue's key (quadratic in topics)."""
    for i in range(3):
        store.create_topic(f"t{i}", 2)
    opts = ReadOptions.parse({"store": str(root), "topic": "*", "startingoffsets": "earliest"}, stream=True)
    end = sp.next_end(store, opts, sp.initial(store, opts), None, None)
    assert sp.births(end) == {f"t{i}": store.topic(f"t{i}").created_at for i in range(3)}


def test_warnings_said_once_are_remembered_in_a_bounded_set() -> None:
    """Before, every warning said once stayed in the process's set for its life."""
    for i in range(3000):
        O.warn("w", ("start", i))
    assert len(O._SAID) <= 1000
