"""The face of ``tx``, ``store``, ``query``/``export`` and ``bench``: check command
answers checked, an empty ``tx list`` said in words, human units and times, ``tx send -``
reading all of stdin as one body, and the short flags that no longer exist failing as usage
errors. Real ``mqctl`` processes (``tests.procs.MQ``) throughout."""
from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from store.tx.check import check_pass, pending
from tests.procs import MQ, handler_script, wait_for

ERROR_LINE = re.compile(r"mqctl: error: [^\n]+\n\Z")


def tx_send(mq: MQ, body: str, *args: str) -> str:
    out = json.loads(mq.ok("tx", "send", "orders", body, *args).stdout)
    assert out["state"] == "PREPARED"
    return str(out["txId"])


def pending_ids(mq: MQ) -> list[str]:
    return [json.loads(line)["txId"] for line in mq.ok("tx", "list", "--json").stdout.splitlines()]


# -- tx check: what the check command answers -----------------------------------------------------

def test_a_check_command_answering_maybe_is_warned_about_and_left_unresolved(mq: MQ, tmp_path: Path) -> None:
    tx = tx_send(mq, "b")
    cmd = handler_script(tmp_path / "maybe.sh", "cat >/dev/null\necho checking...\necho MAYBE")
    r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0")
    assert r.returncode == 0, r.stderr
    warning = (f"mqctl: warning: check command answered 'MAYBE' for {tx}; "
               f"expected COMMIT, ROLLBACK or UNKNOWN; left unknown")
    assert r.stderr.splitlines().count(warning) == 1, r.stderr
    assert "1 transaction checked" in r.stderr and "1 left unknown" in r.stderr
    assert pending_ids(mq) == [tx]
    # with --json: the same warning on stderr, the event says UNKNOWN, stdout stays NDJSON
    r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0", "--json")
    assert r.returncode == 0 and warning in r.stderr.splitlines()
    [event] = [json.loads(line) for line in r.stdout.splitlines()]
    assert (event["txId"], event["answer"], event["state"]) == (tx, "UNKNOWN", "PREPARED")
    assert pending_ids(mq) == [tx]


@pytest.mark.parametrize("said, warning", [
    ("", "check command answered nothing for {tx}; expected COMMIT, ROLLBACK or UNKNOWN; left unknown"),
    ("echo COMMIT; exit 3", "check command exited with status 3 for {tx}; left unknown"),
])
def test_no_answer_or_a_failed_command_is_warned_about(mq: MQ, tmp_path: Path, said: str, warning: str) -> None:
    tx = tx_send(mq, "b")
    cmd = handler_script(tmp_path / "bad.sh", f"cat >/dev/null\n{said}")
    r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0")
    assert r.returncode == 0 and f"mqctl: warning: {warning.format(tx=tx)}" in r.stderr.splitlines(), r.stderr
    assert pending_ids(mq) == [tx]


@pytest.mark.parametrize("said", ["printf '  commit \\r\\n\\n'", "echo Commit_Message", "echo 'log line'; echo commit"])
def test_answers_are_read_in_any_case_without_surrounding_blanks(mq: MQ, tmp_path: Path, said: str) -> None:
    tx = tx_send(mq, "b")
    cmd = handler_script(tmp_path / "yes.sh", f"cat >/dev/null\n{said}")
    r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert f"transaction {tx} (orders): check 1 answered COMMIT: committed" in r.stderr.splitlines()
    assert pending_ids(mq) == []


@pytest.mark.parametrize("said", ["UNKNOWN", "unknow"])
def test_unknown_is_a_valid_answer_without_a_warning(mq: MQ, tmp_path: Path, said: str) -> None:
    tx = tx_send(mq, "b")
    cmd = handler_script(tmp_path / "unsure.sh", f"cat >/dev/null\necho {said}")
    r = mq.run("tx", "check", "--check-cmd", cmd, "--timeout", "0")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert pending_ids(mq) == [tx]


