"""The command-line contract (``spec/cli.md``) walked through command by command: each documented
command and flag is run as a user runs it (real ``mqctl`` processes on a scratch store), and its
exit code and the JSON fields the contract names are checked. More fields are allowed (the
contract fixes names, not the absence of others); a name the contract gives must be there,
spelled as written. (``consume --to`` is another test's.)"""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.procs import MQ, one_error

SEND = {"status", "msgId", "topic", "queueId", "queueOffset", "commitLogOffset"}
ENVELOPE = {"topic", "queueId", "queueOffset", "msgId", "keys", "tags", "properties", "body",
            "bornTimestamp", "storeTimestamp", "reconsumeTimes"}


def has(rows: list[dict[str, Any]], fields: set[str]) -> None:
    assert rows, "no rows"
    for row in rows:
        missing = fields - row.keys()
        assert not missing, f"fields {sorted(missing)} missing from {row}"


def code(mq: MQ, *args: str, input: str | None = None) -> int:
    res = mq.run(*args, input=input, timeout=120)
    assert "Traceback" not in res.stderr, str(res)
    return res.returncode


def test_topics(mq: MQ) -> None:
    mq.ok("init")                                                       # an existing store: fine
    mq.ok("topic", "create", "orders", "--queues", "4")
    mq.ok("topic", "create", "orders", "--queues", "4")                 # the same again: no-op
    assert code(mq, "topic", "create", "orders", "--queues", "2") == 4   # another queue count
    mq.ok("topic", "create", "ordered", "--order")
    rows = mq.ok("topic", "list", "--json").json_lines()
    has(rows, {"topic", "queues", "order", "messages"})
    assert {r["topic"]: (r["queues"], r["order"]) for r in rows} == {"orders": (4, False), "ordered": (8, True)}
    mq.ok("send", "orders", "x", "-q", "1")
    status = mq.ok("topic", "status", "orders", "--json").json_lines()
    has(status, {"queueId", "minOffset", "maxOffset", "lastStoreTimestamp"})
    assert [r["queueId"] for r in status] == [0, 1, 2, 3] and status[1]["maxOffset"] == 1
    assert isinstance(status[1]["lastStoreTimestamp"], int)
    mq.ok("topic", "update", "orders", "--queues", "6")
    assert len(mq.ok("topic", "status", "orders", "--json").json_lines()) == 6
    assert code(mq, "topic", "update", "orders", "--queues", "2") == 2
    for bad in ("bad name", "x" * 128, "a/b", "RMQ_SYS_X", "%RETRY%g", "%DLQ%g"):
        assert code(mq, "topic", "create", bad) == 2, bad
    assert code(mq, "topic", "status", "nosuch") == 3
    assert code(mq, "topic", "update", "nosuch", "--queues", "9") == 3
    assert code(mq, "topic", "delete", "nosuch", "--yes") == 3
    mq.ok("topic", "delete", "ordered", "--yes")
    assert [r["topic"] for r in mq.ok("topic", "list", "--json").json_lines()] == ["orders"]
    assert code(mq, "--store", str(mq.work / "none"), "topic", "list") == 3


def test_sending(mq: MQ) -> None:
    sent = mq.ok("send", "orders", "hello", "--json").json_lines()
    has(sent, SEND)
    assert sent[0]["status"] == "SEND_OK"
    sent = mq.ok("send", "orders", "-", "--json", "-t", "T", "-k", "K1,K2", "-p", "a=b", "-s", "alice",
                 "--flush", "sync", input="one\ntwo\n").json_lines()
    # the same key, the same queue: lines from stdin (a batch) as a single send
    one = mq.ok("send", "orders", "three", "-s", "alice", "--json").json_lines()[0]["queueId"]
    assert [r["queueId"] for r in sent] == [one, one], sent
    assert [r["queueId"] for r in mq.ok("send", "orders", "q", "-q", "3", "--json").json_lines()] == [3]
    assert len(mq.ok("send", "orders", "--delimiter", ";", "--json", input="a;b;c").json_lines()) == 3
    keyed = mq.ok("send", "orders", "--key-delimiter", ":", "--json", input="bob:1\nbob:2\n").json_lines()
    assert keyed[0]["queueId"] == keyed[1]["queueId"]
    line = json.dumps({"body": "j", "tags": "T", "keys": "k", "shardingKey": "s", "queueId": 2,
                       "properties": {"p": "v"}})
    assert mq.ok("send", "orders", "--input", "json", "--json", input=line + "\n").json_lines()[0]["queueId"] == 2
    assert code(mq, "send", "orders", "x", "-q", "99") == 2
    assert code(mq, "send", "orders", "x", "--flush", "sometimes") == 2
    one_error(mq.run("send", "orders", input="small\n" + "x" * 5_000_000 + "\n", timeout=120), 5, "line 2",
              allow_info=True)
    mq.ok("topic", "create", "ordered", "--order")
    assert code(mq, "send", "ordered", "x") == 2                            # no sharding key, no queue
    mq.ok("send", "ordered", "x", "-s", "k")


