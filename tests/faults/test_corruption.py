"""Corruption: random byte flips and truncations in every kind of file of a store.

* commit log (ordinary, half and op records — transactions live in the commit log):
  ``store check`` names every damaged record (file and offset, exit 1); ``consume``, ``msg
  show`` and ``Store.pull`` never serve a damaged body; ``store recover`` rebuilds what the log
  still holds, says what it could not, and readers then get every undamaged message;
* consume queues, key index, checkpoint: reads stay correct (never a wrong body), ``store
  recover`` rebuilds them from the log and the check is clean again;
* JSON files (topics.json, consumerOffset.json, broadcast offsets, tx progress), queue-lock
  and member records: the command either works (the ``.bak`` copy, a warning) or fails with
  one clear line and its exit code; never a traceback, never a silent restart from nothing.

Damage is made with ``random.Random(seed)``; the seed is printed (``-s`` shows it) and is part
of each test id, so a failure can be replayed exactly.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from store.layout import Layout
from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.messagestore import Store
from store.names import HALF_TOPIC, OP_HALF_TOPIC
from tests.faults.faultutil import is_dirty
from tests.procs import KILLED, MQ, Result, one_error, run_inprocess

SLOW = pytest.mark.slow
SEEDS = [11, *[pytest.param(s, marks=SLOW) for s in (2024, 7, 99, 31337)]]


# -- a store with something in every kind of file ------------------------------------------------

def _cli(root: Path, *args: str, stdin: bytes = b"") -> Result:
    res = run_inprocess(["--store", str(root), *args], stdin=stdin)
    assert res.returncode == 0, str(res)
    return res


@pytest.fixture(scope="module")
def mq_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test here starts ``mq`` (tests/conftest.py) from a copy of this store."""
    root = tmp_path_factory.mktemp("corrupt-template") / "store"
    _cli(root, "topic", "create", "t", "--queues", "3")
    lines = "".join(f"k{i % 5}:body-{i}-{'x' * (i % 17)}\n" for i in range(60))
    _cli(root, "send", "t", "--key-delimiter", ":", "--keys", "common", stdin=lines.encode())
    _cli(root, "send", "t", "--input", "json", stdin=b"".join(
        json.dumps({"body": f"json-{i}", "keys": [f"jk{i}"], "tags": "J"}).encode() + b"\n" for i in range(10)))
    txs = [json.loads(_cli(root, "tx", "send", "t", f"tx-{i}", "-k", f"txk{i}").stdout)["txId"] for i in range(4)]
    _cli(root, "tx", "commit", txs[0])
    _cli(root, "tx", "rollback", txs[1])
    _cli(root, "consume", "t", "-g", "G", "--from", "first", "--count", "20")
    _cli(root, "consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "--from", "first", "--count", "5")
    # An orderly member killed while holding its locks leaves lock records behind.
    m = MQ(root, root.parent)
    res = m.run("consume", "t", "-g", "O", "--orderly", "--from", "first", "--count", "3",
                failpoints="rebalance-after-lock:2")
    assert res.returncode == KILLED, str(res)
    assert list((root / "locks" / "O" / "t").glob("*.lock"))
    return root


def records(root: Path) -> list[tuple[int, int, str, bytes, str]]:
    """(commit-log offset, size, topic, body, offset msg id) of every record, in log order."""
    log = CommitLog(Layout(root).commitlog_dir)
    out = [(off, m.size, m.topic, m.body, m.msg_id) for off, m, err in log.scan(0) if m is not None]
    log.close()
    return out


def flip(path: Path, pos: int, rng: random.Random) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ rng.randrange(1, 256)]))


def segment(root: Path, off: int) -> tuple[Path, int]:
    base = off - off % F.COMMITLOG_SEGMENT_SIZE
    return Layout(root).commitlog_dir / F.segment_name(base), off - base


def served_messages(mq: MQ, group: str) -> list[dict]:
    # (--idle-timeout bounds a reader stuck behind a hole in a queue: it then fails the test)
    res = mq.cli("consume", "t", "-g", group, "--from", "first", "-e", "--json", "--idle-timeout", "8")
    assert res.returncode == 0, str(res)
    return res.json_lines()


def body_of(env: dict) -> bytes:
    import base64
    return base64.b64decode(env["body"]) if env.get("bodyEncoding") == "base64" else env["body"].encode()


