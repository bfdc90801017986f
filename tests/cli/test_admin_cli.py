"""The inspection and admin commands: offsets show/reset, progress, locks, consumers,
rebalance, unlock, dlq list/resend, completion.

Commands that do not stream run in-process through ``typer.testing.CliRunner`` against
``mqctl.app.app`` (store errors are mapped to their contract exit code as ``mqctl.app.main``
does); where other processes matter — live consumers holding queues — real ``mqctl consume``
processes are started.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from mqctl.app import app
from store.client.offsets import ClusterOffsetStore
from store.errors import StoreError
from store.layout import Layout
from store.log.broker import Store
from store.log.record import PROP_DLQ_ORIGIN_TOPIC, PROP_RETRY_TOPIC, Draft
from store.names import dlq_topic, retry_topic
from tests.procs import wait_for

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]


class Result:
    def __init__(self, code: int, stdout: str, stderr: str, exc: BaseException | None) -> None:
        self.code, self.stdout, self.stderr, self.exc = code, stdout, stderr, exc

    def json(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def __repr__(self) -> str:
        return f"<exit {self.code} stdout={self.stdout[-500:]!r} stderr={self.stderr[-500:]!r} exc={self.exc!r}>"


class CLI:
    """``mqctl --store ROOT ARGS`` in-process; a StoreError becomes its exit code (and its
    one-line message on stderr), as the real entry point does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        r = self.runner.invoke(app, ["--store", str(self.root), *args], input=input,
                               env={"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
        code, err = r.exit_code, r.stderr
        if isinstance(r.exception, StoreError):
            code = r.exception.exit_code
            err += f"mqctl: error: {r.exception}\n"
        elif r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        return Result(code, r.stdout, err, r.exception)

    def ok(self, *args: str, **kw: Any) -> Result:
        res = self(*args, **kw)
        assert res.code == 0, res
        return res


@pytest.fixture
def cli(root: Path) -> CLI:
    return CLI(root)


def put(store: Store, topic: str, bodies: list[str], queue: int = 0, **kw: Any) -> list:
    return store.put([Draft(topic, b.encode(), queue_id=queue, **kw) for b in bodies])


@pytest.fixture
def loaded(store: Store) -> Store:
    """Topic T (4 queues): queue 0 holds 10 messages, queue 1 holds 3; group G committed
    queue 0 at 4 and queue 1 at 3."""
    store.create_topic("T", 4)
    put(store, "T", [f"a{i}" for i in range(10)], queue=0)
    put(store, "T", [f"b{i}" for i in range(3)], queue=1)
    ClusterOffsetStore(store.layout).commit("G", {("T", 0): 4, ("T", 1): 3, ("T", 2): 0, ("T", 3): 0})
    return store


def offsets_of(store: Store, group: str, topic: str) -> dict[int, int]:
    return {q: o for (t, q), o in ClusterOffsetStore(store.layout).read_group(group).items() if t == topic}


# -- offsets show ------------------------------------------------------------------------------

def test_offsets_show(cli: CLI, loaded: Store) -> None:
    rows = cli.ok("offsets", "show", "-g", "G", "--json").json()
    assert [(r["topic"], r["queueId"], r["offset"]) for r in rows] == [("T", 0, 4), ("T", 1, 3), ("T", 2, 0), ("T", 3, 0)]
    table = cli.ok("offsets", "show", "-g", "G", "--topic", "T").stdout.splitlines()
    assert table[0].split() == ["TOPIC", "QUEUE", "OFFSET"]
    assert table[1].split() == ["T", "0", "4"]


def test_offsets_show_unknown_group_and_topic(cli: CLI, loaded: Store) -> None:
    r = cli("offsets", "show", "-g", "Nope")
    assert r.code == 3 and "Nope" in r.stderr and r.stdout == ""
    assert cli("offsets", "show", "-g", "G", "--topic", "Missing").code == 3
    assert cli("offsets", "show", "-g", "bad/name").code == 2


def test_missing_store_is_not_found(tmp_path: Path) -> None:
    assert CLI(tmp_path / "none")("offsets", "show", "-g", "G").code == 3


# -- offsets reset -----------------------------------------------------------------------------

def test_reset_is_a_dry_run_unless_execute(cli: CLI, loaded: Store) -> None:
    before = offsets_of(loaded, "G", "T")
    r = cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--json")
    plan = r.json()
    assert [(p["queueId"], p["currentOffset"], p["newOffset"], p["applied"]) for p in plan] == [
        (0, 4, 0, False), (1, 3, 0, False), (2, 0, 0, False), (3, 0, 0, False)]
    assert "--execute" in r.stderr
    assert offsets_of(loaded, "G", "T") == before
    epoch = ClusterOffsetStore(loaded.layout).epoch("G", "T")
    r = cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute", "--json")
    assert all(p["applied"] for p in r.json())
    assert offsets_of(loaded, "G", "T") == {0: 0, 1: 0, 2: 0, 3: 0}
    assert ClusterOffsetStore(loaded.layout).epoch("G", "T") == epoch + 1, "live consumers learn of a reset by its epoch"


def test_reset_to_latest_and_to_offset_on_one_queue(cli: CLI, loaded: Store) -> None:
    cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-latest", "--execute")
    assert offsets_of(loaded, "G", "T") == {0: 10, 1: 3, 2: 0, 3: 0}
    cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "7", "-q", "0", "--execute")
    assert offsets_of(loaded, "G", "T") == {0: 7, 1: 3, 2: 0, 3: 0}


def test_reset_to_offset_beyond_the_end_is_clamped_and_reported(cli: CLI, loaded: Store) -> None:
    r = cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "50", "-q", "1", "--execute", "--json")
    (row,) = r.json()
    assert row["newOffset"] == 3 and row["clamped"] == "end"
    assert "past the end" in r.stderr and "clamped" in r.stderr


