"""Transactional messages (store/tx/transaction.py, store/tx/check.py, mqctl tx): visibility,
resolutions, the check service, and exactly-once resolution when a process is killed at each step.

Everything that writes runs in real ``mqctl`` processes; what consumers would see is read
back through a Store handle of this process, as a consumer of the real topic reads it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.log import format as F
from store.log.messagestore import Store
from store.log.positions import load_tx_progress as load_progress
from store.log.record import (
    PROP_CHECK_TIMES,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TRAN_MSG,
    Message,
    java_hash,
)
from store.names import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from store.tx.check import check_pass, pending
from store.tx.transaction import (
    COMMITTED,
    DISCARDED,
    PREPARED,
    PROP_TX_OP,
    ROLLED_BACK,
    end_transaction,
    load,
    parse_op_body,
)
from tests.procs import KILLED, MQ, Result, handler_script, mqctl, one_error, wait_for

# A check command that answers by the body's first letter (c: COMMIT, r: ROLLBACK, else
# UNKNOWN) and logs each question as one JSON line to the file named by $ASK_LOG.
ANSWER_BY_BODY = r"""body=$(cat)
printf '{"tx":"%s","times":"%s","topic":"%s","msgId":"%s","keys":"%s","tags":"%s","body":"%s"}\n' \
  "$MQ_TX_ID" "$MQ_CHECK_TIMES" "$MQ_TOPIC" "$MQ_MSG_ID" "$MQ_KEYS" "$MQ_TAGS" "$body" >> "$ASK_LOG"
case "$body" in
  c*) echo COMMIT ;;
  r*) echo ROLLBACK ;;
  *) echo UNKNOWN ;;