# -- the commit log ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_every_flip_in_the_log_is_found_and_never_served(mq: MQ, seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    recs = records(mq.root)
    original = {r[4]: r for r in recs}
    by_topic = {t: [r for r in recs if r[2] == t] for t in ("t", HALF_TOPIC, OP_HALF_TOPIC)}
    assert all(by_topic.values()), "the template has ordinary, half and op records"
    victims = rng.sample(by_topic["t"], 4) + [rng.choice(by_topic[HALF_TOPIC]), rng.choice(by_topic[OP_HALF_TOPIC])]
    if rng.random() < 0.5:  # sometimes two neighbours: each must still be named
        i = rng.randrange(len(recs) - 1)
        victims += [recs[i], recs[i + 1]]
    victims = sorted(set(victims))
    for off, size, *_ in victims:
        path, pos = segment(mq.root, off)
        flip(path, pos + rng.randrange(size), rng)
    damaged_ids = {v[4] for v in victims}

    # store check: exit 1, each damaged record named by file and offset
    res = mq.check()
    assert res.returncode == 1, str(res)
    problems = [p for p in res.json_lines() if "file" in p]
    named = {(Path(p["file"]).name, p["offset"]) for p in problems}
    for off, *_ in victims:
        path, pos = segment(mq.root, off)
        assert (path.name, pos) in named, f"flip in the record at {off} not reported: {problems}"
    assert "problem" in res.stderr and res.stderr.startswith("mqctl: error:")

    # reads never serve a damaged body
    envs = served_messages(mq, "reader")
    for e in envs:
        assert e["offsetMsgId"] not in damaged_ids
        assert body_of(e) == original[e["offsetMsgId"]][3]
    want = {r[4] for r in by_topic["t"]} - damaged_ids
    committed_tx = {r[4] for r in recs if r[2] == "t"}  # (the committed copy is a record of t)
    assert {e["offsetMsgId"] for e in envs} == want & committed_tx
    for _off, _size, _topic, _body, mid in victims:
        shown = mq.cli("msg", "show", mid, "--json")
        # never the damaged bytes, and never "not found": a data error naming the damage
        assert shown.returncode == 5 and "damaged message" in shown.stderr, str(shown)
        one_error(shown, 5)
    with Store.open(mq.root, warn=lambda _m: None) as store:
        for q in range(3):
            res_pull = store.pull("t", q, 0, 1000)
            for m in res_pull.messages:
                assert m.msg_id not in damaged_ids and m.body == original[m.msg_id][3]
    assert mq.cli("tx", "list", "--json").returncode == 0

    # store recover: rebuilds (the consume queues of t are lost too: rebuilt from the log
    # around the damaged records), names what it could not, and readers get every good message
    shutil.rmtree(Layout(mq.root).topic_cq_dir("t"))
    rec = mq.run("store", "recover", "--json")
    assert rec.returncode == 0, str(rec)
    report = rec.json_lines()[-1]
    lost = {(Path(d["file"]).name, d["offset"]) for d in report["damage"]}
    first_victim = segment(mq.root, victims[0][0])
    assert (first_victim[0].name, first_victim[1]) in lost
    assert "could not recover" in mq.cli("store", "recover").stderr
    after = served_messages(mq, "after-recover")
    assert {e["offsetMsgId"] for e in after} == want & committed_tx
    for e in after:
        assert body_of(e) == original[e["offsetMsgId"]][3]
    # sending goes on: new messages are delivered to a group that has seen everything
    assert mq.cli("send", "t", "-q", "0", "new-after-damage").returncode == 0
    assert [body_of(e) for e in served_messages(mq, "after-recover")] == [b"new-after-damage"]