def test_reset_to_time(cli: CLI, loaded: Store) -> None:
    q = loaded.queue("T", 0)
    ts5 = loaded.store_timestamp_at(q.entry(5)[0])
    # Messages of one batch share a store time: the first at or after ts5 is the batch's first.
    r = cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", str(ts5), "-q", "0", "--json")
    assert r.json()[0]["newOffset"] == loaded.search_offset("T", 0, ts5)
    future = str(int(time.time() * 1000) + 3_600_000)
    assert cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", future, "-q", "0",
                  "--json").json()[0]["newOffset"] == 10


def test_reset_to_time_before_the_earliest_message_is_clamped_with_a_note(cli: CLI, loaded: Store) -> None:
    r = cli.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", "2001-01-01", "--execute", "--json")
    rows = {p["queueId"]: p for p in r.json()}
    assert rows[0]["newOffset"] == 0 and rows[0]["clamped"] == "earliest"
    assert rows[2]["clamped"] is None  # an empty queue has nothing to clamp to
    assert "before the earliest stored message" in r.stderr and "queues 0,1" in r.stderr
    assert offsets_of(loaded, "G", "T")[0] == 0


@pytest.mark.parametrize("targets", [
    [], ["--to-earliest", "--to-latest"], ["--to-time", "now", "--to-offset", "3"],
    ["--to-latest", "--to-offset", "0"],
])
def test_reset_needs_exactly_one_target(cli: CLI, loaded: Store, targets: list[str]) -> None:
    r = cli("offsets", "reset", "-g", "G", "--topic", "T", *targets, "--execute")
    assert r.code == 2, r
    assert "exactly one target" in r.stderr
    assert offsets_of(loaded, "G", "T")[0] == 4


def test_reset_bad_input(cli: CLI, loaded: Store) -> None:
    assert cli("offsets", "reset", "-g", "G", "--topic", "Missing", "--to-earliest").code == 3
    assert cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "-q", "9").code == 2
    assert cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", "yesterday-ish").code == 2
    assert cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-offset", "-1").code == 2
    assert cli("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute", "--dry-run").code == 2


def test_reset_of_broadcast_offsets(cli: CLI, loaded: Store) -> None:
    from store.client.offsets import BroadcastOffsetStore
    b = BroadcastOffsetStore(loaded.layout, "c1", "B")
    for q in range(4):
        b.update("T", q, 2 if q == 0 else 0)
    b.persist({("T", q) for q in range(4)})
    rows = cli.ok("offsets", "show", "-g", "B", "--json").json()
    assert {(r["clientId"], r["queueId"], r["offset"]) for r in rows} >= {("c1", 0, 2)}
    cli.ok("offsets", "reset", "-g", "B", "--topic", "T", "--to-latest", "--execute")
    again = BroadcastOffsetStore(loaded.layout, "c1", "B").load()
    assert again[("T", 0)] == 10
    assert "B" not in ClusterOffsetStore(loaded.layout).groups(), "a broadcast group gets no clustering offsets"


