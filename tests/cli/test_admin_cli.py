"""The inspection and admin commands: offsets show/reset, progress, locks, consumers,
rebalance, unlock, dlq list/resend, completion.

Commands that do not stream run in-process through ``mqctl.app.main`` (``MQ.cli``: its
error boundary included, so store errors end in their contract exit code); where other
processes matter — live consumers holding queues — real ``mqctl consume`` processes are
started (``MQ.start``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from store.layout import Layout
from store.log.messagestore import Store
from store.log.offsets import ClusterOffsetStore
from store.log.record import PROP_DLQ_ORIGIN_TOPIC, PROP_RETRY_TOPIC, Draft
from store.names import dlq_topic, retry_topic
from tests.procs import MQ, one_error, run_inprocess, wait_for


def put(store: Store, topic: str, bodies: list[str], queue: int = 0, **kw: Any) -> list:
    return store.put([Draft(topic, b.encode(), queue_id=queue, **kw) for b in bodies])


@pytest.fixture
def loaded(mq: MQ, store: Store) -> Store:
    """Topic T (4 queues) in ``mq``'s store: queue 0 holds 10 messages, queue 1 holds 3;
    group G committed queue 0 at 4 and queue 1 at 3. (``mq`` runs ``mqctl init`` on the
    path the ``store`` fixture then opens.)"""
    assert store.layout.root == mq.root
    store.create_topic("T", 4)
    put(store, "T", [f"a{i}" for i in range(10)], queue=0)
    put(store, "T", [f"b{i}" for i in range(3)], queue=1)
    ClusterOffsetStore(store.layout).commit("G", {("T", 0): 4, ("T", 1): 3, ("T", 2): 0, ("T", 3): 0})
    return store


def offsets_of(store: Store, group: str, topic: str) -> dict[int, int]:
    return {q: o for (t, q), o in ClusterOffsetStore(store.layout).read_group(group).items() if t == topic}


# -- offsets show ------------------------------------------------------------------------------

def test_offsets_show(mq: MQ, loaded: Store) -> None:
    rows = mq.cli("offsets", "show", "-g", "G", "--json", check=True).json_lines()
    assert [(r["topic"], r["queueId"], r["offset"]) for r in rows] == [("T", 0, 4), ("T", 1, 3), ("T", 2, 0), ("T", 3, 0)]
    table = mq.cli("offsets", "show", "-g", "G", "--topic", "T", check=True).out.splitlines()
    assert table[0].split() == ["TOPIC", "QUEUE", "OFFSET"]
    assert table[1].split() == ["T", "0", "4"]


def test_offsets_show_unknown_group_and_topic(mq: MQ, loaded: Store) -> None:
    r = mq.cli("offsets", "show", "-g", "Nope")
    assert r.returncode == 3 and "Nope" in r.stderr and r.out == ""
    assert mq.cli("offsets", "show", "-g", "G", "--topic", "Missing").returncode == 3
    assert mq.cli("offsets", "show", "-g", "bad/name").returncode == 2


def test_an_unknown_group_names_a_few_known_ones_closest_first(mq: MQ, loaded: Store) -> None:
    """The error listed every group the store knows (about 50 on the tester's store, all on
    one line, and the Python error the same): now at most 10, the names closest to the one
    given first, then "and N more"."""
    offsets = ClusterOffsetStore(loaded.layout)
    for i in range(40):
        offsets.commit(f"billing-{i:02d}", {("T", 0): 1})
    line = one_error(mq.run("progress", "-g", "billing-7"), 3, "consumer group 'billing-7' does not exist")
    known = line.split("; known groups: ")[1]
    shown, more = known.split(" and ")
    assert more == "31 more" and len(shown.split(", ")) == 10, line
    assert shown.split(", ")[0] in ("billing-07", "billing-17", "billing-27", "billing-37"), line
    line = one_error(mq.run("progress", "-g", "zzz"), 3)
    assert line.endswith("; known groups: G, billing-00, billing-01, billing-02, billing-03, billing-04, "
                         "billing-05, billing-06, billing-07, billing-08 and 31 more"), line


def test_missing_store_is_not_found(tmp_path: Path) -> None:
    assert MQ(tmp_path / "none", tmp_path).cli("offsets", "show", "-g", "G").returncode == 3


# -- offsets reset -----------------------------------------------------------------------------

def test_reset_is_a_dry_run_unless_execute(mq: MQ, loaded: Store) -> None:
    before = offsets_of(loaded, "G", "T")
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--json", check=True)
    plan = r.json_lines()
    assert [(p["queueId"], p["currentOffset"], p["newOffset"], p["applied"]) for p in plan] == [
        (0, 4, 0, False), (1, 3, 0, False), (2, 0, 0, False), (3, 0, 0, False)]
    assert "--execute" in r.stderr
    assert offsets_of(loaded, "G", "T") == before
    epoch = ClusterOffsetStore(loaded.layout).epochs_of("G").get("T", 0)
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute", "--json", check=True)
    assert all(p["applied"] for p in r.json_lines())
    assert offsets_of(loaded, "G", "T") == {0: 0, 1: 0, 2: 0, 3: 0}
    assert ClusterOffsetStore(loaded.layout).epochs_of("G").get("T", 0) == epoch + 1, "live consumers learn of a reset by its epoch"


def test_reset_to_latest_and_to_offset_on_one_queue(mq: MQ, loaded: Store) -> None:
    mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-latest", "--execute", check=True)
    assert offsets_of(loaded, "G", "T") == {0: 10, 1: 3, 2: 0, 3: 0}
    mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "7", "-q", "0", "--execute", check=True)
    assert offsets_of(loaded, "G", "T") == {0: 7, 1: 3, 2: 0, 3: 0}


def test_reset_to_offset_beyond_the_end_is_clamped_and_reported(mq: MQ, loaded: Store) -> None:
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "50", "-q", "1", "--execute", "--json", check=True)
    (row,) = r.json_lines()
    assert row["newOffset"] == 3 and row["clamped"] == "end"
    assert "past the end" in r.stderr and "clamped" in r.stderr


def test_reset_to_time(mq: MQ, loaded: Store) -> None:
    ts5 = loaded.store_time("T", 0, 5)
    # Messages of one batch share a store time: the first at or after ts5 is the batch's first.
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", str(ts5), "-q", "0", "--json", check=True)
    assert r.json_lines()[0]["newOffset"] == loaded.search_offset("T", 0, ts5)
    future = str(int(time.time() * 1000) + 3_600_000)
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", future, "-q", "0",
                  "--json", check=True).json_lines()[0]["newOffset"] == 10


def test_reset_to_time_before_the_earliest_message_is_clamped_with_a_note(mq: MQ, loaded: Store) -> None:
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", "2001-01-01", "--execute", "--json", check=True)
    rows = {p["queueId"]: p for p in r.json_lines()}
    assert rows[0]["newOffset"] == 0 and rows[0]["clamped"] == "earliest"
    assert rows[2]["clamped"] is None  # an empty queue has nothing to clamp to
    assert "before the earliest stored message" in r.stderr and "queues 0,1" in r.stderr
    assert offsets_of(loaded, "G", "T")[0] == 0


@pytest.mark.parametrize("targets", [
    [], ["--to-earliest", "--to-latest"], ["--to-time", "now", "--to-offset", "3"],
    ["--to-latest", "--to-offset", "0"],
])
def test_reset_needs_exactly_one_target(mq: MQ, loaded: Store, targets: list[str]) -> None:
    r = mq.cli("offsets", "reset", "-g", "G", "--topic", "T", *targets, "--execute")
    assert r.returncode == 2, r
    assert "exactly one target" in r.stderr
    assert offsets_of(loaded, "G", "T")[0] == 4


def test_reset_bad_input(mq: MQ, loaded: Store) -> None:
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "Missing", "--to-earliest").returncode == 3
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "-q", "9").returncode == 2
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", "yesterday-ish").returncode == 2
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "-1").returncode == 2
    assert mq.cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute", "--dry-run").returncode == 2


def test_reset_of_broadcast_offsets(mq: MQ, loaded: Store) -> None:
    from store.log.broadcastoffsets import BroadcastOffsetStore
    b = BroadcastOffsetStore(loaded.layout, "c1", "B")
    for q in range(4):
        b.update("T", q, 2 if q == 0 else 0)
    b.persist({("T", q) for q in range(4)})
    rows = mq.cli("offsets", "show", "-g", "B", "--json", check=True).json_lines()
    assert {(r["clientId"], r["queueId"], r["offset"]) for r in rows} >= {("c1", 0, 2)}
    mq.cli("offsets", "reset", "-g", "B", "--topic", "T", "--to-latest", "--execute", check=True)
    again = BroadcastOffsetStore(loaded.layout, "c1", "B").load()
    assert again[("T", 0)] == 10
    assert "B" not in ClusterOffsetStore(loaded.layout).groups(), "a broadcast group gets no clustering offsets"


# -- progress --------------------------------------------------------------------------------

def test_progress(mq: MQ, loaded: Store) -> None:
    rows = {r["queueId"]: r for r in mq.cli("progress", "-g", "G", "--json", check=True).json_lines()}
    assert set(rows) == {0, 1, 2, 3}
    assert (rows[0]["brokerOffset"], rows[0]["consumerOffset"], rows[0]["lag"]) == (10, 4, 6)
    assert rows[1]["lag"] == 0 and rows[3]["lag"] == 0
    ts3 = loaded.store_time("T", 0, 3)
    assert rows[0]["lastTimestamp"] == ts3
    assert rows[2]["lastTimestamp"] is None
    for field in ("topic", "queueId", "brokerOffset", "consumerOffset", "lag", "lastTimestamp"):
        assert field in rows[0]


def test_progress_lag_is_never_negative_and_includes_the_retry_topic(mq: MQ, loaded: Store) -> None:
    ClusterOffsetStore(loaded.layout).reset("G", "T", {1: 99})
    put(loaded, retry_topic("G"), ["r1", "r2"], properties={PROP_RETRY_TOPIC: "T"})
    r = mq.cli("progress", "-g", "G", "--json", check=True)
    rows = r.json_lines()
    q1 = next(x for x in rows if x["topic"] == "T" and x["queueId"] == 1)
    assert q1["lag"] == 0
    retry = [x for x in rows if x["topic"] == retry_topic("G")]
    assert [(x["queueId"], x["brokerOffset"], x["consumerOffset"], x["lag"]) for x in retry] == [(0, 2, None, 2)]
    assert all(x["lag"] >= 0 for x in rows)
    only_t = mq.cli("progress", "-g", "G", "--topic", "T", "--json", check=True).json_lines()
    assert {x["topic"] for x in only_t} == {"T"}
    human = mq.cli("progress", "-g", "G", check=True)
    assert human.out.splitlines()[0].split()[:5] == ["TOPIC", "QUEUE", "BROKER-OFFSET", "CONSUMER-OFFSET", "LAG"]
    assert "total lag" in human.stderr


def test_progress_unknown_group(mq: MQ, loaded: Store) -> None:
    r = mq.cli("progress", "-g", "Ghost")
    assert r.returncode == 3 and "Ghost" in r.stderr


# -- locks and unlock ------------------------------------------------------------------------------

def _stale_lock(layout: Layout, group: str, topic: str, qid: int, cid: str) -> None:
    """A lock file whose holder is gone (the process closed it without releasing)."""
    from store.client.qlocks import QueueLock
    lock = QueueLock(layout, group, topic, qid, cid)
    assert lock.try_acquire()
    lock._close()  # as a crash would: the OS lock goes, the file and record stay


def test_locks_and_unlock(mq: MQ, loaded: Store) -> None:
    from store.client.qlocks import QueueLock
    layout = loaded.layout
    held = QueueLock(layout, "O", "T", 0, "alive@1")
    assert held.try_acquire()
    try:
        _stale_lock(layout, "O", "T", 1, "dead@2")
        rows = {r["queueId"]: r for r in mq.cli("locks", "--json", check=True).json_lines()}
        assert rows[0]["alive"] is True and rows[0]["state"] == "held" and rows[0]["clientId"] == "alive@1"
        assert rows[1]["alive"] is False and rows[1]["state"] == "stale"
        for field in ("group", "topic", "queueId", "clientId", "pid", "host", "acquiredAt", "renewedAt",
                      "expiresAt", "alive"):
            assert field in rows[0]
        assert rows[0]["expiresAt"] - rows[0]["renewedAt"] == 60_000
        # machine values only: no "3s ago" / "in 57s" texts beside the times in ms
        assert set(rows[0]) == {"group", "topic", "queueId", "clientId", "pid", "host", "acquiredAt",
                                "renewedAt", "expiresAt", "alive", "state"}, rows[0]
        table = mq.cli("locks", "-g", "O", check=True).out
        assert re.search(r"\d+(ms|s) ago", table) and re.search(r"in \d+s", table)
        # Only the stale lock goes without --force.
        dry = mq.cli("unlock", "-g", "O", "--dry-run", "--json", check=True).json_lines()
        assert [r["queueId"] for r in dry] == [1]
        assert len(mq.cli("locks", "-g", "O", "--json", check=True).json_lines()) == 2
        r = mq.cli("unlock", "-g", "O", "--json", check=True)
        assert [(x["queueId"], x["clientId"]) for x in r.json_lines()] == [(1, "dead@2")]
        assert "--force" in r.stderr
        assert [x["queueId"] for x in mq.cli("locks", "--json", check=True).json_lines()] == [0]
        r = mq.cli("unlock", "-g", "O", "--topic", "T", "-q", "0", "--force", "--json", check=True)
        assert [x["queueId"] for x in r.json_lines()] == [0]
        assert not held.is_valid(), "the holder notices that its lock was broken"
        assert mq.cli("locks", "--json", check=True).json_lines() == []
    finally:
        held.release()


def test_locks_and_unlock_of_an_unknown_group(mq: MQ, loaded: Store) -> None:
    assert mq.cli("locks", "-g", "Ghost").returncode == 3
    assert mq.cli("unlock", "-g", "Ghost").returncode == 3
    r = mq.cli("locks", "-g", "G", check=True)  # a known group without locks: nothing on stdout
    assert r.out == "" and "no queue locks" in r.stderr


# -- consumers and rebalance -------------------------------------------------------------------

@pytest.fixture
def members(loaded: Store) -> Iterator[list]:
    from store.client.members import Membership
    from store.client.qlocks import QueueLock
    ms, locks = [], []
    for cid, qs in (("m1", [0, 1]), ("m2", [2, 3])):
        m = Membership(loaded.layout, "G", cid, {"topics": ["T"], "mode": "clustering", "orderly": False,
                                                 "strategy": "circle", "queues": []})
        m.join()
        # (a clustering member holds the locks of the queues it consumes: what consumers shows)
        locks += [QueueLock(loaded.layout, "G", "T", q, cid) for q in qs]
        m.update(queues=[{"topic": "T", "queueId": q} for q in qs], heartbeatAt=int(time.time() * 1000))
        ms.append(m)
    assert all(lk.try_acquire() for lk in locks)
    yield ms
    for lk in locks:
        lk.release()
    for m in ms:
        m.leave()


def test_consumers(mq: MQ, members: list) -> None:
    rows = mq.cli("consumers", "-g", "G", "--json", check=True).json_lines()
    assert [r["clientId"] for r in rows] == ["m1", "m2"]
    assert rows[0]["queues"] == [{"topic": "T", "queueId": 0}, {"topic": "T", "queueId": 1}]
    for field in ("clientId", "pid", "host", "mode", "orderly", "queues", "startedAt", "heartbeatAt"):
        assert field in rows[0]
    assert rows[0]["pid"] == os.getpid()
    assert "queuesText" not in rows[0]   # (the table's "T:0,1": --json has the queues themselves)
    assert "T:0,1" in mq.cli("consumers", "-g", "G", check=True).out
    assert mq.cli("consumers", "-g", "Ghost").returncode == 3


def test_consumers_of_a_known_group_without_members(mq: MQ, loaded: Store) -> None:
    r = mq.cli("consumers", "-g", "G", "--json", check=True)
    assert r.json_lines() == [] and "no live members" not in r.out


def test_rebalance_preview_uses_the_live_allocation_code(mq: MQ, members: list) -> None:
    from store.client.allocate import allocate_all, queues_of
    rows = mq.cli("rebalance", "T", "-g", "G", "--json", check=True).json_lines()
    expect = allocate_all("circle", queues_of("T", range(4)), ["m1", "m2"])  # the members' strategy
    assert {r["clientId"]: r["queues"] for r in rows} == {c: [q.queue_id for q in mqs] for c, mqs in expect.items()}
    assert rows[0]["holds"] == [0, 1]
    rows = mq.cli("rebalance", "T", "-g", "G", "--consumers", "c,a,b", "--strategy", "averagely", "--json", check=True).json_lines()
    assert [(r["clientId"], r["queues"]) for r in rows] == [("a", [0, 1]), ("b", [2]), ("c", [3])]
    rows = mq.cli("rebalance", "T", "-g", "G", "--consumers", "a,b", "--strategy", "config", "--queues", "0,3",
                  "--json", check=True).json_lines()
    assert [r["queues"] for r in rows] == [[0, 3], [0, 3]]


def test_rebalance_of_a_known_group_without_live_members(mq: MQ, loaded: Store) -> None:
    """Exit 0 with an empty allocation and a line saying why, as ``consumers`` exits 0 with
    none listed (it exited 3, "not found", for a group that has offsets); an unknown group is
    exit 3 for both."""
    res = mq.run("rebalance", "T", "-g", "G")
    assert res.returncode == 0 and res.stdout == b"", res
    assert "no live member of group G consumes T" in res.stderr, res
    assert mq.run("rebalance", "T", "-g", "G", "--json", check=True).stdout == b""
    assert mq.run("consumers", "-g", "G", check=True).stdout == b""
    one_error(mq.run("rebalance", "T", "-g", "Ghost"), 3, "consumer group 'Ghost' does not exist")
    one_error(mq.run("consumers", "-g", "Ghost"), 3, "consumer group 'Ghost' does not exist")


def test_rebalance_bad_input(mq: MQ, loaded: Store) -> None:
    assert mq.cli("rebalance", "Missing", "-g", "G", "--consumers", "a").returncode == 3
    assert mq.cli("rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "config").returncode == 2
    assert mq.cli("rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "random").returncode == 2
    assert mq.cli("rebalance", "T", "-g", "G", "--consumers", "a", "--queues", "1").returncode == 2


def test_rebalance_refuses_a_client_id_given_twice(mq: MQ, loaded: Store) -> None:
    # (it said "shared by 2 members" and printed one row: client ids are unique in a group)
    res = mq.run("rebalance", "T", "-g", "G", "--consumers", "c1,c2,c1")
    one_error(res, 2, "--consumers: client id c1 is given twice")
    assert res.stdout == b""


# -- dlq ---------------------------------------------------------------------------------------

@pytest.fixture
def dead(loaded: Store) -> Store:
    from store.client.retry import dead_letter
    for m in loaded.pull("T", 0, 0, 3).messages:
        dead_letter(loaded, "G", m, 16)
    return loaded


def test_dlq_list(mq: MQ, dead: Store) -> None:
    rows = mq.cli("dlq", "list", "-g", "G", "--json", check=True).json_lines()
    assert [r["body"] for r in rows] == ["a0", "a1", "a2"]
    r = rows[0]
    assert r["topic"] == dlq_topic("G") and r["dlqOriginTopic"] == "T" and r["reconsumeTimes"] == 16
    assert isinstance(r["storeTimestamp"], int) and r["resent"] is False
    for field in ("queueId", "queueOffset", "msgId", "keys", "tags", "properties", "bornTimestamp"):
        assert field in r
    assert "ORIGIN-TOPIC" in mq.cli("dlq", "list", "-g", "G", check=True).out


def test_dlq_unknown_group(mq: MQ, loaded: Store) -> None:
    r = mq.cli("dlq", "list", "-g", "G")  # the group exists but nothing was dead-lettered: empty, not an error
    assert (r.returncode, r.out, r.stderr) == (0, "", "no dead letters for group G\n")
    assert mq.cli("dlq", "list", "-g", "G", "--json").out == ""
    r = mq.cli("dlq", "resend", "-g", "G")
    assert (r.returncode, r.out, r.stderr) == (0, "", "no dead letters for group G\n")
    assert mq.cli("dlq", "list", "-g", "Ghost").returncode == 3
    assert mq.cli("dlq", "resend", "-g", "Ghost").returncode == 3


def test_dlq_resend_all_then_nothing_twice(mq: MQ, dead: Store) -> None:
    r = mq.cli("dlq", "resend", "-g", "G", "--dry-run", "--json", check=True)
    assert len(r.json_lines()) == 3
    assert not dead.has_topic(retry_topic("G")), "a dry run writes nothing"
    r = mq.cli("dlq", "resend", "-g", "G", "--json", check=True)
    assert [x["dlqOffset"] for x in r.json_lines()] == [0, 1, 2]
    copies = list(dead.iter_queue(retry_topic("G"), 0, 0))
    assert [m.body for m in copies] == [b"a0", b"a1", b"a2"]
    for m in copies:
        assert m.reconsume_times == 0 and m.properties[PROP_RETRY_TOPIC] == "T"
        assert PROP_DLQ_ORIGIN_TOPIC not in m.properties
    originals = {m.uniq_key for m in dead.iter_queue(dlq_topic("G"), 0, 0)}
    assert {m.uniq_key for m in copies} == originals, "the unique key is kept for msg show's history"
    assert mq.cli("dlq", "resend", "-g", "G", "--json", check=True).json_lines() == []
    assert dead.max_offset(retry_topic("G"), 0) == 3
    assert all(r["resent"] for r in mq.cli("dlq", "list", "-g", "G", "--json", check=True).json_lines())
    # A new dead letter is resent by the next run, and only it.
    from store.client.retry import dead_letter
    dead_letter(dead, "G", dead.pull("T", 0, 5, 1).messages[0], 16)
    assert [x["dlqOffset"] for x in mq.cli("dlq", "resend", "-g", "G", "--json", check=True).json_lines()] == [3]
    assert len(mq.cli("dlq", "resend", "-g", "G", "--force", "--json", check=True).json_lines()) == 4


def test_dlq_resend_by_id(mq: MQ, dead: Store) -> None:
    rows = mq.cli("dlq", "list", "-g", "G", "--json", check=True).json_lines()
    r = mq.cli("dlq", "resend", "-g", "G", "--msg-id", rows[1]["msgId"], "--json", check=True)
    assert [x["dlqOffset"] for x in r.json_lines()] == [1]
    assert "already resent" not in r.stderr
    assert mq.cli("dlq", "resend", "-g", "G", "--msg-id", rows[1]["offsetMsgId"], "--json", check=True).json_lines() == []
    assert [x["dlqOffset"] for x in mq.cli("dlq", "resend", "-g", "G", "--json", check=True).json_lines()] == [0, 2]
    record = json.loads((dead.layout.config_dir / "dlqResend.json").read_text())
    assert record["offsetTable"]["G"] == 3
    assert mq.cli("dlq", "resend", "-g", "G", "--msg-id", "0" * 32).returncode == 3


def test_tables_escape_control_characters_and_say_binary(mq: MQ, store: Store) -> None:
    """A body with a newline, a TAB and an escape sequence keeps its ``msg query`` and
    ``dlq list`` row one line, and sends the terminal no control character; a binary body reads
    as ``msg show`` says it (no NUL, no U+FFFD). ``--json`` has the bodies as they are."""
    from store.client.retry import dead_letter
    store.create_topic("nl", 1)
    nasty = "l1\nl2\tT \x1b[31mred"
    store.put([Draft("nl", nasty.encode(), {"KEYS": "k"}), Draft("nl", b"\x00\xff\xfe bin", {"KEYS": "k"})])
    for m in store.pull("nl", 0, 0, 2).messages:
        dead_letter(store, "G", m, 16)
    for args in (["msg", "query", "--topic", "nl", "-k", "k"], ["dlq", "list", "-g", "G"]):
        out = mq.ok(*args).out
        header, *rows = out.splitlines()
        assert len(rows) == 2, out
        assert not re.search(r"[\x00-\x1f\x7f-\x9f\ufffd]", out.replace("\n", "")), repr(out)
        ends = sorted(row.rsplit("  ", 1)[-1].strip() for row in rows)
        assert ends == ["(binary; --json has it in base64)", "l1\\nl2\\tT \\x1b[31mred"], rows
    got = mq.ok("msg", "query", "--topic", "nl", "-k", "k", "--json").json_lines()
    assert sorted((r["body"], r.get("bodyEncoding")) for r in got) == [("AP/+IGJpbg==", "base64"), (nasty, None)]


# -- completion and misc -----------------------------------------------------------------------

@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_command_prints_the_committed_file(shell: str) -> None:
    from mqctl.completions import DEFAULT_DIR, SHELLS, script
    res = run_inprocess(["completion", shell])
    assert res.returncode == 0, str(res)
    out = res.out
    assert out == script(shell)
    committed = DEFAULT_DIR / SHELLS[shell]
    if committed.exists():
        assert out == committed.read_text()


def test_completion_unknown_shell() -> None:
    assert run_inprocess(["completion", "tcsh"]).returncode == 2


def test_format_with_an_unknown_token_is_a_usage_error(mq: MQ, loaded: Store) -> None:
    r = mq.cli("consume", "T", "-g", "G", "--format", "%Z %s\\n", "-e")
    assert r.returncode == 2 and "%Z" in r.stderr


def test_tables_have_no_escape_codes_when_piped(mq: MQ, loaded: Store) -> None:
    res = mq.run("progress", "-g", "G", extra_env={"NO_COLOR": None})
    assert res.returncode == 0 and b"\x1b[" not in res.stdout and "\x1b[" not in res.stderr


# -- with real consumer processes -------------------------------------------------------------

@pytest.mark.parametrize("orderly", [False, True])
def test_live_members_block_a_reset_unless_forced(mq: MQ, loaded: Store, orderly: bool) -> None:
    group = "G"
    p = mq.start("consume", "T", "-g", group, "--client-id", "worker-1", "--idle-timeout", "60",
                 *(["--orderly"] if orderly else []), stdout=subprocess.DEVNULL)
    from store.client.members import live_members
    wait_for(lambda: any(len(m.queues) == 4 for m in live_members(loaded.layout, group)), 20.0,
             what="the consumer to hold all four queues")
    # What the commands show about it.
    rows = mq.run("consumers", "-g", group, "--json").json_lines()[0]
    assert rows["clientId"] == "worker-1" and rows["pid"] == p.pid and len(rows["queues"]) == 4
    if orderly:
        locks = mq.run("locks", "-g", group, "--json").json_lines()
        assert len(locks) == 4 and all(x["alive"] and x["pid"] == p.pid for x in locks)
        assert mq.run("unlock", "-g", group, "--json").stdout == b"", "live locks stay without --force"
    before = offsets_of(loaded, group, "T")
    res = mq.run("offsets", "reset", "-g", group, "--topic", "T", "--to-earliest", "--execute")
    assert res.returncode == 4, res.stderr
    assert "worker-1" in res.stderr and "--force" in res.stderr and res.stderr.startswith("mqctl: error:")
    assert offsets_of(loaded, group, "T") == before
    # The plan alone is fine, with a warning.
    res = mq.run("offsets", "reset", "-g", group, "--topic", "T", "--to-earliest")
    assert res.returncode == 0 and "--force" in res.stderr
    mq.ok("offsets", "reset", "-g", group, "--topic", "T", "--to-earliest", "--execute", "--force")
    assert p.stop(30) == 0
    # Once the consumer is gone the reset needs no --force, and the offsets are what it says.
    mq.ok("offsets", "reset", "-g", group, "--topic", "T", "--to-offset", "2", "-q", "0", "--execute")
    assert offsets_of(loaded, group, "T")[0] == 2


def test_forced_reset_is_taken_up_by_a_live_consumer(mq: MQ, loaded: Store) -> None:
    """After a forced reset the running consumer redelivers from the new offset (it learns of
    the reset through the epoch at its next commit)."""
    p = mq.start("consume", "T", "-g", "R", "--from", "first", "--idle-timeout", "60")
    wait_for(lambda: len(p.lines()) == 13, 20.0, what="the first 13 messages")
    wait_for(lambda: offsets_of(loaded, "R", "T").get(0) == 10, 20.0, what="the offsets to be committed")
    mq.ok("offsets", "reset", "-g", "R", "--topic", "T", "--to-earliest", "-q", "0", "--execute", "--force")
    put(loaded, "T", ["new"], queue=0)
    wait_for(lambda: p.lines().count(b"a0") == 2, 20.0, what="a0 to be delivered again")
    assert p.stop(30) == 0


def test_a_one_queue_reset_disturbs_only_that_queue_of_a_live_consumer(mq: MQ, loaded: Store) -> None:
    """A reset epoch is per topic: a member used to let every queue of the topic go on a reset
    of one, warning "offsets of T/1 were reset" for queues whose offsets had not moved. Now it
    warns for, and takes again, only the queue the reset moved; the others go on (their
    commits under the new epoch), nothing of them delivered twice."""
    p = mq.start("consume", "T", "-g", "R", "--from", "first", "--idle-timeout", "60")
    wait_for(lambda: len(p.lines()) == 13, 20.0, what="the first 13 messages")
    wait_for(lambda: offsets_of(loaded, "R", "T") == {0: 10, 1: 3, 2: 0, 3: 0}, 20.0,
             what="the offsets to be committed")
    mq.ok("offsets", "reset", "-g", "R", "--topic", "T", "--to-earliest", "-q", "0", "--execute", "--force")
    put(loaded, "T", ["new0"], queue=0)
    wait_for(lambda: p.lines().count(b"a0") == 2 and b"new0" in p.lines(), 20.0,
             what="queue 0 delivered again, and its new message")
    # (queue 1 gets its message once the reset is taken up: a member that read past a queue's
    # stored offset when it learns of a reset cannot tell whether the reset named that queue)
    put(loaded, "T", ["new1"], queue=1)
    wait_for(lambda: b"new1" in p.lines(), 20.0, what="queue 1's new message")
    wait_for(lambda: offsets_of(loaded, "R", "T") == {0: 11, 1: 4, 2: 0, 3: 0}, 20.0,
             what="both queues committed after the reset")
    assert p.stop(30) == 0
    warned = [line for line in p.stderr().splitlines() if "were reset" in line]
    assert warned == ["mqctl: warning: offsets of T/0 were reset; continuing from 0"], p.stderr()
    lines = p.lines()
    assert sorted(x for x in lines if x.startswith(b"b") or x == b"new1") == [b"b0", b"b1", b"b2", b"new1"]