def test_the_library_warns_about_a_checker_answer_outside_the_three(mq: MQ) -> None:
    tx = tx_send(mq, "b")
    said: list[str] = []
    from store.log.messagestore import Store
    with Store.open(mq.root, warn=said.append) as store:
        report = check_pass(store, lambda _m, _n: "maybe", timeout_ms=0)
        assert [(e.answer, e.state) for e in report.events] == [("UNKNOWN", "PREPARED")]
        assert [p.tx_id for p in pending(store)] == [tx]
    assert said == [f"checker answered 'maybe' for {tx}; expected COMMIT, ROLLBACK or UNKNOWN; left unknown"]


# -- tx list and tx send --------------------------------------------------------------------------

def test_an_empty_tx_list_says_so_on_stderr_and_prints_no_data(mq: MQ) -> None:
    r = mq.run("tx", "list")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", "no unresolved half messages\n")
    r = mq.run("tx", "list", "--json")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", "")


def test_tx_list_shows_local_or_utc_times_and_ages_json_keeps_ms(mq: MQ) -> None:
    tx = tx_send(mq, "b")
    header, row = mq.ok("tx", "list").stdout.decode().splitlines()
    assert header.split() == ["TX-ID", "TOPIC", "QUEUE", "BORN", "AGE", "CHECKS"]
    assert re.fullmatch(rf"{tx}\s+orders\s+\d+\s+\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}}\s+\S+\s+0", row), row
    _, row = mq.ok("tx", "list", "--utc").stdout.decode().splitlines()
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row), row
    [obj] = [json.loads(line) for line in mq.ok("tx", "list", "--json").stdout.splitlines()]
    assert isinstance(obj["bornTimestamp"], int) and {"born", "age"}.isdisjoint(obj)


def test_tx_send_dash_reads_all_of_stdin_as_one_body(mq: MQ) -> None:
    body = b"line one\nline two\n\x00binary tail"
    out = json.loads(mq.ok("tx", "send", "orders", "-", input=body).stdout)
    mq.ok("tx", "commit", out["txId"])
    with mq.store() as store:
        got = [m.body for q in store.queue_ids("orders") for m in store.iter_queue("orders", q, 0)]
    assert got == [body]
    help_text = mq.ok("tx", "send", "--help").stdout.decode()
    assert "'-' reads all of stdin as ONE body" in help_text and "one message per line" in help_text


# -- store ----------------------------------------------------------------------------------------

def test_store_stats_speaks_in_units_and_json_keeps_bytes(mq: MQ) -> None:
    mq.send_lines("metrics", (str(i) for i in range(100)))
    lines = mq.ok("store", "stats").stdout.decode().splitlines()
    assert lines[0].split() == ["PART", "FILES", "SIZE", "DETAIL"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert re.search(r"\s\d+\.\d (KiB|MiB)\s", rows["commitlog"]) and "MiB segments" in rows["commitlog"]
    assert rows["consumequeue"].endswith("1 topic")
    assert re.search(r"\s0 B\s", rows["reclaimable"])
    stats = {r["part"]: r for r in map(json.loads, mq.ok("store", "stats", "--json").stdout.splitlines())}
    assert isinstance(stats["commitlog"]["bytes"], int) and stats["commitlog"]["bytes"] >= 4096


def test_store_check_on_damage_exits_1_and_says_how_to_repair(mq: MQ) -> None:
    mq.send_lines("t", ["a" * 50, "b" * 50, "c" * 50])
    seg = next((mq.root / "commitlog").iterdir())
    data = bytearray(seg.read_bytes())
    with mq.store() as store:
        [second] = [m for q in store.queue_ids("t") for m in store.iter_queue("t", q, 0) if m.body == b"b" * 50]
    data[second.commitlog_offset + second.size - 10] ^= 0x5A   # its CRC fails
    seg.write_bytes(bytes(data))
    r = mq.run("store", "check")
    assert r.returncode == 1
    *_, summary, error = r.stderr.splitlines()
    assert summary == "checked 2 records and 3 consume-queue entries: 2 problems", summary
    assert error.startswith("mqctl: error: store check found ") and "`mqctl store recover`" in error
    assert mq.run("store", "check").stdout.decode().count(f":{second.commitlog_offset}: ") == 1
    clean = mq.run("store", "clean", "--dry-run")
    assert clean.returncode == 0 and clean.stderr.startswith("nothing to delete: ")


# -- short flags that no longer exist -------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["tx", "check", "-c", "true"],
    ["bench", "produce", "-n", "10"],
    ["bench", "produce", "-s", "10"],
    ["bench", "produce", "-b", "10"],
    ["bench", "consume", "-m", "1"],
    ["bench", "consume", "-J"],
    ["bench", "produce", "-J"],
    ["export", "t", "-o", "/nonexistent/out"],
    ["query", "SELECT 1", "-t", "t"],
])
def test_removed_short_flags_are_usage_errors(mq: MQ, args: list[str]) -> None:
    r = mq.run(*args)
    flag = next(a for a in args if re.fullmatch(r"-[a-zA-Z]", a))
    assert (r.returncode, r.stdout) == (2, b""), r.stderr
    assert ERROR_LINE.fullmatch(r.stderr) and f"No such option: {flag}" in r.stderr, r.stderr


