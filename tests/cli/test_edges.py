"""What a newcomer hits at the edges: a consumer on a terminal stopped by Ctrl-C,
auto-creation said and refusable, a consumer started before its topic, ``mqctl help``, the
Spark entry points, kcat's ``-o`` and the smaller surprises. Every test runs ``mqctl`` as a
user does: real processes on a real store (a real pseudo-terminal for Ctrl-C)."""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.procs import MQ, mqctl_env, one_error, run, wait_for  # noqa: F401

# -- 1: Ctrl-C on a terminal keeps what was counted as consumed -------------------------------


def _pending(master: int) -> int:
    """Bytes written to the pty that its reader (the master side) has not taken yet."""
    return int(struct.unpack("i", fcntl.ioctl(master, termios.FIONREAD, struct.pack("i", 0)))[0])


def test_ctrl_c_on_a_terminal_commits_only_what_the_terminal_showed(mq: MQ) -> None:
    """A consumer on a terminal nobody reads for a while blocks with a full tty buffer; ^C
    then used to discard that buffer (the tty driver flushes output on an interrupt) while
    the consumer committed it: messages never seen and never delivered again. Now every
    committed message was read from the terminal, and the rest come to the group again."""
    n = 6000
    mq.ok("topic", "create", "big", "--queues", "2")
    mq.send_lines("big", (f"body-{i:05d}-" + "x" * 40 for i in range(n)))
    master, slave = os.openpty()

    def controlling_terminal() -> None:   # what a shell does for a foreground job
        os.setsid()
        fcntl.ioctl(1, termios.TIOCSCTTY, 0)

    err = mq.work / "tty.err"
    with open(err, "wb") as ferr:
        p = subprocess.Popen(mq.argv("consume", "big", "-g", "ttyg", "--from", "first", "-f", r"%p:%o %s\n"),
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=ferr, env=mq.environ(),
                             preexec_fn=controlling_terminal)
    os.close(slave)
    try:
        # nobody reads the terminal: the consumer fills its buffer and blocks in a write
        wait_for(lambda: _pending(master) >= 4095, what="the terminal's buffer to fill")
        os.write(master, b"\x03")   # Ctrl-C, typed on the terminal
        shown = b""
        while select.select([master], [], [], 60)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the consumer closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert p.wait(timeout=60) == 0, err.read_text()
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    shown = shown.replace(b"^C", b"")   # the echo of the interrupt, wherever it fell in a line
    seen = {(int(q), int(o)) for q, o in re.findall(rb"(\d+):(\d+) body-\d{5}-x+\r?\n", shown)}
    committed = mq.offsets("ttyg", "big")
    assert sum(committed.values()) > 0
    lost = [(q, o) for (_, q), end in committed.items() for o in range(end) if (q, o) not in seen]
    assert not lost, f"{len(lost)} messages committed but never shown on the terminal"
    rest = mq.ok("consume", "big", "-g", "ttyg", "-e", "-f", r"%p:%o\n").out.split()
    again = {(int(q), int(o)) for q, o in (x.split(":") for x in rest)}
    assert len(seen | again) == n


# -- 6: the Spark entry points of the contract -------------------------------------------------


def test_store_spark_exports_its_entry_points_lazily() -> None:
    """``from store.spark import register`` (spec/cli.md, the README) works, and neither
    ``import store`` nor ``import store.spark`` imports PySpark."""
    script = """
import sys
import store, store.spark
assert "pyspark" not in sys.modules, "import store.spark imported pyspark"
from store.spark import local_session, prepare_environment, register, ship_archive
assert all(map(callable, (register, local_session, prepare_environment, ship_archive)))
assert {"local_session", "prepare_environment", "register", "ship_archive"} <= set(store.spark.__all__)
print("ok")
"""
    res = run([sys.executable, "-c", script], env=mqctl_env(None))
    assert res.returncode == 0 and res.out == "ok\n", str(res)


# -- 9: the README's completion commands on a fresh HOME; mqctl help -------------------------


