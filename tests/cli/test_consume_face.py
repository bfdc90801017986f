"""``mqctl consume``'s face: its flags, its help, --format's kcat tokens, values
checked up front with one-line errors, --batch's handler input, and redeliveries that say
so. Real ``mqctl`` processes on a real store."""
from __future__ import annotations

import json

import pytest

from mqctl.commands.consume import complete_from
from tests.cli.helppage import help_at_80_columns
from tests.procs import MQ, handler_script, one_error

ERROR = "mqctl: error: "



@pytest.fixture
def loaded(mq: MQ) -> MQ:
    """Topic T (4 queues) with one message carrying every kind of field."""
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.ok("send", "T", "hello", "-t", "paid", "-k", "k1,k2", "-p", "region=eu", "-p", "tier=gold",
          "-s", "shard-7")
    return mq


def envelope_of(mq: MQ) -> dict:
    cp = mq.ok("consume", "T", "-g", "look", "--from", "first", "-e", "-j")
    return json.loads(cp.stdout)


# -- --format: kcat's tokens mean what they mean in kcat ---------------------------------------

def test_each_format_token_through_the_cli(loaded: MQ) -> None:
    env = envelope_of(loaded)
    fmt = "%t|%p|%o|%k|%s|%S|%T|%h|%g|%i|%I|%r|%B|%D|%%\\n"
    cp = loaded.ok("consume", "T", "-g", "fmt", "--from", "first", "-e", "-f", fmt)
    fields = cp.stdout.decode().rstrip("\n").split("|")
    assert fields == [
        "T", str(env["queueId"]), str(env["queueOffset"]), "k1 k2", "hello", "5",
        str(env["storeTimestamp"]),
        "region=eu,tier=gold",          # %h: user properties, as --json's (no UNIQ_KEY, TAGS ...)
        "paid", env["msgId"], env["offsetMsgId"], "0", str(env["bornTimestamp"]),
        _iso(env["storeTimestamp"]), "%",
    ]
    assert env["properties"] == {"region": "eu", "tier": "gold"}


def _iso(ms: int) -> str:
    from store.timeparse import format_time
    return format_time(ms)


def test_R_is_kcats_binary_length_prefix(loaded: MQ) -> None:
    cp = loaded.ok("consume", "T", "-g", "fmt", "--from", "first", "-e", "-f", "%R%s")
    assert cp.stdout == (5).to_bytes(4, "big") + b"hello"


def test_d_follows_utc(loaded: MQ) -> None:
    env = envelope_of(loaded)
    cp = loaded.ok("--utc", "consume", "T", "-g", "fmt", "--from", "first", "-e", "-f", "%d\\n")
    assert cp.stdout.decode() == _iso(env["storeTimestamp"]) + "\n"


@pytest.mark.parametrize("fmt, start", [
    ("[%z] %% %s\\n", "--format: unknown token %z (tokens: %t topic, %p queue id, %o queue offset"),
    ("%q %s", "--format: unknown token %q (tokens: "),
    ("%s %", "--format: a lone % at the end"),
    ("%s\\q", "--format: unknown escape \\q (escapes: \\n \\t \\r \\0 \\\\ \\xNN)"),
])
def test_a_bad_format_names_itself(loaded: MQ, fmt: str, start: str) -> None:
    line = one_error(loaded.run("consume", "T", "-g", "bad", "--from", "first", "-e", "-f", fmt), 2, start)
    assert repr(fmt) not in line and "'[%z]" not in line


# -- tag expressions -----------------------------------------------------------------------

@pytest.mark.parametrize("expr, why", [
    ("paid && new", "there is no '&&'"),
    ("paid & new", "there is no '&&'"),
    ("paid | new", "alternatives are separated by '||'"),
    ("paid,new", "alternatives are separated by '||', not ','"),
    ("pa*", "'*' stands alone"),
    ("||", "it names no tag"),         # (it used to select every message)
    (" || ", "it names no tag"),
    (" ", "it names no tag"),
])
def test_a_tag_expression_outside_the_grammar_is_refused(loaded: MQ, expr: str, why: str) -> None:
    line = one_error(loaded.run("consume", "T", "-g", "tags", "--from", "first", "-e", "-t", expr), 2,
                     f"--tag {expr!r}: {why}")
    assert line.endswith("write * (every message) or TAG || TAG || ...")
    assert loaded.offsets("tags") == {}, "refused before joining"


