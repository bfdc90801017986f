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
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.log.broker import Store

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]


def env_for(root: Path) -> dict[str, str]:
    env = dict(os.environ, MQCTL_STORE=str(root), NO_COLOR="1")
    env.pop("MQCTL_FAILPOINTS", None)
    return env


def start_producer(root: Path, topic: str, data_file: Path, out: Path, *extra: str) -> subprocess.Popen:
    """``mqctl send TOPIC --json < data_file > out`` in the background."""
    with open(data_file, "rb") as stdin, open(out, "wb") as stdout:
        return subprocess.Popen(MQCTL + ["send", topic, "--json", *extra], stdin=stdin, stdout=stdout,
                                stderr=subprocess.PIPE, env=env_for(root))


def printed(out: Path) -> list[dict]:
    """Results a producer printed: complete lines only (a kill may cut the last one)."""
    data = out.read_bytes()
    lines = data.split(b"\n")
    return [json.loads(ln) for ln in lines[:-1]]


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(MQCTL + ["store", "check"], capture_output=True, env=env_for(root), timeout=120)


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

def run_four_producers(tmp_path: Path, per_producer: int) -> None:
    root = tmp_path / "store"
    s = Store.open(root, create=True)
    s.create_topic("T", 8)
    s.close()
    procs, outs, sent = [], [], {}
    for p in range(4):
        lines = [b"p%d-%07d" % (p, i) for i in range(per_producer)]
        sent.update({ln: p for ln in lines})
        data, out = tmp_path / f"in{p}", tmp_path / f"out{p}"
        write_lines(data, lines)
        outs.append((out, lines))
    for p, (out, _) in enumerate(outs):
        procs.append(start_producer(root, "T", tmp_path / f"in{p}", out))
    for pr in procs:
        _, err = pr.communicate(timeout=300)
        assert pr.returncode == 0, err.decode()
    queues = queue_contents(root, "T")
    assert_dense(queues)
    stored = [m for msgs in queues.values() for m in msgs]
    assert len(stored) == 4 * per_producer
    assert sorted(m.body for m in stored) == sorted(sent)
    by_offset = {m.commitlog_offset: m for m in stored}
    assert len(by_offset) == len(stored)
    for out, lines in outs:
        rs = printed(out)
        assert len(rs) == len(lines)
        for r, line in zip(rs, lines):   # results are in input order
            m = by_offset[r["commitLogOffset"]]
            assert (m.body, m.queue_id, m.queue_offset) == (line, r["queueId"], r["queueOffset"])
    # the producers' batches interleaved in the log (else this test proved little)
    owners = [sent[m.body] for m in sorted(stored, key=lambda m: m.commitlog_offset)]
    switches = sum(1 for a, b in zip(owners, owners[1:]) if a != b)
    assert switches >= 3
    p = check(root)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


def test_four_producers_at_once(tmp_path: Path) -> None:
    run_four_producers(tmp_path, 20_000)


@pytest.mark.slow
def test_four_producers_at_once_long(tmp_path: Path) -> None:
    """150,000 lines each (``MQCTL_PRODUCER_LINES`` for a longer run)."""
    run_four_producers(tmp_path, int(os.environ.get("MQCTL_PRODUCER_LINES", "150000")))


# -- kill -9 in the middle of a batch ---------------------------------------------------------------

def kill_mid_batch(tmp_path: Path, reps: int, lines_per_rep: int = 150_000) -> None:
    root = tmp_path / "store"
    s = Store.open(root, create=True)
    s.create_topic("T", 4)
    s.close()
    rng = random.Random(1234)
    all_printed: list[tuple[dict, bytes]] = []
    killed_mid_run = 0
    for rep in range(reps):
        lines = [b"r%02d-%07d-" % (rep, i) + b"x" * rng.randrange(0, 100) for i in range(lines_per_rep)]
        data, out = tmp_path / f"in{rep}", tmp_path / f"out{rep}"
        write_lines(data, lines)
        extra = ["--keys", f"rep{rep}"] if rep % 2 else []
        if rep % 3 == 2:
            extra += ["--flush", "sync"]
        pr = start_producer(root, "T", data, out, *extra)
        # wait until it has reported something, then kill it at a random moment
        deadline = time.monotonic() + 60
        while out.stat().st_size == 0 and pr.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.15))
        if pr.poll() is None:
            os.kill(pr.pid, signal.SIGKILL)
            killed_mid_run += 1
        pr.communicate(timeout=60)
        rs = printed(out)
        assert len(rs) < len(lines) or pr.returncode == 0
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
        p = check(root)
        assert p.returncode == 0, p.stdout.decode()[-2000:] + p.stderr.decode()
    assert killed_mid_run >= max(1, reps - 1), "the producers finished before they could be killed"
    # in the end: every queue dense, every reported message still there, nothing duplicated
    queues = queue_contents(root, "T")
    assert_dense(queues)
    stored = {m.commitlog_offset: m.body for msgs in queues.values() for m in msgs}
    for r, line in all_printed:
        assert stored[r["commitLogOffset"]] == line
    assert len(set(stored.values())) == len(stored)
    # and the store takes new writes normally
    p = subprocess.run(MQCTL + ["send", "T", "after"], capture_output=True, env=env_for(root), timeout=60)
    assert p.returncode == 0, p.stderr.decode()


def test_kill_9_mid_batch(tmp_path: Path) -> None:
    kill_mid_batch(tmp_path, reps=2)


@pytest.mark.slow
def test_kill_9_mid_batch_repeated(tmp_path: Path) -> None:
    """Six producers killed at random moments (``MQCTL_KILL_REPS`` for a longer run)."""
    kill_mid_batch(tmp_path, reps=int(os.environ.get("MQCTL_KILL_REPS", "6")))
