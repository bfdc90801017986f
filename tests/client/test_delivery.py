"""Delivery a user can trust: no duplicate without a fault, no loss through a pipe,
clean stops. Real ``mqctl`` processes on one store; every wait is bounded and polls a
condition (no sleep races the thing it waits for)."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.procs import MQ, MQCTL, Proc, handler_script, pid_running, wait_for  # noqa: F401  (mq is a fixture)


def ids_of(lines: list[bytes]) -> list[str]:
    return [json.loads(x)["msgId"] for x in lines if x.strip()]


def dups(*outputs: list[bytes]) -> int:
    counts = collections.Counter(i for out in outputs for i in ids_of(out))
    return sum(n - 1 for n in counts.values() if n > 1)


def fill(mq: MQ, topic: str, n: int, queues: int = 8, size: int = 20) -> None:
    mq.ok("topic", "create", topic, "--queues", str(queues))
    st = mq.store()
    st.put_bodies(topic, [b"%08d" % i + b"x" * max(0, size - 8) for i in range(n)])


# -- hand-over: members starting together, joining and leaving -----------------------------

@pytest.mark.parametrize("stagger", [0.0, 0.15, 0.5])
@pytest.mark.slow
def test_members_started_together_or_staggered_hand_over_without_duplicates(mq: MQ, stagger: float) -> None:
    n = 30_000
    fill(mq, "T", n)
    members = []
    for _i in range(3):
        members.append(mq.start("consume", "T", "-g", "G", "--from", "first", "--json",
                                "--idle-timeout", "2"))
        if stagger:
            time.sleep(stagger)
    for m in members:
        assert m.wait(90) == 0, m.stderr()
    outs = [m.lines() for m in members]
    rest = mq.ok("consume", "T", "-g", "G", "-e", "--json").stdout.splitlines()
    assert dups(*outs, rest) == 0
    assert len({i for out in outs + [rest] for i in ids_of(out)}) == n
    assert mq.committed_total("G", "T") == n


@pytest.mark.parametrize("mode", ["stdout", "exec", "orderly-exec"])
def test_joins_and_graceful_leaves_during_a_stream_never_duplicate(mq: MQ, mode: str) -> None:
    n = 20_000 if mode == "stdout" else 1_500
    mq.ok("topic", "create", "T", "--queues", "8")
    log = mq.work / "log"
    extra: list[str] = ["--json"]
    if mode != "stdout":
        h = handler_script(mq.work / "h.sh", 'cat >> "$LOG"')
        extra = ["--json", "--exec", h, "--batch", "20", "--threads", "4"]
        if mode == "orderly-exec":
            extra.append("--orderly")
    env = {"LOG": str(log)}

    def member(*more: str):
        p = mq.start("consume", "T", "-g", "G", "--from", "first", "--rebalance-interval", "0.2",
                     *extra, *more, extra_env=env)
        # A signal is graceful once the member has joined (before, Python is still starting).
        wait_for(lambda: not p.alive() or any(m.pid == p.pid for m in mq.members("G")), 30,
                 what="the member to join")
        return p

    producer = subprocess.Popen(MQCTL + ["send", "T", "--batch-size", "50"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=mq.environ())
    sent = 0

    def send(k: int) -> None:
        nonlocal sent
        assert producer.stdin is not None
        producer.stdin.write(b"".join(b"m%07d\n" % (sent + i) for i in range(k)))
        producer.stdin.flush()
        sent += k

    a = member()
    send(n // 5)
    b = member()
    send(n // 5)
    c = member("--count", str(n // 10))          # leaves by --count
    send(n // 5)
    a.signal(signal.SIGINT)                       # leaves by SIGINT
    send(n // 5)
    d = member()
    b.signal(signal.SIGTERM)                      # leaves by SIGTERM
    send(n - sent)
    assert producer.stdin is not None
    producer.stdin.close()
    assert producer.wait(60) == 0
    for p in (a, b):
        assert p.wait(60) == 0, (p.args, p.stderr())
    assert c.wait(60) == 0, c.stderr()
    e = member("--idle-timeout", "2")
    wait_for(lambda: mq.committed_total("G", "T") >= n, 90, what="everything consumed")
    for p in (d, e):
        p.signal(signal.SIGTERM)
        assert p.wait(60) == 0, p.stderr()
    if mode == "stdout":
        outs = [p.lines() for p in (a, b, c, d, e)]
        got = [json.loads(x)["body"] for out in outs for x in out]
    else:
        got = [json.loads(x)["body"] for x in log.read_bytes().splitlines()]
    counts = collections.Counter(got)
    assert [k for k, v in counts.items() if v > 1] == []
    assert len(counts) == n


def test_crash_duplicates_are_bounded_by_one_pull_batch_per_queue(mq: MQ) -> None:
    n, queues = 40_000, 4
    fill(mq, "T", n, queues=queues)
    a = mq.start("consume", "T", "-g", "G", "--from", "first", "--json")
    wait_for(lambda: len(a.lines()) >= n // 4, 60, what="a quarter consumed")
    a.kill9()
    # a kill -9 inside a write leaves a torn last line: never delivered whole, never committed
    written = a.stdout()
    first = written[:written.rfind(b"\n") + 1].splitlines()
    rest = mq.ok("consume", "T", "-g", "G", "-e", "--json").stdout.splitlines()
    assert len({i for out in (first, rest) for i in ids_of(out)}) == n
    d = dups(first, rest)
    print(f"duplicates after kill -9: {d}")
    assert d <= 256 * queues


# -- stops: SIGINT / SIGTERM at every phase of a handler --------------------------------------

SLOW = ('echo "start $MQ_QUEUE_OFFSET $$" >> "$LOG"; '
        'if [ "$MQ_QUEUE_OFFSET" -ge "$SLOW_FROM" ]; then sleep "$SLEEP"; fi; '
        'echo "done $MQ_QUEUE_OFFSET" >> "$LOG"')


def run_slow(mq: MQ, slow_from: int, sleep: str, *extra: str):
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    log = mq.work / "log"
    h = handler_script(mq.work / "slow.sh", SLOW)
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--threads", "1", "--exec", h, *extra,
                 extra_env={"LOG": str(log), "SLOW_FROM": str(slow_from), "SLEEP": sleep})
    return p, log


def log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_lets_the_running_handler_finish_and_starts_no_other(mq: MQ, sig: int) -> None:
    p, log = run_slow(mq, 3, "1")
    wait_for(lambda: "start 3" in " ".join(log_lines(log)).split(" $$")[0] or
             any(x.startswith("start 3") for x in log_lines(log)), what="the slow handler to start")
    p.signal(sig)
    assert p.wait(30) == 0, p.stderr()
    lines = log_lines(log)
    starts = [x for x in lines if x.startswith("start")]
    assert starts[-1].startswith("start 3"), lines      # nothing started after the signal
    assert lines[-1] == "done 3"                          # the running one finished
    assert mq.offsets("G", "T")[("T", 0)] == 4            # and was committed
    assert mq.members("G") == [] and mq.locks("G") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_before_any_handler_and_between_handlers(mq: MQ, sig: int) -> None:
    p, log = run_slow(mq, 100, "0")
    wait_for(lambda: mq.committed_total("G", "T") == 10, what="all handled")
    p.signal(sig)
    assert p.wait(30) == 0
    assert len([x for x in log_lines(log) if x.startswith("start")]) == 10


def test_second_signal_ends_running_handlers_commits_what_finished_and_exits_130(mq: MQ) -> None:
    p, log = run_slow(mq, 3, "60")
    wait_for(lambda: any(x.startswith("start 3") for x in log_lines(log)), what="the slow handler")
    handler_pid = int([x for x in log_lines(log) if x.startswith("start 3")][0].split()[2])
    t0 = time.monotonic()
    p.signal(signal.SIGINT)
    time.sleep(0.3)
    assert p.alive()                                     # still waiting for the handler
    p.signal(signal.SIGINT)
    assert p.wait(15) == 130
    assert time.monotonic() - t0 < 10
    wait_for(lambda: not pid_running(handler_pid), 5, what="the handler to be gone")
    assert mq.offsets("G", "T")[("T", 0)] == 3           # the three that finished
    assert "done 3" not in log_lines(log)
    assert mq.members("G") == [] and mq.locks("G") == []
    # ...and the interrupted message is delivered again, not lost
    again = mq.ok("consume", "T", "-g", "G", "-e").stdout.splitlines()
    assert again[0] == b"m3"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_write_blocked_on_a_reader_and_commits_whole_lines(mq: MQ, sig: int) -> None:
    """(The first signal waited for the reader; a second one exited 130.)"""
    fill(mq, "T", 5000, queues=1, size=400)
    r, w = os.pipe()
    try:
        p = mq.start("consume", "T", "-g", "G", "--from", "first", stdout=w)
        os.close(w)
        w = -1
        os.set_blocking(r, False)
        wait_for(lambda: mq.members("G"), what="the member")
        time.sleep(0.5)        # lets it fill the pipe; then its write blocks, nobody reads
        p.signal(sig)
        assert p.wait(15) == 0, p.stderr()
        assert mq.members("G") == [] and mq.locks("G") == []
        data = b""
        while True:
            try:
                chunk = os.read(r, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    whole = data.count(b"\n")
    assert whole >= 1
    assert mq.committed_total("G", "T") == whole


# -- pipes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [10, 1000, 70_000])
@pytest.mark.parametrize("k", [1, 5, 200])
def test_consume_into_head(mq: MQ, k: int, size: int) -> None:
    n = 1000 if size < 70_000 else 300
    fill(mq, "T", n, queues=1, size=size)
    cmd = f"{' '.join(MQCTL)} consume T -g G --from first; echo \"rc=$?\" >&2"
    cp = subprocess.run(["sh", "-c", f"( {cmd} ) | head -n {k}"], capture_output=True, env=mq.environ(), timeout=60)
    lines = cp.stdout.splitlines()
    assert len(lines) == k and lines[0].startswith(b"00000000")
    assert b"rc=141" in cp.stderr, cp.stderr
    committed = mq.committed_total("G", "T")
    # At least what head printed; what it never read is not committed when a write failed on
    # it, but what sat in the pipe from writes that had returned is (see README).
    assert k <= committed <= n, committed
    if n * (size + 1) > 4 * 65536:   # mqctl was still writing when head left
        assert committed <= k + 2 * (65536 // (size + 1) + 1) + 65536 // (size + 1), committed
    rest = mq.ok("consume", "T", "-g", "G", "-e").stdout.splitlines()
    assert len(rest) == n - committed
    if rest:
        assert rest[0].startswith(b"%08d" % committed)
    print(f"head -n {k}, {size} B: {committed} of {n} committed")


# -- copying ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_copy_with_exec_survives_a_destination_that_fails_half_way(mq: MQ) -> None:
    fill(mq, "SRC", 600, queues=4)
    mq.ok("topic", "create", "DST", "--queues", "2")
    # The destination takes the first half of the first delivery of each batch, then fails.
    send = " ".join(MQCTL)
    h = handler_script(mq.work / "copy.sh",
                       f'if [ "$MQ_RECONSUME_TIMES" = 0 ]; then head -n 25 | {send} send DST --input json --reroute; exit 1; fi\n'
                       f'exec {send} send DST --input json --reroute')
    cp = mq.run("consume", "SRC", "-g", "copy", "--from", "first", "--json", "--batch", "50",
                "--exec", h, "--retry-delay", "200ms", "--idle-timeout", "3", timeout=120)
    assert cp.returncode == 0, cp.stderr
    src = collections.Counter(json.loads(x)["body"] for x in
                              mq.ok("consume", "SRC", "--no-group", "--from", "earliest", "-e", "--json").stdout.splitlines())
    dst = collections.Counter(json.loads(x)["body"] for x in
                              mq.ok("consume", "DST", "--no-group", "--from", "earliest", "-e", "--json").stdout.splitlines())
    assert set(dst) == set(src)                           # nothing lost
    assert mq.committed_total("copy", "SRC") == 600


def test_send_json_names_unknown_fields_and_takes_a_missing_body_as_empty(mq: MQ) -> None:
    cp = mq.run("send", "T", "--input", "json", input='{"body":"ok"}\n{"bdy":"x"}\n')
    assert cp.returncode == 5 and "line 2" in cp.stderr and "'bdy'" in cp.stderr and "'body'" in cp.stderr
    # cli.md lists body among the optional fields: a line without one is an empty message
    mq.ok("send", "E", "--input", "json", input='{"tags":"x"}\n{}\n{"body":null,"keys":"k"}\n')
    got = mq.ok("consume", "E", "--no-group", "--from", "earliest", "-e", "--json").json_lines()
    assert sorted((m["body"], m["tags"] or "", m["keys"]) for m in got) == [("", "", []), ("", "", ["k"]), ("", "x", [])]


def test_copy_into_fewer_queues_reroutes(mq: MQ) -> None:
    mq.ok("topic", "create", "BIG", "--queues", "8")
    mq.ok("topic", "create", "SMALL", "--queues", "2")
    mq.ok("send", "BIG", "k1-msg", "-s", "k1")
    mq.send_lines("BIG", [f"m{i}" for i in range(40)])
    data = mq.ok("consume", "BIG", "--no-group", "--from", "first", "-e", "--json").stdout
    mq.ok("topic", "create", "SMALL2", "--queues", "2")
    cp = mq.run("send", "SMALL2", "--input", "json", input=data)
    assert cp.returncode == 5 and "--reroute" in cp.stderr
    mq.ok("send", "SMALL", "--input", "json", "--reroute", input=data)
    out = [json.loads(x) for x in mq.ok("consume", "SMALL", "--no-group", "--from", "first", "-e", "--json").stdout.splitlines()]
    assert len([o for o in out if o["body"] == "k1-msg"]) == 1
    assert len(out) == 41
    k1 = [o for o in out if o["body"] == "k1-msg"][0]
    assert k1.get("shardingKey") == "k1"


# -- broadcast identity, reads without a group -------------------------------------------------

def test_broadcast_client_id_is_stable_across_restarts(mq: MQ) -> None:
    mq.ok("topic", "create", "B", "--queues", "2")
    mq.send_lines("B", ["a", "b"])
    assert len(mq.ok("consume", "B", "-g", "BC", "--broadcast", "--from", "first", "-e").stdout.splitlines()) == 2
    mq.send_lines("B", ["c"])                           # sent while it is down
    assert mq.ok("consume", "B", "-g", "BC", "--broadcast", "-e").stdout.splitlines() == [b"c"]
    live = mq.start("consume", "B", "-g", "BC", "--broadcast")
    wait_for(lambda: mq.members("BC"), what="the broadcast member")
    cp = mq.run("consume", "B", "-g", "BC", "--broadcast", "-e")
    assert cp.returncode == 4 and "--client-id" in cp.stderr
    assert mq.run("consume", "B", "-g", "BC", "--broadcast", "-e", "--client-id", "second",
                  "--from", "first").returncode == 0
    assert live.stop() == 0
    show = [json.loads(x) for x in mq.ok("offsets", "show", "-g", "BC", "--json").stdout.splitlines()]
    assert {r["clientId"] for r in show} == {f"{os.uname().nodename}@DEFAULT", "second"}
    assert all(r["clientAlive"] is False for r in show)
    prog = [json.loads(x) for x in mq.ok("progress", "-g", "BC", "--json").stdout.splitlines()]
    assert all(r["clientState"] == "dead" for r in prog)
    mq.ok("offsets", "delete", "-g", "BC", "--client-id", "second", "--yes")
    show = [json.loads(x) for x in mq.ok("offsets", "show", "-g", "BC", "--json").stdout.splitlines()]
    assert {r["clientId"] for r in show} == {f"{os.uname().nodename}@DEFAULT"}
    mq.ok("offsets", "delete", "-g", "BC", "--yes")
    assert mq.run("offsets", "show", "-g", "BC", "--json").stdout == b""


@pytest.mark.parametrize("mode", ["stdout", "exec"])
def test_a_topic_deleted_and_created_again_under_a_member_is_delivered_once(mq: MQ, mode: str) -> None:
    """The member lets the deleted topic's queue go, then takes the new topic's queue from its
    start: once (it used to take it, deliver it, then find the deletion's reset epoch at its
    commit and deliver everything again)."""
    mq.ok("topic", "create", "dr", "--queues", "1")
    mq.ok("send", "dr", "-", input=b"1\n2\n3\n4\n")
    extra = ["--exec", """sh -c 'echo "$(cat)"'"""] if mode == "exec" else []   # (one write a line)
    p = mq.start("consume", "dr", "-g", "G", "--from", "first", *extra)
    wait_for(lambda: mq.committed_total("G", "dr") == 4, 30, what="the first four consumed")
    mq.ok("topic", "delete", "dr", "--yes")
    wait_for(lambda: not any(mq.member_queues("G", "dr").values()), 30,
             what="the member to let the deleted topic's queue go")
    mq.ok("topic", "create", "dr", "--queues", "1")
    mq.ok("send", "dr", "-", input=b"".join(b"N%d\n" % i for i in range(1, 9)))
    wait_for(lambda: mq.committed_total("G", "dr") == 8, 30, what="the new topic consumed")
    assert p.stop() == 0, p.stderr()
    assert sorted(p.stdout().split()) == [b"1", b"2", b"3", b"4"] + [b"N%d" % i for i in range(1, 9)], p.stderr()
    assert "were reset" not in p.stderr()


def test_offsets_delete_refuses_a_live_group(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    p = mq.start("consume", "T", "-g", "G")
    wait_for(lambda: mq.members("G"), what="the member")
    assert mq.run("offsets", "delete", "-g", "G", "--yes").returncode == 4
    assert p.stop() == 0
    mq.ok("offsets", "delete", "-g", "G", "--yes")
    assert mq.offsets("G") == {}


def test_read_without_a_group_and_from_synonyms(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    out = mq.ok("consume", "T", "--no-group", "--from", "earliest", "-e").stdout.splitlines()
    assert sorted(out) == sorted(f"m{i}".encode() for i in range(10))
    cp = mq.run("offsets", "show", "-g", "mqctl-no-group")   # no offsets, no member: no trace
    assert cp.returncode == 3 and "known groups: none" in cp.stderr
    assert mq.ok("consume", "T", "-g", "L", "--from", "latest", "-e").stdout == b""
    assert mq.run("consume", "T").returncode == 2
    assert mq.run("consume", "T", "--no-group", "-g", "G").returncode == 2


# -- one-shot commands and SIGINT ---------------------------------------------------------------

def test_send_interrupted_exits_130_even_when_started_with_sigint_ignored(mq: MQ) -> None:
    p = subprocess.Popen(MQCTL + ["send", "T", "--json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=mq.environ(),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(b"a\nb\n")
    p.stdin.flush()
    first = p.stdout.readline()           # acknowledged...
    assert b"SEND_OK" in first
    p.send_signal(signal.SIGINT)
    assert p.wait(15) == 130
    assert len(mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout.splitlines()) >= 1


# -- no orphans ---------------------------------------------------------------------------------

def processes() -> list[tuple[int, str]]:
    """(pid, command line) of every process."""
    return [(x, cmd) for x, _ppid, cmd in _proc_table()]


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid``."""
    return [(x, cmd) for x, ppid, cmd in _proc_table() if ppid == pid]


