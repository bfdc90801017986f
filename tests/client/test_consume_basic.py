"""``mqctl consume`` as one process: where it starts, when it stops, what it hands a handler,
what it commits — always with real ``mqctl`` processes on a real store."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.procs import MQ, MQCTL, finish, handler_script, one_error, python, wait_for  # noqa: F401  (mq is a fixture)

# A handler that appends "BODY QUEUE OFFSET RECONSUME" to $LOG, one write per message.
RECORD = 'b=$(cat); printf "%s %s %s %s\\n" "$b" "$MQ_QUEUE_ID" "$MQ_QUEUE_OFFSET" "$MQ_RECONSUME_TIMES" >> "$LOG"'


def recorder(mq: MQ, name: str = "rec.sh") -> str:
    return handler_script(mq.work / name, RECORD)


def log_lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def bodies(cp: subprocess.CompletedProcess) -> list[str]:
    return [line.decode() for line in cp.stdout.splitlines()]


# -- where a new group starts ----------------------------------------------------------------

def test_from_first_last_and_timestamp(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    batches = []
    for b in range(3):
        mq.send_lines("T", [f"b{b}-{i}" for i in range(8)])
        batches.append({f"b{b}-{i}" for i in range(8)})
        time.sleep(0.01)  # distinct store timestamps per batch
    peek = mq.ok("consume", "T", "-g", "peek", "--from", "first", "-e", "--json")
    env = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(env) == 24
    ts = {e["body"][:2]: e["storeTimestamp"] for e in env}
    assert ts["b0"] < ts["b1"] < ts["b2"]

    assert set(bodies(mq.ok("consume", "T", "-g", "g-first", "--from", "first", "-e"))) == set().union(*batches)
    # LOWER boundary: the first message stored at or after the time.
    at = bodies(mq.ok("consume", "T", "-g", "g-ms", "--from", str(ts["b1"]), "-e"))
    assert set(at) == batches[1] | batches[2]
    after = bodies(mq.ok("consume", "T", "-g", "g-ms1", "--from", str(ts["b1"] + 1), "-e"))
    assert set(after) == batches[2]
    iso = datetime.fromtimestamp(ts["b1"] / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
    assert set(bodies(mq.ok("consume", "T", "-g", "g-iso", "--from", iso, "-e"))) == batches[1] | batches[2]
    older = datetime.fromtimestamp((ts["b0"] - 60_000) / 1000, tz=timezone.utc).isoformat()
    assert len(bodies(mq.ok("consume", "T", "-g", "g-old", "--from", older, "-e"))) == 24
    future = str(ts["b2"] + 3_600_000)
    assert bodies(mq.ok("consume", "T", "-g", "g-future", "--from", future, "-e")) == []

    # last (the default): skip the backlog, and the start is committed, so --from no longer
    # applies to this group afterwards.
    assert bodies(mq.ok("consume", "T", "-g", "g-last", "-e")) == []
    assert mq.committed_total("g-last", "T") == 24
    assert bodies(mq.ok("consume", "T", "-g", "g-last", "--from", "first", "-e")) == []
    mq.send_lines("T", ["new-1", "new-2"])
    assert sorted(bodies(mq.ok("consume", "T", "-g", "g-last", "-e"))) == ["new-1", "new-2"]

    bad = mq.run("consume", "T", "-g", "g-bad", "--from", "yesterday-ish", "-e")
    assert bad.returncode == 2 and "mqctl: error:" in bad.stderr


# -- when it stops ---------------------------------------------------------------------------

def test_exit_at_end_does_not_wait_for_later_messages(mq: MQ) -> None:
    """-e takes each queue's end when it starts: a producer that keeps sending faster than the
    handler runs must not keep it going."""
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"init-{i}" for i in range(20)])
    log = mq.work / "log"
    slow = handler_script(mq.work / "slow.sh", "sleep 0.05; " + RECORD)
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        st = mq.store()
        while not stop.is_set():
            st.put_bodies("T", [b"later-%d" % (sent[0] + i) for i in range(5)])
            sent[0] += 5
            time.sleep(0.05)  # ~100 msgs/s, several times what the handler can do
        st.close()

    p = mq.start("consume", "T", "-g", "G", "--from", "first", "-e", "--threads", "1", "--exec", slow,
                 extra_env={"LOG": str(log)})
    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        rc = p.wait(timeout=40)
    finally:
        stop.set()
        th.join(10)
    assert rc == 0, p.stderr()
    handled = [line.split()[0] for line in log_lines(log)]
    assert {f"init-{i}" for i in range(20)} <= set(handled)
    # Everything handled was there when it started: all 'later' ones it handled were sent
    # before the 20 initial messages had been drained, and far fewer than were sent.
    assert len(handled) < sent[0]


def test_count_stops_after_n_and_commits_n(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    first = bodies(mq.ok("consume", "T", "-g", "G", "--from", "first", "--count", "3"))
    assert len(first) == 3
    assert mq.committed_total("G", "T") == 3
    rest = bodies(mq.ok("consume", "T", "-g", "G", "-e"))
    assert sorted(first + rest) == sorted(f"m{i}" for i in range(10))
    # --count with --exec: exactly N handler runs.
    log = mq.work / "log"
    mq.send_lines("T", [f"x{i}" for i in range(10)])
    p = mq.start("consume", "T", "-g", "G", "--count", "4", "--exec", recorder(mq), "--threads", "4",
                 extra_env={"LOG": str(log)})
    assert p.wait(30) == 0, p.stderr()
    assert len(log_lines(log)) == 4
    assert mq.committed_total("G", "T") == 14


@pytest.mark.slow
def test_idle_timeout(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    t0 = time.monotonic()
    cp = mq.ok("consume", "T", "-g", "G", "--idle-timeout", "0.5")
    assert cp.stdout == b""
    assert time.monotonic() - t0 < 20
    # Messages arriving more often than the timeout keep it running.
    p = mq.start("consume", "T", "-g", "G", "--idle-timeout", "1.5")
    wait_for(lambda: mq.member_queues("G"), 15, what="member to join")
    st = mq.store()
    t_start = time.monotonic()
    for i in range(8):
        st.put_bodies("T", [b"tick-%d" % i])
        time.sleep(0.4)
        assert p.alive(), f"stopped while messages kept coming: {p.stderr()}"
    t_last = time.monotonic()
    assert p.wait(30) == 0, p.stderr()
    assert time.monotonic() - t_start >= 3.2
    assert len(p.lines()) == 8
    assert time.monotonic() - t_last < 20


def test_tag_filter(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    for tag in ("A", "B", "C", "AB"):
        mq.send_lines("T", [f"{tag}-{i}" for i in range(3)], "--tag", tag)
    mq.send_lines("T", ["untagged"])
    got = bodies(mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--tag", "A || B"))
    assert sorted(got) == sorted([f"A-{i}" for i in range(3)] + [f"B-{i}" for i in range(3)])
    # Filtered-out messages are passed over, not left behind: the group is at the end.
    assert mq.committed_total("G", "T") == 13
    star = bodies(mq.ok("consume", "T", "-g", "G2", "--from", "first", "-e", "--tag", "*"))
    assert len(star) == 13
    only_c = bodies(mq.ok("consume", "T", "-g", "G3", "--from", "first", "-e", "--tag", "C"))
    assert sorted(only_c) == ["C-0", "C-1", "C-2"]


def test_json_envelope_round_trips_through_send(mq: MQ) -> None:
    mq.ok("topic", "create", "SRC", "--queues", "4")
    mq.ok("topic", "create", "DST", "--queues", "4")
    mq.ok("send", "SRC", "hello", "--tag", "greet", "--keys", "k1,k2", "-p", "color=blue")
    mq.ok("send", "SRC", "-q", "2", "--tag", "bin", input=b"\xff\xfe\x00binary\x80\n")
    mq.ok("send", "SRC", "caf\u00e9 \u2603", "-s", "shard-1")
    out = mq.ok("consume", "SRC", "-g", "copy", "--from", "first", "-e", "--json").stdout
    src = [json.loads(line) for line in out.splitlines()]
    assert len(src) == 3
    for e in src:
        for f in ("topic", "queueId", "queueOffset", "msgId", "keys", "tags", "properties", "body",
                  "bornTimestamp", "storeTimestamp", "reconsumeTimes"):
            assert f in e, f
    binary = next(e for e in src if e["tags"] == "bin")
    assert binary["bodyEncoding"] == "base64"
    assert base64.b64decode(binary["body"]) == b"\xff\xfe\x00binary\x80"
    mq.ok("send", "DST", "--input", "json", input=out)
    dst = [json.loads(line) for line in
           mq.ok("consume", "DST", "-g", "check", "--from", "first", "-e", "--json").stdout.splitlines()]

    def essence(e: dict) -> tuple:
        return (e["body"], e.get("bodyEncoding"), e["tags"], tuple(e["keys"]),
                json.dumps(e["properties"], sort_keys=True), e["queueId"])
    assert sorted(map(essence, dst)) == sorted(map(essence, src))
    # The raw bytes are the same, not just the text.
    raw = mq.ok("consume", "DST", "-g", "raw", "--from", "first", "-e", "--tag", "bin").stdout
    assert raw == b"\xff\xfe\x00binary\x80\n"


def test_stdout_closed_early_exits_141_and_commits_only_what_was_written(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", [f"m{i}" for i in range(5)])
    r, w = os.pipe()
    p = mq.start("consume", "T", "-g", "G", "--from", "first", stdout=w)
    os.close(w)
    got = b""
    deadline = time.monotonic() + 20
    while got.count(b"\n") < 5 and time.monotonic() < deadline:
        got += os.read(r, 65536)
    assert got.count(b"\n") == 5
    os.close(r)  # the reader goes away, as `| head -5` does
    mq.send_lines("T", ["after-close"])
    assert p.wait(30) == 141, p.stderr()
    assert "Traceback" not in p.stderr()
    # The five written lines count as consumed; the one that could not be written does not.
    assert mq.committed_total("G", "T") == 5
    assert bodies(mq.ok("consume", "T", "-g", "G", "-e")) == ["after-close"]


def test_shell_pipe_into_head(mq: MQ) -> None:
    """The real thing: `mqctl consume … | head -1` on a backlog larger than a pipe buffer."""
    mq.ok("topic", "create", "T", "--queues", "1")
    st = mq.store()
    st.put_bodies("T", [b"%06d" % i + b"x" * 200 for i in range(3000)])
    script = f"{' '.join(MQCTL)} consume T -g G --from first; echo \"rc=$?\" >&2"
    cp = subprocess.run(["sh", "-c", f"( {script} ) | head -1"], capture_output=True, env=mq.environ(),
                        timeout=60)
    assert cp.stdout.startswith(b"000000")
    assert b"rc=141" in cp.stderr
    committed = mq.committed_total("G", "T")
    # Less than everything (head stopped reading), and never more than was written.
    assert 1 <= committed < 3000
    rest = mq.ok("consume", "T", "-g", "G", "-e").stdout.splitlines()
    assert len(rest) == 3000 - committed
    assert rest[0].startswith(b"%06d" % committed)


# -- --exec ----------------------------------------------------------------------------------

def test_exec_environment(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    res = json.loads(mq.ok("send", "T", "payload", "--tag", "TG", "--keys", "k1,k2", "-q", "3",
                           "--json").stdout)
    envdump = mq.work / "env"
    h = handler_script(mq.work / "h.sh", f'env | grep "^MQ_" > {envdump}; cat > {mq.work}/body')
    mq.ok("consume", "T", "-g", "GRP", "--from", "first", "-e", "--exec", h)
    env = dict(line.split("=", 1) for line in envdump.read_text().splitlines())
    assert env["MQ_TOPIC"] == "T"
    assert env["MQ_QUEUE_ID"] == "3"
    assert env["MQ_QUEUE_OFFSET"] == str(res["queueOffset"])
    assert env["MQ_MSG_ID"] == res["msgId"]
    assert set(env["MQ_KEYS"].replace(",", " ").split()) == {"k1", "k2"}
    assert env["MQ_TAGS"] == "TG"
    assert env["MQ_RECONSUME_TIMES"] == "0"
    assert env["MQ_GROUP"] == "GRP"
    assert (mq.work / "body").read_bytes() == b"payload"


def test_handler_that_cannot_start(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    cp = mq.run("consume", "T", "-g", "fresh", "--from", "first", "--exec", "/nonexistent/handler", timeout=30)
    assert cp.returncode == 1
    assert "mqctl: error:" in cp.stderr and "/nonexistent/handler" in cp.stderr
    assert mq.offsets("fresh") == {}
    cp = mq.run("consume", "T", "-g", "fresh", "--from", "first", "--exec", "no-such-program-xyz", timeout=30)
    assert cp.returncode == 1 and "no-such-program-xyz" in cp.stderr
    assert mq.offsets("fresh") == {}

    mq.ok("consume", "T", "-g", "G", "--from", "first", "--count", "3")
    before = mq.offsets("G")
    plain = mq.work / "not-executable.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    cp = mq.run("consume", "T", "-g", "G", "--exec", str(plain), timeout=30)
    assert cp.returncode == 1 and "not-executable.sh" in cp.stderr
    assert mq.offsets("G") == before
    # Executable, but its interpreter does not exist: fails when it is run, not before.
    broken = mq.work / "broken.sh"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    cp = mq.run("consume", "T", "-g", "G", "--exec", str(broken), timeout=30)
    assert cp.returncode == 1 and "broken.sh" in cp.stderr, cp.stderr
    assert mq.offsets("G") == before
    assert not mq.members("G")


# -- delay, dedup ----------------------------------------------------------------------------

def test_send_delay_level_1(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    p = mq.start("consume", "T", "-g", "G", "--json")
    wait_for(lambda: any(mq.member_queues("G").values()), 15, what="member")
    t0 = time.time()
    mq.ok("send", "T", "later", "--delay", "1")
    lines = wait_for(lambda: p.lines(), 20, what="delayed message")
    got = time.time()
    e = json.loads(lines[0])
    assert e["body"] == "later"
    assert got - t0 >= 1.0
    # The parked copy says when it is due: at least 1 s after the send began, and the
    # scheduler never delivers it before then.
    from store.log.record import PROP_DELIVER_MS
    parked = list(mq.store().iter_queue("SCHEDULE_TOPIC_XXXX", 0, 0))
    assert len(parked) == 1
    due = int(parked[0].properties[PROP_DELIVER_MS])
    assert due - int(t0 * 1000) >= 1000
    assert e["storeTimestamp"] >= due
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0


def test_dedup_after_offsets_reset(mq: MQ) -> None:
    from store.layout import Layout
    from store.log.offsets import ClusterOffsetStore
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"m{i}" for i in range(12)])
    log = mq.work / "log"
    h = recorder(mq)
    run = lambda *extra: mq.start("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", h,  # noqa: E731
                                  *extra, extra_env={"LOG": str(log)})
    assert run("--dedup").wait(30) == 0
    assert len(log_lines(log)) == 12
    store = ClusterOffsetStore(Layout(mq.root))
    store.reset("G", "T", {q: 0 for q in range(4)})
    assert mq.committed_total("G", "T") == 0
    p = run("--dedup")
    assert p.wait(30) == 0, p.stderr()
    assert len(log_lines(log)) == 12, "a recorded message was handed to the handler again"
    assert mq.committed_total("G", "T") == 12
    # Control: without --dedup the same reset does redeliver.
    store.reset("G", "T", {q: 0 for q in range(4)})
    assert run().wait(30) == 0
    assert len(log_lines(log)) == 24


# -- damaged offsets -------------------------------------------------------------------------

def test_corrupt_offsets_file(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    mq.ok("consume", "T", "-g", "G", "--from", "first", "--count", "4")
    main = mq.root / "config" / "consumerOffset.json"
    bak = main.with_name("consumerOffset.json.bak")
    bak.write_bytes(main.read_bytes())
    main.write_bytes(b"\x00garbage{{{")
    cp = mq.run("consume", "T", "-g", "G", "-e", timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert "warning" in cp.stderr and "consumerOffset.json" in cp.stderr
    assert len(bodies(cp)) == 6  # it resumed from the backup, not from scratch
    json.loads(main.read_text())  # and the main file is good again

    mq.send_lines("T", ["n0", "n1"])
    main.write_bytes(b"garbage")
    bak.write_bytes(b"more garbage")
    cp = mq.run("consume", "T", "-g", "G", "-e", timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert sorted(bodies(cp)) == ["n0", "n1"]  # both copies lost: the offsets journal has them

    (mq.root / "config" / "consumerOffset.log").unlink()   # a store of an older version
    main.write_bytes(b"garbage")
    bak.write_bytes(b"more garbage")
    cp = mq.run("consume", "T", "-g", "G", "-e", timeout=30)
    assert cp.returncode == 5
    assert "mqctl: error:" in cp.stderr and str(main) in cp.stderr
    assert cp.stdout == b""
    assert not mq.members("G")


def test_corrupt_broadcast_offsets(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", [f"m{i}" for i in range(4)])
    mq.ok("consume", "T", "-g", "B", "--broadcast", "--client-id", "c1", "--from", "first", "--count", "2")
    path = mq.root / "offsets" / "c1" / "B" / "offsets.json"
    assert path.exists()
    path.write_bytes(b"{not json")
    path.with_name("offsets.json.bak").write_bytes(b"{neither")
    cp = mq.run("consume", "T", "-g", "B", "--broadcast", "--client-id", "c1", "-e", timeout=30)
    assert cp.returncode == 5 and str(path) in cp.stderr


# -- stopping and identity -------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(mq: MQ, sig: int) -> None:
    mq.ok("topic", "create", "T", "--queues", "4")
    mq.send_lines("T", [f"m{i}" for i in range(10)])
    log = mq.work / "log"
    p = mq.start("consume", "T", "-g", "G", "--from", "first", "--client-id", "me", "--exec", recorder(mq),
                 extra_env={"LOG": str(log)})
    wait_for(lambda: len(log_lines(log)) == 10, 20, what="10 messages handled")
    members = mq.root / "consumers" / "G"
    assert (members / "me.json").exists()
    p.signal(sig)
    assert p.wait(20) == 0, p.stderr()
    assert mq.committed_total("G", "T") == 10
    assert not (members / "me.json").exists() and not (members / "me.lock").exists()
    assert not mq.members("G")
    assert "Traceback" not in p.stderr()
    # Nothing is delivered again.
    assert bodies(mq.ok("consume", "T", "-g", "G", "-e")) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_consumer_starts_still_exits_0(mq: MQ, sig: int) -> None:
    """A consume stopped while still starting, before its own handlers are installed (they
    are, before it joins), exited by the signal (143, or 130 "interrupted"): a supervisor that
    stops a consumer it has just started saw a crash. Here its open waits on the store's
    settings file made a FIFO that no one writes, a place it is sure to be still starting."""
    mq.ok("topic", "create", "T")
    settings = mq.root / "store.json"
    real = settings.read_bytes()
    settings.unlink()
    os.mkfifo(settings)
    try:
        p = mq.start("consume", "T", "-g", "G")
        wchan = Path(f"/proc/{p.pid}/wchan")
        wait_for(lambda: not p.alive() or wchan.read_text() == "wait_for_partner", 30,
                 what="the consumer to open the FIFO")
        p.signal(sig)
        assert p.wait(20) == 0, p.stderr()
        assert "Traceback" not in p.stderr() and not mq.members("G")
    finally:
        settings.unlink()
        settings.write_bytes(real)


def test_duplicate_client_id_is_a_conflict(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    p = mq.start("consume", "T", "-g", "G", "--client-id", "same")
    wait_for(lambda: "same" in mq.member_queues("G"), 15, what="first member")
    cp = mq.run("consume", "T", "-g", "G", "--client-id", "same", "-e", timeout=30)
    assert cp.returncode == 4
    assert "same" in cp.stderr and "mqctl: error:" in cp.stderr
    assert p.alive()
    # Another group may use the id.
    assert mq.run("consume", "T", "-g", "OTHER", "--client-id", "same", "-e").returncode == 0
    p.signal(signal.SIGTERM)
    assert p.wait(20) == 0


def test_unknown_topic(mq: MQ) -> None:
    cp = mq.run("consume", "NOPE", "-g", "G", "-e")
    assert cp.returncode == 3 and "NOPE" in cp.stderr
    assert not mq.members("G")


def _copies_on_three_queues(mq: MQ) -> str:
    """A message and two copies with its id (a resend round-robined elsewhere) on queues 0, 1
    and 2, with others around them, all in the backlog; the id."""
    import store
    mq.ok("topic", "create", "T", "--queues", "4")
    with store.Producer(mq.root) as p:
        first = p.send("T", "first", queue=0)
        for q in (1, 2):
            p.send_many("T", [f"q{q}-a", f"q{q}-b"], queue=q)
            p.send("T", "copy", queue=q, msg_id=first.msg_id)
    return first.msg_id


@pytest.mark.parametrize("how", ["run", "consume"])
def test_dedup_skips_copies_on_other_queues_handed_out_after_the_first_was_handled(mq: MQ, how: str) -> None:
    """The copies are pulled with the first (each queue's backlog), before it is handled: the
    check when each is handed to the handler skips them (one thread: the first is handled by
    then). (The iterator hands batches out ahead of the loop: README, "--dedup".)"""
    import store
    uk = _copies_on_three_queues(mq)
    if how == "consume":
        got = [e["msgId"] for e in mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--dedup",
                                         "--json").json_lines()]
    else:
        got = []
        with store.Consumer("T", group="G", path=mq.root, start_from="first", dedup=True) as c:
            c.run(lambda m: got.append(m.msg_id), threads=1, exit_at_end=True)
    assert got.count(uk) == 1 and len(got) == 5, got
    assert mq.committed_total("G", "T") == 7   # the copies are consumed, not left behind


@pytest.mark.parametrize("how", ["run", "exec"])
def test_dedup_skips_a_copy_handed_out_while_the_first_is_handled(mq: MQ, how: str) -> None:
    """A copy on another queue with nothing between it and the first in handling order (a
    batch of each queue in turn): it is handed out while the first's handler still runs, to
    wait for the one thread (``run(threads=1)``) or ``--threads`` slot (``--exec``), so the
    look at its hand-out came before the first was recorded. The look as its handler starts
    skips it. (Before: both handled, the first's handler slow or not.)"""
    import store
    mq.ok("topic", "create", "T", "--queues", "2")
    with store.Producer(mq.root) as p:
        first = p.send("T", "first", queue=0)
        p.send("T", "copy", queue=1, msg_id=first.msg_id)
    if how == "exec":
        log = mq.work / "log"
        h = handler_script(mq.work / "h.sh", 'b=$(cat); [ "$b" = first ] && sleep 0.2; echo "$MQ_MSG_ID $b" >> "$LOG"')
        mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--dedup", "--exec", h,
              extra_env={"LOG": str(log)})
        got = log_lines(log)
    else:
        got = []

        def handle(m: store.Message) -> None:
            if m.text == "first":
                time.sleep(0.2)   # (a slow first handler: the copy waits for the thread meanwhile)
            got.append(f"{m.msg_id} {m.text}")

        with store.Consumer("T", group="G", path=mq.root, start_from="first", dedup=True) as c:
            c.run(handle, threads=1, exit_at_end=True)
    assert got == [f"{first.msg_id} first"], got
    assert mq.committed_total("G", "T") == 2   # the copy is consumed, not left behind
    assert (mq.root / "dedup" / "G.log").read_text().count(first.msg_id) == 1


CONSUME_AT_END = """
    import sys, store
    root, how, extra = sys.argv[1], sys.argv[2], dict(dedup=True) if sys.argv[3] == "dedup" else dict(tags="a")
    with store.Consumer("T", group="G", path=root, start_from="first", orderly=True, **extra) as c:
        if how == "run":
            got = []
            c.run(lambda m: got.append(m.text), threads=1, exit_at_end=True)
        else:
            got = [m.text for m in c.messages(exit_at_end=True)]
    print(" ".join(got))
"""


@pytest.mark.parametrize("how", ["stdout", "exec", "run", "messages"])
@pytest.mark.parametrize("skip", ["dedup", "tag"])
def test_orderly_commits_what_a_pull_left_out_at_the_end_of_a_queue(mq: MQ, how: str, skip: str) -> None:
    """An orderly member commits past the messages a pull left out after the last one it
    consumed (a copy ``--dedup`` skipped in the same pull, another tag's message): they are
    consumed, as in concurrent mode. (Before: the offset stopped after the last handled one,
    so ``-e`` never saw the queue drained and waited forever, and the lag stayed 1.)"""
    import store
    mq.ok("topic", "create", "T", "--queues", "1")
    with store.Producer(mq.root) as p:
        first = p.send("T", "first", tags="a")
        if skip == "dedup":
            p.send("T", "copy", msg_id=first.msg_id, tags="a")
        else:
            p.send("T", "other", tags="b")
    flags = ["--dedup"] if skip == "dedup" else ["--tag", "a"]
    if how in ("stdout", "exec"):
        log = mq.work / "log"
        h = handler_script(mq.work / "h.sh", 'cat >> "$LOG"; echo >> "$LOG"')
        res = mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--orderly", *flags,
                    *(["--exec", h] if how == "exec" else []), extra_env={"LOG": str(log)}, timeout=30)
        got = log_lines(log) if how == "exec" else res.out.splitlines()
    else:
        got = finish(python(CONSUME_AT_END, mq.root, how, skip, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
                     timeout=30)[0].split()
    assert got == ["first"], got
    assert mq.committed_total("G", "T") == 2


# -- what may be consumed ----------------------------------------------------------------------

def test_the_stores_own_topics_cannot_be_consumed(mq: MQ) -> None:
    """Half messages (pending, rolled back), parked transactions and delayed messages live in
    the store's own topics: ``consume``, ``store.Consumer`` and ``store.AsyncConsumer`` refuse
    them as ``send`` does (exit 2, ``InvalidNameError``); a group's ``%DLQ%`` topic stays
    consumable."""
    import store
    from store.errors import InvalidNameError, TopicNotFoundError
    mq.ok("tx", "send", "t", "pending-secret")               # a half message, never committed
    mq.ok("send", "t", "later", "--delay", "1h")             # a delayed one
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SCHEDULE_TOPIC_XXXX"):
        res = mq.run("consume", topic, "-g", "spy", "--from", "first", "-e")
        one_error(res, 2, f"topic {topic!r} is reserved for the system")
        assert res.stdout == b""
        with pytest.raises(InvalidNameError, match="reserved for the system"):
            store.Consumer(topic, group="spy", path=mq.root, start_from="first")
        with pytest.raises(InvalidNameError, match="reserved for the system"):
            store.AsyncConsumer(topic, group="spy", path=mq.root, start_from="first")
    with pytest.raises(TopicNotFoundError):                   # the name is fine: no dead letters yet
        store.Consumer("%DLQ%spy", group="spy", path=mq.root)
    assert mq.offsets("spy") == {}                           # nothing joined, nothing committed