# -- progress --------------------------------------------------------------------------------

def test_progress(cli: CLI, loaded: Store) -> None:
    rows = {r["queueId"]: r for r in cli.ok("progress", "-g", "G", "--json").json()}
    assert set(rows) == {0, 1, 2, 3}
    assert (rows[0]["brokerOffset"], rows[0]["consumerOffset"], rows[0]["lag"]) == (10, 4, 6)
    assert rows[1]["lag"] == 0 and rows[3]["lag"] == 0
    ts3 = loaded.store_timestamp_at(loaded.queue("T", 0).entry(3)[0])
    assert rows[0]["lastTimestamp"] == ts3
    assert rows[2]["lastTimestamp"] is None
    for field in ("topic", "queueId", "brokerOffset", "consumerOffset", "lag", "lastTimestamp"):
        assert field in rows[0]


def test_progress_lag_is_never_negative_and_includes_the_retry_topic(cli: CLI, loaded: Store) -> None:
    ClusterOffsetStore(loaded.layout).reset("G", "T", {1: 99})
    put(loaded, retry_topic("G"), ["r1", "r2"], properties={PROP_RETRY_TOPIC: "T"})
    r = cli.ok("progress", "-g", "G", "--json")
    rows = r.json()
    q1 = next(x for x in rows if x["topic"] == "T" and x["queueId"] == 1)
    assert q1["lag"] == 0
    retry = [x for x in rows if x["topic"] == retry_topic("G")]
    assert [(x["queueId"], x["brokerOffset"], x["consumerOffset"], x["lag"]) for x in retry] == [(0, 2, None, 2)]
    assert all(x["lag"] >= 0 for x in rows)
    only_t = cli.ok("progress", "-g", "G", "--topic", "T", "--json").json()
    assert {x["topic"] for x in only_t} == {"T"}
    human = cli.ok("progress", "-g", "G")
    assert human.stdout.splitlines()[0].split()[:5] == ["TOPIC", "QUEUE", "BROKER-OFFSET", "CONSUMER-OFFSET", "LAG"]
    assert "total lag" in human.stderr


def test_progress_unknown_group(cli: CLI, loaded: Store) -> None:
    r = cli("progress", "-g", "Ghost")
    assert r.code == 3 and "Ghost" in r.stderr


# -- locks and unlock ------------------------------------------------------------------------------

def _stale_lock(layout: Layout, group: str, topic: str, qid: int, cid: str) -> None:
    """A lock file whose holder is gone (the process closed it without releasing)."""
    from store.client.qlocks import QueueLock
    lock = QueueLock(layout, group, topic, qid, cid)
    assert lock.try_acquire()
    lock._close()  # as a crash would: the OS lock goes, the file and record stay


def test_locks_and_unlock(cli: CLI, loaded: Store) -> None:
    from store.client.qlocks import QueueLock
    layout = loaded.layout
    held = QueueLock(layout, "O", "T", 0, "alive@1")
    assert held.try_acquire()
    try:
        _stale_lock(layout, "O", "T", 1, "dead@2")
        rows = {r["queueId"]: r for r in cli.ok("locks", "--json").json()}
        assert rows[0]["alive"] is True and rows[0]["state"] == "held" and rows[0]["clientId"] == "alive@1"
        assert rows[1]["alive"] is False and rows[1]["state"] == "stale"
        for field in ("group", "topic", "queueId", "clientId", "pid", "host", "acquiredAt", "renewedAt",
                      "expiresAt", "alive"):
            assert field in rows[0]
        assert rows[0]["expiresAt"] - rows[0]["renewedAt"] == 60_000
        table = cli.ok("locks", "-g", "O").stdout
        assert re.search(r"\d+(ms|s) ago", table) and re.search(r"in \d+s", table)
        # Only the stale lock goes without --force.
        dry = cli.ok("unlock", "-g", "O", "--dry-run", "--json").json()
        assert [r["queueId"] for r in dry] == [1]
        assert len(cli.ok("locks", "-g", "O", "--json").json()) == 2
        r = cli.ok("unlock", "-g", "O", "--json")
        assert [(x["queueId"], x["clientId"]) for x in r.json()] == [(1, "dead@2")]
        assert "--force" in r.stderr
        assert [x["queueId"] for x in cli.ok("locks", "--json").json()] == [0]
        r = cli.ok("unlock", "-g", "O", "--topic", "T", "-q", "0", "--force", "--json")
        assert [x["queueId"] for x in r.json()] == [0]
        assert not held.is_valid(), "the holder notices that its lock was broken"
        assert cli.ok("locks", "--json").json() == []
    finally:
        held.release()