def _readme_block_after(marker: str) -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```sh\n", readme.index(marker)) + len("```sh\n")
    return readme[start:readme.index("```", start)]


def test_readme_completion_commands_work_on_a_fresh_home(mq: MQ, tmp_path: Path) -> None:
    """The bash and fish lines of the README's completion block, run as written in a HOME
    that has no ~/.local or ~/.config yet, install the scripts (the zsh line needs zsh)."""
    home = tmp_path / "home"
    home.mkdir()
    block = _readme_block_after("### Shell completion")
    lines = [ln for ln in block.splitlines() if ln.strip() and "zsh" not in ln]
    res = mq.shell("set -e\n" + "\n".join(lines), extra_env={"HOME": str(home)})
    assert res.returncode == 0, str(res)
    assert "complete" in (home / ".local/share/bash-completion/completions/mqctl").read_text()
    assert "complete" in (home / ".config/fish/completions/mqctl.fish").read_text()


def test_help_command_is_the_help_flag(mq: MQ) -> None:
    """``mqctl help consume`` prints ``mqctl consume --help``; ``mqctl help`` ``mqctl --help``;
    ``mqctl help topic create`` the sub-command's page; an unknown name is exit 2."""
    for words in (["consume"], [], ["topic", "create"]):
        by_flag = mq.ok(*words, "--help")
        by_help = mq.ok("help", *words)
        assert by_help.out == by_flag.out and by_help.out.startswith("Usage: mqctl"), words
    one_error(mq.run("help", "nosuch"), 2, "No such command 'nosuch'")
    assert mq.ok("help", "help").out == mq.ok("--help").out   # (was: "No such command 'help'")
    # and the root's help says it exists (it was found only by trying it)
    assert "'mqctl help CMD' is 'mqctl CMD --help'" in " ".join(mq.ok("--help").out.split())


def test_an_option_missing_its_value_names_the_help_to_read(mq: MQ) -> None:
    """Click raises "requires an argument" without its context: the line lacked the
    ``(see 'mqctl CMD --help')`` every other usage error carries."""
    one_error(mq.run("consume", "-g"), 2, "Option '-g' requires an argument. (see 'mqctl consume --help')")
    one_error(mq.run("topic", "create", "--queues"), 2,
              "Option '--queues' requires an argument. (see 'mqctl topic create --help')")


# -- 11: the smaller surprises --------------------------------------------------------------


def test_msg_show_takes_the_id_as_m_too(mq: MQ) -> None:
    """The README's short-flag table lists ``-m`` (``--msg-id``): ``msg show -m ID`` is
    ``msg show ID``; neither or both is a usage error."""
    msg_id = mq.ok("send", "orders", "hello", "--json").json_lines()[0]["msgId"]
    by_arg = mq.ok("msg", "show", msg_id, "--json").json_lines()
    assert mq.ok("msg", "show", "-m", msg_id, "--json").json_lines() == by_arg
    assert mq.ok("msg", "show", "--msg-id", msg_id, "--json").json_lines() == by_arg
    one_error(mq.run("msg", "show"), 2, "give the message id once")
    one_error(mq.run("msg", "show", msg_id, "-m", msg_id), 2, "give the message id once")


def test_offsets_delete_needs_yes_off_a_terminal(mq: MQ) -> None:
    """Like ``topic delete``: without ``--yes`` and without a terminal to ask on, nothing is
    deleted (exit 2, naming the flag)."""
    mq.ok("send", "orders", "hello")
    mq.ok("consume", "orders", "-g", "G", "--from", "first", "-e")
    before = mq.offsets("G")
    assert sum(before.values()) == 1
    one_error(mq.run("offsets", "delete", "-g", "G"), 2, "deleting the offsets of group G needs --yes")
    assert mq.offsets("G") == before
    mq.ok("offsets", "delete", "-g", "G", "--yes")
    assert mq.offsets("G") == {}