esac"""


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def ask_log(tmp_path: Path) -> Path:
    return tmp_path / "asked.ndjson"


def mq(root: Path, *args: str, failpoints: str = "", env: dict[str, str] | None = None,
       stdin: bytes = b"") -> Result:
    """``mqctl ARGS`` on ``root`` (:func:`tests.procs.mqctl`), within two minutes."""
    return mqctl(root, *args, input=stdin, failpoints=failpoints or None, extra_env=env, timeout=120)


def ok(root: Path, *args: str, **kw) -> Result:
    proc = mq(root, *args, **kw)
    assert proc.returncode == 0, (args, proc.returncode, proc.stderr)
    return proc


def tx_send(root: Path, topic: str, body: str, *args: str) -> dict:
    proc = ok(root, "tx", "send", topic, body, *args)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def check(root: Path, cmd: str, *args: str, ask_log: Path | None = None, failpoints: str = "",
          code: int = 0) -> Result:
    env = {"ASK_LOG": str(ask_log)} if ask_log is not None else None
    proc = mq(root, "tx", "check", "--check-cmd", cmd, "--json", *args, env=env, failpoints=failpoints)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    return proc


def asked(ask_log: Path) -> list[dict]:
    return [json.loads(line) for line in ask_log.read_text().splitlines()] if ask_log.exists() else []


def read_topic(root: Path, topic: str) -> list[Message]:
    """Every message of ``topic`` as its consumers would pull it, queue by queue."""
    with Store.open(root) as store:
        if not store.has_topic(topic):
            return []
        return [m for q in store.queue_ids(topic) for m in store.iter_queue(topic, q, 0)]


def state_of(root: Path, tx_id: str) -> str:
    with Store.open(root) as store:
        return load(store, tx_id).state


def ops_of(root: Path, tx_id: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(m.properties[PROP_TX_OP], parse_op_body(m.body)) for m in read_topic(root, OP_HALF_TOPIC)
            if m.properties.get("__transactionId__") == tx_id]


def pending_ids(root: Path) -> list[str]:
    """What ``tx list`` lists (its CLI is tested on its own below)."""
    with Store.open(root) as store:
        return [p.tx_id for p in pending(store)]


def assert_committed_once(root: Path, topic: str, tx_id: str, body: str) -> Message:
    real = [m for m in read_topic(root, topic) if m.uniq_key == tx_id]
    assert len(real) == 1, real
    assert real[0].body == body.encode()
    assert state_of(root, tx_id) == COMMITTED
    assert tx_id not in pending_ids(root)
    return real[0]


# -- visibility -----------------------------------------------------------------------------------

def test_a_half_message_is_invisible_until_commit_then_visible_once(root: Path) -> None:
    ok(root, "init")
    sent = tx_send(root, "orders", "pay 7", "--tag", "T", "--keys", "k1,k2", "--property", "color=red")
    assert sent["state"] == PREPARED and sent["txId"] == sent["msgId"]
    assert read_topic(root, "orders") == []
    [half] = read_topic(root, HALF_TOPIC)
    assert half.uniq_key == sent["txId"] and half.sysflag & F.TX_MASK == F.TX_NOT
    assert half.properties[PROP_REAL_TOPIC] == "orders" and half.properties[PROP_TRAN_MSG] == "true"
    assert int(half.properties[PROP_REAL_QID]) == sent["queueId"]

    ok(root, "tx", "commit", sent["txId"])
    [real] = read_topic(root, "orders")
    assert real.body == b"pay 7" and real.uniq_key == sent["txId"]
    assert real.tags == "T" and real.keys == ["k1", "k2"] and real.user_properties == {"color": "red"}
    assert real.queue_id == sent["queueId"]
    assert real.sysflag & F.TX_MASK == F.TX_COMMIT
    assert real.prepared_tx_offset == half.commitlog_offset
    assert not {PROP_REAL_TOPIC, PROP_REAL_QID, PROP_TRAN_MSG} & set(real.properties)
    [op] = read_topic(root, OP_HALF_TOPIC)
    assert op.tags == "d" and op.body == b"0," and op.properties[PROP_TX_OP] == "COMMIT"


def test_a_rolled_back_message_is_never_visible(root: Path) -> None:
    sent = tx_send(root, "orders", "nope")
    ok(root, "tx", "rollback", sent["txId"])
    assert read_topic(root, "orders") == []
    assert ops_of(root, sent["txId"]) == [("ROLLBACK", (0,))]
    assert state_of(root, sent["txId"]) == ROLLED_BACK
    assert pending_ids(root) == []


def test_the_real_queue_is_chosen_at_send_time(root: Path) -> None:
    by_key = tx_send(root, "orders", "a", "--sharding-key", "customer-9")
    assert by_key["queueId"] == abs(java_hash("customer-9")) % 8
    by_queue = tx_send(root, "orders", "b", "--queue", "3")
    assert by_queue["queueId"] == 3
    for sent in (by_key, by_queue):
        ok(root, "tx", "commit", sent["txId"])
    assert sorted((m.body, m.queue_id) for m in read_topic(root, "orders")) == [
        (b"a", by_key["queueId"]), (b"b", 3)]


def test_msg_show_reports_the_transaction_state(root: Path) -> None:
    sent = tx_send(root, "orders", "x")
    half = json.loads(ok(root, "msg", "show", sent["offsetMsgId"], "--json").stdout)
    assert half["transaction"]["state"] == PREPARED and half["transaction"]["txId"] == sent["txId"]
    ok(root, "tx", "commit", sent["txId"])
    real = json.loads(ok(root, "msg", "show", sent["txId"], "--json").stdout)
    assert real["topic"] == "orders"
    assert real["transaction"]["state"] == COMMITTED


# -- resolutions and exit codes -------------------------------------------------------------------

def test_repeated_and_conflicting_resolutions(root: Path) -> None:
    a = tx_send(root, "orders", "a")["txId"]
    b = tx_send(root, "orders", "b")["txId"]
    ok(root, "tx", "commit", a)
    again = json.loads(ok(root, "tx", "commit", a, "--json").stdout)
    assert again["changed"] is False and again["state"] == COMMITTED
    conflict = mq(root, "tx", "rollback", a)
    assert conflict.returncode == 4 and "already committed" in conflict.stderr
    ok(root, "tx", "rollback", b)
    ok(root, "tx", "rollback", b)
    assert mq(root, "tx", "commit", b).returncode == 4
    assert mq(root, "tx", "commit", "0" * 32).returncode == 3
    assert mq(root, "tx", "rollback", "not-a-tx").returncode == 3
    assert [m.body for m in read_topic(root, "orders")] == [b"a"]
    assert len(ops_of(root, a)) == 1 and len(ops_of(root, b)) == 1


def test_the_offset_id_of_the_half_message_names_the_transaction(root: Path) -> None:
    sent = tx_send(root, "orders", "a")
    ok(root, "tx", "commit", sent["offsetMsgId"])
    assert_committed_once(root, "orders", sent["txId"], "a")


def test_exec_runs_the_local_transaction(root: Path, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    local = handler_script(tmp_path / "local.sh", f"""\
        body=$(cat)
        echo "$MQ_TX_ID $MQ_TOPIC $body" >> {seen}
        echo "this goes to stderr, not to tx send's stdout"
        case "$body" in c*) exit 0 ;; r*) exit 1 ;; *) exit 7 ;; esac
        """)
    results = {body: tx_send(root, "orders", body, "--exec", local) for body in ("commit", "roll", "unsure")}
    assert {b: r["state"] for b, r in results.items()} == {
        "commit": COMMITTED, "roll": ROLLED_BACK, "unsure": "UNKNOWN"}
    assert sorted(seen.read_text().splitlines()) == sorted(
        f"{r['txId']} orders {b}" for b, r in results.items())
    assert [m.body for m in read_topic(root, "orders")] == [b"commit"]
    assert pending_ids(root) == [results["unsure"]["txId"]]


def test_a_missing_exec_command_stores_nothing(root: Path) -> None:
    ok(root, "init")
    proc = mq(root, "tx", "send", "orders", "x", "--exec", "/nonexistent/cmd")
    assert proc.returncode == 1 and proc.stdout == b""
    assert read_topic(root, HALF_TOPIC) == []


def test_tx_send_creates_its_topic_as_send_does(root: Path) -> None:
    """The first tx send to a topic creates it and says so, as send does (README: "The first
    send to a store or topic that does not exist creates it ... and says so on stderr"); one
    refused for a queue the new topic would not have leaves no topic behind (it used to create
    the topic silently, and create it before refusing the queue)."""
    ok(root, "init")
    proc = ok(root, "tx", "send", "fresh", "x")
    assert "mqctl: created topic fresh (8 queues)" in proc.stderr, proc
    one_error(mq(root, "tx", "send", "other", "x", "--queue", "9"), 2, "queue 9 does not exist")
    assert [json.loads(line)["topic"] for line in ok(root, "topic", "list", "--json").stdout.splitlines()] == ["fresh"]


def test_list_shows_unresolved_transactions_with_their_fields(root: Path) -> None:
    a = tx_send(root, "orders", "a", "--keys", "k")
    b = tx_send(root, "audit", "b")
    ok(root, "tx", "commit", tx_send(root, "orders", "c")["txId"])
    rows = [json.loads(line) for line in ok(root, "tx", "list", "--json").stdout.splitlines()]
    assert [(r["txId"], r["topic"], r["msgId"], r["checkTimes"]) for r in rows] == [
        (a["txId"], "orders", a["txId"], 0), (b["txId"], "audit", b["txId"], 0)]
    assert all(isinstance(r["bornTimestamp"], int) and r["bornTimestamp"] > 0 for r in rows)


# -- the check service ----------------------------------------------------------------------------

def test_check_resolves_by_the_answer_and_asks_unknown_ones_again(root: Path, tmp_path: Path,
                                                                  ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    c = tx_send(root, "orders", "c1", "--keys", "k1,k2", "--tag", "T")["txId"]
    r = tx_send(root, "orders", "r1")["txId"]
    u = tx_send(root, "orders", "u1")["txId"]
    proc = check(root, cmd, "--timeout", "0", ask_log=ask_log)
    events = {e["txId"]: e for e in map(json.loads, proc.stdout.splitlines())}
    assert {t: (e["answer"], e["state"]) for t, e in events.items()} == {
        c: ("COMMIT", COMMITTED), r: ("ROLLBACK", ROLLED_BACK), u: ("UNKNOWN", PREPARED)}
    first = {q["tx"]: q for q in asked(ask_log)}
    assert first[c] == {"tx": c, "times": "1", "topic": "orders", "msgId": c, "keys": "k1 k2",
                        "tags": "T", "body": "c1"}
    assert_committed_once(root, "orders", c, "c1")
    assert state_of(root, r) == ROLLED_BACK
    assert [m.body for m in read_topic(root, "orders")] == [b"c1"]

    # The unknown one was re-appended with its count; the pass moved past every offset.
    copies = [m for m in read_topic(root, HALF_TOPIC) if m.uniq_key == u]
    assert [m.properties.get(PROP_CHECK_TIMES) for m in copies] == [None, "1"]
    with Store.open(root) as store:
        assert load_progress(store.layout)[0] == 3
    assert pending_ids(root) == [u]

    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    assert [(q["tx"], q["times"]) for q in asked(ask_log)[3:]] == [(u, "2")]


def test_young_half_messages_wait_for_the_timeout(root: Path, tmp_path: Path, ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    c = tx_send(root, "orders", "c1")["txId"]
    check(root, cmd, ask_log=ask_log)  # default timeout: 6 s
    check(root, cmd, "--timeout", "1h", ask_log=ask_log)
    assert asked(ask_log) == []
    assert pending_ids(root) == [c]
    time.sleep(1.1)
    check(root, cmd, "--timeout", "1s", ask_log=ask_log)
    assert [q["tx"] for q in asked(ask_log)] == [c]
    assert_committed_once(root, "orders", c, "c1")


def test_check_immunity_property_overrides_the_timeout(root: Path, tmp_path: Path, ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    immune = tx_send(root, "orders", "c-immune", "-p", "CHECK_IMMUNITY_TIME_IN_SECONDS=3600")["txId"]
    plain = tx_send(root, "orders", "c-plain")["txId"]
    eager = tx_send(root, "orders", "c-eager", "-p", "CHECK_IMMUNITY_TIME_IN_SECONDS=0")["txId"]
    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    # The immune one does not block the ones after it, but holds the progress offset back.
    assert sorted(q["tx"] for q in asked(ask_log)) == sorted([plain, eager])
    assert pending_ids(root) == [immune]
    with Store.open(root) as store:
        assert load_progress(store.layout)[0] == 0
    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    assert len(asked(ask_log)) == 2
    # A zero immunity is checked even when the timeout would leave it alone.
    zero = tx_send(root, "orders", "c-zero", "-p", "CHECK_IMMUNITY_TIME_IN_SECONDS=0")["txId"]
    check(root, cmd, "--timeout", "1h", ask_log=ask_log)
    assert [q["tx"] for q in asked(ask_log)[2:]] == [zero]


def test_after_max_checks_a_transaction_is_discarded_then_can_be_resolved_by_hand(
        root: Path, tmp_path: Path, ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    u = tx_send(root, "orders", "u1")["txId"]
    for _ in range(2):
        check(root, cmd, "--timeout", "0", "--max-checks", "2", ask_log=ask_log)
    assert [q["times"] for q in asked(ask_log)] == ["1", "2"]
    proc = check(root, cmd, "--timeout", "0", "--max-checks", "2", ask_log=ask_log)
    [event] = map(json.loads, proc.stdout.splitlines())
    assert (event["action"], event["state"]) == ("discarded", DISCARDED)
    [parked] = read_topic(root, CHECK_MAX_TOPIC)
    assert parked.uniq_key == u and parked.body == b"u1"
    assert state_of(root, u) == DISCARDED and pending_ids(root) == []
    check(root, cmd, "--timeout", "0", "--max-checks", "2", ask_log=ask_log)
    assert len(asked(ask_log)) == 2 and len(read_topic(root, CHECK_MAX_TOPIC)) == 1
    ok(root, "tx", "commit", u)
    assert_committed_once(root, "orders", u, "u1")


def _flip_half_copy(root: Path, tx_id: str, check_times: str) -> Message:
    """Flip a bit in the body of ``tx_id``'s half copy written by its check ``check_times``."""
    with Store.open(root) as store:
        [copy] = [m for m in store.iter_queue(HALF_TOPIC, 0, 0)
                  if m.uniq_key == tx_id and m.properties.get(PROP_CHECK_TIMES) == check_times]
        base = store.commitlog.segment_of(copy.commitlog_offset)
        path = store.commitlog.segment_path(base)
    with open(path, "r+b") as fh:
        fh.seek(copy.commitlog_offset - base + F.RECORD_HEADER_SIZE)
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 0x01]))
    return copy


