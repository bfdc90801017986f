"""Contract items a black-box pass found, each run as a user meets it: real ``mqctl``
processes on real stores. An id nobody has; ``msg query``'s limit and keys;
what the inspection commands print, read back by ``send --input json``."""
from __future__ import annotations

import json

import pytest

from tests.procs import MQ, one_error

GOOD_UNKNOWN = "0A0B0C0D00002A9F0000000000000000"   # 32 hex digits no message has


def dead_letters(mq: MQ, topic: str, lines: str, *send_args: str) -> list[dict]:
    """``lines`` sent to ``topic`` and dead-lettered at once by group G."""
    mq.ok("send", topic, *send_args, input=lines)
    res = mq.run("consume", topic, "-g", "G", "--from", "first", "-e", "--max-reconsume", "0", "--exec", "false")
    assert res.returncode == 1, str(res)
    return mq.ok("dlq", "list", "-g", "G", "--json").json_lines()


# -- ids: a well-formed id nobody has is "not found" (so is one that is no id at all: cli.md's
# exit 3 for a message or transaction id) ----------------------------------------------------

@pytest.mark.parametrize("args", [["msg", "show", GOOD_UNKNOWN], ["msg", "show", f" {GOOD_UNKNOWN.lower()} "],
                                  ["tx", "commit", GOOD_UNKNOWN], ["tx", "rollback", GOOD_UNKNOWN],
                                  ["dlq", "resend", "-g", "G", "--msg-id", GOOD_UNKNOWN]])
def test_a_well_formed_id_nobody_has_is_not_found(mq: MQ, args: list[str]) -> None:
    dead_letters(mq, "d", "a\n")
    one_error(mq.run(*args), 3, "no ")


# -- msg query: a key no message can have, and the limit --------------------------------------

@pytest.mark.parametrize("key", ["", "  ", "a b"])
def test_msg_query_refuses_a_key_no_message_can_have(mq: MQ, key: str) -> None:
    mq.ok("send", "d", "x", "--keys", "K")
    one_error(mq.run("msg", "query", "--topic", "d", "--key", key), 2, "--key")


def test_msg_query_says_on_stderr_when_more_match_than_it_shows(mq: MQ) -> None:
    mq.ok("send", "d", "--keys", "K", input="".join(f"m{i}\n" for i in range(70)))
    res = mq.ok("msg", "query", "--topic", "d", "--key", "K", "--json")
    assert len(res.json_lines()) == 64   # the default --limit: newest first
    assert res.json_lines()[0]["body"] == "m69"
    assert "64 shown, more match: --limit N" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    res = mq.ok("msg", "query", "--topic", "d", "--key", " K ", "--limit", "3")
    assert len(res.stdout.splitlines()) == 4   # the header and 3 rows
    assert "3 shown, more match" in res.stderr
    for limit in ("70", "100"):   # all shown: no note
        res = mq.ok("msg", "query", "--topic", "d", "--key", "K", "--json", "--limit", limit)
        assert len(res.json_lines()) == 70 and res.stderr == "", res.stderr


# -- send --input json reads what the inspection commands print -------------------------------

def test_dead_letters_listed_as_json_are_resent_by_hand(mq: MQ) -> None:
    letters = dead_letters(mq, "d", "a\nb\nc\nd\n")
    assert {d["queueId"] for d in letters} == {0} and "group" in letters[0] and "storeTime" in letters[0]
    res = mq.ok("dlq", "list", "-g", "G", "--json").stdout
    sent = mq.ok("send", "again", "--input", "json", "--json", input=res).json_lines()
    assert [r["status"] for r in sent] == ["SEND_OK"] * 4
    # the %DLQ% queue 0 is no queue of the target: round-robin, as any line without queueId
    assert len({r["queueId"] for r in sent}) == 4
    got = mq.ok("consume", "again", "--no-group", "--from", "first", "-e").stdout
    assert sorted(got.split()) == [b"a", b"b", b"c", b"d"]


def test_a_dead_letter_of_an_ordered_topic_goes_back_to_its_keys_queue(mq: MQ) -> None:
    mq.ok("topic", "create", "ord", "--queues", "4", "--order")
    first = mq.ok("send", "ord", "x", "-s", "bob", "--json").json_lines()[0]
    assert first["queueId"] != 0   # (else this test could not tell the DLQ's queue 0 from the key's)
    letters = dead_letters(mq, "ord", "y\n", "-s", "bob")
    assert [d["shardingKey"] for d in letters] == ["bob", "bob"]
    res = mq.ok("dlq", "list", "-g", "G", "--json").stdout
    sent = mq.ok("send", "ord", "--input", "json", "--json", input=res).json_lines()
    assert [r["queueId"] for r in sent] == [first["queueId"]] * 2


def test_msg_show_and_msg_query_json_are_read_back_and_typos_still_refused(mq: MQ) -> None:
    r = mq.ok("send", "src", "hello", "--keys", "K", "--tag", "t", "-p", "a=1", "--json").json_lines()[0]
    shown = mq.ok("msg", "show", r["msgId"], "--json").stdout
    assert {"sysFlag", "history", "consumerGroups", "deleted"} <= set(json.loads(shown))
    out = mq.ok("send", "copy", "--input", "json", "--json", input=shown).json_lines()
    assert out[0]["status"] == "SEND_OK" and out[0]["msgId"] != r["msgId"]   # another topic: a new id
    queried = mq.ok("msg", "query", "--topic", "src", "--key", "K", "--json").stdout
    mq.ok("send", "copy", "--input", "json", input=queried)
    got = mq.ok("consume", "copy", "--no-group", "--from", "first", "-e", "--json").json_lines()
    assert [(m["body"], m["keys"], m["tags"], m["properties"]) for m in got] == [("hello", ["K"], "t", {"a": "1"})] * 2
    for typo in ('{"body":"x","tagz":"t"}', '{"body":"x","histroy":[]}', '{"body":"x","Group":"G"}'):
        one_error(mq.run("send", "copy", "--input", "json", input=typo + "\n"), 5, "line 1: unknown field")