def test_exec_batch_bigger_than_a_pull_is_handed_whole(mq: MQ) -> None:
    """``--batch 500`` on a backlog hands the handler 500 messages (it got 256, a pull's
    worth); more than a queue's cache (1000) is refused rather than quietly cut."""
    mq.ok("topic", "create", "b", "--queues", "1")
    mq.send_lines("b", (str(i) for i in range(600)))
    sizes = mq.work / "sizes"
    mq.ok("consume", "b", "-g", "G", "--from", "first", "-e", "--batch", "500",
          "--exec", f"sh -c 'wc -l >> {sizes}'")
    # the two batches' handlers run side by side (--threads): either may append first
    assert sorted(int(x) for x in sizes.read_text().split()) == [100, 500]
    one_error(mq.run("consume", "b", "-g", "G", "--batch", "1001", "-x", "true"), 2,
              "Invalid value for '--batch'")


def test_a_due_delayed_message_counts_in_topic_list(mq: MQ) -> None:
    """A delayed message that is due shows in ``topic list`` and ``topic status`` although no
    consumer ran (a broker would have delivered it by itself)."""
    mq.ok("send", "later", "x", "--delay", "1s")

    def counted() -> bool:
        rows = {r["topic"]: r for r in mq.ok("topic", "list", "--json").json_lines()}
        return rows.get("later", {}).get("messages") == 1
    wait_for(counted, what="the due message in topic list")
    status = mq.ok("topic", "status", "later", "--json").json_lines()
    assert sum(r["maxOffset"] - r["minOffset"] for r in status) == 1


def test_exit_at_end_says_its_retries_are_pending(mq: MQ) -> None:
    """``-e`` exits 0 after a handler failed, and says on stderr that the failed messages
    wait in the retry topic (a run that exits 0 looked like everything was handled)."""
    mq.ok("send", "jobs", "a")
    res = mq.ok("consume", "jobs", "-g", "G", "--from", "first", "-e", "-x", "false")
    assert "mqctl: warning: 1 failed message waits in %RETRY%G for a retry" in res.stderr, res.stderr
    res = mq.ok("consume", "jobs", "-g", "H", "--from", "first", "-e", "-x", "true")
    assert "for a retry" not in res.stderr


# -- 4: auto-creation said, and refusable ----------------------------------------------------


def test_auto_creation_is_said_on_stderr(tmp_path: Path) -> None:
    """A send that creates the store or the topic says so on stderr (a typo in a path or a
    name shows at once), only when it created it, never in ``--json`` stdout."""
    where = tmp_path / "typo"
    env = mqctl_env(None)
    mq = MQ(where, tmp_path)
    first = run(mq.argv("--store", str(where), "send", "jbos", "hello"), env=env)
    assert first.returncode == 0, str(first)
    assert first.stderr.splitlines()[:2] == [f"mqctl: created store at {where}",
                                             "mqctl: created topic jbos (8 queues)"], first.stderr
    again = run(mq.argv("--store", str(where), "send", "jbos", "hello"), env=env)
    assert "created" not in again.stderr, again.stderr
    js = run(mq.argv("--store", str(where), "send", "other", "--json"), env=env, input="a\nb\n")
    assert js.returncode == 0 and "mqctl: created topic other (8 queues)" in js.stderr, str(js)
    assert [r["status"] for r in js.json_lines()] == ["SEND_OK", "SEND_OK"]


def test_no_auto_create_refuses_sends_to_missing_topics(tmp_path: Path) -> None:
    """``init --no-auto-create`` (kept in store.json) and ``MQCTL_AUTO_CREATE=0`` make a send
    to a missing topic exit 3 with a clear error; nothing is created. The variable also keeps
    a send from creating a store."""
    mq = MQ(tmp_path / "strict", tmp_path)
    mq.ok("init", "--no-auto-create")
    assert '"autoCreateTopics": false' in (mq.root / "store.json").read_text()
    one_error(mq.run("send", "jbos", "hello"), 3, "topic 'jbos' does not exist")
    mq.ok("topic", "create", "jobs")
    mq.ok("send", "jobs", "hello")
    assert [r["topic"] for r in mq.ok("topic", "list", "--json").json_lines()] == ["jobs"]

    other = MQ(tmp_path / "other", tmp_path, extra_env={"MQCTL_AUTO_CREATE": "0"})
    one_error(other.run("send", "t", "x"), 3, "no store at")
    assert not other.root.exists()
    other.ok("init")
    one_error(other.run("send", "t", "x"), 3, "topic 't' does not exist")
    one_error(other.run("send", "t", input="a\nb\n"), 3, "topic 't' does not exist")
    other.ok("topic", "create", "t")
    other.ok("send", "t", "x")