def test_enumerations_are_checked_and_name_the_valid_values(mq: MQ) -> None:
    for args in (["tx", "send", "orders", "b", "--flush", "fast"], ["bench", "produce", "--flush", "fast"],
                 ["export", "t", "--out", "/nonexistent/out", "--format", "xml"]):
        r = mq.run(*args)
        assert r.returncode == 2 and ERROR_LINE.fullmatch(r.stderr), r.stderr
        assert "'async', 'sync'" in r.stderr or "'parquet', 'json'" in r.stderr, r.stderr


def test_bench_count_is_dash_c(mq: MQ) -> None:
    row = json.loads(mq.ok("bench", "produce", "-c", "300", "--size", "16", "--json", "--dir", str(mq.work)).stdout)
    assert (row["count"], row["size"]) == (300, 16)
    r = mq.run("bench", "consume", "--handover", "--rebalance")
    assert r.returncode == 2 and r.stderr == "mqctl: error: give --handover or --rebalance, not both\n"


@pytest.mark.parametrize("what", [["produce", "-c", "50000000", "--size", "16"],
                                  ["consume", "-c", "2000000", "--size", "16", "--members", "2"]])
def test_bench_ended_by_sigterm_removes_its_store_and_says_so(mq: MQ, what: list[str]) -> None:
    """SIGTERM (``timeout``) killed a bench where it stood: no line, its throwaway store
    (tens of MB) left in the temporary directory. Now as Ctrl-C: removed, one line, exit 143."""
    scratch = mq.work / "benchdir"
    scratch.mkdir()
    proc = mq.start("bench", *what, "--dir", str(scratch))
    wait_for(lambda: any(scratch.glob("mqctl-bench-*/store/*/*")), timeout=60, what="the bench's store")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 143
    assert proc.stderr().endswith("mqctl: error: terminated\n"), proc.stderr()
    assert not any(scratch.iterdir()), list(scratch.iterdir())


def test_tx_send_whose_line_cannot_be_written_names_the_stored_half(mq: MQ) -> None:
    """``tx send T B >&-`` (or a full disk) stored a half message and exited 1 without its
    txId: a PREPARED transaction nobody could resolve. The error names it now, as send's names
    what it stored; a reader gone (`| head`) gets a note with it, and 141."""
    for redirect, code in ((">&-", 1), ("> /dev/full", 1)):
        res = mq.shell(f"mqctl tx send T body {redirect}")
        assert res.returncode == code, res
        tx_id = re.search(r"the half message is stored as txId ([0-9A-F]{32}) \(PREPARED\)$", res.stderr.strip())
        assert tx_id and res.stderr.strip().splitlines()[-1].startswith("mqctl: error: cannot write to standard output")
        assert tx_id.group(1) in mq.ok("tx", "list").out
        mq.ok("tx", "rollback", tx_id.group(1))


def test_tx_send_accepts_json_and_names_a_missing_command(mq: MQ) -> None:
    cp = mq.ok("tx", "send", "T", "body", "--json")
    assert json.loads(cp.stdout)["state"] == "PREPARED"
    cp = mq.run("tx", "check", "--check-cmd", "/nonexistent/ask", "--timeout", "0")
    assert cp.returncode == 1
    assert cp.stderr.startswith("mqctl: error: cannot run check command '/nonexistent/ask'"), cp.stderr