@pytest.mark.parametrize("seed", SEEDS)
def test_log_truncated_anywhere(mq: MQ, seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    recs = records(mq.root)
    path, _ = segment(mq.root, 0)
    cut = rng.randrange(recs[len(recs) // 2][0], os.path.getsize(path))
    log = CommitLog(Layout(mq.root).commitlog_dir)
    flags = {off: m.sysflag for off, m, _err in log.scan(0) if m is not None}
    log.close()
    os.truncate(path, cut)
    # a batch the cut left without its end record goes whole (store/log/atomicbatch.py)
    open_at = None
    for r in recs:
        if r[0] + r[1] <= cut:
            inside = flags[r[0]] & F.ATOMIC_BATCH and not flags[r[0]] & F.ATOMIC_END
            open_at = (r[0] if open_at is None else open_at) if inside else None
    whole = {r[4]: r for r in recs if r[0] + r[1] <= cut and (open_at is None or r[0] < open_at)}
    assert is_dirty(mq.root)
    mq.ok("store", "stats")   # the open recovers: the torn tail is cut, derived files trimmed
    mq.check_clean()
    envs = served_messages(mq, "reader")
    for e in envs:
        assert e["offsetMsgId"] in whole and body_of(e) == whole[e["offsetMsgId"]][3]
    assert {e["offsetMsgId"] for e in envs} == {m for m, r in whole.items() if r[2] == "t"}
    assert mq.cli("send", "t", "-q", "1", "after-cut").returncode == 0
    assert [body_of(e) for e in served_messages(mq, "reader")] == [b"after-cut"]
    # the group that had consumed past the cut is not left stuck: it gets the new message
    got = mq.cli("consume", "t", "-g", "G", "-e").stdout.splitlines()
    assert b"after-cut" in got
    mq.check_clean()


# -- derived files: consume queues, index, checkpoint ------------------------------------------------

def _files(root: Path, kind: str) -> list[Path]:
    lay = Layout(root)
    if kind == "consumequeue":
        return sorted(p for p in lay.consumequeue_dir.rglob("*") if p.is_file())
    if kind == "index":
        return sorted(lay.index_dir.iterdir())
    return [lay.checkpoint]


@pytest.mark.parametrize("kind", ["consumequeue", "index", "checkpoint"])
@pytest.mark.parametrize("seed", SEEDS)
def test_derived_files_damaged_are_rebuilt(mq: MQ, kind: str, seed: int) -> None:
    print(f"seed={seed} kind={kind}")
    rng = random.Random(seed)
    recs = records(mq.root)
    original = {r[4]: r for r in recs}
    before = {e["offsetMsgId"] for e in served_messages(mq, "before")}
    for path in _files(mq.root, kind):
        size = os.path.getsize(path)
        if not size:
            continue
        action = rng.choice(["flip", "flip", "truncate"])
        if action == "truncate":
            os.truncate(path, rng.randrange(size))
        elif kind == "index":  # the header, or somewhere in the used part of the tables
            for _ in range(4):
                flip(path, rng.choice([rng.randrange(40), rng.randrange(min(size, 40 + F.INDEX_SLOTS * 4))]), rng)
        else:
            for _ in range(3):
                flip(path, rng.randrange(size), rng)
    # whatever the damage, nothing served is wrong, and nothing crashes
    res = mq.cli("consume", "t", "-g", "reader", "--from", "first", "-e", "--json")
    assert "Traceback" not in res.stderr and res.returncode == 0, str(res)
    for e in res.json_lines():
        assert body_of(e) == original[e["offsetMsgId"]][3]
    some = rng.choice([r for r in recs if r[2] == "t"])
    shown = mq.run("msg", "show", some[4], "--json")
    assert shown.returncode == 0 and body_of(shown.json_lines()[0]) == some[3], str(shown)
    # recover rebuilds them from the log: clean, and every message back, by id and by key
    assert mq.cli("store", "recover").returncode == 0
    mq.check_clean()
    assert {e["offsetMsgId"] for e in served_messages(mq, "after")} == before
    with Store.open(mq.root) as store:
        for _off, _size, _topic, body, mid in recs:
            m = store.find(mid)
            assert m.body == body
        uniq = {store.get(r[0]).uniq_key for r in recs if r[2] == "t"}
        for u in uniq:
            assert store.find(u).uniq_key == u  # the key index answers again
        assert len(store.query_key("t", "common", limit=1000)) == 60


# -- JSON files, lock and member records --------------------------------------------------------------

def _damage_json(path: Path, rng: random.Random) -> None:
    data = path.read_bytes()
    how = rng.choice(["truncate", "flip", "garbage", "empty"])
    if how == "truncate" and len(data) > 1:
        path.write_bytes(data[: rng.randrange(1, len(data))])
    elif how == "flip":
        b = bytearray(data)
        for _ in range(3):
            i = rng.randrange(len(b))
            b[i] = rng.choice(b"{}[]\":,\x00\xff")
        path.write_bytes(bytes(b))
    elif how == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(40)))
    else:
        path.write_bytes(b"")


def _assert_works_or_one_clear_error(res: Result, codes: set[int]) -> None:
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, str(res)
    assert res.returncode in codes, str(res)
    if res.returncode != 0:
        one_error(res, res.returncode, allow_info=True)


JSON_FILES = {
    "topics": "config/topics/t.json",
    "consumerOffset": "config/consumerOffset.json",
    "broadcast": "offsets/bc1/B/offsets.json",
    "txProgress": "tx/CID_RMQ_SYS_TRANS.json",
    "store": "store.json",
}


@pytest.mark.parametrize("bak", ["with-bak", "without-bak"])
@pytest.mark.parametrize("name", sorted(JSON_FILES))
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_json_files_damaged(mq: MQ, name: str, bak: str, seed: int) -> None:
    print(f"seed={seed} file={name} {bak}")
    rng = random.Random(seed)
    path = mq.root / JSON_FILES[name]
    if name == "txProgress" and not path.exists():
        answer = mq.root.parent / "unknown.sh"
        answer.write_text("#!/bin/sh\necho UNKNOWN\n")
        answer.chmod(0o755)
        for _ in range(2):  # the second pass keeps the first one's file as the .bak
            mq.ok("tx", "check", "--check-cmd", str(answer), "--timeout", "0")
    if name == "store":
        (mq.root / "store.json.bak").write_bytes(path.read_bytes())  # (store.json is written once)
    assert path.exists(), path
    # a topic's copy is the one beside its queues; every other file keeps a .bak
    bak_path = mq.root / "consumequeue/t/topic.json" if name == "topics" else path.with_name(path.name + ".bak")
    if bak == "without-bak":
        bak_path.unlink(missing_ok=True)
    else:
        assert bak_path.exists(), f"{path.name} should keep a .bak beside it"
    before = path.read_bytes()
    _damage_json(path, rng)
    assume_damaged = path.read_bytes() != before
    cmds = [
        (["topic", "list", "--json"], {0, 5}),
        (["consume", "t", "-g", "G", "-e", "--count", "5"], {0, 5}),
        (["consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e", "--count", "5"], {0, 5}),
        (["send", "t", "after-damage"], {0, 5}),
        (["offsets", "show", "--group", "G", "--json"], {0, 3, 5}),
        (["tx", "list", "--json"], {0, 5}),
        (["store", "check"], {0, 1, 5}),
    ]
    for args, codes in cmds:
        res = mq.cli(*args)
        _assert_works_or_one_clear_error(res, codes)
        if bak == "with-bak" and assume_damaged and res.returncode == 0 and args[0] != "store":
            pass  # the .bak copy was used (a warning may say so)
        if bak == "without-bak" and res.returncode == 5:
            assert JSON_FILES[name].split("/")[-1] in res.stderr  # the error names the file
    if bak == "with-bak":
        # with the previous version at hand, nothing is refused
        for args in (["topic", "list"], ["send", "t", "still-fine"]):
            assert mq.cli(*args).returncode == 0, args


def test_damaged_group_offsets_without_a_backup_never_restart_silently(mq: MQ) -> None:
    path = mq.root / "config" / "consumerOffset.json"
    path.with_name("consumerOffset.json.bak").unlink(missing_ok=True)
    path.with_name("consumerOffset.log").unlink(missing_ok=True)   # no journal either
    path.write_bytes(b'{"offsetTable": {"t@G": {"0": ')
    res = mq.cli("consume", "t", "-g", "G", "-e")
    msg = one_error(res, 5, allow_warnings=True)
    assert "consumerOffset.json" in msg
    assert res.stdout == b""  # nothing redelivered from offset 0 without being told


def test_store_check_says_whether_a_backup_is_there_to_fall_back_on(mq: MQ) -> None:
    """Not "(offsets.json.bak is used instead)" when the .bak is as unreadable: its client's
    consumers then refuse (exit 5), and the check must say so, not promise a fallback."""
    path = mq.root / JSON_FILES["broadcast"]
    path.write_bytes(b"{bad")
    res = mq.run("store", "check")
    assert res.returncode == 1 and "(offsets.json.bak is used instead)" in res.stdout.decode(), str(res)
    path.with_name(path.name + ".bak").write_bytes(b"{bad")
    res = mq.run("store", "check")
    out = res.stdout.decode()
    assert res.returncode == 1 and "is used instead" not in out, str(res)
    assert "(and so is offsets.json.bak: " in out and "nothing to fall back on)" in out, out
    one_error(mq.run("consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e"), 5,
              allow_warnings=True)


def test_a_broadcast_client_falling_back_on_its_bak_says_so_once(mq: MQ) -> None:
    """The file is read at the start and again by the first persist, which mends it: one
    warning for one damage (it was printed twice, three times in a longer run)."""
    path = mq.root / JSON_FILES["broadcast"]
    mq.ok("consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e", "--count", "5")
    assert path.with_name(path.name + ".bak").exists()
    path.write_bytes(b"{bad")
    res = mq.run("consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e")
    assert res.returncode == 0, str(res)
    warnings = [ln for ln in res.stderr.splitlines() if "offsets.json" in ln]
    assert len(warnings) == 1 and "using offsets.json.bak" in warnings[0], res.stderr
    assert mq.run("store", "check").returncode == 0   # (mended by the persist)


def test_store_recover_starts_a_broadcast_client_beyond_reading_over_from_the_oldest_message(mq: MQ) -> None:
    """README: offsets beyond recovery make only their group's commands fail until ``store
    recover``, which resets them to the oldest message, so nothing is skipped. A broadcast
    client's file and its .bak both unreadable stayed so through ``store recover`` (exit 0),
    its consumers refusing for good."""
    path = mq.root / JSON_FILES["broadcast"]
    for p in (path, path.with_name(path.name + ".bak")):
        p.write_bytes(b"{bad")
    every = mq.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout.splitlines()
    res = mq.run("store", "recover")
    assert res.returncode == 0, str(res)
    assert "broadcast client bc1 of group B: offsets could not be recovered" in res.stderr, str(res)
    assert mq.run("store", "check").returncode == 0
    got = mq.ok("consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e").stdout.splitlines()
    assert sorted(got) == sorted(every) and every


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_damaged_lock_and_member_records(mq: MQ, seed: int) -> None:
    """A dead holder's lock record, damaged, never keeps the queue locked nor crashes anyone:
    a new orderly member takes the queue and consumes; a damaged member record of a dead
    member is ignored."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    locks = sorted((mq.root / "locks" / "O" / "t").glob("*.lock"))
    assert locks
    for p in locks:
        _damage_json(p, rng)
    dead_members = list((mq.root / "consumers").rglob("*.json"))
    for p in dead_members:
        _damage_json(p, rng)
    res = mq.cli("locks", "--group", "O", "--json")
    _assert_works_or_one_clear_error(res, {0})
    res = mq.cli("consumers", "--group", "O", "--json")
    _assert_works_or_one_clear_error(res, {0, 3})
    res = mq.cli("consume", "t", "-g", "O", "--orderly", "--from", "first", "-e")
    assert res.returncode == 0, str(res)
    total = sum(1 for r in records(mq.root) if r[2] == "t")
    assert len(res.stdout.splitlines()) == total - 0  # every message of t, from the start
    mq.check_clean()


def test_store_check_asks_each_files_owner_what_its_readers_accept(mq: MQ) -> None:
    """Valid JSON of the wrong shape is as unusable to a file's readers as bad JSON (they
    fall back on the .bak): the check asks the file's owner (its validator), so it says so
    too — it used to parse the JSON only, and pass such a file."""
    path = mq.root / JSON_FILES["broadcast"]
    path.write_bytes(b'{"offsetTable": 5}')
    res = mq.run("store", "check")
    out = res.stdout.decode()
    assert res.returncode == 1, str(res)
    assert "valid JSON of the wrong shape: offsetTable is not a list (offsets.json.bak is used instead)" in out, out
    path.with_name(path.name + ".bak").write_bytes(b'{"offsetTable": [{"topic": "t"}]}')
    out = mq.run("store", "check").stdout.decode()
    assert "(and so is offsets.json.bak: valid JSON of the wrong shape: entry " in out, out
    one_error(mq.run("consume", "t", "-g", "B", "--broadcast", "--client-id", "bc1", "-e"), 5,
              allow_warnings=True)


def test_topic_counts_say_when_damage_stops_the_due_delayed_messages(mq: MQ) -> None:
    """Counting topics first delivers the due delayed messages; when the scheduler's progress
    and its .bak are unreadable that cannot happen, and the counts are as stored: said in a
    warning (it used to be passed over in silence), exit 0."""
    mq.ok("send", "t", "later", "--delay", "1h")
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (mq.root / "config" / name).write_bytes(b"{bad")
    res = mq.run("topic", "list")
    assert res.returncode == 0, str(res)
    assert "mqctl: warning: delayed messages now due were not delivered (" in res.stderr, res.stderr
    assert "delayOffset.json" in res.stderr


def test_a_directory_in_place_of_the_topics_epoch_is_reported_and_put_aside(mq: MQ) -> None:
    """``config/topics.epoch`` (a change signal) replaced by a directory: reads go on, a topic
    change fails naming the file, ``store check`` reports it (it said OK), and ``store recover``
    moves it aside and writes a new one (it failed with "Is a directory", naming nothing)."""
    mq.ok("send", "t", "x")
    epoch = mq.root / "config" / "topics.epoch"
    epoch.unlink()
    epoch.mkdir()
    (epoch / "kept").write_text("mine")
    assert "t" in mq.ok("topic", "list").stdout.decode()
    assert str(epoch) in one_error(mq.run("topic", "create", "u"), 1, "cannot write ")
    res = mq.run("store", "check")
    assert res.returncode == 1 and f"{epoch}:0: not a file" in res.stdout.decode(), str(res)
    res = mq.ok("store", "recover")
    aside = [p for p in epoch.parent.iterdir() if p.name.startswith("topics.epoch.not-a-file.")]
    assert len(aside) == 1 and (aside[0] / "kept").read_text() == "mine" and epoch.is_file(), str(res)
    mq.ok("store", "check")
    mq.ok("topic", "create", "u")


@pytest.mark.parametrize("obstacle", ["directory", "dangling link"])
def test_a_recover_that_cannot_rewrite_a_queue_file_changes_nothing(mq: MQ, obstacle: str) -> None:
    """A directory where a consume-queue file belongs: ``store recover`` cannot rewrite it, so
    it refuses first, naming it, and changes nothing. It used to drop the key index first and
    stop there: every command then failed, where only that queue's topic had."""
    mq.ok("topic", "create", "ta", "--queues", "2")
    mq.ok("topic", "create", "tb", "--queues", "1")
    mq.ok("send", "ta", input="".join(f"a{i}\n" for i in range(10)))
    mq.ok("send", "tb", input="".join(f"b{i}\n" for i in range(5)))
    q = mq.root / "consumequeue" / "ta" / "0" / F.segment_name(0)
    q.unlink()
    if obstacle == "directory":
        q.mkdir()
    else:
        q.symlink_to(mq.root / "nowhere")
    err = one_error(mq.run("store", "recover"), 5, str(q))
    assert ("a directory, not a file" if obstacle == "directory" else "a link to nothing") in err, err
    assert "changed nothing" in err, err
    assert not (mq.root / "index" / "REBUILDING").exists()
    assert len(mq.ok("consume", "tb", "-g", "z", "--from", "first", "-e").stdout.split()) == 5
    mq.ok("msg", "query", "--topic", "tb", "--key", "nothing")
    q.rmdir() if obstacle == "directory" else q.unlink()
    mq.ok("store", "recover")
    assert sorted(mq.ok("consume", "ta", "-g", "z", "--from", "first", "-e").stdout.decode().split()) == \
        sorted(f"a{i}" for i in range(10))