def test_a_store_json_without_the_auto_create_setting_opens(tmp_path: Path) -> None:
    """A store.json written before the setting existed (no ``autoCreateTopics``) still opens,
    with topics created on send as before."""
    import json
    mq = MQ(tmp_path / "old", tmp_path)
    mq.ok("init")
    obj = json.loads((mq.root / "store.json").read_text())
    del obj["autoCreateTopics"]
    (mq.root / "store.json").write_text(json.dumps(obj))
    mq.ok("send", "fresh", "x")
    assert mq.ok("topic", "list", "--json").json_lines()[0]["topic"] == "fresh"


# -- 8: a consumer started before its topic -------------------------------------------------


def test_a_consumer_waits_for_its_topic(mq: MQ) -> None:
    """``consume notyet -g w`` (no ``-e``) waits for the topic, saying so once on stderr, then
    gets what is sent to it, the first messages included (default ``--from last``); SIGTERM
    stops it with exit 0. ``-e`` still exits 3."""
    one_error(mq.run("consume", "notyet", "-g", "w", "-e"), 3, "topic 'notyet' does not exist")
    p = mq.start("consume", "notyet", "-g", "w")
    wait_for(lambda: "waiting for topic 'notyet'" in p.stderr(), what="the waiting line")
    assert p.alive()
    mq.send_lines("notyet", ["one", "two"])
    wait_for(lambda: sorted(p.lines()) == [b"one", b"two"], what="both messages")
    assert p.stop() == 0
    assert p.stderr().count("waiting for topic") == 1, p.stderr()
    # stopped while still waiting: exit 0, nothing created
    q = mq.start("consume", "later", "-g", "w")
    wait_for(lambda: "waiting for topic 'later'" in q.stderr(), what="the waiting line")
    assert q.stop() == 0
    assert "later" not in {r["topic"] for r in mq.ok("topic", "list", "--json").json_lines()}
    # and --idle-timeout ends the wait as it ends an idle consumer
    assert mq.run("consume", "later", "-g", "w", "--idle-timeout", "0.3").returncode == 0


# -- 10: tx check says what it left alone ------------------------------------------------------


def test_tx_check_says_how_many_it_left_because_they_are_young(mq: MQ) -> None:
    """Two unknown transactions younger than --timeout: the pass says they are pending and
    why they were not checked (it said "nothing to check" while tx list showed two)."""
    for body in ("a", "b"):
        mq.ok("tx", "send", "pay", body, "--exec", "sh -c 'exit 3'")
    assert len(mq.ok("tx", "list", "--json").json_lines()) == 2
    res = mq.ok("tx", "check", "--check-cmd", "true", "--timeout", "1h")
    assert res.stderr.strip() == "check pass: nothing to check (2 pending, none older than 1 h)", res.stderr
    res = mq.ok("tx", "check", "--check-cmd", "echo COMMIT", "--timeout", "0")
    assert "2 transactions checked (2 committed" in res.stderr, res.stderr
    res = mq.ok("tx", "check", "--check-cmd", "true", "--timeout", "0")
    assert res.stderr.strip() == "check pass: nothing to check", res.stderr


# -- 7: kcat's -o values ------------------------------------------------------------------------


