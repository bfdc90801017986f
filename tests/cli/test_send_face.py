"""``mqctl send``'s face: its flags and help, the hint when it waits on a terminal,
human summary lines, honest --delay reports, decimal delays, and values checked up front
with one-line errors. Real ``mqctl`` processes on a real store."""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.cli.helppage import help_at_80_columns
from tests.procs import MQ, one_error

ERROR = "mqctl: error: "
HINT = "mqctl: reading messages from stdin, one per line (Ctrl-D to end)"



def topic_size(mq: MQ, topic: str) -> int:
    s = mq.store()
    try:
        return sum(s.max_offset(topic, q) for q in s.queue_ids(topic)) if s.has_topic(topic) else 0
    finally:
        s.close()


# -- the human summary -------------------------------------------------------------------------

def test_summary_lines_read_like_a_person_wrote_them(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "3")
    mq.ok("topic", "create", "W", "--queues", "12")
    cp = mq.ok("send", "T", "x", "-q", "2")
    assert cp.stderr == "sent 1 message to T (queue 2)\n"
    cp = mq.ok("send", "T", input="a\nb\nc\n")
    assert cp.stderr == "sent 3 messages to T (queues 0,1,2)\n"
    cp = mq.ok("send", "W", input="".join(f"{i}\n" for i in range(24)))
    assert cp.stderr == "sent 24 messages to W (12 queues)\n"
    assert mq.ok("send", "T", "-j", input="a\n").stderr == ""


# -- --delay -------------------------------------------------------------------------------------