def test_the_tag_grammar_selects(loaded: MQ) -> None:
    loaded.ok("send", "T", "other", "-t", "new")
    loaded.ok("send", "T", "untagged")

    def bodies(expr: str) -> list[str]:
        cp = loaded.ok("consume", "T", "--no-group", "--from", "first", "-e", "-t", expr)
        return sorted(cp.stdout.decode().split())

    assert bodies("paid || new") == ["hello", "other"]
    assert bodies(" paid ||  new || ") == ["hello", "other"]    # spaces and an empty alternative
    assert bodies("new") == ["other"]
    assert bodies("*") == bodies("new || *") == ["hello", "other", "untagged"]


# -- contradictory flags, refused with the reason ------------------------------------------

@pytest.mark.parametrize("extra, start", [
    (["--queues", "0,3"], "--queues applies to --strategy config only"),
    (["--strategy", "hash", "--queues", "1"], "--queues applies to --strategy config only"),
    (["--strategy", "config"], "--strategy config needs --queues"),
    (["--strategy", "config", "--queues", "a,b"], "--queues 'a,b': expected queue ids like 0,3"),
    (["--broadcast", "--dedup"], "--dedup does not apply to --broadcast: its log is the group's"),
    (["--broadcast", "--max-reconsume", "3"], "--max-reconsume does not apply to --broadcast"),
    (["--broadcast", "--retry-delay", "1s"], "--retry-delay does not apply to --broadcast"),
    (["--broadcast", "--strategy", "hash"], "--strategy does not apply to --broadcast"),
    (["--orderly", "--retry-delay", "1s"], "--retry-delay applies to concurrent consumption"),
    (["--suspend-ms", "100"], "--suspend-ms applies to --orderly"),
    (["-j", "-f", "%s"], "give --json or --format, not both"),
    (["--json", "--format", "raw"], "give --json or --format, not both"),   # (was: JSON, silently)
    (["--format", "jsno"], "--format 'jsno': not raw, json or a template"),   # (was: "jsno" a message)
    (["-x", "cat", "-f", "%s"], "--format applies to stdout"),
    (["--strategy", "bogus"], "Invalid value for '--strategy': 'bogus' is not one of 'averagely', 'circle', "
                              "'hash', 'config'"),
    (["--idle-timeout", "soon"], "--idle-timeout 'soon': not a duration (accepted: 500ms, 30s, 1.5s"),
    (["--retry-delay", "1x"], "--retry-delay '1x': not a duration"),
    (["--consume-timeout", "0"], "--consume-timeout must be at least 1 ms"),
    (["--batch", "5"], "--batch applies to --exec"),
    (["--strategy", "config", "--queues", "0,99"], "queue 99 does not exist: topic 'T' has queues 0-"),
])
def test_contradictory_or_bad_values_are_refused_up_front(loaded: MQ, extra: list[str], start: str) -> None:
    one_error(loaded.run("consume", "T", "-g", "G", "--from", "first", "-e", *extra), 2, start)
    assert loaded.offsets("G") == {} and not loaded.members("G")


@pytest.mark.parametrize("extra", [["--broadcast"], ["--orderly"], ["--max-reconsume", "1"],
                                   ["--retry-delay", "1s"], ["--strategy", "hash"]])
def test_no_group_refuses_what_needs_a_group(loaded: MQ, extra: list[str]) -> None:
    flag = extra[0]
    one_error(loaded.run("consume", "T", "--no-group", "-e", *extra), 2,
              f"{flag} needs a group; --no-group reads without one")


