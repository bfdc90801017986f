"""Small contract items of the command line, each as a user meets it: a key with a space in
a ``send --input json`` line, ``send --json | head`` telling what it could not print, the
live allocation of ``--strategy config`` members, CMD strings split as POSIX ``sh`` splits
them, ``msg show --json``'s history, a ``--store`` path that cannot be a store, and the
half message ``tx send --exec`` names before its local transaction. Real ``mqctl``
processes on real stores."""
from __future__ import annotations

import json

import pytest

from tests.procs import MQ, one_error


def stored_keys(mq: MQ, topic: str) -> list[list[str]]:
    s = mq.store()
    try:
        msgs = sorted((m for q in s.queue_ids(topic) for m in s.iter_queue(topic, q, 0)),
                      key=lambda m: m.commitlog_offset)
        return [m.keys for m in msgs]
    finally:
        s.close()


# -- send --input json: a key with a space --------------------------------------------------

@pytest.mark.parametrize("keys", ['["a b"]', '"h i"', '["ok", " x y "]', '"a,b c"'])
def test_a_json_key_with_a_space_is_refused_naming_its_line(mq: MQ, keys: str) -> None:
    lines = f'{{"body":"first"}}\n{{"body":"x","keys":{keys}}}\n{{"body":"third"}}\n'
    res = mq.run("send", "T", "--input", "json", "--json", input=lines)
    err = one_error(res, 5, allow_info=True)
    assert "line 2" in err and "a key may not contain spaces" in err, err
    assert len(res.json_lines()) == 1 and len(stored_keys(mq, "T")) == 1


def test_json_keys_are_split_on_commas_as_the_keys_flag_splits_them(mq: MQ) -> None:
    lines = '{"body":"a","keys":"k1, k2,k3"}\n{"body":"b","keys":["k4,k5"," k6 "]}\n'
    mq.ok("send", "T", "--input", "json", input=lines)
    mq.ok("send", "T", "c", "-k", "k7, k8")
    assert stored_keys(mq, "T") == [["k1", "k2", "k3"], ["k4", "k5", "k6"], ["k7", "k8"]]


# -- send --json | head: what was stored but not printed -------------------------------------

def test_send_json_into_a_reader_that_leaves_names_what_it_stored_but_could_not_print(mq: MQ) -> None:
    # Lines come one at a time; head takes the first result and leaves. The send stores the
    # lines it has already read, exits 141, and says which results never reached stdout.
    script = ("(for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done) | mqctl send slow --json | head -1;"
              " echo \"rc=${PIPESTATUS[1]}\" >&2")
    res = mq.shell(script)
    assert "rc=141" in res.stderr, str(res)
    errs = [ln for ln in res.stderr.splitlines() if ln.startswith("mqctl: ") and "created topic" not in ln]
    assert len(errs) == 1 and "error" not in res.stderr, str(res)
    s = mq.store()
    try:
        ids = sorted(((m.commitlog_offset, m.uniq_key) for q in s.queue_ids("slow")
                      for m in s.iter_queue("slow", q, 0)))
    finally:
        s.close()
    printed = [json.loads(ln)["msgId"] for ln in res.out.splitlines()]
    assert len(printed) == 1 and printed[0] == ids[0][1] and len(ids) >= 2
    assert errs[0].startswith(f"mqctl: stdout was closed by the reader after {len(ids)} messages "
                              "were stored; the result"), errs[0]
    assert ids[-1][1] in errs[0], errs[0]   # the last stored is named, whatever else is


# -- rebalance: live members with --strategy config ------------------------------------------