def _proc_table() -> list[tuple[int, int, str]]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fb:
                cmd = fb.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out.append((int(entry), ppid, cmd))
    return out


def watchdog_of(consumer: int) -> int | None:
    found = [p for p, cmd in children(consumer) if "watchdog.py" in cmd]
    return found[0] if found else None


# Each handler records: its pid, its process group, the signals it ignores (hex mask), and the
# pid of a child it leaves running; then it waits for that child (60 s).
RECORD_AND_WAIT = """sleep 60 &
echo "$$ $(ps -o pgid= -p $$ | tr -d ' ') $(awk '/^SigIgn/ {print $2}' /proc/$$/status) $!" >> "$LOG"
wait"""


def handler_rows(log: Path) -> list[list[str]]:
    return [x.split() for x in log_lines(log) if len(x.split()) == 4]


def start_recording_consumer(mq: MQ) -> tuple[Proc, Path]:
    """A consumer of a one-queue topic T whose handlers (two at a time) log a row each
    (``handler_rows``) and then wait; the log's path."""
    mq.ok("topic", "create", "T", "--queues", "1")
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", RECORD_AND_WAIT)
    return mq.start("consume", "T", "-g", "G", "--from", "first", "--exec", h, "--threads", "2",
                    extra_env={"LOG": str(log)}), log