def test_a_key_index_entry_led_into_a_records_zero_field_is_healed_not_a_miss(mq: MQ) -> None:
    """One flipped bit in a key-index entry's phyOffset can land inside another record, on a
    field of zeros. That was taken for a zeroed log (the log's damage) and passed over in
    silence, the entry left as it was (a ``msg query`` of 300 messages answered 299, exit 0);
    it is the index's damage: the file is repaired from the log, with a warning, and the
    answer is whole."""
    mq.ok("topic", "create", "kz", "--queues", "1")
    mq.ok("send", "kz", "-k", "K", input="".join(f"m{i}\n" for i in range(20)))
    hits = [json.loads(line) for line in mq.ok("msg", "query", "--topic", "kz", "--key", "K", "--json").stdout.splitlines()]
    victim = hits[5]["commitLogOffset"]
    index = mq.root / "index" / F.segment_name(0)
    raw = bytearray(index.read_bytes())
    entries = F.INDEX_HEADER_SIZE + F.INDEX_SLOTS * 4
    at = next(i for i in range(entries, len(raw), F.INDEX_ENTRY_SIZE)
              if F.INDEX_ENTRY.unpack_from(raw, i)[1] == victim)
    key_hash, _phys, diff, prev = F.INDEX_ENTRY.unpack_from(raw, at)
    F.INDEX_ENTRY.pack_into(raw, at, key_hash, victim + F.OFF_QUEUE_OFFSET - 4, diff, prev)   # FLAG, then the queue offset's high bytes
    index.write_bytes(bytes(raw))
    res = mq.ok("msg", "query", "--topic", "kz", "--key", "K", "--json")
    assert len(res.stdout.splitlines()) == 20, str(res)
    assert "where no record starts: repaired from the commit log" in res.stderr, res.stderr