def test_a_transaction_whose_newest_half_copy_is_damaged_is_listed_and_checked_from_its_sound_one(
        root: Path, tmp_path: Path, ask_log: Path) -> None:
    """Each check re-appends a half copy and finishes the older ones. A bit flipped in the body of
    the newest made the transaction vanish from ``tx list`` and from the check service for good
    (a 'skipping damaged message' warning, exit 0), though the copy before it was sound."""
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    u = tx_send(root, "orders", "u-kept", "--keys", "k1")["txId"]
    other = tx_send(root, "orders", "u-other")["txId"]
    check(root, cmd, "--timeout", "0", ask_log=ask_log)   # a second copy of each
    damaged = _flip_half_copy(root, u, "1")
    listed = ok(root, "tx", "list", "--json")
    assert {r["txId"]: r["checkTimes"] for r in map(json.loads, listed.stdout.splitlines())} == {u: 1, other: 1}
    [warning] = [ln for ln in listed.stderr.splitlines() if "damaged" in ln]
    assert f"{HALF_TOPIC}/0@{damaged.queue_offset} is damaged" in warning and u in warning, warning

    check(root, cmd, "--timeout", "0", ask_log=ask_log)   # asked about it from its sound copy
    assert [(q["tx"], q["times"], q["body"]) for q in asked(ask_log)[2:]] == [(u, "2", "u-kept"),
                                                                            (other, "2", "u-other")]
    # (that check's op finished the damaged copy too: nothing to warn of any more)
    assert any(damaged.queue_offset in offsets for kind, offsets in ops_of(root, u) if kind == "CHECK")
    listed = ok(root, "tx", "list", "--json")
    assert sorted(r["txId"] for r in map(json.loads, listed.stdout.splitlines())) == sorted([u, other])
    assert "damaged" not in listed.stderr, listed.stderr
    ok(root, "tx", "commit", u)
    assert_committed_once(root, "orders", u, "u-kept")