def test_kcat_offsets_for_o(mq: MQ) -> None:
    """``-o beginning|end|stored|N|-N`` as kcat means them: N is a queue offset (--no-group,
    every queue), -N is N before the end of each queue; a bad value lists what -o takes."""
    mq.ok("topic", "create", "one", "--queues", "1")
    mq.send_lines("one", (str(i) for i in range(1, 11)))

    def got(*args: str) -> list[str]:
        return mq.ok("consume", "one", *args, "-e").out.split()
    assert got("--no-group", "-o", "7") == ["8", "9", "10"]
    assert got("--no-group", "-o", "-3") == ["8", "9", "10"]
    assert got("--no-group", "-o", "beginning", "-c", "2") == ["1", "2"]
    assert got("-g", "a", "-o", "beginning", "-c", "2") == ["1", "2"]
    assert got("-g", "a", "-o", "stored", "-c", "2") == ["3", "4"]   # the group's own offset
    assert got("-g", "b", "-o", "end") == []
    assert got("-g", "c", "-o", "-2") == ["9", "10"]
    one_error(mq.run("consume", "one", "-g", "d", "-o", "5", "-e"), 2, "-o 5 (a queue offset) needs --no-group")
    one_error(mq.run("consume", "one", "--no-group", "-o", "stored", "-e"), 2, "-o stored")
    mq.send_lines("eight", ["x"])
    # every queue of a topic of several from its offset N, clamped to what it holds
    assert mq.ok("consume", "eight", "--no-group", "-o", "2", "-e").out.split() == []
    assert mq.ok("consume", "eight", "--no-group", "-o", "0", "-e").out.split() == ["x"]
    line = one_error(mq.run("consume", "one", "-g", "g", "--from", "yesterday"), 2, "bad time 'yesterday'")
    assert "first/earliest/beginning, last/latest/end, stored" in line


# -- 2: --count bounds the messages taken --------------------------------------------------------


def test_count_bounds_messages_taken_whatever_their_outcome(mq: MQ) -> None:
    """``--count 1`` with a failing handler makes one attempt and stops (it went on taking
    message after message, dead-lettering each, until stopped); orderly too."""
    mq.send_lines("jobs", (str(i) for i in range(5)))
    res = mq.run("consume", "jobs", "-g", "g", "--from", "first", "--count", "1", "--max-reconsume", "0",
                 "--exec", "sh -c 'exit 1'", timeout=30)
    one_error(res, 1, "gave up on 1 message", allow_warnings=True)
    assert len(mq.ok("dlq", "list", "-g", "g", "--json").json_lines()) == 1
    assert sum(mq.offsets("g", "jobs").values()) == 1
    res = mq.ok("consume", "jobs", "-g", "o", "--orderly", "--from", "first", "--count", "1",
                "--suspend-ms", "10", "--exec", "sh -c 'exit 1'", timeout=30)
    assert res.stderr.count("retrying in place") == 1, res.stderr



# -- a consumer that gave up on a message exits 1 ---------------------------------------------


@pytest.mark.parametrize("mode", [[], ["--orderly", "--suspend-ms", "10"], ["--broadcast"]],
                         ids=["concurrent", "orderly", "broadcast"])
def test_consume_exec_that_gave_up_on_a_message_exits_1(mq: MQ, mode: list[str]) -> None:
    """The contract's exit 1 for "``consume --exec`` gave up": a run ending on its own (``-e``)
    after dead-lettering a message (or skipping a failed broadcast one) exits 1 with one error
    line naming where it went; it used to exit 0. The good messages are still consumed."""
    mq.ok("topic", "create", "jobs", "--queues", "1")
    mq.send_lines("jobs", ["ok-1", "POISON", "ok-2"])
    reconsume = [] if mode == ["--broadcast"] else ["--max-reconsume", "0"]
    res = mq.run("consume", "jobs", "-g", "g", "--from", "first", "-e", *mode, *reconsume,
                 "--exec", 'sh -c "! grep -q POISON"', timeout=60)
    where = "broadcast messages are not retried" if mode == ["--broadcast"] else "moved to %DLQ%g"
    one_error(res, 1, f"gave up on 1 message ({where}", allow_warnings=True)
    if mode != ["--broadcast"]:
        assert [r["body"] for r in mq.ok("dlq", "list", "-g", "g", "--json").json_lines()] == ["POISON"]
        assert mq.offsets("g", "jobs") == {("jobs", 0): 3}
    # nothing given up: exit 0
    mq.send_lines("jobs", ["ok-3"])
    ok = mq.run("consume", "jobs", "-g", "g2", "--from", "first", "-e", *mode, "--exec", "true", timeout=60)
    assert ok.returncode == 0 and "gave up" not in ok.stderr, str(ok)