def test_consuming(mq: MQ) -> None:
    mq.ok("topic", "create", "orders", "--queues", "2")
    mq.ok("send", "orders", "-t", "A", "-k", "K", input="a1\na2\n")
    mq.ok("send", "orders", "-t", "B", input="b1\n")
    env = mq.ok("consume", "orders", "-g", "g1", "--from", "first", "-e", "--json").json_lines()
    has(env, ENVELOPE)
    assert sorted(m["body"] for m in env) == ["a1", "a2", "b1"]
    # --format raw is the default output; --format json is --json
    raw = mq.ok("consume", "orders", "-g", "g2", "--from", "first", "-e", "--format", "raw").out
    assert sorted(raw.split("\n")[:-1]) == ["a1", "a2", "b1"] and raw.endswith("\n"), raw
    assert mq.ok("consume", "orders", "-g", "g3", "--from", "first", "-e", "--format", "json").json_lines() \
        == mq.ok("consume", "orders", "-g", "g4", "--from", "first", "-e", "--json").json_lines()
    # --tag, --count, -o words, --from TIME, --no-group -o -N, broadcast, orderly, --client-id, --strategy
    assert sorted(mq.ok("consume", "orders", "-g", "g5", "--from", "first", "-e", "--tag", "A || C").out.split()) \
        == ["a1", "a2"]
    assert len(mq.ok("consume", "orders", "-g", "g6", "--from", "first", "-e", "--count", "1").out.split()) == 1
    assert sorted(mq.ok("consume", "orders", "-g", "g7", "-o", "beginning", "-e").out.split()) == ["a1", "a2", "b1"]
    assert mq.ok("consume", "orders", "-g", "g8", "-o", "end", "-e").out == ""
    assert mq.ok("consume", "orders", "-g", "g1", "-o", "stored", "-e").out == ""   # g1 is at the end
    assert mq.ok("consume", "orders", "-g", "g9", "--from", "2001-01-01T00:00:00", "-e").out.count("\n") == 3
    assert mq.ok("consume", "orders", "-g", "g9b", "--from", "4102444800000", "-e").out == ""   # 2100: none
    assert mq.ok("consume", "orders", "--no-group", "-o", "-1", "-e").out.count("\n") == 2       # 1 per queue
    for extra in (["--broadcast"], ["--orderly"], ["--client-id", "me", "--strategy", "config", "--queues", "0,1"],
                  ["--strategy", "circle"], ["--dedup"], ["--idle-timeout", "30"]):
        out = mq.ok("consume", "orders", "-g", "m" + str(len(extra)) + extra[0][2:5], "--from", "first", "-e",
                    *extra).out
        assert sorted(out.split()) == ["a1", "a2", "b1"], extra
    # --exec: the MQ_* environment; exit 0 consumed
    env_out = mq.work / "env.txt"
    mq.ok("consume", "orders", "-g", "x1", "--from", "first", "-e", "--count", "1", "--exec",
          f"sh -c 'env >> {env_out}'")
    names = {ln.split("=", 1)[0] for ln in env_out.read_text().splitlines()}
    assert {"MQ_TOPIC", "MQ_QUEUE_ID", "MQ_QUEUE_OFFSET", "MQ_MSG_ID", "MQ_KEYS", "MQ_TAGS",
            "MQ_RECONSUME_TIMES", "MQ_GROUP"} <= names
    # gave up on a message: exit 1; not found, usage
    one_error(mq.run("consume", "orders", "-g", "x2", "--from", "first", "-e", "--max-reconsume", "0",
                     "--exec", "false"), 1, "gave up on 3 messages", allow_warnings=True)
    assert code(mq, "consume", "nosuch", "-g", "g", "-e") == 3
    assert code(mq, "consume", "orders", "-g", "g", "--from", "yesterday") == 2
    assert code(mq, "consume", "orders", "-g", "bad group") == 2
    assert code(mq, "consume", "orders", "-g", "g", "--strategy", "nope") == 2
    assert code(mq, "consume", "orders", "-e") == 2                                # no group


def test_transactions(mq: MQ) -> None:
    mq.ok("topic", "create", "pay", "--queues", "1")
    half = mq.ok("tx", "send", "pay", "b1", "--tag", "T", "--keys", "k", "--sharding-key", "s").json_lines()
    has(half, {"txId", "msgId", "state"})
    tx = half[0]["txId"]
    rows = mq.ok("tx", "list", "--json").json_lines()
    has(rows, {"txId", "topic", "msgId", "bornTimestamp", "checkTimes"})
    mq.ok("tx", "commit", tx)
    mq.ok("tx", "commit", tx)                                          # the same again: no-op
    assert code(mq, "tx", "rollback", tx) == 4
    assert code(mq, "tx", "commit", "0" * 32) == 3
    states = [mq.ok("tx", "send", "pay", f"b{n}", "--exec", f"sh -c 'exit {n}'").json_lines()[0]["state"]
              for n in (0, 1, 3)]
    assert states[0] != states[1] and "UNKNOWN" in states[2], states
    mq.ok("tx", "check", "--check-cmd", "echo COMMIT", "--timeout", "0", "--max-checks", "3")
    assert mq.ok("tx", "list", "--json").json_lines() == []