def test_rebalance_shows_each_config_members_own_queues(mq: MQ) -> None:
    from tests.procs import wait_for
    mq.ok("topic", "create", "sq", "--queues", "6")
    procs = [mq.start("consume", "sq", "-g", "cfg", "--strategy", "config", "--queues", qs, "--client-id", cid)
             for cid, qs in (("C1", "0,3"), ("C2", "1,2,4,5"))]
    try:
        def held() -> bool:
            res = mq.run("consumers", "-g", "cfg", "--json")   # (exit 3 until the first joins)
            rows = res.json_lines() if res.returncode == 0 else []
            return sorted((r["clientId"], [q["queueId"] for q in r["queues"]]) for r in rows) == [
                ("C1", [0, 3]), ("C2", [1, 2, 4, 5])]
        wait_for(held, what="both members holding their queues")
        for extra in ([], ["--strategy", "config"]):
            rows = mq.ok("rebalance", "sq", "-g", "cfg", "--json", *extra).json_lines()
            assert sorted((r["clientId"], r["strategy"], r["queues"], r["holds"]) for r in rows) == [
                ("C1", "config", [0, 3], [0, 3]), ("C2", "config", [1, 2, 4, 5], [1, 2, 4, 5])], rows
        table = mq.ok("rebalance", "sq", "-g", "cfg").out.splitlines()
        assert table[1].split() == ["C1", "0,3", "0,3"] and table[2].split() == ["C2", "1,2,4,5", "1,2,4,5"]
        # (to preview other client ids, the queue ids are still needed)
        one_error(mq.run("rebalance", "sq", "-g", "cfg", "--consumers", "C1,C3"), 2)
    finally:
        for p in procs:
            p.stop()


# -- CMD strings split as sh splits them ----------------------------------------------------

SH_CASES = [r'sh -c "echo \$0 x"', r'a "b\`c" "d\"e" "f\\g" "j\k" "l\'m"', "a \"b\\\nc\" d\\\ne",
            r"a\ b 'c\d' e\\f", r'''"" '' x""y''z''', r"a\'", "a\\", r'"\\\\\"" "\a" "\$HOME"',
            "x\t y ", r'''"it's" 'say "hi"' ''', r"'\$0' \$0 ", "a\rb c\r", "\r"]


@pytest.mark.parametrize("line", SH_CASES)
def test_a_cmd_string_splits_into_the_words_sh_gives(line: str) -> None:
    import subprocess

    from mqctl.shellwords import split
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + line], capture_output=True, check=True).stdout
    assert split(line) == out.decode().split("\0")[:-1]


@pytest.mark.parametrize("line", ['a "b', "a 'b", 'a "b\\"'])
def test_an_open_quote_is_refused(mq: MQ, line: str) -> None:
    from mqctl.shellwords import split
    with pytest.raises(ValueError, match="No closing quotation"):
        split(line)
    assert "No closing quotation" in one_error(mq.run("tx", "send", "T", "b", "--exec", line), 2)


def test_exec_and_tx_exec_run_the_words_a_shell_would(mq: MQ) -> None:
    out = mq.work / "said"
    mq.ok("send", "T", "m1")
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", f'sh -c "echo \\$0 x >> {out}"')
    mq.ok("tx", "send", "T", "b", "--exec", f'sh -c "echo \\$0 y \\"\\$MQ_TOPIC\\" >> {out}"')
    assert out.read_text() == "sh x\nsh y T\n"


# -- msg show --json: the history the human view shows --------------------------------------

def human_events(mq: MQ, msg_id: str) -> list[str]:
    out = mq.ok("msg", "show", msg_id).out
    return [line.strip() for line in out.split("\nHistory:\n")[1].splitlines()]


def test_msg_show_json_has_every_event_of_the_human_history(mq: MQ) -> None:
    mq.ok("topic", "create", "js", "--queues", "3")
    sent = json.loads(mq.ok("send", "js", "x", "-q", "2", "--json").stdout)
    shown = json.loads(mq.ok("msg", "show", sent["msgId"], "--json").stdout)
    assert [(h["event"], h["topic"], h["queueId"], h["queueOffset"], h["this"]) for h in shown["history"]] == [
        ("sent", "js", 2, 0, True)]
    assert human_events(mq, sent["msgId"])[0].endswith("sent to js queue 2 offset 0  (this copy)")