def test_store_clean_keeps_the_sound_copy_of_a_transaction_whose_newest_copy_is_damaged(root: Path) -> None:
    """The log is kept from an unresolved transaction's live copies: none is live when the newest
    is damaged, and ``store clean`` deleted the segment of the sound copy, the one left to commit."""
    ok(root, "init", "--max-message-size", "16KiB", "--segment-size", "80KiB")
    body = "u" + "x" * 3000
    u = tx_send(root, "orders", body)["txId"]
    filler = "".join("y" * 3000 + "\n" for _ in range(30)).encode()   # past the first segment
    ok(root, "send", "orders", stdin=filler)
    check(root, "echo UNKNOWN", "--timeout", "0")
    ok(root, "send", "orders", stdin=filler * 2)
    damaged = _flip_half_copy(root, u, "1")
    with Store.open(root) as store:
        assert store.commitlog.segment_of(damaged.commitlog_offset) > 0   # (the sound one in the first)
    ok(root, "store", "clean", "--older-than", "0")
    ok(root, "tx", "commit", u)
    assert_committed_once(root, "orders", u, body)


def test_tx_list_parked_shows_what_the_check_service_parked_until_it_is_resolved(
        root: Path, tmp_path: Path) -> None:
    # (a parked transaction left `tx list` and no option listed it: its id was to be dug out
    # of TRANS_CHECK_MAX_TIME_TOPIC with `consume --no-group`)
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    u1 = tx_send(root, "orders", "u1", "--keys", "k")
    assert ok(root, "tx", "list", "--parked", "--json").stdout == b""   # (no check-max topic yet)
    u2 = tx_send(root, "audit", "u2")
    u3 = tx_send(root, "orders", "u3")["txId"]
    check(root, cmd, "--timeout", "0", "--max-checks", "1")   # asks about each once
    check(root, cmd, "--timeout", "0", "--max-checks", "1")   # parks the three
    ok(root, "tx", "commit", u3)   # resolved by hand: no longer parked
    rows = [json.loads(line) for line in ok(root, "tx", "list", "--parked", "--json").stdout.splitlines()]
    assert [(r["txId"], r["topic"], r["msgId"], r["checkTimes"], r["state"]) for r in rows] == [
        (u1["txId"], "orders", u1["txId"], 1, DISCARDED), (u2["txId"], "audit", u2["txId"], 1, DISCARDED)]
    assert [r["queueId"] for r in rows] == [u1["queueId"], u2["queueId"]]
    assert all(r["parkedTimestamp"] >= r["bornTimestamp"] > 0 for r in rows)
    assert ok(root, "tx", "list", "--json").stdout == b""   # pending: none
    table = ok(root, "tx", "list", "--parked").out.splitlines()
    assert table[0].split() == ["TX-ID", "TOPIC", "QUEUE", "BORN", "AGE", "CHECKS", "PARKED"]
    assert [ln.split()[0] for ln in table[1:]] == [u1["txId"], u2["txId"]]
    ok(root, "tx", "rollback", u1["txId"])
    rows = [json.loads(line) for line in ok(root, "tx", "list", "--parked", "--json").stdout.splitlines()]
    assert [r["txId"] for r in rows] == [u2["txId"]]
    ok(root, "tx", "commit", u2["txId"])
    empty = ok(root, "tx", "list", "--parked")
    assert empty.stdout == b"" and "no parked transactions" in empty.stderr