def test_consume_stopped_by_sigterm_after_giving_up_exits_0_and_says_so(mq: MQ) -> None:
    """A long-running member stopped by SIGTERM exits 0 (the contract's graceful stop), but
    still says on stderr that it gave up on a message."""
    import signal
    mq.ok("topic", "create", "jobs", "--queues", "1")
    p = mq.start("consume", "jobs", "-g", "g", "--from", "first", "--max-reconsume", "0",
                 "--exec", 'sh -c "! grep -q POISON"')
    mq.send_lines("jobs", ["POISON"])
    wait_for(lambda: mq.run("dlq", "list", "-g", "g", "--json").json_lines(), 30, what="a dead letter")
    p.signal(signal.SIGTERM)
    assert p.wait(30) == 0, p.stderr()
    assert "mqctl: warning: gave up on 1 message (moved to %DLQ%g" in p.stderr(), p.stderr()



def test_progress_shows_a_retry_waiting_in_the_schedule_topic(mq: MQ) -> None:
    """A failed message waiting out its retry delay is in the schedule topic, in no queue of
    the group: ``progress`` showed lag 0 everywhere, as if nothing were left to do. Now the
    group's %RETRY% row counts it as ``scheduled`` (the table, its summary and ``--json``)."""
    mq.ok("topic", "create", "jobs", "--queues", "2")
    mq.send_lines("jobs", ["ok", "POISON"])
    res = mq.ok("consume", "jobs", "-g", "g", "--from", "first", "-e", "--exec", 'sh -c "! grep -q POISON"')
    assert "wait" in res.stderr and "%RETRY%g" in res.stderr, res.stderr   # retry level 3: 10 s away
    rows = mq.ok("progress", "-g", "g", "--json").json_lines()
    assert sum(r["lag"] for r in rows) == 0
    assert {(r["topic"], r["queueId"]): r["scheduled"] for r in rows} == {
        ("jobs", 0): 0, ("jobs", 1): 0, ("%RETRY%g", 0): 1}, rows
    table = mq.ok("progress", "-g", "g")
    header, *lines = table.out.splitlines()
    assert "SCHEDULED" in header.split(), table.out
    retry_line = next(ln for ln in lines if ln.startswith("%RETRY%g"))
    assert retry_line.split()[header.split().index("SCHEDULED")] == "1", table.out
    assert "1 failed message waiting for a retry" in table.stderr, table.stderr
    # --topic naming the user topic leaves the retry row out, and with it the column
    only = mq.ok("progress", "-g", "g", "--topic", "jobs")
    assert "SCHEDULED" not in only.out, only.out


# -- 3: a malformed input line says what was stored before it ---------------------------------


def test_a_bad_input_line_says_how_many_were_sent_before_it(mq: MQ) -> None:
    """The lines before a malformed one are stored (their --json results printed, with
    --flush sync after their fsync) and the error says how many, so resending the fixed file
    from the top is not a silent duplicate; a first bad line says nothing was sent."""
    res = mq.run("send", "ndj", "--input", "json", input='{"body":"ok1"}\n{oops\n')
    line = one_error(res, 5, "line 2: not a JSON object", allow_info=True)
    assert line.endswith("(1 message sent before it)"), line
    res = mq.run("send", "ndj", "--input", "json", "--json", "--flush", "sync",
                 input='{"body":"a"}\n{"body":"b"}\n[1]\n')
    line = one_error(res, 5, "line 3: not a JSON object", allow_info=True)
    assert line.endswith("(2 messages sent before it)"), line
    assert [r["status"] for r in res.json_lines()] == ["SEND_OK", "SEND_OK"]
    line = one_error(mq.run("send", "ndj", "--input", "json", input="{oops\n"), 5, "line 1:", allow_info=True)
    assert line.endswith("(nothing was sent)"), line
    assert mq.ok("topic", "list", "--json").json_lines()[0]["messages"] == 3