def test_handlers_die_with_a_killed_consumer_and_each_runs_in_a_group_of_its_own(mq: MQ) -> None:
    p, log = start_recording_consumer(mq)
    mq.send_lines("T", ["a", "b"])
    rows = wait_for(lambda: len(handler_rows(log)) == 2 and handler_rows(log), what="both handlers")
    consumer_pgid = os.getpgid(p.pid)
    groups = {int(r[1]) for r in rows}
    assert len(groups) == 2 and consumer_pgid not in groups and p.pid not in groups, rows
    for r in rows:   # SIGINT (2) and SIGPIPE (13) at their default
        assert not int(r[2], 16) & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGPIPE - 1)), rows
    pids = [int(r[0]) for r in rows] + [int(r[3]) for r in rows]
    assert all(pid_running(x) for x in pids)
    p.kill9()
    wait_for(lambda: not any(pid_running(x) for x in pids), 10,
             what="the handlers and their children to die with the consumer")


@pytest.mark.parametrize("delay_ms", [0, 3, 10, 25])
def test_no_handler_outlives_a_consumer_killed_while_it_starts_handlers(mq: MQ, delay_ms: int) -> None:
    """The consumer is killed in the middle of a burst of spawns (16 handlers started at
    once): some are running, some being started. Every one that got to run dies."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", [f"m{i}" for i in range(32)])
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", 'echo "$$" >> "$LOG"; sleep 60')
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--exec", h, "--threads", "16",
                 extra_env={"LOG": str(log)})
    wait_for(lambda: log_lines(log), 30, interval=0.001, what="the first handler")
    time.sleep(delay_ms / 1000)
    p.kill9()

    def survivors() -> list[int]:
        logged = [int(x) for x in log_lines(log) if x.strip().isdigit()]
        return [x for x in logged if pid_running(x)] + [x for x, cmd in processes() if h in cmd and pid_running(x)]
    wait_for(lambda: not survivors(), 10, what="every handler to die with the consumer")
    # A handler being started at the kill, had it escaped, would show up within this window
    # (its exec is microseconds away); it would then run for a minute.
    time.sleep(0.5)
    assert not survivors()
    assert log_lines(log)


def test_a_killed_watchdog_is_replaced_and_running_handlers_still_die_with_the_consumer(mq: MQ) -> None:
    p, log = start_recording_consumer(mq)
    mq.send_lines("T", ["a"])
    wait_for(lambda: len(handler_rows(log)) == 1, what="the first handler")
    first = wait_for(lambda: watchdog_of(p.pid), what="the watchdog")
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (w := watchdog_of(p.pid)) and w != first and w, what="a new watchdog")
    assert pid_running(second)
    mq.send_lines("T", ["b"])   # a handler starts under the new watchdog
    rows = wait_for(lambda: len(handler_rows(log)) == 2 and handler_rows(log), what="the second handler")
    pids = [int(r[0]) for r in rows] + [int(r[3]) for r in rows]
    assert all(pid_running(x) for x in pids)
    p.kill9()
    # the first handler's group came from the killed watchdog: the new one adopted it
    wait_for(lambda: not any(pid_running(x) for x in pids), 10,
             what="the handlers of both watchdogs to die with the consumer")
    wait_for(lambda: not pid_running(second), 10, what="the watchdog to exit")


def test_a_stopping_consumer_ends_its_watchdog(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    log = mq.work / "log"
    h = handler_script(mq.work / "h.sh", 'echo "$$" >> "$LOG"')
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--exec", h, extra_env={"LOG": str(log)})
    mq.send_lines("T", ["a"])
    wait_for(lambda: log_lines(log), what="the handler")
    w = wait_for(lambda: watchdog_of(p.pid), what="the watchdog")
    placeholders = [c for c, _cmd in children(w)]
    assert placeholders
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.stderr()
    assert mq.committed_total("G", "T") == 1
    wait_for(lambda: not any(pid_running(x) for x in [w, *placeholders]), 10,
             what="the watchdog and its placeholders to exit")


@pytest.mark.slow
def test_a_new_owner_waits_for_handlers_of_a_killed_owner(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["one"])
    pidfile = mq.work / "grandchild"
    # The handler leaves a grandchild that lives 3 s in a session of its own (out of reach of
    # the kill of the handler's group): it still holds the queue's lock through the
    # descriptor it inherited.
    h = handler_script(mq.work / "h.sh", f'setsid sleep 3 & echo $! > {pidfile}; wait')
    a = mq.start("consume", "T", "-g", "G", "--orderly", "--from", "first", "--exec", h)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the handler")
    grandchild = int(pidfile.read_text())
    a.kill9()
    log = mq.work / "b.log"
    hb = handler_script(mq.work / "hb.sh", f'echo "$MQ_QUEUE_OFFSET" >> {log}')
    b = mq.start("consume", "T", "-g", "G", "--orderly", "--from", "first", "--exec", hb)
    while pid_running(grandchild):
        assert not log.exists(), "the new owner started while a handler of the old one ran"
        time.sleep(0.05)
    wait_for(log.exists, 15, what="the new owner to take the queue")
    assert b.stop() == 0


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_what_a_finished_handler_left_running_ends_with_it(mq: MQ, orderly: bool) -> None:
    """A handler that exits leaving ``sleep 60 &`` behind: that process kept a descriptor of the
    queue's lock, so after a ``kill -9`` of its consumer the queue's next owner waited ~60 s (the
    lease) and ``mqctl unlock`` refused, the holder looking alive; it also ran on beside the
    next owner. It is killed with its handler's group now, and the next owner takes the queue
    at once."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["one"])
    pidfile = mq.work / "left"
    h = handler_script(mq.work / "h.sh", f'sleep 60 & echo $! > {pidfile}')
    mode = ["--orderly"] if orderly else []
    a = mq.start("consume", "T", "-g", "G", *mode, "--from", "first", "--exec", h)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the handler")
    left = int(pidfile.read_text())
    wait_for(lambda: not pid_running(left), 15, what="the handler's leftover to end with its group")
    assert a.alive()
    a.kill9()
    log = mq.work / "b.log"
    hb = handler_script(mq.work / "hb.sh", f'echo "$MQ_QUEUE_OFFSET" >> {log}')
    b = mq.start("consume", "T", "-g", "G", *mode, "--from", "first", "--exec", hb)
    mq.send_lines("T", ["two"])
    # (well within the 60 s lease the leftover used to hold the queue for)
    wait_for(lambda: log.exists() and "1" in log.read_text().split(), 20, what="the next owner to take the queue")
    assert b.stop() == 0
