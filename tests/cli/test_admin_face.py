"""The face of the inspection and admin commands: short flags with one meaning,
messages a person would write, empty results said once on stderr, human times with --utc,
``msg show``'s timeline, contradictory flags refused with one line, progress bars on a TTY.

Every command runs as a real ``mqctl`` process (``tests.procs.MQ``); the store is prepared
through the library where building it with commands would be slow (retries, dead letters).
"""
from __future__ import annotations

import inspect
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from store.log.broadcastoffsets import BroadcastOffsetStore
from store.log.offsets import ClusterOffsetStore
from store.log.record import Draft
from store.timeparse import format_time
from tests.procs import MQ, Result, one_error

LOCAL = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}")


def refused(res: Result, code: int, *parts: str) -> None:
    """:func:`one_error` (its only stderr line) holding every one of ``parts``, and nothing
    on stdout."""
    line = one_error(res, code)
    for part in parts:
        assert part in line, (part, line)
    assert res.stdout == b""


@pytest.fixture
def loaded(mq: MQ) -> MQ:
    """Topic T (4 queues, 3 messages in queue 0), group G with offsets in T, topic U empty."""
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.ok("topic", "create", "U", "--queues", "1")
    mq.send_lines("T", ["a", "b", "c"], "-q", "0", "-k", "k1")
    s = mq.store()
    ClusterOffsetStore(s.layout).commit("G", {("T", q): 1 if q == 0 else 0 for q in range(4)})
    s.close()
    return mq


# -- one meaning per short flag: the collisions removed ----------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["progress", "-t", "T", "-g", "G"], "-t"),                       # -t is the tag, not the topic
    (["offsets", "show", "-g", "G", "-t", "T"], "-t"),
    (["offsets", "reset", "-g", "G", "-t", "T", "--to-earliest"], "-t"),
    (["unlock", "-g", "G", "-t", "T"], "-t"),
    (["msg", "query", "-t", "T", "-k", "k1"], "-t"),
    (["msg", "query", "--topic", "T", "-k", "k1", "-m", "5"], "-m"),  # -m is --msg-id, not --limit
    (["rebalance", "T", "-g", "G", "-c", "a,b"], "-c"),               # -c is --count, not --consumers
    (["topic", "create", "V", "-n", "2"], "-n"),                      # -n is --dry-run, not --queues
    (["topic", "list", "-J"], "-J"),                                  # -j is the only short --json
    (["progress", "-g", "G", "-J"], "-J"),
])
def test_removed_short_flags_are_usage_errors(loaded: MQ, args: list[str], flag: str) -> None:
    refused(loaded.run(*args), 2, f"No such option: {flag}")


def test_the_long_names_and_the_kept_short_flags_work(loaded: MQ) -> None:
    assert len(loaded.ok("progress", "--topic", "T", "-g", "G", "-j").stdout.splitlines()) == 4
    assert len(loaded.ok("msg", "query", "--topic", "T", "-k", "k1", "--limit", "2", "-j").stdout.splitlines()) == 2
    rows = loaded.ok("rebalance", "T", "-g", "G", "--consumers", "a,b", "-j").stdout.splitlines()
    assert [json.loads(r)["queues"] for r in rows] == [[0, 1], [2, 3]]
    plan = loaded.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "-q", "0", "-n", "-j")
    assert [json.loads(r)["newOffset"] for r in plan.stdout.splitlines()] == [0]
    assert "dry run" in plan.stderr


# -- messages ----------------------------------------------------------------------------------

def test_topic_create_says_what_it_made(mq: MQ) -> None:
    assert mq.ok("topic", "create", "A", "--queues", "1").stderr == "created topic A (1 queue)\n"
    assert mq.ok("topic", "create", "A", "--queues", "1").stderr == "topic A exists (1 queue)\n"
    assert mq.ok("topic", "create", "B", "--order").stderr == "created topic B (8 queues, ordered)\n"
    refused(mq.run("topic", "create", "A", "--queues", "2"), 4, "exists")