# -- 5: a directory named store in the current directory -------------------------------------


@pytest.mark.slow   # a venv and the README's install: ~30 s
def test_readme_install_imports_store_beside_a_store_directory(tmp_path: Path) -> None:
    """The README's install (``pip install -e .`` into a fresh venv), then, from a directory
    holding ``store/`` and ``mqctl/`` folders (users name their data directory ``store``),
    ``import store`` finds the package, and the README's first commands work with ``store`` as
    the store. The editable install's import hook used to lose to such a folder (the folder
    became a namespace package: ``AttributeError: module 'store' has no attribute 'Consumer'``)."""
    project = Path(__file__).resolve().parents[2]
    readme = (project / "README.md").read_text()
    install = readme[readme.index("python3 -m venv .venv && "):].split(" && seq", 1)[0]
    assert install == "python3 -m venv .venv && .venv/bin/pip install -q -e .", install
    venv = tmp_path / "venv"
    env = mqctl_env(None)
    res = run(["bash", "-c", install.replace(".venv", str(venv))], env=env, cwd=project, timeout=600)
    assert res.returncode == 0, str(res)
    work = tmp_path / "work"
    (work / "store").mkdir(parents=True)
    (work / "mqctl").mkdir()
    res = run([str(venv / "bin/python"), "-c", "import store, mqctl.app; print(store.Consumer.__name__)"],
              env=env, cwd=work)
    assert res.returncode == 0 and res.out == "Consumer\n", str(res)
    (work / "store").rmdir()
    res = run(["bash", "-c", "seq 5 | mqctl --store store send demo && "
               "mqctl --store store consume demo -g readme --from first --exit-at-end && "
               "python -c 'import store; print(store.Admin(\"store\").topics()[0].messages)'"],
              env={**env, "PATH": f"{venv / 'bin'}:{env['PATH']}"}, cwd=work)
    # five messages back (in queue order, not send order: they went round robin), then the count
    words = res.out.split()
    assert res.returncode == 0 and sorted(words[:5]) == ["1", "2", "3", "4", "5"] and words[5:] == ["5"], str(res)


def test_send_with_standard_input_closed_reads_it_as_empty(mq: MQ) -> None:
    """``mqctl send T <&-`` (a script that closed its input): no input, not an internal error,
    through the quick path (lines from stdin) and the full one (a flag)."""
    mq.ok("topic", "create", "T")
    for extra in ("", " -k k1"):
        res = mq.shell(f"mqctl send T{extra} <&-")
        assert res.returncode == 0 and "no input" in res.stderr and "internal error" not in res.stderr, res
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "--exit-at-end").stdout == b""


def _answer_on_a_terminal(mq: MQ, args: tuple[str, ...], typed: bytes) -> tuple[int, str]:
    """Run ``mqctl ARGS`` with stdin and stderr on a pseudo-terminal (where it asks), type
    ``typed`` there; its exit code and what the terminal showed."""
    master, slave = os.openpty()
    p = subprocess.Popen(mq.argv(*args), stdin=slave, stdout=subprocess.DEVNULL, stderr=slave,
                         env=mq.environ())
    os.close(slave)
    shown = b""
    try:
        os.write(master, typed)
        while select.select([master], [], [], 60)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return code, shown.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("typed", [b"n\n", b"\n", b"\x04"], ids=["no", "empty", "ctrl-d"])