@pytest.mark.parametrize("body", [
    "sleep 30; echo COMMIT",               # overruns --cmd-timeout
    "echo COMMIT; exit 3",                 # non-zero exit
    "echo COMMIT; kill -9 $$",             # crash
    "echo 'I think so'",                   # not an answer
])
def test_a_failed_check_command_means_unknown(root: Path, tmp_path: Path, body: str) -> None:
    cmd = handler_script(tmp_path / "bad.sh", "cat >/dev/null\n" + body)
    tx = tx_send(root, "orders", "x")["txId"]
    t0 = time.monotonic()
    proc = check(root, cmd, "--timeout", "0", "--cmd-timeout", "500ms")
    assert time.monotonic() - t0 < 20
    [event] = map(json.loads, proc.stdout.splitlines())
    assert (event["answer"], event["state"]) == ("UNKNOWN", PREPARED)
    assert pending_ids(root) == [tx] and read_topic(root, "orders") == []


def test_rocketmq_answer_spellings_are_accepted(root: Path, tmp_path: Path) -> None:
    cmd = handler_script(tmp_path / "rmq.sh", "cat >/dev/null\necho checking\necho commit_message")
    tx = tx_send(root, "orders", "x")["txId"]
    check(root, cmd, "--timeout", "0")
    assert_committed_once(root, "orders", tx, "x")


