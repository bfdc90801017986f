"""Corners of the CLI contract (spec/cli.md) that a black-box pass found divergent, each run
as a user would: real ``mqctl`` processes on a real store."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess

import pytest

from store import validate_any_topic, validate_group
from tests.procs import MQ, handler_script, one_error, wait_for


def test_o_n_starts_every_queue_at_n_clamped_to_what_it_holds(mq: MQ) -> None:
    """kcat's ``-o N`` applies to every partition: each queue starts at offset N, or at its end
    when it holds fewer (cli.md: "with ``--no-group`` ``N`` (a queue offset)")."""
    mq.ok("topic", "create", "par", "--queues", "3")
    mq.ok("send", "par", "-q", "0", input="a0\na1\na2\na3\na4\n")
    mq.ok("send", "par", "-q", "1", input="b0\nb1\n")
    mq.ok("send", "par", "-q", "2", input="c0\nc1\nc2\nc3\n")
    out = mq.ok("consume", "par", "--no-group", "-o", "3", "-e", "--json").stdout
    got = sorted((e["queueId"], e["queueOffset"], e["body"]) for e in map(json.loads, out.splitlines()))
    assert got == [(0, 3, "a3"), (0, 4, "a4"), (2, 3, "c3")]
    # -N stays N before the end of each queue
    out = mq.ok("consume", "par", "--no-group", "-o", "-1", "-e").stdout
    assert sorted(out.split()) == [b"a4", b"b1", b"c3"]


def test_a_127_character_group_retries_and_dead_letters(mq: MQ) -> None:
    """Groups take the spec's 1-127 characters (they were cut at 120); the group's
    ``%RETRY%``/``%DLQ%`` topics (up to 134 characters) work end to end: a retry, a dead
    letter, ``dlq list/resend``, check, and recover rebuilding their consume queues."""
    group = "g" * 127
    retry, dlq = f"%RETRY%{group}", f"%DLQ%{group}"
    assert validate_group(group) == group and validate_any_topic(dlq) == dlq
    seen, done = mq.work / "seen", mq.work / "done"
    handler = handler_script(mq.work / "h.sh", f"""
        b=$(cat)
        case "$b" in
          POISON) exit 1;;
          RETRY) [ -e {seen} ] || {{ touch {seen}; exit 1; }};;
        esac
        echo "$b" >> {done}
        """)
    mq.ok("topic", "create", "jobs", "--queues", "1")
    mq.ok("send", "jobs", input="ok-1\nRETRY\nPOISON\n")
    args = ("consume", "jobs", "-g", group, "-e", "--max-reconsume", "1", "--retry-delay", "10ms",
            "--exec", handler)
    res = mq.ok(*args, "--from", "first")
    assert f"will be redelivered through {retry}" in res.stderr
    one_error(mq.run(*args), 1, f"gave up on 1 message (moved to {dlq}", allow_warnings=True)
    assert done.read_text().split() == ["ok-1", "RETRY"]
    letters = mq.ok("dlq", "list", "-g", group, "--json").json_lines()
    assert [(d["topic"], d["body"], d["dlqOriginTopic"]) for d in letters] == [(dlq, "POISON", "jobs")]
    assert [r["topic"] for r in mq.ok("progress", "-g", group, "--json").json_lines()] == ["jobs", retry]
    mq.ok("dlq", "resend", "-g", group)
    for topic in (retry, dlq):
        shutil.rmtree(mq.root / "consumequeue" / topic)
    assert mq.run("store", "check").returncode == 1
    mq.ok("store", "recover")
    mq.ok("store", "check")
    # the resent dead letter comes back through the (rebuilt) retry topic
    res = mq.ok(*args)
    assert f"{retry}/0@2: handler exited with 1; will be redelivered through {retry}" in res.stderr


@pytest.mark.parametrize("command", [
    "seq 1 5000 | mqctl send ep --json",                                  # results in one last batch
    "mqctl consume ep --no-group -o first -e --json",
    "mqctl msg query --topic ep --key k --limit 5000 --json",
    "mqctl msg query --topic ep --key k --limit 5000",
])
def test_a_reader_leaving_during_the_last_write_gives_141(mq: MQ, command: str) -> None:
    """cli.md: "141 when stdout is closed early". A last write bigger than the pipe, cut
    short by the reader leaving, used to drop its rest silently and exit 0."""
    mq.ok("send", "ep", "-k", "k", input="".join(f"message {i}\n" for i in range(5000)))
    res = mq.shell(f"set -o pipefail; {command} | head -c 200 >/dev/null; echo $?")
    assert res.out.split() == ["141"], str(res)
    assert "Traceback" not in res.stderr and "error" not in res.stderr, str(res)
    if "send" in command:   # (its messages are stored: it says which results stdout did not get)
        assert "mqctl: stdout was closed by the reader after 5000 messages were stored" in res.stderr, str(res)
    assert len(mq.ok("consume", "ep", "--no-group", "-o", "first", "-e").stdout.splitlines()) in (5000, 10000)


def test_an_empty_sharding_key_is_no_key(mq: MQ) -> None:
    """An empty sharding key got past the ordered-topic rule (every such message hashed to
    queue 0, stored keyless). It is no key: refused on an ordered topic, round-robin else."""
    mq.ok("topic", "create", "ok", "--queues", "4", "--order")
    mq.ok("topic", "create", "un", "--queues", "4")
    one_error(mq.run("send", "ok", "x", "-s", ""), 2, "--sharding-key is empty: topic 'ok' is ordered")
    one_error(mq.run("send", "ok", "-K", ":", input="k:1\n:2\n"), 5,
              "line 2: an empty key before the key delimiter: topic 'ok' is ordered", allow_info=True)
    one_error(mq.run("send", "ok", "--input", "json", input='{"body": "a", "shardingKey": ""}\n'), 5,
              "line 1: topic 'ok' is ordered")
    assert mq.ok("send", "ok", "x", "-s", "", "-q", "2", "--json").json_lines()[0]["queueId"] == 2
    mq.ok("send", "un", "-K", ":", input=":1\n:2\n:3\n:4\n")
    got = mq.ok("consume", "un", "--no-group", "-o", "first", "-e", "--json").json_lines()
    assert sorted(e["queueId"] for e in got) == [0, 1, 2, 3]   # spread, not all on one queue
    assert sorted(e["body"] for e in got) == ["1", "2", "3", "4"]
    assert not any("shardingKey" in e for e in got)


@pytest.mark.parametrize("name", ["%DLQ%w", "%RETRY%w", "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX",
                                  "%RETRY%" + "w" * 127])   # (134 characters: reserved, not too long)
def test_topic_update_refuses_the_systems_topics_as_create_and_delete_do(mq: MQ, name: str) -> None:
    mq.ok("send", "t", "x")
    mq.run("consume", "t", "-g", "w", "-o", "first", "-e", "--max-reconsume", "0", "--exec", "false")
    mq.ok("tx", "send", "t", "y")
    for args in (("create", name, "--queues", "4"), ("update", name, "--queues", "4"), ("delete", name, "--yes")):
        one_error(mq.run("topic", *args), 2, f"topic name {name!r} is reserved for the system")
    assert mq.run("topic", "status", name, "--json").returncode in (0, 3)
    if name in ("%DLQ%w", "RMQ_SYS_TRANS_HALF_TOPIC"):
        assert len(mq.ok("topic", "status", name, "--json").json_lines()) == 1   # still one queue


def test_msg_query_rows_have_what_msg_show_has(mq: MQ) -> None:
    """cli.md gives msg show and msg query "the fields of the consume --json envelope, plus
    what the store knows of the message's history"; query's rows had the envelope only."""
    mq.ok("topic", "create", "q", "--queues", "1")
    mq.ok("send", "q", "first", "-k", "k1")
    mq.ok("consume", "q", "-g", "seen", "-o", "first", "-e")
    mq.ok("send", "q", "second", "-k", "k1")
    rows = mq.ok("msg", "query", "--topic", "q", "--key", "k1", "--json").json_lines()
    assert [r["body"] for r in rows] == ["second", "first"]
    for row in rows:
        assert row == mq.ok("msg", "show", row["msgId"], "--json").json_lines()[0]
    assert [r["consumerGroups"] for r in rows] == [[{"group": "seen", "consumed": False, "offset": 1}],
                                                   [{"group": "seen", "consumed": True, "offset": 1}]]
    table = mq.ok("msg", "query", "--topic", "q", "--key", "k1").out.splitlines()
    assert "GROUPS-PAST" in table[0].split()
    assert [line.split()[-2:] for line in table[1:]] == [["-", "second"], ["seen", "first"]]


def test_a_stage_into_an_ordered_topic_without_orderly_is_refused_before_it_joins(mq: MQ) -> None:
    """It failed at its first write, after joining, with a hint naming send's -s/-q and a
    warning that offsets could not be persisted."""
    mq.ok("topic", "create", "src", "--queues", "2")
    mq.ok("send", "src", input="1\n2\n3\n4\n")
    mq.ok("topic", "create", "odst", "--queues", "2", "--order")
    one_error(mq.run("consume", "src", "-g", "s1", "--from", "first", "-e", "--to", "odst"), 2,
              "--to odst: the topic is ordered, and its messages need a sharding key or a queue: add --orderly")
    one_error(mq.run("offsets", "show", "-g", "s1"), 3)   # never joined
    handler = handler_script(mq.work / "keyed.sh", """printf '{"body":"x","shardingKey":"k"}\\n'""")
    res = mq.ok("consume", "src", "-g", "s2", "--from", "first", "-e", "--to", "odst", "--exec", handler,
                "--output", "json")
    assert "warning" not in res.stderr
    mq.ok("consume", "src", "-g", "s1", "--from", "first", "-e", "--to", "odst", "--orderly")
    out = mq.ok("consume", "odst", "--no-group", "-o", "first", "-e").stdout.split()
    assert sorted(out) == [b"1", b"2", b"3", b"4", b"x", b"x", b"x", b"x"]


@pytest.mark.parametrize("env, width", [({"COLUMNS": None, "LINES": None}, 80), ({"COLUMNS": "120", "LINES": "30"}, 120)])
def test_top_on_a_terminal_with_no_window_size_draws_a_screen(mq: MQ, env: dict[str, str | None],
                                                             width: int) -> None:
    """A pty nobody sized (0 x 0: ``script``, CI runners) drew nothing but the alternate
    screen; top now draws for COLUMNS x LINES, else 80 x 24, and ``q`` quits."""
    mq.ok("send", "orders", "x")
    master, slave = pty.openpty()   # a new pty has no window size
    p = subprocess.Popen(mq.argv("top", "--interval", "0.2"), stdin=slave, stdout=slave, stderr=slave,
                         env=mq.environ(extra=env), start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        def drawn() -> bool:
            nonlocal seen
            while select.select([master], [], [], 0)[0]:
                seen += os.read(master, 65536)
            return b"orders" in seen
        wait_for(drawn, what="top to draw its topics")
        os.write(master, b"q")
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    rows = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"\n", seen).decode(errors="replace").splitlines()
    assert max(len(r) for r in rows) <= width
    assert any("orders" in r for r in rows)


def test_message_and_transaction_ids_are_found_in_any_case(mq: MQ) -> None:
    """Hex is hex: a unique key (the msg id ``send`` prints) and a transaction id typed in lower
    case name what they name in upper case, as an offset id always did."""
    uk = mq.ok("send", "t", "hello", "--json").json_lines()[0]["msgId"]
    assert mq.ok("msg", "show", uk.lower(), "--json").json_lines()[0]["msgId"] == uk
    tx = mq.ok("tx", "send", "t", "half", "--json").json_lines()[0]
    assert tx["txId"] != tx["txId"].lower()
    mq.ok("tx", "commit", tx["txId"].lower())
    assert mq.ok("tx", "list", "--json").json_lines() == []
    bodies = mq.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout.split()
    assert sorted(bodies) == [b"half", b"hello"]


def test_topic_create_with_another_ordering_says_which(mq: MQ) -> None:
    """``topic create T --order`` on an unordered T of that queue count is a conflict (exit 4);
    the error said only "exists with 8 queues", the count that was asked for. It says the
    ordering differs, as it does the other way round."""
    mq.ok("topic", "create", "plain")
    mq.ok("topic", "create", "keyed", "--order")
    line = one_error(mq.run("topic", "create", "plain", "--order"), 4, "topic 'plain' exists with 8 queues")
    assert "not ordered" in line
    line = one_error(mq.run("topic", "create", "keyed"), 4, "topic 'keyed' exists with 8 queues")
    assert "(ordered)" in line
    # the same shape again is still a no-op
    mq.ok("topic", "create", "keyed", "--order")


def test_a_usage_error_listing_choices_is_one_line_without_tabs(mq: MQ) -> None:
    """Click words a missing choice as ``Choose from:\\n\\tbash,\\n\\tzsh``: joined into the one
    error line, its tabs stayed in it."""
    line = one_error(mq.run("completion"), 2, "Missing argument 'SHELL'")
    assert "\t" not in line and "Choose from: bash, zsh, fish" in line