def test_a_declined_question_says_nothing_was_done(mq: MQ, typed: bytes) -> None:
    """A "no", an empty answer or Ctrl-D at ``topic delete``'s question deleted nothing but
    said nothing either (exit 1, silent), and Ctrl-D was reported as an interrupt (130). Now
    each declines with one line saying what is kept, exit 1."""
    mq.ok("send", "orders", "hello")
    code, shown = _answer_on_a_terminal(mq, ("topic", "delete", "orders"), typed)
    assert code == 1, shown
    assert "Delete topic orders and its consumer offsets? [y/N]" in shown, shown
    assert "mqctl: not confirmed: topic orders is kept" in shown, shown
    assert "interrupted" not in shown, shown
    assert "orders" in mq.ok("topic", "list").out


def test_a_confirmed_question_goes_on_and_an_unclear_answer_is_asked_again(mq: MQ) -> None:
    mq.ok("send", "orders", "hello")
    mq.ok("consume", "orders", "-g", "G", "--from", "first", "-e")
    code, shown = _answer_on_a_terminal(mq, ("offsets", "delete", "-g", "G"), b"maybe\ny\n")
    assert code == 0, shown
    assert shown.count("Delete the offsets of group G? [y/N]") == 2 and "please answer y or n" in shown, shown
    assert mq.offsets("G") == {}
    code, shown = _answer_on_a_terminal(mq, ("topic", "delete", "orders"), b"yes\n")
    assert code == 0 and "deleted topic orders" in shown, shown


def test_a_handler_in_the_current_directory_without_dot_slash_gets_a_hint(mq: MQ, tmp_path: Path) -> None:
    """``--exec handle.sh`` with handle.sh in the current directory failed as any missing
    program does ("not found on PATH"); a shell user's slip, so the error says ./handle.sh."""
    mq.ok("send", "orders", "hello")
    work = tmp_path / "here"
    work.mkdir()
    script = work / "handle.sh"
    script.write_text("#!/bin/sh\ncat > /dev/null\n")
    script.chmod(0o755)
    err = one_error(mq.run("consume", "orders", "-g", "G", "--from", "first", "-e", "--exec", "handle.sh",
                           cwd=work), 1, "cannot run handler 'handle.sh': not found on PATH")
    assert "did you mean ./handle.sh?" in err, err
    assert mq.offsets("G") == {} or sum(mq.offsets("G").values()) == 0   # nothing consumed
    mq.ok("consume", "orders", "-g", "G", "--from", "first", "-e", "--exec", "./handle.sh", cwd=work)
    assert sum(mq.offsets("G").values()) == 1
    # elsewhere (no such file here) the error stays as it was
    err = one_error(mq.run("consume", "orders", "-g", "G2", "-e", "--exec", "handle.sh"), 1,
                    "cannot run handler 'handle.sh': not found on PATH")
    assert "did you mean" not in err, err


def test_a_new_group_starting_at_the_end_says_so_on_a_terminal(mq: MQ) -> None:
    """A first try, ``mqctl consume orders -g G -e`` after sending, printed nothing and exited
    0: a new group starts at the end (RocketMQ's and Kafka's default), silently. On a terminal
    it now says so once, with the flag that reads what is stored; in a pipe or a file it stays
    silent, and a group that has offsets, or ``--from first``, is not told."""
    mq.send_lines("orders", ["a", "b", "c"])
    res = mq.run("consume", "orders", "-g", "G", "-e", tty="stderr")
    assert res.returncode == 0 and res.out == "", res
    shown = res.stderr.replace("\r\n", "\n")
    assert shown.count("mqctl: group G is new to orders: it starts at the end") == 1, shown
    assert "--from first reads them" in shown, shown
    quiet = mq.run("consume", "orders", "-g", "G2", "-e")   # stderr a pipe
    assert (quiet.returncode, quiet.out, quiet.stderr) == (0, "", ""), quiet
    again = mq.run("consume", "orders", "-g", "G", "-e", tty="stderr")   # G has offsets now
    assert again.returncode == 0 and "is new" not in again.stderr, again
    first = mq.run("consume", "orders", "-g", "G3", "--from", "first", "-e", tty="stderr")
    assert first.returncode == 0 and sorted(first.out.split()) == ["a", "b", "c"], first   # (8 queues: any order)
    assert "is new" not in first.stderr, first