def test_locks_and_unlock_of_an_unknown_group(cli: CLI, loaded: Store) -> None:
    assert cli("locks", "-g", "Ghost").code == 3
    assert cli("unlock", "-g", "Ghost").code == 3
    r = cli.ok("locks", "-g", "G")  # a known group without locks: nothing on stdout
    assert r.stdout == "" and "no queue locks" in r.stderr


# -- consumers and rebalance -------------------------------------------------------------------

@pytest.fixture
def members(loaded: Store) -> Iterator[list]:
    from store.client.members import Membership
    ms = []
    for cid, qs in (("m1", [0, 1]), ("m2", [2, 3])):
        m = Membership(loaded.layout, "G", cid, {"topics": ["T"], "mode": "clustering", "orderly": False,
                                                 "strategy": "circle", "queues": []})
        m.join()
        m.update(queues=[{"topic": "T", "queueId": q} for q in qs], heartbeatAt=int(time.time() * 1000))
        ms.append(m)
    yield ms
    for m in ms:
        m.leave()


def test_consumers(cli: CLI, members: list) -> None:
    rows = cli.ok("consumers", "-g", "G", "--json").json()
    assert [r["clientId"] for r in rows] == ["m1", "m2"]
    assert rows[0]["queues"] == [{"topic": "T", "queueId": 0}, {"topic": "T", "queueId": 1}]
    for field in ("clientId", "pid", "host", "mode", "orderly", "queues", "startedAt", "heartbeatAt"):
        assert field in rows[0]
    assert rows[0]["pid"] == os.getpid()
    assert "T:0,1" in cli.ok("consumers", "-g", "G").stdout
    assert cli("consumers", "-g", "Ghost").code == 3


def test_consumers_of_a_known_group_without_members(cli: CLI, loaded: Store) -> None:
    r = cli.ok("consumers", "-g", "G", "--json")
    assert r.json() == [] and "no live members" not in r.stdout


def test_rebalance_preview_uses_the_live_allocation_code(cli: CLI, members: list) -> None:
    from store.client.allocate import allocate_all, queues_of
    rows = cli.ok("rebalance", "T", "-g", "G", "--json").json()
    expect = allocate_all("circle", queues_of("T", range(4)), ["m1", "m2"])  # the members' strategy
    assert {r["clientId"]: r["queues"] for r in rows} == {c: [q.queue_id for q in mqs] for c, mqs in expect.items()}
    assert rows[0]["holds"] == [0, 1]
    rows = cli.ok("rebalance", "T", "-g", "G", "--consumers", "c,a,b", "--strategy", "averagely", "--json").json()
    assert [(r["clientId"], r["queues"]) for r in rows] == [("a", [0, 1]), ("b", [2]), ("c", [3])]
    rows = cli.ok("rebalance", "T", "-g", "G", "--consumers", "a,b", "--strategy", "config", "--queues", "0,3",
                  "--json").json()
    assert [r["queues"] for r in rows] == [[0, 3], [0, 3]]