def test_init_says_where_and_warns_about_ignored_settings(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "s", tmp_path)
    first = mq.ok("init", "--max-message-size", "4096", "--segment-size", "69632")
    assert first.stderr == (f"initialised store at {mq.root} (messages up to 4.0 KiB, 68.0 KiB segments, "
                            f"topics created on first send)\n")
    again = mq.ok("init", "--segment-size", "1048576", "--max-message-size", "4096")
    assert again.stderr.splitlines() == [
        f"store already exists at {mq.root}",
        "mqctl: warning: --segment-size ignored: an existing store keeps the settings it was created with"]
    # a flag not given asked for nothing, though its default differs from the store's setting
    assert mq.ok("init").stderr == f"store already exists at {mq.root}\n"
    assert mq.ok("init", "--no-auto-create").stderr.splitlines()[1:] == [
        "mqctl: warning: --no-auto-create ignored: an existing store keeps the settings it was created with"]


def test_reset_and_unlock_counts_read_like_sentences(loaded: MQ) -> None:
    r = loaded.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-latest", "-q", "0", "--execute")
    assert r.stderr.splitlines()[-1] == "reset 1 queue of T for group G (1 moved)"
    r = loaded.ok("offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute")
    assert r.stderr.splitlines()[-1] == "reset 4 queues of T for group G (1 moved)"
    s = loaded.store()
    from store.client.qlocks import QueueLock
    lock = QueueLock(s.layout, "G", "T", 2, "gone@1")
    assert lock.try_acquire()
    lock._close()  # as a crash leaves it
    s.close()
    r = loaded.ok("unlock", "-g", "G", "--topic", "T", "-q", "2")
    assert r.stderr == "released 1 lock\n"
    assert "  \n" not in r.stdout.decode() and not r.stdout.decode().endswith(" \n"), "no trailing spaces"


# -- empty results: one human line on stderr, nothing on stdout --------------------------------

@pytest.mark.parametrize("args, line", [
    (["offsets", "show", "-g", "G", "--topic", "U"], "no committed offsets for group G in topic U"),
    (["progress", "-g", "G", "--topic", "U"], "no committed offsets or subscriptions for group G in topic U"),
    (["locks", "-g", "G"], "no queue locks for group G"),
    (["locks"], "no queue locks"),
    (["consumers", "-g", "G"], "no live members in group G"),
    (["dlq", "list", "-g", "G"], "no dead letters for group G"),
    (["dlq", "resend", "-g", "G"], "no dead letters for group G"),
    (["msg", "query", "--topic", "T", "--key", "nope"], "no messages with key nope in topic T"),
])
def test_empty_results_are_said_once_on_stderr(loaded: MQ, args: list[str], line: str) -> None:
    r = loaded.ok(*args)
    assert (r.stdout, r.stderr) == (b"", line + "\n")
    r = loaded.ok(*args, "--json")
    assert (r.stdout, r.stderr) == (b"", "")


def test_empty_topic_list(mq: MQ) -> None:
    r = mq.ok("topic", "list")
    assert (r.stdout, r.stderr) == (b"", "no topics (--all shows system topics)\n")
    assert mq.ok("topic", "list", "--json").stdout == b""


def test_an_unknown_group_is_still_not_found(loaded: MQ) -> None:
    for args in (["dlq", "list", "-g", "Ghost"], ["dlq", "resend", "-g", "Ghost"], ["progress", "-g", "Ghost"],
                 ["consumers", "-g", "Ghost"]):
        refused(loaded.run(*args), 3, "Ghost", "does not exist")


# -- human times: local, or UTC with --utc; JSON keeps ms ---------------------------------------

