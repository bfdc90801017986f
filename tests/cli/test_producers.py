"""Many ``mqctl send`` processes on one store, and producers killed with SIGKILL mid-batch.

The store has no broker: producers serialise on the store's write lock, one batch at a time.
These tests check what that must give: dense, unique queue offsets; every message a producer
reported as sent is readable afterwards, even when the producer was killed right after; and
the store is consistent (``mqctl store check`` exit 0) once the next opener has recovered it.
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from store.log.messagestore import Store
from tests.procs import MQ, Proc, wait_for


def start_producer(mq: MQ, topic: str, data_file: Path, *extra: str) -> Proc:
    """``mqctl send TOPIC --json < data_file`` in the background."""
    with open(data_file, "rb") as stdin:
        return mq.start("send", topic, "--json", *extra, stdin=stdin)


def printed(producer: Proc) -> list[dict]:
    """Results a producer printed: complete lines only (a kill may cut the last one)."""
    lines = producer.stdout().split(b"\n")
    return [json.loads(ln) for ln in lines[:-1]]


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(ln + b"\n" for ln in lines))


def queue_contents(root: Path, topic: str) -> dict[int, list]:
    s = Store.open(root)
    try:
        return {q: list(s.iter_queue(topic, q, 0)) for q in s.queue_ids(topic)}
    finally:
        s.close()


def assert_dense(queues: dict[int, list]) -> None:
    for q, msgs in queues.items():
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), f"queue {q} offsets not dense"


# -- concurrent producers -------------------------------------------------------------------------

def run_four_producers(mq: MQ, per_producer: int) -> None:
    s = mq.store()
    s.create_topic("T", 8)
    s.close()
    inputs, sent = [], {}
    for p in range(4):
        lines = [b"p%d-%07d" % (p, i) for i in range(per_producer)]
        sent.update({ln: p for ln in lines})
        write_lines(mq.work / f"in{p}", lines)
        inputs.append(lines)
    producers = [start_producer(mq, "T", mq.work / f"in{p}") for p in range(4)]
    for pr in producers:
        assert pr.wait(300) == 0, pr.stderr()
    queues = queue_contents(mq.root, "T")
    assert_dense(queues)
    stored = [m for msgs in queues.values() for m in msgs]
    assert len(stored) == 4 * per_producer
    assert sorted(m.body for m in stored) == sorted(sent)
    by_offset = {m.commitlog_offset: m for m in stored}
    assert len(by_offset) == len(stored)
    for pr, lines in zip(producers, inputs):
        rs = printed(pr)
        assert len(rs) == len(lines)
        for r, line in zip(rs, lines):   # results are in input order
            m = by_offset[r["commitLogOffset"]]
            assert (m.body, m.queue_id, m.queue_offset) == (line, r["queueId"], r["queueOffset"])
    # the producers' batches interleaved in the log (else this test proved little)
    owners = [sent[m.body] for m in sorted(stored, key=lambda m: m.commitlog_offset)]
    switches = sum(1 for a, b in zip(owners, owners[1:]) if a != b)
    assert switches >= 3
    mq.check_clean()


def test_four_producers_at_once(mq: MQ) -> None:
    run_four_producers(mq, 20_000)


@pytest.mark.slow
def test_four_producers_at_once_long(mq: MQ) -> None:
    """150,000 lines each (``MQCTL_PRODUCER_LINES`` for a longer run)."""
    run_four_producers(mq, int(os.environ.get("MQCTL_PRODUCER_LINES", "150000")))


# -- kill -9 in the middle of a batch ---------------------------------------------------------------

def kill_mid_batch(mq: MQ, reps: int, lines_per_rep: int = 150_000) -> None:
    root = mq.root
    s = mq.store()
    s.create_topic("T", 4)
    s.close()
    rng = random.Random(1234)
    all_printed: list[tuple[dict, bytes]] = []
    killed_mid_run = 0
    for rep in range(reps):
        lines = [b"r%02d-%07d-" % (rep, i) + b"x" * rng.randrange(0, 100) for i in range(lines_per_rep)]
        data = mq.work / f"in{rep}"
        write_lines(data, lines)
        extra = ["--keys", f"rep{rep}"] if rep % 2 else []
        if rep % 3 == 2:
            extra += ["--flush", "sync"]
        pr = start_producer(mq, "T", data, *extra)
        # wait until it has reported something, then kill it at a random moment
        wait_for(lambda pr=pr: pr.out_path.stat().st_size > 0 or not pr.alive(), 60.0, interval=0.005,
                 what="the producer's first results")
        time.sleep(rng.uniform(0, 0.15))
        if pr.alive():
            pr.kill9()
            killed_mid_run += 1
        code = pr.wait(60)
        rs = printed(pr)
        assert len(rs) < len(lines) or code == 0
        all_printed += list(zip(rs, lines))
        # every message whose result was printed is readable, by offset id and through its queue
        s = Store.open(root)       # recovers what the killed producer left
        try:
            for r, line in zip(rs, lines):
                m = s.get(r["commitLogOffset"])
                assert m.body == line and (m.queue_id, m.queue_offset) == (r["queueId"], r["queueOffset"])
            for r, line in rng.sample(list(zip(rs, lines)), min(50, len(rs))):
                [m] = s.pull("T", r["queueId"], r["queueOffset"], 1).messages
                assert m.body == line
                assert s.find(r["msgId"]).body == line
        finally:
            s.close()
        mq.check_clean()
    assert killed_mid_run >= max(1, reps - 1), "the producers finished before they could be killed"
    # in the end: every queue dense, every reported message still there, nothing duplicated
    queues = queue_contents(root, "T")
    assert_dense(queues)
    stored = {m.commitlog_offset: m.body for msgs in queues.values() for m in msgs}
    for r, line in all_printed:
        assert stored[r["commitLogOffset"]] == line
    assert len(set(stored.values())) == len(stored)
    # and the store takes new writes normally
    mq.ok("send", "T", "after")


@pytest.mark.slow
def test_kill_9_mid_batch(mq: MQ) -> None:
    kill_mid_batch(mq, reps=2)


@pytest.mark.slow
def test_kill_9_mid_batch_repeated(mq: MQ) -> None:
    """Six producers killed at random moments (``MQCTL_KILL_REPS`` for a longer run)."""
    kill_mid_batch(mq, reps=int(os.environ.get("MQCTL_KILL_REPS", "6")))
