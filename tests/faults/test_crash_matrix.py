"""Crash matrix: a real ``mqctl`` process is killed (SIGKILL, via ``MQCTL_FAILPOINTS``) at each
named step of the write path, the consumer and transactions; then the invariants are checked.

Crash points (where they are placed):

* ``put-after-log``, ``put-after-cq``, ``put-after-index`` — ``store/log/writebatch.py``
  ``WriteBatch.commit``: after the commit-log write / the consume queues / the key index,
  before the checkpoint moves;
* ``rebalance-after-lock``, ``rebalance-before-unlock`` — ``store/client/rebalance.py``;
  ``offsets-before-persist``, ``offsets-after-persist`` — ``store/client/offset_keeper.py``;
* ``tx-…`` — ``store/tx/transaction.py`` and ``store/tx/check.py`` (listed in their docstrings).

Invariants, after the next open (which recovers):

* every acknowledged message (a ``send --json`` result read before the crash) is readable,
  with its body, by a fresh consumer, by ``msg show`` and through the key index;
* no torn or corrupt record is served (every body served is one that was sent, whole);
* ``store check`` exits 0;
* each (topic, queue) is dense and each key's messages keep their order within their queue;
* committed consumer offsets are never ahead of what was delivered (handler log vs
  ``config/consumerOffset.json``), and everything is delivered at least once in the end;
* a transaction is resolved at most once: never two committed copies, never both outcomes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.faultutil import (
    LOGGING_HANDLER,
    assert_key_order,
    drop_torn_by_kills,
    is_dirty,
    keyed_lines,
    read_handler_log,
)
from tests.procs import KILLED, MQ, handler_script, wait_for

PUT_POINTS = ["put-after-log", "put-after-cq", "put-after-index"]
KEYS = ["alpha", "bravo", "charlie", "delta", "echo"]


# -- the write path ------------------------------------------------------------------------------

def _send_until_killed(mq: MQ, topic: str, point: str, mode: str) -> tuple[list[dict], dict[str, str], list[str]]:
    """Feed batches of keyed lines to one ``send --json`` armed to die in its third batch.
    Returns (acknowledged results, body of each acked msgId, every line written)."""
    seqs: dict[str, int] = {}
    if mode == "raw":
        feeder = mq.feed(topic, "--key-delimiter", ":", "--keys", "batchkey", failpoints=f"{point}:3")
    else:
        feeder = mq.feed(topic, "--input", "json", failpoints=f"{point}:3")
    written: list[str] = []
    bodies_by_batch: list[list[str]] = []
    for i in range(3):
        lines = keyed_lines(KEYS, seqs, 12)
        bodies = [ln.split(":", 1)[1] for ln in lines]
        bodies_by_batch.append(bodies)
        written += bodies
        if mode == "json":
            lines = [json.dumps({"body": b, "shardingKey": b.rsplit("-", 1)[0], "keys": ["batchkey", b],
                                 "tags": "T" + b[0]}) for b in bodies]
        alive = feeder.batch(lines)
        assert alive == (i < 2), f"batch {i}: expected the failpoint in the third batch; {feeder.stderr}"
    rc = feeder.close()
    assert rc == KILLED, (rc, feeder.stderr)
    assert f"failpoint {point}" in feeder.stderr
    acked = feeder.acked
    assert len(acked) == 24  # two whole batches, nothing of the third
    body_of = {}
    flat = [b for batch in bodies_by_batch[:2] for b in batch]
    for res, body in zip(acked, flat):
        body_of[res["msgId"]] = body
    return acked, body_of, written


SLOW = pytest.mark.slow


@pytest.mark.parametrize("mode", ["raw", pytest.param("json", marks=SLOW)])
@pytest.mark.parametrize("point", PUT_POINTS)
def test_send_killed_in_the_write_path(mq: MQ, point: str, mode: str) -> None:
    mq.ok("topic", "create", "orders", "--queues", "4")
    acked, body_of, written = _send_until_killed(mq, "orders", point, mode)
    # The third batch is in the commit log but the checkpoint never moved past it.
    assert is_dirty(mq.root)

    # The next open recovers (store check only reads: it does not), then the check is
    # clean and the store is no longer dirty.
    mq.ok("store", "stats")
    mq.check_clean()
    assert not is_dirty(mq.root)

    envs = mq.drain("orders", "verify")
    served = {e["msgId"]: e for e in envs}
    assert len(served) == len(envs), "a record was served twice"
    for e in envs:
        assert e["body"] in written, f"served a body that was never sent: {e!r}"
    for res in acked:
        e = served.get(res["msgId"])
        assert e is not None, f"acknowledged message lost: {res}"
        assert e["body"] == body_of[res["msgId"]]
        assert (e["queueId"], e["queueOffset"]) == (res["queueId"], res["queueOffset"])
    # The third batch was wholly in the log: recovery dispatched all of it.
    assert sorted(e["body"] for e in envs) == sorted(written)
    by_queue: dict[int, list[int]] = {}
    for e in envs:
        by_queue.setdefault(e["queueId"], []).append(e["queueOffset"])
    for q, offs in by_queue.items():
        assert sorted(offs) == list(range(len(offs))), f"queue {q} is not dense: {sorted(offs)}"
    assert_key_order(envs)

    # The key index covers the recovered batch too (put-after-log/-cq crashed before it).
    third = [e for e in envs if e["msgId"] not in body_of]
    shown = mq.ok("msg", "show", third[-1]["msgId"], "--json").json_lines()[0]
    assert shown["body"] == third[-1]["body"]
    from store.log.messagestore import Store
    with Store.open(mq.root) as store:
        for e in envs:
            assert store.find(e["msgId"]).body.decode() == e["body"]
        assert len(store.query_key("orders", "batchkey", limit=1000)) == len(written)

    # Writing goes on where recovery left off: offsets stay dense, nothing is overwritten.
    more = mq.ok("send", "orders", "--key-delimiter", ":", "--json",
                 input="".join(f"{k}:{k}-999\n" for k in KEYS)).json_lines()
    with Store.open(mq.root) as store:
        for q in range(4):
            got = list(store.iter_queue("orders", q, 0))
            assert [m.queue_offset for m in got] == list(range(len(got)))
        assert sum(store.max_offset("orders", q) for q in range(4)) == len(written) + len(more)
    mq.check_clean()


@pytest.mark.parametrize("point", ["put-after-log", pytest.param("put-after-cq", marks=SLOW),
                                   pytest.param("put-after-index", marks=SLOW)])
def test_writer_after_a_crash_recovers_before_writing(mq: MQ, point: str) -> None:
    """The next *writer* (not a reader) is the one that finds the store dirty."""
    mq.ok("send", "t", "first", "-q", "0")
    assert mq.run("send", "t", "torn", "-q", "0", failpoints=point).returncode == KILLED
    assert is_dirty(mq.root)
    res = mq.ok("send", "t", "after", "-q", "0", "--json").json_lines()[0]
    assert res["queueOffset"] == 2  # "torn" kept offset 1: its record was whole in the log
    assert [e["body"] for e in mq.drain("t", "g")] == ["first", "torn", "after"]
    mq.check_clean()


# -- transactions through the write path ---------------------------------------------------------

def _real_copies(mq: MQ, topic: str, tx_id: str) -> int:
    from store.log.messagestore import Store
    with Store.open(mq.root) as store:
        return sum(1 for q in store.queue_ids(topic) for m in store.iter_queue(topic, q, 0)
                   if m.uniq_key == tx_id)


def _ops(mq: MQ, tx_id: str) -> list[str]:
    from store.log.messagestore import Store
    from store.names import OP_HALF_TOPIC
    with Store.open(mq.root) as store:
        if not store.has_topic(OP_HALF_TOPIC):
            return []
        return [m.properties.get("TRAN_OP", "") for m in store.iter_queue(OP_HALF_TOPIC, 0, 0)
                if m.properties.get("__transactionId__") == tx_id]


def _state(mq: MQ, tx_id: str) -> str:
    from store.log.messagestore import Store
    from store.tx.transaction import load
    with Store.open(mq.root) as store:
        return load(store, tx_id).state


def assert_resolved_at_most_once(mq: MQ, topic: str, tx_id: str) -> str:
    state = _state(mq, tx_id)
    copies = _real_copies(mq, topic, tx_id)
    ops = _ops(mq, tx_id)
    assert copies <= 1, f"{tx_id} committed {copies} times"
    assert not ("COMMIT" in ops and "ROLLBACK" in ops), f"{tx_id} resolved both ways: {ops}"
    assert (copies == 1) == (state == "COMMITTED"), (state, copies, ops)
    if state == "ROLLED_BACK":
        assert "COMMIT" not in ops
    return state


TX_END_CASES = [
    ("commit", "put-after-log", 1), ("commit", "put-after-index", 2),
    *[pytest.param(r, p, n, marks=SLOW) for r, p, n in [("rollback", "put-after-cq", 1),
        ("commit", "put-after-cq", 1), ("commit", "put-after-index", 1), ("commit", "put-after-log", 2),
        ("commit", "put-after-cq", 2), ("rollback", "put-after-log", 1), ("rollback", "put-after-index", 1)]],
]


@pytest.mark.parametrize("resolution,point,nth", TX_END_CASES)
def test_tx_end_killed_in_the_write_path(mq: MQ, point: str, nth: int, resolution: str) -> None:
    """``tx commit`` writes two records (the real message, then the op), ``tx rollback`` one:
    kill either at each put point; the repeated command completes it exactly once."""
    tx = json.loads(mq.ok("tx", "send", "orders", "body-1", "-s", "k").stdout)["txId"]
    assert mq.run("tx", resolution, tx, failpoints=f"{point}:{nth}").returncode == KILLED
    mq.check_clean()
    first = assert_resolved_at_most_once(mq, "orders", tx)
    # The record that reached the log decides the state, torn batch or not.
    assert first == ("COMMITTED" if resolution == "commit" else "ROLLED_BACK")
    again = json.loads(mq.ok("tx", resolution, tx, "--json").stdout)
    assert again["changed"] is False
    other = "rollback" if resolution == "commit" else "commit"
    assert mq.run("tx", other, tx).returncode == 4
    assert assert_resolved_at_most_once(mq, "orders", tx) == first
    bodies = [e["body"] for e in mq.drain("orders", "g")]
    assert bodies == (["body-1"] if resolution == "commit" else [])
    mq.check_clean()


@pytest.mark.parametrize("point", ["put-after-cq:3", *[pytest.param(p, marks=SLOW) for p in PUT_POINTS]])
def test_tx_check_killed_in_the_write_path(mq: MQ, tmp_path: Path, point: str) -> None:
    answer = handler_script(tmp_path / "answer.sh", """
        #!/bin/sh
        case "$(cat)" in c*) echo COMMIT ;; r*) echo ROLLBACK ;; *) echo UNKNOWN ;; esac
    """)
    txs = {b: json.loads(mq.ok("tx", "send", "orders", b).stdout)["txId"] for b in ("c1", "r1", "c2")}
    rc = mq.run("tx", "check", "--check-cmd", answer, "--timeout", "0", failpoints=point).returncode
    assert rc == KILLED
    mq.check_clean()
    for tx in txs.values():
        assert_resolved_at_most_once(mq, "orders", tx)
    for _ in range(2):
        mq.ok("tx", "check", "--check-cmd", answer, "--timeout", "0")
    assert assert_resolved_at_most_once(mq, "orders", txs["c1"]) == "COMMITTED"
    assert assert_resolved_at_most_once(mq, "orders", txs["c2"]) == "COMMITTED"
    assert assert_resolved_at_most_once(mq, "orders", txs["r1"]) == "ROLLED_BACK"
    assert sorted(e["body"] for e in mq.drain("orders", "g")) == ["c1", "c2"]
    mq.check_clean()


TX_POINTS = {
    # point: the command that reaches it (after the common setup)
    "tx-send-after-half": "send-exec",
    "tx-commit-after-real": "commit",
    "tx-commit-after-op": "commit",
    "tx-rollback-after-op": "rollback",
    "tx-check-after-copy": "check",
    "tx-check-after-op": "check",
    "tx-check-after-answer": "check",
    "tx-check-before-progress": "check",
    "tx-discard-after-copy": "discard",
}


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(TX_POINTS))
def test_tx_points_resolve_at_most_once(mq: MQ, tmp_path: Path, point: str) -> None:
    """The transaction helper's own points (``store/tx/transaction.py``, ``store/tx/check.py``),
    each reached by the command that passes it; then everything is finished and checked for
    at-most-once."""
    answer = handler_script(tmp_path / "answer.sh", """
        #!/bin/sh
        case "$(cat)" in c*) echo COMMIT ;; r*) echo ROLLBACK ;; *) echo UNKNOWN ;; esac
    """)
    ok_exec = handler_script(tmp_path / "local.sh", "#!/bin/sh\nexit 0\n")
    txs = {b: json.loads(mq.ok("tx", "send", "orders", b).stdout)["txId"] for b in ("c1", "r1", "u1")}
    how = TX_POINTS[point]
    if how == "send-exec":
        assert mq.run("tx", "send", "orders", "c-local", "--exec", ok_exec, failpoints=point).returncode == KILLED
        from store.log.messagestore import Store
        from store.tx.check import pending
        with Store.open(mq.root) as store:
            txs["c-local"] = next(p.tx_id for p in pending(store) if p.half.body == b"c-local")
    elif how == "commit":
        assert mq.run("tx", "commit", txs["c1"], failpoints=point).returncode == KILLED
    elif how == "rollback":
        assert mq.run("tx", "rollback", txs["r1"], failpoints=point).returncode == KILLED
    elif how == "check":
        assert mq.run("tx", "check", "--check-cmd", answer, "--timeout", "0",
                      failpoints=point).returncode == KILLED
    else:
        mq.ok("tx", "check", "--check-cmd", answer, "--timeout", "0", "--max-checks", "1")
        assert mq.run("tx", "check", "--check-cmd", answer, "--timeout", "0", "--max-checks", "1",
                      failpoints=point).returncode == KILLED
    mq.check_clean()
    for tx in txs.values():
        assert_resolved_at_most_once(mq, "orders", tx)
    for _ in range(2):  # (the default --max-checks: a check killed before its answer was used still counts)
        mq.ok("tx", "check", "--check-cmd", answer, "--timeout", "0")
    states = {b: assert_resolved_at_most_once(mq, "orders", tx) for b, tx in txs.items()}
    assert states["c1"] == "COMMITTED" and states["r1"] == "ROLLED_BACK"
    assert states["u1"] in ("PREPARED", "DISCARDED")
    committed = sorted(b for b, s in states.items() if s == "COMMITTED")
    assert sorted(e["body"] for e in mq.drain("orders", "g")) == committed
    mq.check_clean()


# -- the consumer ---------------------------------------------------------------------------------

CONSUMER_POINTS = ["rebalance-after-lock", "rebalance-before-unlock", "offsets-before-persist",
                   "offsets-after-persist"]


def _assert_offsets_not_ahead(mq: MQ, group: str, topic: str, log: Path) -> dict[tuple[str, int], int]:
    """Every offset below a committed one was delivered (offsets are read first: whatever was
    committed then had already been logged by its handler)."""
    committed = mq.offsets(group, topic)
    delivered: dict[int, set[int]] = {}
    for t, q, off, _mid, _body in read_handler_log(log):
        if t == topic:
            delivered.setdefault(q, set()).add(off)
    for (t, q), off in committed.items():
        missing = set(range(off)) - delivered.get(q, set())
        assert not missing, f"{t}/{q}: committed offset {off} is ahead of delivery; never delivered {sorted(missing)[:10]}"
    return committed


CONSUMER_CASES = [
    ("rebalance-after-lock", True), ("rebalance-before-unlock", True),
    ("offsets-before-persist", False), ("offsets-after-persist", False),
    pytest.param("offsets-before-persist", True, marks=SLOW),
    pytest.param("offsets-after-persist", True, marks=SLOW),
]


@pytest.mark.parametrize("point,orderly", CONSUMER_CASES)
@pytest.mark.slow
def test_consumer_killed_at_each_point(mq: MQ, tmp_path: Path, point: str, orderly: bool) -> None:
    """(Queue locks are taken and released by orderly members only, so the rebalance points
    are reached in orderly mode.)"""
    n = 120
    mq.ok("topic", "create", "events", "--queues", "4")
    seqs: dict[str, int] = {}
    lines = keyed_lines(KEYS, seqs, n)
    mq.ok("send", "events", "--key-delimiter", ":", input="".join(f"{ln}\n" for ln in lines))
    bodies = sorted(ln.split(":", 1)[1] for ln in lines)
    handler = handler_script(tmp_path / "handler.sh", LOGGING_HANDLER)
    log = tmp_path / "handled.log"
    env = {"HANDLER_LOG": str(log), "HANDLER_SLEEP": "0.02"}
    mode = ["--orderly"] if orderly else []
    args = ["consume", "events", "-g", "G", "--from", "first", "--exec", handler, *mode,
            "--rebalance-interval", "0.2"]
    # rebalance-after-lock: the member that joins second dies as it takes its first queue;
    # the others: the first member dies when the second one's arrival makes it drop queues
    # (or at its periodic offset persist).
    first_points = None if point == "rebalance-after-lock" else point
    second_points = point if point == "rebalance-after-lock" else None
    a = mq.start(*args, failpoints=first_points, extra_env=env)
    # (a member persists offsets as soon as it is idle or a queue has 128 finished messages:
    # an offsets failpoint may kill the first member before ten deliveries)
    wait_for(lambda: len(read_handler_log(log)) >= 10 or not a.alive(), what="the first deliveries")
    b = mq.start(*args, failpoints=second_points, extra_env=env)
    victim = b if second_points else a
    survivor = a if second_points else b
    wait_for(lambda: not victim.alive(), timeout=30, what=f"the failpoint {point}")
    assert victim.p.returncode == KILLED, victim.stderr()
    assert f"failpoint {point}" in victim.stderr()
    _assert_offsets_not_ahead(mq, "G", "events", log)

    # The survivor takes over every queue (the dead one's locks and membership are gone with
    # it) and delivers everything.
    def all_delivered() -> bool:
        return set(bodies) <= {r[4] for r in read_handler_log(log)}
    wait_for(all_delivered, timeout=60, what="every message delivered by the survivor")
    _assert_offsets_not_ahead(mq, "G", "events", log)
    assert survivor.stop() == 0, survivor.stderr()
    committed = _assert_offsets_not_ahead(mq, "G", "events", log)
    assert sum(committed.values()) == n, committed  # the survivor committed all it did

    handled, torn = drop_torn_by_kills(read_handler_log(log, with_pid=True), set(bodies), {victim.pid})
    if torn:
        print(f"{torn} handler run(s) of the killed consumer got a truncated body")
    assert sorted({r[4] for r in handled}) == bodies
    for _t, _q, _off, _mid, body in handled:
        assert body in bodies
    if orderly:  # first deliveries per key are in order
        first: dict[str, int] = {}
        seen = set()
        for _t, _q, _off, _mid, body in handled:
            if body in seen:
                continue
            seen.add(body)
            key, _, seq = body.rpartition("-")
            assert int(seq) > first.get(key, 0), f"key {key} delivered out of order: {body}"
            first[key] = int(seq)
    duplicates = len(handled) - len(bodies)
    assert duplicates <= n  # redeliveries after the kill only: at most one extra round
    mq.check_clean()


def test_consumer_killed_before_its_final_persist_redelivers_and_never_skips(mq: MQ) -> None:
    """stdout mode: the dead member committed nothing past what it printed; the next member
    starts where the committed offsets are, so nothing is skipped."""
    mq.ok("send", "t", "-q", "0", input="".join(f"m{i}\n" for i in range(50)))
    first = mq.run("consume", "t", "-g", "G", "--from", "first", "--count", "20",
                   failpoints="offsets-before-persist")
    assert first.returncode == KILLED
    printed = first.out.split()
    assert printed[:20] == [f"m{i}" for i in range(20)]
    off = mq.offsets("G", "t").get(("t", 0), 0)
    assert off <= len(printed)
    rest = mq.ok("consume", "t", "-g", "G", "--from", "first", "-e").out.split()
    assert rest == [f"m{i}" for i in range(off, 50)]

    mq.ok("send", "t", "-q", "0", input="".join(f"n{i}\n" for i in range(10)))
    second = mq.run("consume", "t", "-g", "G", "--count", "4", failpoints="offsets-after-persist")
    assert second.returncode == KILLED
    assert second.out.split() == [f"n{i}" for i in range(4)]
    assert mq.offsets("G", "t")[("t", 0)] == 54  # exactly what was printed
    assert mq.ok("consume", "t", "-g", "G", "-e").out.split() == [f"n{i}" for i in range(4, 10)]
    mq.check_clean()