def test_times_are_local_or_utc(loaded: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")   # +05:30: local and UTC differ in hours and minutes
    (row,) = [json.loads(x) for x in loaded.ok("topic", "status", "T", "--json").stdout.splitlines()[:1]]
    ms = row["lastStoreTimestamp"]
    assert isinstance(ms, int)
    ist = datetime.fromtimestamp(ms / 1000, timezone(timedelta(hours=5, minutes=30)))
    local = f"{ist:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}"
    human = loaded.ok("topic", "status", "T").stdout.decode().splitlines()
    assert human[0].split() == ["QUEUE", "MIN-OFFSET", "MAX-OFFSET", "MESSAGES", "LAST-STORED"]
    assert human[1].endswith(local) and human[1].split()[:4] == ["0", "0", "3", "3"]
    assert loaded.ok("topic", "status", "T", "--utc").stdout.decode().splitlines()[1].endswith(format_time(ms))
    s = loaded.store()
    from store.client.qlocks import QueueLock
    lock = QueueLock(s.layout, "G", "T", 2, "gone@1")
    assert lock.try_acquire()
    lock._close()
    s.close()
    (held,) = [json.loads(x) for x in loaded.ok("locks", "--json").stdout.splitlines()]
    assert isinstance(held["acquiredAt"], int) and "acquiredTime" not in held
    row = loaded.ok("locks", "--utc").stdout.decode().splitlines()[1]
    assert format_time(held["acquiredAt"]) in row and re.search(r"\d+(ms|s) ago", row)
    assert LOCAL.search(loaded.ok("locks").stdout.decode())
    prog = loaded.ok("progress", "-g", "G", "--topic", "T", "--utc").stdout.decode().splitlines()
    assert prog[1].split()[5].endswith("Z") and LOCAL.search(loaded.ok("progress", "-g", "G").stdout.decode())


# -- msg show: readable fields and the history as a timeline -----------------------------------

@pytest.fixture
def retried(loaded: MQ) -> dict[str, str]:
    """A message of T consumed by G, retried once through %RETRY%G, then dead-lettered."""
    from store.client.retry import send_back
    from store.log.schedule import deliver_due
    sent = json.loads(loaded.ok("send", "T", "hello", "-q", "1", "-p", "color=red", "-k", "k9", "--json").stdout)
    s = loaded.store()
    try:
        m = s.find(sent["offsetMsgId"])
        ClusterOffsetStore(s.layout).commit("G", {("T", 1): 1})
        send_back(s, "G", m, max_reconsume=1, retry_delay_ms=1)
        assert deliver_due(s, now_ms=m.store_timestamp + 3_600_000) == 1
        (retry,) = list(s.iter_queue("%RETRY%G", 0, 0))
        assert send_back(s, "G", retry, max_reconsume=1) == "dlq"
        (dead,) = list(s.iter_queue("%DLQ%G", 0, 0))
        return {"msgId": sent["msgId"], "origin": sent["offsetMsgId"], "retry": retry.msg_id, "dead": dead.msg_id}
    finally:
        s.close()


def test_msg_show_timeline(loaded: MQ, retried: dict[str, str]) -> None:
    out = loaded.ok("msg", "show", retried["origin"]).stdout.decode()
    head, history = out.split("\nHistory:\n")
    fields = dict(line.split(":", 1) for line in head.splitlines())
    assert fields["Topic"].strip() == "T" and fields["Queue"].strip() == "1"
    assert fields["Properties"].strip() == "color=red" and fields["Keys"].strip() == "k9"
    assert LOCAL.fullmatch(fields["Stored"].strip()) and fields["Body"].strip() == "hello"
    events = [re.sub(r"^  (\S+ \S+|\s+)  ", "", line) for line in history.splitlines()]
    assert events == [
        "sent to T queue 1 offset 0  (this copy)",
        "group G is past it (committed offset 1)",
        "retry 1 scheduled for %RETRY%G, due " + events[2].rsplit("due ", 1)[1],
        "retry 1 sent to %RETRY%G queue 0 offset 0",
        "dead-lettered to %DLQ%G offset 0 (reconsumed 1 time)",
    ]
    assert all(LOCAL.match(line.strip()) for line in history.splitlines() if "is past it" not in line)
    assert "{" not in out and "[" not in out, "no raw JSON in the human output"


def test_msg_show_of_a_retry_says_so(loaded: MQ, retried: dict[str, str]) -> None:
    out = loaded.ok("msg", "show", retried["retry"], "--utc").stdout.decode().splitlines()
    assert out[0] == f"retry 1 of message {retried['origin']} from topic T"
    assert "retry 1 sent to %RETRY%G queue 0 offset 0  (this copy)" in out[-2]
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  sent to T", "\n".join(out))
    dead = loaded.ok("msg", "show", retried["dead"]).stdout.decode().splitlines()
    assert dead[0] == f"dead letter of message {retried['origin']} from topic T (reconsumed 1 time)"
    shown = json.loads(loaded.ok("msg", "show", retried["retry"], "--json").stdout)
    assert isinstance(shown["storeTimestamp"], int) and [h["event"] for h in shown["history"]] == [
        "sent", "consumed", "scheduled", "retry", "dead-lettered"], "--json has the events the timeline shows"
    assert [h["this"] for h in shown["history"] if h["event"] != "consumed"] == [False, False, True, False]


def test_msg_show_transaction_timeline(mq: MQ) -> None:
    tx = json.loads(mq.ok("tx", "send", "T", "pending").stdout)["txId"]
    mq.ok("tx", "rollback", tx)
    out = mq.ok("msg", "show", tx).stdout.decode().splitlines()
    assert out[0] == "half message of a transaction for topic T"
    assert any(line.startswith("Transaction:") and line.endswith(f"{tx} (rolled back)") for line in out)
    assert out[-2].endswith("transaction half message stored for T  (this copy)")
    assert out[-1].endswith("transaction rolled back")


def test_msg_query_table(loaded: MQ) -> None:
    lines = loaded.ok("msg", "query", "--topic", "T", "--key", "k1").stdout.decode().splitlines()
    assert lines[0].split() == ["MSG-ID", "QUEUE", "OFFSET", "STORED", "TAGS", "KEYS", "PROPERTIES", "GROUPS-PAST",
                                 "BODY"]
    assert [line.split()[-1] for line in lines[1:]] == ["c", "b", "a"]
    assert all(LOCAL.search(line) for line in lines[1:])


# -- contradictory flags and bad values: exit 2, one line naming what is wrong ------------------

@pytest.mark.parametrize("args, code, parts", [
    (["offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--to-latest"], 2,
     ["exactly one target", "got --to-earliest and --to-latest"]),
    (["offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--execute", "--dry-run"], 2,
     ["--execute and --dry-run"]),
    (["offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "--force"], 2, ["--force", "--execute"]),
    (["offsets", "reset", "-g", "G", "--topic", "T", "--to-earliest", "-q", "4"], 2,
     ["queue 4 does not exist", "queues 0-3"]),
    (["offsets", "reset", "-g", "G", "--topic", "Nope", "--to-earliest"], 3, ["Nope"]),
    (["rebalance", "T", "-g", "G", "--consumers", "a", "--queues", "1"], 2, ["--queues needs --strategy config"]),
    (["rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "config"], 2, ["needs --queues"]),
    (["rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "config", "--queues", "4"], 2,
     ["queue 4 does not exist"]),
    (["rebalance", "T", "-g", "G", "--consumers", "a", "--strategy", "random"], 2,
     ["'averagely', 'circle', 'hash', 'config'"]),
    (["unlock", "-g", "G", "-q", "1"], 2, ["--queue needs --topic"]),
    (["unlock", "-g", "G", "--topic", "T", "-q", "7"], 2, ["queue 7 does not exist", "queues 0-3"]),
    (["topic", "create", "V", "--queues", "0"], 2, ["1<=x<=1024"]),
    (["topic", "create", "V", "--queues", "1025"], 2, ["1<=x<=1024"]),
    (["completion", "tcsh"], 2, ["'bash', 'zsh', 'fish'"]),
    (["init", "--max-message-size", "4194305"], 2, ["1<=x<=4194304"]),
])
def test_contradictions_and_bad_values(loaded: MQ, args: list[str], code: int, parts: list[str]) -> None:
    refused(loaded.run(*args), code, *parts)


def test_segment_size_minimum_is_stated_and_accepted(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "s", tmp_path)
    refused(mq.run("init", "--segment-size", "100000"), 2,
              "segment size (--segment-size) must be at least the maximum message size + 64 KiB = 4259840 bytes", "got 100000")
    refused(mq.run("init", "--max-message-size", "1000", "--segment-size", "66535"), 2, "= 66536 bytes")
    assert not mq.root.exists()
    mq.ok("init", "--max-message-size", "1000", "--segment-size", "66536")
    assert json.loads((mq.root / "store.json").read_text())["commitlogSegmentSize"] == 66536


# -- help --------------------------------------------------------------------------------------

MINE = ["offsets show", "offsets reset", "offsets delete", "progress", "locks", "consumers", "rebalance",
        "unlock", "completion", "dlq list", "dlq resend", "msg show", "msg query", "init", "topic create",
        "topic list", "topic status", "topic delete"]


def _help(path: str) -> str:
    import typer

    from mqctl.app import build_app
    cmd = typer.main.get_command(build_app())
    for name in path.split():
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return inspect.cleandoc(cmd.help or "")


@pytest.mark.parametrize("path", MINE)
def test_help_shape(path: str) -> None:
    """A whole first sentence that fits the command list; examples kept line by line (no
    ``\\b``), each line fitting 80 columns once help indents it."""
    from mqctl.helpfmt import first_sentence
    text = _help(path)
    assert len(first_sentence(text)) <= 60 and first_sentence(text).endswith(".")
    assert "\b" not in text
    blocks = [p.splitlines() for p in text.split("\n\n") if any(x.startswith("  ") for x in p.splitlines()[1:])]
    assert [b[0] for b in blocks] == (["Install it once, then open a new shell:"] if path == "completion"
                                      else ["Examples:"])
    for line in blocks[0][1:]:
        assert line.startswith("  ") and len(line) + 2 <= 78, line   # help indents by 2 more


def test_help_states_limits_and_installation(mq: MQ) -> None:
    init = mq.ok("init", "--help").stdout.decode()
    assert "at least --max-message-size + 64 KiB" in " ".join(init.split()) and "65536" not in init
    assert "1<=x<=1024" in mq.ok("topic", "create", "--help").stdout.decode()
    assert "[averagely|circle|hash|config]" in mq.ok("rebalance", "--help").stdout.decode()
    comp = mq.ok("completion", "--help").stdout.decode()
    for line in ("mqctl completion bash > ~/.local/share/bash-completion/completions/mqctl",
                 'mqctl completion zsh > "${fpath[1]}/_mqctl"',
                 "mqctl completion fish > ~/.config/fish/completions/mqctl.fish"):
        assert line in comp


# -- progress bars: on a terminal only ----------------------------------------------------------

def _on_a_tty(mq: MQ, *args: str) -> Result:
    """``mqctl ARGS`` with stderr on a terminal that allows colour and animation."""
    return mq.run(*args, tty="stderr", extra_env={"TERM": "xterm", "CI": None, "NO_COLOR": None})


def _dead_letters(mq: MQ, n: int) -> None:
    from store.client.retry import dead_letter
    s = mq.store()
    s.put([Draft("T", b"m%d" % i, queue_id=3) for i in range(n)])
    for m in s.pull("T", 3, 0, n).messages:
        dead_letter(s, "G", m, 16)
    s.close()


def test_dlq_resend_shows_a_bar_on_a_terminal_only(loaded: MQ) -> None:
    _dead_letters(loaded, 5)
    res = _on_a_tty(loaded, "dlq", "resend", "-g", "G", "-n")
    assert res.returncode == 0 and "resending" in res.stderr and "5/5" in res.stderr
    piped = loaded.ok("dlq", "resend", "-g", "G")
    assert piped.stderr == "resent 5 dead letters of group G to %RETRY%G\n"


def test_a_long_reset_shows_a_bar_and_moves_every_offset_set(mq: MQ) -> None:
    mq.ok("topic", "create", "W", "--queues", "64")
    mq.send_lines("W", [str(i) for i in range(128)])
    s = mq.store()
    ClusterOffsetStore(s.layout).commit("B", {("W", q): 0 for q in range(64)})
    for cid in ("c1", "c2"):
        b = BroadcastOffsetStore(s.layout, cid, "B")
        for q in range(64):
            b.update("W", q, 0)
        b.persist({("W", q) for q in range(64)})
    s.close()
    res = _on_a_tty(mq, "offsets", "reset", "-g", "B", "--topic", "W", "--to-latest", "--execute", "--json")
    assert res.returncode == 0 and "resetting offsets" in res.stderr and "192/192" in res.stderr
    rows = res.json_lines()
    assert len(rows) == 192 and all(r["applied"] and r["newOffset"] == r["maxOffset"] for r in rows)
    s = mq.store()
    assert BroadcastOffsetStore(s.layout, "c2", "B").load()[("W", 5)] == s.max_offset("W", 5)
    s.close()
    piped = mq.ok("offsets", "reset", "-g", "B", "--topic", "W", "--to-earliest", "--execute")
    assert "\x1b" not in piped.stderr
    assert piped.stderr.splitlines()[-1] == "reset 64 queues of W for group B and 2 broadcast clients (192 of 192 offsets moved)"


def test_a_lock_renewed_just_after_now_was_read_is_not_renewed_in_the_future() -> None:
    """``locks`` read the clock before the lock files, so a renewal in between showed as
    "RENEWED in 51ms". Now the clock is read after, and a past time a moment ahead of it
    shows as "0ms ago"; one a second or more ahead is a clock skew, and says so."""
    from mqctl.adminview import lock_row
    from store.client.admin_rows import lock_row as probed
    from store.client.locktable import LockInfo
    now = 1_764_500_000_000

    def shown(acquired: int, renewed: int) -> tuple[str, str, str]:
        info = LockInfo("G", "T", 0, "c", 1, "h", acquired, renewed, renewed + 60_000, True)
        row = lock_row(probed(info, now), now, False)
        return row["acquired"], row["renewed"], row["expires"]

    assert shown(now - 5_000, now + 51) == ("5s ago", "0ms ago", "in 1m00s")
    assert shown(now - 5_000, now - 2_000) == ("5s ago", "2s ago", "in 58s")
    assert shown(now + 3_000, now + 3_000) == ("in 3s (a clock ahead of this one)",) * 2 + ("in 1m03s",)


def test_msg_show_and_msg_query_write_several_keys_alike(mq: MQ) -> None:
    """``msg query`` wrote a message's keys as sent (``a,b``), ``msg show`` as stored (``a b``):
    one message, two spellings. Both write what ``-k`` takes now."""
    mq.ok("send", "t", "hello", "-k", "a,b")
    [row] = mq.ok("msg", "query", "--topic", "t", "-k", "a", "--json").json_lines()
    table = mq.ok("msg", "query", "--topic", "t", "-k", "a").out.splitlines()
    at = table[0].index("KEYS")
    assert table[1][at:].split()[0] == "a,b", table
    out = mq.ok("msg", "show", row["msgId"]).out
    fields = dict(line.split(":", 1) for line in out.split("\nHistory:\n")[0].splitlines())
    assert fields["Keys"].strip() == "a,b", out