@pytest.mark.parametrize("flag", ["-n", "-J", "-b"])
def test_removed_short_flags(loaded: MQ, flag: str) -> None:
    one_error(loaded.run("consume", "T", "-g", "G", "-e", flag, "1"), 2, f"No such option: {flag}")


def test_the_short_flags_of_the_table(loaded: MQ) -> None:
    cp = loaded.ok("consume", "T", "-g", "G", "-o", "first", "-c", "1", "-t", "paid", "-j")
    assert json.loads(cp.stdout)["body"] == "hello"
    cp = loaded.ok("consume", "T", "-g", "G2", "-o", "first", "-e", "-f", "%s\\n")
    assert cp.stdout == b"hello\n"
    cp = loaded.ok("consume", "T", "-g", "G3", "-o", "first", "-e", "-x", "cat")
    assert cp.stdout == b"hello"


def test_durations_take_the_duration_grammar(loaded: MQ) -> None:
    cp = loaded.ok("consume", "T", "-g", "G", "--from", "first", "--idle-timeout", "0.5s",
                   "--rebalance-interval", "100ms", "--consume-timeout", "1m", timeout=30)
    assert cp.stdout == b"hello\n"


# -- --orderly --broadcast: it works, so it is accepted (and documented) ---------------------

def test_orderly_broadcast_gives_every_member_every_queue_in_order(mq: MQ) -> None:
    mq.ok("topic", "create", "O", "--queues", "2")
    mq.ok("send", "O", "--key-delimiter", ":", input="".join(f"k{i % 2}:{i}\n" for i in range(10)))
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", 'b=$(cat); echo "$MQ_QUEUE_ID $b" >> "$LOG.$ID"')
    runs = [mq.start("consume", "O", "-g", "B", "--orderly", "--broadcast", "--client-id", cid,
                     "--from", "first", "-e", "-x", h, extra_env={"LOG": str(log), "ID": cid})
            for cid in ("a", "b")]
    for p in runs:
        assert p.wait(60) == 0, p.stderr()
        assert p.stderr() == ""
    for cid in ("a", "b"):
        rows = [line.split() for line in (mq.work / f"log.{cid}").read_text().splitlines()]
        assert sorted(int(b) for _, b in rows) == list(range(10))
        for q in ("0", "1"):
            seq = [int(b) for qid, b in rows if qid == q]
            assert seq == sorted(seq) and len(seq) == 5


# -- --batch: what the handler reads -----------------------------------------------------------

BATCH_HANDLER = ('cat > "$OUT.$MQ_QUEUE_OFFSET"; '
                 'echo "$MQ_BATCH_SIZE|$MQ_QUEUE_OFFSETS|$MQ_MSG_IDS|$MQ_RECONSUME_TIMES" > "$OUT.$MQ_QUEUE_OFFSET.env"')


@pytest.fixture
def batch_run(mq: MQ):  # noqa: ANN201
    def run(*extra: str) -> dict[int, tuple[bytes, list[str]]]:
        out = mq.work / "out"
        h = handler_script(mq.work / "h.sh", BATCH_HANDLER)
        p = mq.start("consume", "B", "-g", "G" + str(len(extra)), "--from", "first", "-e", "--batch", "2",
                     "--threads", "1", "-x", h, *extra, extra_env={"OUT": str(out)})
        assert p.wait(60) == 0, p.stderr()
        got = {}
        for f in mq.work.glob("out.*.env"):
            off = int(f.name.split(".")[1])
            got[off] = ((mq.work / f"out.{off}").read_bytes(), f.read_text().strip().split("|"))
            f.unlink()
            (mq.work / f"out.{off}").unlink()
        return got
    mq.ok("topic", "create", "B", "--queues", "1")
    mq.ok("send", "B", input="a\nb\nc\n")
    return run