def test_one_stuck_transaction_does_not_hold_back_progress(root: Path, tmp_path: Path, ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    for body in ("u-stuck", "c1", "r1", "c2"):
        tx_send(root, "orders", body)
    for _ in range(3):
        check(root, cmd, "--timeout", "0", ask_log=ask_log)
    with Store.open(root) as store:
        half, op = load_progress(store.layout)
        # Left for the next pass: only what the last pass wrote, the stuck one's newest copy
        # and the op record that finished the copy before it.
        assert half == store.max_offset(HALF_TOPIC, 0) - 1
        assert op == store.max_offset(OP_HALF_TOPIC, 0) - 1
    assert [q["body"] for q in asked(ask_log)].count("u-stuck") == 3
    assert sorted(m.body for m in read_topic(root, "orders")) == [b"c1", b"c2"]


def test_loop_keeps_checking_and_stops_cleanly_on_sigterm(mq: MQ, tmp_path: Path, ask_log: Path) -> None:
    root = mq.root
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    proc = mq.start("tx", "check", "--check-cmd", cmd, "--loop", "--timeout", "0", "--interval", "100ms",
                    extra_env={"ASK_LOG": str(ask_log)})
    tx = tx_send(root, "orders", "c-late")["txId"]
    wait_for(lambda: state_of(root, tx) == COMMITTED, timeout=30, what="the loop to commit it")
    assert proc.stop(timeout=30) == 0, proc.stderr()
    assert_committed_once(root, "orders", tx, "c-late")


# -- crashes: exactly once ------------------------------------------------------------------------

@pytest.mark.parametrize("point", ["tx-commit-after-real", "tx-commit-after-op"])
@pytest.mark.parametrize("finish", ["commit-again", "check-pass"])
def test_commit_killed_at_each_step_completes_exactly_once(root: Path, tmp_path: Path, ask_log: Path,
                                                          point: str, finish: str) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    tx = tx_send(root, "orders", "r-but-committed")["txId"]
    assert mq(root, "tx", "commit", tx, failpoints=point).returncode == KILLED
    assert len(read_topic(root, "orders")) == 1  # the committed message is written first
    assert state_of(root, tx) == COMMITTED
    if finish == "commit-again":
        again = json.loads(ok(root, "tx", "commit", tx, "--json").stdout)
        assert again["changed"] is False
    else:  # the check service completes it without asking (its answer would be ROLLBACK)
        check(root, cmd, "--timeout", "0", ask_log=ask_log)
        assert asked(ask_log) == []
    assert [kind for kind, _ in ops_of(root, tx)] == ["COMMIT"]
    assert mq(root, "tx", "rollback", tx).returncode == 4
    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    assert asked(ask_log) == []
    assert_committed_once(root, "orders", tx, "r-but-committed")


CHECK_POINTS = ["tx-check-after-copy", "tx-check-after-op", "tx-check-after-answer",
                "tx-commit-after-real", "tx-commit-after-op", "tx-check-before-progress"]


@pytest.mark.parametrize("point", CHECK_POINTS)
def test_check_pass_killed_at_each_step_resolves_exactly_once(root: Path, tmp_path: Path, ask_log: Path,
                                                              point: str) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    txs = {body: tx_send(root, "orders", body)["txId"] for body in ("c1", "c2", "r1")}
    check(root, cmd, "--timeout", "0", ask_log=ask_log, failpoints=point, code=KILLED)
    for _ in range(2):
        check(root, cmd, "--timeout", "0", ask_log=ask_log)
    for body in ("c1", "c2"):
        assert_committed_once(root, "orders", txs[body], body)
    assert state_of(root, txs["r1"]) == ROLLED_BACK
    assert sorted(m.body for m in read_topic(root, "orders")) == [b"c1", b"c2"]
    assert pending_ids(root) == []
    # Each transaction was asked once, or twice when the kill came before its answer was used.
    per_tx = [q["tx"] for q in asked(ask_log)]
    assert all(1 <= per_tx.count(t) <= 2 for t in txs.values())
    n = len(per_tx)
    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    assert len(asked(ask_log)) == n


def test_killed_in_the_middle_of_a_pass_the_rest_is_done_next_time(root: Path, tmp_path: Path,
                                                                   ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    txs = [tx_send(root, "orders", f"c{i}")["txId"] for i in range(4)]
    check(root, cmd, "--timeout", "0", ask_log=ask_log, failpoints="tx-commit-after-real:3", code=KILLED)
    assert [state_of(root, t) for t in txs] == [COMMITTED, COMMITTED, COMMITTED, PREPARED]
    check(root, cmd, "--timeout", "0", ask_log=ask_log)
    for i, t in enumerate(txs):
        assert_committed_once(root, "orders", t, f"c{i}")
    assert [q["tx"] for q in asked(ask_log)] == txs  # the one killed mid-commit was not asked again


def test_discard_killed_after_the_parked_copy_is_completed(root: Path, tmp_path: Path, ask_log: Path) -> None:
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    u = tx_send(root, "orders", "u1")["txId"]
    check(root, cmd, "--timeout", "0", "--max-checks", "1", ask_log=ask_log)
    check(root, cmd, "--timeout", "0", "--max-checks", "1", ask_log=ask_log,
          failpoints="tx-discard-after-copy", code=KILLED)
    assert state_of(root, u) == DISCARDED
    proc = check(root, cmd, "--timeout", "0", "--max-checks", "1", ask_log=ask_log)
    assert [json.loads(line)["action"] for line in proc.stdout.splitlines()] == ["repaired"]
    assert [kind for kind, _ in ops_of(root, u)] == ["CHECK", "DISCARD"]
    assert len(read_topic(root, CHECK_MAX_TOPIC)) == 1 and len(asked(ask_log)) == 1


def test_send_killed_before_the_local_transaction_is_left_to_the_check(root: Path, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    local = handler_script(tmp_path / "local.sh", f"touch {ran}\nexit 0")
    proc = mq(root, "tx", "send", "orders", "c1", "--exec", local, failpoints="tx-send-after-half")
    assert proc.returncode == KILLED and proc.stdout == b"" and not ran.exists()
    [tx] = pending_ids(root)
    check(root, handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY), "--timeout", "0",
          ask_log=tmp_path / "log")
    assert_committed_once(root, "orders", tx, "c1")


def test_a_handle_opened_before_a_writer_died_mid_put_recovers_before_deciding(root: Path) -> None:
    tx = tx_send(root, "orders", "c1")["txId"]
    with Store.open(root) as early:
        # Killed with the committed message in the log but not yet in its queue or the index.
        assert mq(root, "tx", "commit", tx, failpoints="put-after-log").returncode == KILLED
        res = end_transaction(early, tx, True)
        assert (res.state, res.changed) == (COMMITTED, False)
        questions: list[Message] = []
        check_pass(early, lambda m, n: questions.append(m) or "COMMIT", timeout_ms=0)
        assert questions == []
    assert_committed_once(root, "orders", tx, "c1")
    assert [kind for kind, _ in ops_of(root, tx)] == ["COMMIT"]


# -- several processes at once --------------------------------------------------------------------

def test_parallel_check_passes_resolve_each_transaction_once(mq: MQ, tmp_path: Path, ask_log: Path) -> None:
    root = mq.root
    cmd = handler_script(tmp_path / "answer.sh", ANSWER_BY_BODY)
    txs = {f"c{i}": tx_send(root, "orders", f"c{i}")["txId"] for i in range(8)}
    procs = [mq.start("tx", "check", "--check-cmd", cmd, "--timeout", "0", extra_env={"ASK_LOG": str(ask_log)})
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr()
    for body, tx in txs.items():
        assert_committed_once(root, "orders", tx, body)
    assert sorted(q["tx"] for q in asked(ask_log)) == sorted(txs.values())


def test_a_check_racing_manual_commits_never_resolves_both_ways(mq: MQ, tmp_path: Path) -> None:
    root = mq.root
    cmd = handler_script(tmp_path / "rollback.sh", "cat >/dev/null\necho ROLLBACK")
    txs = [tx_send(root, "orders", f"m{i}")["txId"] for i in range(6)]
    checker = mq.start("tx", "check", "--check-cmd", cmd, "--timeout", "0")
    codes = {tx: mq.run("tx", "commit", tx, timeout=120).returncode for tx in txs}
    assert checker.wait(timeout=120) == 0, checker.stderr()
    real = {m.uniq_key for m in read_topic(root, "orders")}
    assert len(read_topic(root, "orders")) == len(real)
    for tx in txs:
        state = state_of(root, tx)
        assert (state, codes[tx], tx in real) in ((COMMITTED, 0, True), (ROLLED_BACK, 4, False))


# -- failpoints -----------------------------------------------------------------------------------

def _run_failpoints(spec: str, hits: int) -> subprocess.CompletedProcess[str]:
    code = f"from store.failpoints import failpoint\nfor i in range({hits}):\n" \
           "    print(i, flush=True)\n    failpoint('unit-point')\n"
    env = {**os.environ, "MQCTL_FAILPOINTS": spec}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_a_failpoint_kills_only_when_armed_and_at_the_armed_hit() -> None:
    assert _run_failpoints("other-point", 3).returncode == 0
    first = _run_failpoints("unit-point", 3)
    assert first.returncode == KILLED and first.stdout.split() == ["0"]
    third = _run_failpoints("x, unit-point:3", 5)
    assert third.returncode == KILLED and third.stdout.split() == ["0", "1", "2"]
    assert "failpoint unit-point" in third.stderr


def test_tx_send_refuses_property_separators_in_tags_and_keys(root: Path) -> None:
    # A \x02 in --tag would end TAGS and start a forged property (here: the unique key).
    for args in (["--tag", "a\x02UNIQ_KEY\x01forged"], ["--keys", "k\x01v"], ["--sharding-key", "s\x02x"]):
        proc = mq(root, "tx", "send", "t", "body", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("mqctl: error: ") and proc.stderr.count("\n") == 1
    assert not (root / "consumequeue" / HALF_TOPIC).exists()  # nothing was stored


def test_an_answer_that_is_no_state_is_unknown_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``True`` or ``1`` from a local transaction (or a check) is no commit: UNKNOWN, as
    RocketMQ leaves it, but said, not silently; None (no answer) stays quiet."""
    import store
    with store.TransactionProducer(tmp_path / "s", check=lambda m: 5) as tp:
        for answer, said in [(True, "True"), (1, "1"), ("commit_message", None), (None, None)]:
            caplog.clear()
            r = tp.send("pay", b"x", local_tx=lambda m, a=answer: a)  # type: ignore[misc]
            want = store.TxState.COMMIT if answer == "commit_message" else store.TxState.UNKNOWN
            assert r.state is want
            warned = [rec.getMessage() for rec in caplog.records]
            assert warned == ([f"transaction {r.tx_id}: the local transaction answered {said}, not a TxState "
                               f"(COMMIT, ROLLBACK or UNKNOWN); left UNKNOWN"] if said else []), warned
        caplog.clear()
        tp.check_pending(timeout=0, max_checks=5)
        assert any("the check answered 5, not a TxState" in rec.getMessage() for rec in caplog.records)


def test_a_transaction_producer_creates_a_missing_store_only_to_send(tmp_path: Path) -> None:
    """``commit``/``rollback``/``check_pending``/``pending`` of a missing store raise
    ``StoreNotFoundError`` and leave nothing behind (as ``mqctl tx commit`` exits 3), sync and
    async; a ``send`` still creates it."""
    import asyncio

    import store
    from store.errors import StoreNotFoundError
    missing = tmp_path / "missing"
    tx_id = "0" * 32
    with store.TransactionProducer(path=missing, check=lambda m: store.TxState.COMMIT) as tp:
        for call in (lambda: tp.commit(tx_id), lambda: tp.rollback(tx_id), tp.check_pending, tp.pending):
            with pytest.raises(StoreNotFoundError, match="no store at"):
                call()
    with pytest.raises(store.UsageError):
        store.TransactionProducer(path=missing).check_pending()     # no check function

    async def async_calls() -> None:
        async with store.AsyncTransactionProducer(path=missing, check=lambda m: store.TxState.COMMIT) as atp:
            with pytest.raises(StoreNotFoundError, match="no store at"):
                await atp.commit(tx_id)
            with pytest.raises(StoreNotFoundError, match="no store at"):
                await atp.check_pending()
    asyncio.run(async_calls())
    assert not missing.exists()
    with store.TransactionProducer(path=missing) as tp:
        sent = tp.send("t", b"x")
        assert tp.commit(sent.tx_id).state == "COMMITTED"
    with Store.open(missing) as s:
        assert s.max_offset("t", sent.queue_id) == 1