def test_rebalance_bad_input(cli: CLI, loaded: Store) -> None:
    assert cli("rebalance", "T", "-g", "G").code == 3  # no live members and no --consumers
    assert cli("rebalance", "Missing", "-g", "G", "--consumers", "a").code == 3
    assert cli("rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "config").code == 2
    assert cli("rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "random").code == 2
    assert cli("rebalance", "T", "-g", "G", "--consumers", "a", "--queues", "1").code == 2


# -- dlq ---------------------------------------------------------------------------------------

@pytest.fixture
def dead(loaded: Store) -> Store:
    from store.client.retry import dead_letter
    for m in loaded.pull("T", 0, 0, 3).messages:
        dead_letter(loaded, "G", m, 16)
    return loaded


def test_dlq_list(cli: CLI, dead: Store) -> None:
    rows = cli.ok("dlq", "list", "-g", "G", "--json").json()
    assert [r["body"] for r in rows] == ["a0", "a1", "a2"]
    r = rows[0]
    assert r["topic"] == dlq_topic("G") and r["dlqOriginTopic"] == "T" and r["reconsumeTimes"] == 16
    assert isinstance(r["storeTimestamp"], int) and r["resent"] is False
    for field in ("queueId", "queueOffset", "msgId", "keys", "tags", "properties", "bornTimestamp"):
        assert field in r
    assert "ORIGIN-TOPIC" in cli.ok("dlq", "list", "-g", "G").stdout


def test_dlq_unknown_group(cli: CLI, loaded: Store) -> None:
    r = cli("dlq", "list", "-g", "G")  # the group exists but nothing was dead-lettered: empty, not an error
    assert (r.code, r.stdout, r.stderr) == (0, "", "no dead letters for group G\n")
    assert cli("dlq", "list", "-g", "G", "--json").stdout == ""
    r = cli("dlq", "resend", "-g", "G")
    assert (r.code, r.stdout, r.stderr) == (0, "", "no dead letters for group G\n")
    assert cli("dlq", "list", "-g", "Ghost").code == 3
    assert cli("dlq", "resend", "-g", "Ghost").code == 3


def test_dlq_resend_all_then_nothing_twice(cli: CLI, dead: Store) -> None:
    r = cli.ok("dlq", "resend", "-g", "G", "--dry-run", "--json")
    assert len(r.json()) == 3
    assert not dead.has_topic(retry_topic("G")), "a dry run writes nothing"
    r = cli.ok("dlq", "resend", "-g", "G", "--json")
    assert [x["dlqOffset"] for x in r.json()] == [0, 1, 2]
    copies = list(dead.iter_queue(retry_topic("G"), 0, 0))
    assert [m.body for m in copies] == [b"a0", b"a1", b"a2"]
    for m in copies:
        assert m.reconsume_times == 0 and m.properties[PROP_RETRY_TOPIC] == "T"
        assert PROP_DLQ_ORIGIN_TOPIC not in m.properties
    originals = {m.uniq_key for m in dead.iter_queue(dlq_topic("G"), 0, 0)}
    assert {m.uniq_key for m in copies} == originals, "the unique key is kept for msg show's history"
    assert cli.ok("dlq", "resend", "-g", "G", "--json").json() == []
    assert dead.max_offset(retry_topic("G"), 0) == 3
    assert all(r["resent"] for r in cli.ok("dlq", "list", "-g", "G", "--json").json())
    # A new dead letter is resent by the next run, and only it.
    from store.client.retry import dead_letter
    dead_letter(dead, "G", dead.pull("T", 0, 5, 1).messages[0], 16)
    assert [x["dlqOffset"] for x in cli.ok("dlq", "resend", "-g", "G", "--json").json()] == [3]
    assert len(cli.ok("dlq", "resend", "-g", "G", "--force", "--json").json()) == 4


def test_dlq_resend_by_id(cli: CLI, dead: Store) -> None:
    rows = cli.ok("dlq", "list", "-g", "G", "--json").json()
    r = cli.ok("dlq", "resend", "-g", "G", "--msg-id", rows[1]["msgId"], "--json")
    assert [x["dlqOffset"] for x in r.json()] == [1]
    assert "already resent" not in r.stderr
    assert cli.ok("dlq", "resend", "-g", "G", "--msg-id", rows[1]["offsetMsgId"], "--json").json() == []
    assert [x["dlqOffset"] for x in cli.ok("dlq", "resend", "-g", "G", "--json").json()] == [0, 2]
    record = json.loads((dead.layout.config_dir / "dlqResend.json").read_text())
    assert record["offsetTable"]["G"] == 3
    assert cli("dlq", "resend", "-g", "G", "--msg-id", "0" * 32).code == 3


# -- completion and misc -----------------------------------------------------------------------

@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_command_prints_the_committed_file(cli: CLI, shell: str) -> None:
    from mqctl.completions import DEFAULT_DIR, SHELLS, script
    out = cli.ok("completion", shell).stdout
    assert out == script(shell)
    committed = DEFAULT_DIR / SHELLS[shell]
    if committed.exists():
        assert out == committed.read_text()


def test_completion_unknown_shell(cli: CLI) -> None:
    assert cli("completion", "tcsh").code == 2


def test_format_with_an_unknown_token_is_a_usage_error(cli: CLI, loaded: Store) -> None:
    r = cli("consume", "T", "-g", "G", "--format", "%Z %s\\n", "-e")
    assert r.code == 2 and "%Z" in r.stderr


def test_tables_have_no_escape_codes_when_piped(root: Path, loaded: Store) -> None:
    cp = subprocess.run(MQCTL + ["progress", "-g", "G"], capture_output=True, env={**os.environ, "MQCTL_STORE": str(root)},
                        timeout=60)
    assert cp.returncode == 0 and b"\x1b[" not in cp.stdout and b"\x1b[" not in cp.stderr


# -- with real consumer processes -------------------------------------------------------------

@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _mqctl(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MQCTL_STORE": str(root), "NO_COLOR": "1"}
    return subprocess.run(MQCTL + list(args), capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("orderly", [False, True])
def test_live_members_block_a_reset_unless_forced(root: Path, loaded: Store, procs: list, tmp_path: Path,
                                                  orderly: bool) -> None:
    env = {**os.environ, "MQCTL_STORE": str(root), "NO_COLOR": "1"}
    group = "G"
    err = open(tmp_path / "consumer.err", "wb")
    p = subprocess.Popen(MQCTL + ["consume", "T", "-g", group, "--client-id", "worker-1", "--idle-timeout", "60"]
                         + (["--orderly"] if orderly else []),
                         stdout=subprocess.DEVNULL, stderr=err, env=env)
    procs.append(p)
    from store.client.members import live_members
    wait_for(lambda: any(len(m.queues) == 4 for m in live_members(loaded.layout, group)), 20.0,
             what="the consumer to hold all four queues")
    # What the commands show about it.
    rows = json.loads(_mqctl(root, "consumers", "-g", group, "--json").stdout.splitlines()[0])
    assert rows["clientId"] == "worker-1" and rows["pid"] == p.pid and len(rows["queues"]) == 4
    if orderly:
        locks = [json.loads(x) for x in _mqctl(root, "locks", "-g", group, "--json").stdout.splitlines()]
        assert len(locks) == 4 and all(x["alive"] and x["pid"] == p.pid for x in locks)
        assert _mqctl(root, "unlock", "-g", group, "--json").stdout == "", "live locks stay without --force"
    before = offsets_of(loaded, group, "T")
    cp = _mqctl(root, "offsets", "reset", "-g", group, "--topic", "T", "--to-earliest", "--execute")
    assert cp.returncode == 4, cp.stderr
    assert "worker-1" in cp.stderr and "--force" in cp.stderr and cp.stderr.startswith("mqctl: error:")
    assert offsets_of(loaded, group, "T") == before
    # The plan alone is fine, with a warning.
    cp = _mqctl(root, "offsets", "reset", "-g", group, "--topic", "T", "--to-earliest")
    assert cp.returncode == 0 and "--force" in cp.stderr
    cp = _mqctl(root, "offsets", "reset", "-g", group, "--topic", "T", "--to-earliest", "--execute", "--force")
    assert cp.returncode == 0, cp.stderr
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    # Once the consumer is gone the reset needs no --force, and the offsets are what it says.
    cp = _mqctl(root, "offsets", "reset", "-g", group, "--topic", "T", "--to-offset", "2", "-q", "0", "--execute")
    assert cp.returncode == 0, cp.stderr
    assert offsets_of(loaded, group, "T")[0] == 2


def test_forced_reset_is_taken_up_by_a_live_consumer(root: Path, loaded: Store, procs: list, tmp_path: Path) -> None:
    """After a forced reset the running consumer redelivers from the new offset (it learns of
    the reset through the epoch at its next commit)."""
    env = {**os.environ, "MQCTL_STORE": str(root), "NO_COLOR": "1"}
    out = tmp_path / "out"
    with open(out, "wb") as fout:
        p = subprocess.Popen(MQCTL + ["consume", "T", "-g", "R", "--from", "first", "--idle-timeout", "60"],
                             stdout=fout, stderr=subprocess.DEVNULL, env=env)
    procs.append(p)
    wait_for(lambda: len(out.read_bytes().splitlines()) == 13, 20.0, what="the first 13 messages")
    wait_for(lambda: offsets_of(loaded, "R", "T").get(0) == 10, 20.0, what="the offsets to be committed")
    cp = _mqctl(root, "offsets", "reset", "-g", "R", "--topic", "T", "--to-earliest", "-q", "0", "--execute", "--force")
    assert cp.returncode == 0, cp.stderr
    put(loaded, "T", ["new"], queue=0)
    wait_for(lambda: out.read_bytes().splitlines().count(b"a0") == 2, 20.0, what="a0 to be delivered again")
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