def test_batch_handler_input(mq: MQ, batch_run) -> None:  # noqa: ANN001
    got = batch_run()
    assert sorted(got) == [0, 2]
    body, env = got[0]
    assert body == b"a\nb\n" and env[0] == "2" and env[1] == "0,1" and len(env[2].split(",")) == 2
    body, env = got[2]
    assert body == b"c\n", "a batch of one is a line too"
    assert env[:2] == ["1", "2"] and env[3] == "0"

    got = batch_run("-j")
    lines = got[0][0].decode().splitlines()
    assert [json.loads(x)["body"] for x in lines] == ["a", "b"]
    assert got[0][0].endswith(b"\n")
    assert [json.loads(x)["body"] for x in got[2][0].decode().splitlines()] == ["c"]


def test_the_help_says_what_batch_handlers_read() -> None:
    from mqctl.commands.consume import HELP
    text = " ".join(HELP.split())
    assert "Its stdin holds each body followed by a newline, or with --json one envelope per line" in text
    assert "The MQ_* values are the first message's, except MQ_RECONSUME_TIMES: the highest of the batch" in text
    assert "MQ_QUEUE_OFFSETS and MQ_MSG_IDS list every message, MQ_BATCH_SIZE counts them" in text


# -- a redelivery says so ------------------------------------------------------------------------

def test_a_redelivery_shows_its_reconsume_times(mq: MQ) -> None:
    mq.ok("topic", "create", "R", "--queues", "1")
    mq.ok("send", "R", "flaky")
    seen = mq.work / "seen"
    h = handler_script(mq.work / "h.sh", f"""cat > /dev/null
echo "$MQ_TOPIC $MQ_RECONSUME_TIMES $(cat {seen}.n 2>/dev/null)" >> {seen}
[ -e {seen}.n ] && exit 0
echo 1 > {seen}.n
exit 1""")
    p = mq.start("consume", "R", "-g", "G", "--from", "first", "--retry-delay", "100ms",
                 "--idle-timeout", "3", "-x", h)
    assert p.wait(60) == 0, p.stderr()
    assert seen.read_text().splitlines() == ["R 0 ", "R 1 1"]
    assert "will be redelivered through %RETRY%G (reconsume 1 of 16)" in p.stderr()


def test_a_redelivery_in_json_and_format(mq: MQ) -> None:
    mq.ok("topic", "create", "R", "--queues", "1")
    mq.ok("send", "R", "flaky")
    # --exec --json: the handler's envelope is the one consume --json prints
    envs = mq.work / "envs"
    h = handler_script(mq.work / "h.sh", f"""cat >> {envs}
[ "$MQ_RECONSUME_TIMES" -gt 0 ]""")
    p = mq.start("consume", "R", "-g", "G", "--from", "first", "--retry-delay", "100ms",
                 "--idle-timeout", "3", "-j", "-x", h)
    assert p.wait(60) == 0, p.stderr()
    first, again = (json.loads(x) for x in envs.read_text().splitlines())
    assert (first["topic"], first["reconsumeTimes"]) == ("R", 0)
    assert (again["topic"], again["reconsumeTimes"]) == ("R", 1)
    assert again["msgId"] == first["msgId"]
    # stdout: the retry topic read directly, %r shows the count
    cp = mq.ok("consume", "%RETRY%G", "-g", "look", "--from", "first", "-e", "-f", "%r %s\\n")
    assert cp.stdout == b"1 flaky\n"


# -- help ------------------------------------------------------------------------------------------

def test_help_examples_survive_at_80_columns(mq: MQ) -> None:
    from mqctl.commands.consume import HELP
    page = help_at_80_columns(mq, "consume", HELP)
    for metavar in ("TOPIC", "GROUP", "first|last|TIME", "EXPR", "CMD", "CLIENT-ID", "IDS", "DURATION",
                    "[averagely|circle|hash|config]", "FORMAT"):
        assert metavar in page, metavar


def test_from_completes_its_words(mq: MQ) -> None:
    words = ["first", "last", "beginning", "end", "stored"]   # ours, then kcat's
    assert complete_from("") == words and complete_from("l") == ["last"]
    cp = mq.run(extra_env={"_MQCTL_COMPLETE": "complete_bash", "COMP_WORDS": "mqctl consume t --from ",
                           "COMP_CWORD": "4"})
    assert cp.out.split() == words