def test_a_resent_dead_letters_json_history_has_the_resend(mq: MQ) -> None:
    from mqctl.msgview import event_text
    from store import format_local
    mq.ok("topic", "create", "js", "--queues", "3")
    sent = json.loads(mq.ok("send", "js", "x", "-q", "2", "--json").stdout)
    mq.run("consume", "js", "-g", "G", "--from", "first", "--exec", "false", "--max-reconsume", "0", "-e")
    mq.ok("dlq", "resend", "-g", "G")
    for msg_id in (sent["offsetMsgId"], sent["msgId"]):
        history = json.loads(mq.ok("msg", "show", msg_id, "--json").stdout)["history"]
        assert [h["event"] for h in history if h["event"] != "consumed"] == ["sent", "dead-lettered", "resent"]
        human = human_events(mq, msg_id)
        assert any("resent from the dead-letter queue to %RETRY%G" in line for line in human), human
        assert len(human) == len(history) and all(
            line.endswith(event_text(e, lambda ms: format_local(ms, False))) for line, e in zip(human, history))


# -- --store on a file ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["init"], ["send", "x", "y"], ["topic", "list"], ["store", "check"]])
def test_a_store_path_that_is_or_is_under_a_file_is_a_bad_value(mq: MQ, args: list[str]) -> None:
    f = mq.work / "f"
    f.write_text("hi\n")
    for path, why in ((f, f"{f} cannot be a store directory: it is not a directory"),
                      (f / "sub", f"{f}/sub cannot be a store directory: {f} is not a directory")):
        one_error(mq.run("--store", str(path), *args), 2, why)
        one_error(mq.run(*args, extra_env={"MQCTL_STORE": str(path)}), 2, why)
    assert f.read_text() == "hi\n"
    # a store missing under a directory is still not found (a read) or created (a write)
    one_error(mq.run("--store", str(mq.work / "none"), "topic", "list"), 3, "no store at")
    mq.ok("--store", str(mq.work / "d" / "new"), "send", "x", "y")


def test_the_library_refuses_such_a_path_with_a_usage_error(tmp_path) -> None:  # noqa: ANN001
    from store import Producer
    from store.errors import UsageError
    (tmp_path / "f").write_text("hi\n")
    with pytest.raises(UsageError, match="cannot be a store directory"):
        Producer(tmp_path / "f" / "sub")


# -- tx send --exec: the half message named before the local transaction ---------------------

def test_tx_send_names_its_half_message_before_the_local_transaction(mq: MQ) -> None:
    import os
    import re
    import signal

    from tests.procs import wait_for
    mq.ok("topic", "create", "race", "--queues", "2")
    p = mq.start("tx", "send", "race", "b", "--exec", "sleep 60", new_session=True)
    try:
        line = wait_for(lambda: re.search(r"^mqctl: half message stored: txId ([0-9A-F]{32}) \(topic race, "
                                          r"queue \d, offsetMsgId ([0-9A-F]{32})\); running the local "
                                          r"transaction$", p.stderr(), re.M), what="the half message's line")
    finally:
        os.killpg(p.pid, signal.SIGKILL)   # mqctl and its local transaction, as kill -9 would leave it
        p.wait()
    assert p.stdout() == b"", "stdout keeps its one JSON line for the end"
    tx_id, offset_id = line.group(1), line.group(2)
    pending = mq.ok("tx", "list", "--json").json_lines()
    assert [(t["txId"], t["offsetMsgId"]) for t in pending] == [(tx_id, offset_id)], pending
    mq.ok("tx", "rollback", tx_id)
    assert mq.ok("tx", "list", "--json").json_lines() == []
    # a run that ends prints its one JSON line on stdout, the same txId as its stderr line
    res = mq.ok("tx", "send", "race", "c", "--exec", "true")
    (obj,) = res.json_lines()
    assert obj["state"] == "COMMITTED" and f"half message stored: txId {obj['txId']} " in res.stderr