def test_inspection_and_admin(mq: MQ) -> None:
    mq.ok("topic", "create", "orders", "--queues", "2")
    sent = mq.ok("send", "orders", "-k", "order-7", "--json", input="a\nb\nc\n").json_lines()
    mq.ok("consume", "orders", "-g", "G", "--from", "first", "-e", "--count", "2")
    has(mq.ok("offsets", "show", "--group", "G", "--json").json_lines(), {"topic", "queueId", "offset"})
    has(mq.ok("offsets", "show", "--group", "G", "--topic", "orders", "--json").json_lines(),
        {"topic", "queueId", "offset"})
    for target in (["--to-earliest"], ["--to-latest"], ["--to-time", "2001-01-01T00:00:00"], ["--to-offset", "0"]):
        mq.ok("offsets", "reset", "--group", "G", "--topic", "orders", *target, "--queue", "0")
    before = mq.offsets("G", "orders")
    mq.ok("offsets", "reset", "--group", "G", "--topic", "orders", "--to-earliest")   # a dry run
    assert mq.offsets("G", "orders") == before
    mq.ok("offsets", "reset", "--group", "G", "--topic", "orders", "--to-earliest", "--execute")
    assert set(mq.offsets("G", "orders").values()) == {0}
    assert code(mq, "offsets", "reset", "--group", "G", "--topic", "orders", "--to-earliest", "--to-latest") == 2
    assert code(mq, "offsets", "show", "--group", "nosuch") == 3
    lag = mq.ok("progress", "--group", "G", "--json").json_lines()
    has(lag, {"topic", "queueId", "brokerOffset", "consumerOffset", "lag", "lastTimestamp"})
    has(mq.ok("progress", "--group", "G", "--topic", "orders", "--json").json_lines(), {"lag"})
    assert code(mq, "progress", "--group", "nosuch") == 3
    p = mq.start("consume", "orders", "-g", "L", "--orderly", "--from", "first", "--client-id", "live-1")
    mq.wait_balanced("L", "orders", 1, 2)
    locks = mq.ok("locks", "--group", "L", "--json").json_lines()
    has(locks, {"group", "topic", "queueId", "clientId", "pid", "acquiredAt", "renewedAt", "expiresAt", "alive"})
    has(mq.ok("locks", "--json").json_lines(), {"group", "clientId"})
    members = mq.ok("consumers", "--group", "L", "--json").json_lines()
    assert members and "live-1" in json.dumps(members), members
    p.stop()
    assert code(mq, "consumers", "--group", "nosuch") == 3
    alloc = mq.ok("rebalance", "orders", "--group", "G", "--consumers", "c1,c2", "--strategy", "circle",
                  "--json").json_lines()
    has(alloc, {"clientId", "queues"})
    assert sorted(q for r in alloc for q in r["queues"]) == [0, 1]
    assert code(mq, "rebalance", "nosuch", "--group", "G") == 3
    shown = mq.ok("msg", "show", sent[0]["msgId"], "--json").json_lines()
    has(shown, ENVELOPE)
    found = mq.ok("msg", "query", "--topic", "orders", "--key", "order-7", "--json").json_lines()
    has(found, ENVELOPE)
    assert len(found) == 3
    assert code(mq, "msg", "show", "0" * 31 + "1") == 3
    assert code(mq, "msg", "query", "--topic", "nosuch", "--key", "k") == 3
    mq.run("consume", "orders", "-g", "D", "--from", "first", "-e", "--max-reconsume", "0", "--exec", "false")
    dead = mq.ok("dlq", "list", "--group", "D", "--json").json_lines()
    assert len(dead) == 3
    mq.ok("dlq", "resend", "--group", "D", "--msg-id", dead[0]["msgId"])
    mq.ok("dlq", "resend", "--group", "D")
    assert code(mq, "dlq", "list", "--group", "nosuch") == 3


def test_store_commands(mq: MQ) -> None:
    mq.ok("send", "orders", input="a\nb\n")
    rows = mq.ok("store", "check", "--json").json_lines()
    assert rows[-1]["status"] == "OK" and rows[-1]["problems"] == 0, rows
    mq.ok("store", "recover")
    mq.ok("store", "clean", "--older-than", "1h")
    assert code(mq, "store", "clean", "--older-than", "soon") == 2
    assert mq.ok("store", "stats").out
    out = mq.ok("bench", "produce", "--count", "2000", "--size", "10").out + \
        mq.run("bench", "consume", "--help").out
    assert "msgs/s" in out or "msg/s" in out, out
    assert "MiB/s" in out, out


@pytest.mark.parametrize("args", [["topic"], ["offsets"], ["tx"], ["store"], ["msg"], ["dlq"]])
def test_a_command_group_without_its_subcommand_is_usage(mq: MQ, args: list[str]) -> None:
    assert code(mq, *args) == 2