def test_delay_reports_the_real_topic_and_when_it_is_due(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    cp = mq.ok("send", "T", "later", "--delay", "3s")
    m = re.fullmatch(r"sent 1 message to T \(queue (\d)\), due at "
                     r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \(a 3s delay\)\n", cp.stderr)
    assert m, cp.stderr
    assert 0 <= int(m.group(1)) < 8 and "queue 18" not in cp.stderr
    cp = mq.ok("--utc", "send", "T", "later", "--delay", "90s")
    assert re.search(r", due at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(a 90s delay\)\n$", cp.stderr), cp.stderr


def test_delay_json_names_the_queue_it_will_be_delivered_to(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    t0 = int(time.time() * 1000)
    res = json.loads(mq.ok("send", "T", "later", "--delay", "1.5s", "-j").stdout)
    t1 = int(time.time() * 1000)
    assert res["status"] == "SEND_OK" and res["topic"] == "T"
    assert 0 <= res["queueId"] < 8
    assert res["queueOffset"] is None, "it has no offset in T until it is delivered"
    assert t0 + 1500 <= res["deliverTimestamp"] <= t1 + 1500
    assert isinstance(res["commitLogOffset"], int) and res["offsetMsgId"]
    # delivered where and when it said, under the same message id
    cp = mq.ok("consume", "T", "-g", "G", "--from", "first", "-c", "1", "-j", "--idle-timeout", "20", timeout=60)
    got = json.loads(cp.stdout)
    assert (got["body"], got["queueId"], got["msgId"]) == ("later", res["queueId"], res["msgId"])
    assert got["storeTimestamp"] >= res["deliverTimestamp"]


@pytest.mark.parametrize("group", [["-g", "G"], ["--no-group"]], ids=["group", "no-group"])
def test_an_exit_at_end_run_takes_delayed_messages_already_due(mq: MQ, group: list[str]) -> None:
    """Due before the run starts = part of what is there: -e must not leave it for next time."""
    mq.ok("topic", "create", "T", "--queues", "2")
    due = json.loads(mq.ok("send", "T", "later", "--delay", "500ms", "-j").stdout)["deliverTimestamp"]
    while int(time.time() * 1000) <= due + 50:   # wait on the clock, not on a guess
        time.sleep(0.05)
    cp = mq.ok("consume", "T", *group, "--from", "first", "-e")
    assert cp.stdout == b"later\n"


def test_a_decimal_delay_and_its_forms(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    for value in ("1.5s", "0.5m", "500ms", "1m30s", "2"):
        cp = mq.ok("send", "T", "x", "--delay", value)
        assert ", due at " in cp.stderr, (value, cp.stderr)
    one_error(mq.run("send", "T", "x", "--delay", "2.5"), 2,
              "--delay '2.5': a bare number is a delay level 1-18; give a unit for a duration, e.g. 2.5s")
    one_error(mq.run("send", "T", "x", "--delay", "1.5q"), 2,
              "--delay '1.5q': give a level 1-18 or a duration like 500ms, 1.5s")
    one_error(mq.run("send", "T", "x", "--delay", "0"), 2, "--delay level must be 1-18")
    one_error(mq.run("send", "T", "x", "--delay", "19"), 2, "--delay level must be 1-18")
    one_error(mq.run("send", "T", "x", "--delay", "99999999999d"), 2, "--delay '99999999999d': due after")


def test_delayed_stdin_lines_report_their_queues(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    cp = mq.ok("send", "T", "--delay", "2m", input="a\nb\nc\nd\n")
    assert cp.stderr.startswith("sent 4 messages to T (queues 0,1,2,3), due at "), cp.stderr
    assert cp.stderr.endswith("(a 2m delay)\n")
    cp = mq.ok("send", "T", "x", "--delay", "3")
    assert cp.stderr.endswith("(delay level 3: 10s)\n"), cp.stderr


# -- the hint on a terminal -------------------------------------------------------------------------

def test_a_terminal_on_stdin_gets_a_one_line_hint(mq: MQ) -> None:
    mq.ok("topic", "create", "T")
    cp = mq.run("send", "T", input=b"hello\n", tty="stdin")
    assert cp.returncode == 0, cp.stderr
    hint, summary = cp.stderr.splitlines()
    assert hint == HINT and re.fullmatch(r"sent 1 message to T \(queue \d\)", summary)
    cp = mq.run("send", "T", "-i", "json", input=b'{"body":"x"}\n', tty="stdin")
    assert cp.stderr.splitlines()[0] == "mqctl: reading JSON objects from stdin, one per line (Ctrl-D to end)"


def test_lines_typed_at_a_terminal_get_no_rate(mq: MQ) -> None:
    """A rate of lines typed by a person (``sent 1 message to T (queue 2), 0 msg/s`` after a
    pause) says nothing: the summary has none when stdin is a terminal."""
    import os
    import pty
    import subprocess

    from tests.procs import MQCTL, mqctl_env
    mq.ok("topic", "create", "T")
    master, slave = pty.openpty()
    p = subprocess.Popen(MQCTL + ["send", "T"], stdin=slave, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=mqctl_env(mq.root))
    os.close(slave)
    try:
        os.write(master, b"hello\n")
        time.sleep(0.8)   # (a person's pause: over the half second after which a rate is given)
        os.write(master, b"\x04")
        err = p.communicate(timeout=60)[1].decode()
    finally:
        os.close(master)
    assert p.returncode == 0, err
    assert re.fullmatch(r"sent 1 message to T \(queue \d\)", err.splitlines()[-1]), err


def test_no_hint_from_a_pipe_or_a_file(mq: MQ, tmp_path) -> None:  # noqa: ANN001
    mq.ok("topic", "create", "T")
    cp = mq.ok("send", "T", input="hello\n")
    assert re.fullmatch(r"sent 1 message to T \(queue \d\)\n", cp.stderr)
    f = tmp_path / "in"
    f.write_bytes(b"a\n")
    with open(f, "rb") as fh:
        from_file = mq.start("send", "T", stdin=fh)
    assert from_file.wait() == 0 and "reading" not in from_file.stderr()
    assert mq.ok("send", "T", "body").stderr.startswith("sent 1 message")   # BODY: stdin is not read


# -- values checked up front -------------------------------------------------------------------------

@pytest.mark.parametrize("tag, why", [
    ("a||b", "a message has one tag, and a tag may not contain '|'"),
    ("a || b", "a message has one tag, and a tag may not contain '|'"),
    ("paid && new", "a tag may not contain '&'"),
    ("a,b", "a tag may not contain ','"),
    ("a*", "a tag may not contain '*'"),
    (" a", "a tag may not start or end with spaces"),
])
def test_a_tag_no_consumer_could_select_is_refused(mq: MQ, tag: str, why: str) -> None:
    one_error(mq.run("send", "T", "x", "-t", tag), 2, f"--tag {tag!r}: {why}")
    one_error(mq.run("tx", "send", "T", "x", "-t", tag), 2, f"--tag {tag!r}: {why}")
    assert topic_size(mq, "T") == 0


def test_a_json_line_with_such_a_tag_is_a_data_error_naming_its_line(mq: MQ) -> None:
    mq.ok("topic", "create", "T")
    cp = mq.run("send", "T", "-i", "json", input='{"body":"ok","tags":"a"}\n{"body":"x","tags":"a || b"}\n')
    assert cp.returncode == 5
    summary, error = cp.stderr.splitlines()   # the line before it is sent and reported
    assert summary.startswith("sent 1 message to T")
    assert error.startswith(ERROR + "line 2: 'tags' 'a || b': a message has one tag"), error
    assert topic_size(mq, "T") == 1


@pytest.mark.parametrize("extra, lines", [
    (["-i", "json"], ['{"body":"a"}', '{"body":"b"}', '{"body":"x","properties":{"p":"%s"}}' % ("v" * 40000),
                      '{"body":"c"}']),
    (["-i", "json", "-t", "T1"], ['{"body":"a"}', '{"body":"b"}', '{"body":"x","keys":"%s"}' % ("k" * 40000),
                                  '{"body":"c"}']),
    (["-K", ":"], ["k1:a", "k2:b", "%s:x" % ("k" * 40000), "k3:c"]),
    # bytes that are not UTF-8 are stored as U+FFFD, three bytes each: 12,000 of them overflow
    (["-K", ":"], [b"k1:a", b"k2:b", b"\xff" * 12000 + b":x", b"k3:c"]),
])
def test_a_line_whose_properties_do_not_fit_is_named_and_the_lines_before_it_are_sent(
        mq: MQ, extra: list[str], lines: list[str] | list[bytes]) -> None:
    """As for a body over the limit: not the whole batch refused by its write, with no line named."""
    mq.ok("topic", "create", "T", "--queues", "1")
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines)
    cp = mq.run("send", "T", "--json", *extra, input=data)
    one_error(cp, 5, "line 3: message properties of", allow_info=True)
    assert "(2 messages sent before it)" in cp.stderr
    assert len(cp.stdout.splitlines()) == 2 and topic_size(mq, "T") == 2


@pytest.mark.parametrize("value, named", [("null", "null"), ('{"y":1}', "an object"), ("true", "a boolean"),
                                          ("1.5", "a fractional number"), ("[]", "an array")])
def test_a_json_property_that_is_not_a_string_is_a_data_error_naming_its_line(mq: MQ, value: str,
                                                                                named: str) -> None:
    """Not stored as Python's spelling of it ("None", "True", "{'y': 1}"): a property is text."""
    mq.ok("topic", "create", "T")
    cp = mq.run("send", "T", "-i", "json", input='{"body":"ok"}\n{"body":"x","properties":{"p":%s}}\n' % value)
    error = one_error(cp, 5, "line 2: property 'p'", allow_info=True)
    assert f"strings (or integers), not {named}" in error
    cp = mq.run("send", "T", "-i", "json", input='{"body":"x","properties":[]}\n')
    one_error(cp, 5, "line 1: 'properties' must be an object")
    out = mq.ok("consume", "T", "--no-group", "--from", "first", "-e", "--json").stdout.decode()
    assert [json.loads(ln)["properties"] for ln in out.splitlines()] == [{}]


def test_a_json_property_that_is_an_integer_is_stored_as_its_decimal_text(mq: MQ) -> None:
    """A handler's or jq's ``{"n": 5}`` is unambiguous: stored as "5" (as before properties
    had to be text), where ``5.0``/``1e3`` would not be."""
    mq.ok("topic", "create", "T")
    mq.ok("send", "T", "-i", "json", input='{"body":"x","properties":{"n":5,"m":-12345678901234567890}}\n')
    out = mq.ok("consume", "T", "--no-group", "--from", "first", "-e", "--json").stdout.decode()
    assert json.loads(out)["properties"] == {"n": "5", "m": "-12345678901234567890"}

@pytest.mark.parametrize("args, start", [
    (["x", "-D", ","], "--delimiter applies to messages read from stdin, not to a BODY argument"),
    (["x", "-K", ":"], "--key-delimiter applies to messages read from stdin"),
    (["x", "-i", "json"], "--input json applies to messages read from stdin"),
    (["x", "--reroute"], "--reroute applies to messages read from stdin"),
    (["--reroute"], "--reroute applies to --input json"),
    (["-i", "json", "-K", ":"], "--key-delimiter applies to --input raw only"),
    (["-K", ":", "-s", "bob"], "--key-delimiter gives each line its own sharding key: not with --sharding-key"),
    (["-K", ":", "-q", "1"], "--key-delimiter gives each line its own sharding key: not with --sharding-key"),
    (["x", "-s", "k", "-q", "1"], "give --sharding-key or --queue, not both"),
    (["-D", ""], "--delimiter may not be empty"),
    (["x", "--flush", "later"], "Invalid value for '--flush': 'later' is not one of 'async', 'sync'"),
    (["-i", "xml"], "Invalid value for '--input' / '-i': 'xml' is not one of 'raw', 'json'"),
])
def test_contradictory_or_bad_values_are_refused_before_anything_is_read(mq: MQ, args: list[str],
                                                                         start: str) -> None:
    one_error(mq.run("send", "T", *args, input="a\n"), 2, start)
    assert topic_size(mq, "T") == 0


def test_the_short_flags_of_the_table(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    res = json.loads(mq.ok("send", "T", "x", "-t", "paid", "-k", "k1,k2", "-p", "a=1", "-q", "3", "-j").stdout)
    assert res["queueId"] == 3
    mq.ok("send", "T", "-K", ":", "-D", ";", input="k:b1;k:b2;")
    mq.ok("send", "T", "y", "-s", "k")
    mq.ok("send", "T", "-i", "json", input='{"body":"z"}\n')
    env = json.loads(mq.ok("consume", "T", "-g", "G", "--from", "first", "-c", "1", "-t", "paid", "-j").stdout)
    assert (env["tags"], env["keys"], env["properties"]) == ("paid", ["k1", "k2"], {"a": "1"})
    assert topic_size(mq, "T") == 5


# -- help ------------------------------------------------------------------------------------------

def test_help_examples_survive_at_80_columns(mq: MQ) -> None:
    from mqctl.commands.send import HELP
    page = help_at_80_columns(mq, "send", HELP)
    assert "Usage: mqctl send [OPTIONS] TOPIC [BODY]" in page
    for metavar in ("--tag TAG", "--keys K1,K2", "--property NAME=VALUE", "--sharding-key KEY", "--queue N",
                    "--key-delimiter D", "--delimiter D", "--input [raw|json]", "--flush [async|sync]",
                    "--delay LEVEL|DURATION", "--batch-size N"):
        assert metavar in page, metavar


def test_flush_and_input_complete_their_choices(mq: MQ) -> None:
    for words, want in (("mqctl send t --flush ", ["async", "sync"]), ("mqctl send t --input ", ["raw", "json"])):
        cp = mq.run(extra_env={"_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": "4"})
        assert cp.out.split() == want
