"""A consumer on a full disk: failed messages whose copy to ``%RETRY%G``/``%DLQ%G`` cannot be
written, and offsets whose snapshot cannot be written. Nothing is lost, nothing multiplied,
and the consumer carries on once there is room again.

Real files on a real full file system (a 2 MiB tmpfs, see ``faultutil.small_tmpfs``: skipped
where ``mount`` is not allowed). Handlers wait on a gate file, so the disk is filled while
they run, and each run is logged outside the small file system.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.faultutil import fill_fs, small_tmpfs
from tests.procs import MQ, Proc, handler_script, wait_for


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    yield from small_tmpfs(tmp_path, "2m")


def _store(fs: Path, tmp_path: Path) -> MQ:
    m = MQ(fs / "store", tmp_path)
    m.ok("init", "--segment-size", "256KiB", "--max-message-size", "4KiB")
    m.ok("topic", "create", "fj", "--queues", "1")
    m.ok("send", "fj", input="one\ntwo\n")
    return m


def _gated_handler(tmp_path: Path, exit_code: int) -> tuple[str, Path, Path]:
    """A handler that logs its run, waits while the gate file exists, then exits ``exit_code``."""
    gate, runs = tmp_path / "gate", tmp_path / "runs"
    gate.touch()
    script = handler_script(tmp_path / "handler.sh", f"""
        cat > /dev/null
        echo "$MQ_QUEUE_OFFSET" >> {runs}
        while [ -e {gate} ]; do sleep 0.05; done
        exit {exit_code}
    """)
    return script, gate, runs


def _runs(runs: Path) -> list[str]:
    return runs.read_text().split() if runs.exists() else []


def _commitlog_sizes(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (root / "commitlog").iterdir()}


@pytest.mark.slow
def test_a_send_back_that_fails_on_a_full_disk_is_retried_once_later_not_multiplied(
        small_fs: Path, tmp_path: Path) -> None:
    """The handler fails while the disk is full: the dead-letter copy cannot be written (the
    group's ``%DLQ%`` topic cannot even be created). The send-back is tried again every 5 s,
    the message kept handed out meanwhile: the handler is not run again, no copy is stored
    while it fails, and once there is room each message has exactly one dead letter."""
    m = _store(small_fs, tmp_path)
    try:
        script, gate, runs = _gated_handler(tmp_path, 1)
        consumer = m.start("consume", "fj", "-g", "G", "--from", "first", "-e", "--max-reconsume", "0",
                           "--exec", script)
        wait_for(lambda: _runs(runs), what="a handler to start")
        fill_fs(small_fs)
        log_before = _commitlog_sizes(m.root)
        gate.unlink()

        def failed_twice() -> bool:   # each message's send-back failed, and failed again when retried
            warned = [ln for ln in consumer.stderr().splitlines() if "could not send" in ln]
            ids = {ln.split("could not send ")[1].split()[0] for ln in warned}
            return len(ids) == 2 and len(warned) >= 4 or not consumer.alive()
        wait_for(failed_twice, timeout=60, what="two failed send-backs of each message")
        assert consumer.alive(), consumer.stderr()
        assert "retrying here in 5 s" in consumer.stderr()
        # each handler ran once: a message whose send-back failed is not handed out again
        assert sorted(_runs(runs)) == ["0", "1"], (len(_runs(runs)), consumer.stderr()[-2000:])
        # a failed send-back stores nothing
        assert _commitlog_sizes(m.root) == log_before
        (small_fs / "filler").unlink()
        assert consumer.wait(60) == 1, consumer.stderr()   # (it gave up on them: exit 1)
        assert "gave up on 2 messages" in consumer.stderr(), consumer.stderr()
        dead = m.ok("dlq", "list", "-g", "G", "--json").json_lines()
        assert sorted(d["body"] for d in dead) == ["one", "two"], dead
        assert sorted(_runs(runs)) == ["0", "1"]
        m.ok("offsets", "show", "-g", "G")
        assert m.offsets("G", "fj") == {("fj", 0): 2}
        m.check_clean()
    finally:
        m.cleanup()


@pytest.mark.slow
def test_a_consumer_whose_offsets_snapshot_does_not_fit_warns_and_carries_on(
        small_fs: Path, tmp_path: Path) -> None:
    """Handled messages are committed (a record appended to the offsets journal, which has
    room in its last page), but the table (``consumerOffset.json``) cannot be written again:
    the consumer warns and tries later, it does not exit; once there is room it writes it,
    and the offsets are there."""
    m = _store(small_fs, tmp_path)
    try:
        script, gate, runs = _gated_handler(tmp_path, 0)
        consumer = m.start("consume", "fj", "-g", "G", "--from", "first", "--exec", script)
        wait_for(lambda: _runs(runs), what="a handler to start")
        fill_fs(small_fs)
        gate.unlink()
        wait_for(lambda: "consumerOffset.json is written again later" in consumer.stderr() or not consumer.alive(),
                 timeout=60, what="the offsets table's write to fail")
        assert consumer.alive(), consumer.stderr()
        [warning] = [ln for ln in consumer.stderr().splitlines() if "consumerOffset" in ln]   # (said once)
        assert "consumerOffset.json: no space left on device" in warning, warning
        assert sorted(_runs(runs)) == ["0", "1"]
        assert m.offsets("G", "fj") == {("fj", 0): 2}   # (readers apply the journal's records)
        (small_fs / "filler").unlink()
        table = m.root / "config" / "consumerOffset.json"

        def snapshot_holds_them() -> bool:
            return json.loads(table.read_text()).get("offsetTable", {}).get("fj@G") == {"0": 2} \
                or not consumer.alive()
        wait_for(snapshot_holds_them, timeout=60, what="the offsets table to be written")
        assert consumer.alive(), consumer.stderr()
        assert consumer.stop() == 0, consumer.stderr()
        assert sorted(_runs(runs)) == ["0", "1"]
        m.check_clean()
    finally:
        m.cleanup()


def _fill_journal_page(root: Path) -> None:
    """Commit for another group until the offsets journal's last page has no room for one
    more record: the next commit must take a new page of the file system."""
    from store.layout import Layout
    from store.log.offsets import ClusterOffsetStore
    lay = Layout(root)
    other = ClusterOffsetStore(lay)
    n = 0
    while 4096 - lay.consumer_offset_log.stat().st_size % 4096 >= 24:
        n += 1
        other.commit("Other", {("fj", 0): n}, journal_only=True)
    other.settle(0.0)   # (its snapshot written now, not on the full disk)
    assert 4096 - lay.consumer_offset_log.stat().st_size % 4096 < 24


def _refused_commit(m: MQ, small_fs: Path, tmp_path: Path) -> tuple[Proc, Path]:
    """A consumer of ``fj`` whose commit after its first handler run the full disk refuses
    (the journal's last page has no room): it is running, has warned, and handled 0 and 1."""
    script, gate, runs = _gated_handler(tmp_path, 0)
    consumer = m.start("consume", "fj", "-g", "G", "--from", "first", "--exec", script)
    wait_for(lambda: _runs(runs), what="a handler to start")
    _fill_journal_page(m.root)
    fill_fs(small_fs)
    gate.unlink()
    wait_for(lambda: "could not commit offsets" in consumer.stderr() or not consumer.alive(),
             timeout=60, what="a commit to fail")
    assert consumer.alive(), consumer.stderr()
    return consumer, runs


@pytest.mark.slow
def test_a_consumer_whose_offsets_journal_does_not_fit_keeps_its_offsets_and_commits_them_later(
        small_fs: Path, tmp_path: Path) -> None:
    """The commit record itself cannot be appended (the journal needs a new page): the
    consumer warns once, keeps the offsets and commits them once there is room; it does not
    exit, and nothing is handled twice."""
    m = _store(small_fs, tmp_path)
    try:
        consumer, runs = _refused_commit(m, small_fs, tmp_path)
        assert sorted(_runs(runs)) == ["0", "1"]
        assert m.offsets("G", "fj") != {("fj", 0): 2}
        (small_fs / "filler").unlink()
        wait_for(lambda: m.offsets("G", "fj") == {("fj", 0): 2} or not consumer.alive(), timeout=60,
                 what="the offsets to be committed")
        assert consumer.stop() == 0, consumer.stderr()
        warned = [ln for ln in consumer.stderr().splitlines() if "could not commit offsets" in ln]
        assert len(warned) == 1 and "consumerOffset.log: no space left on device" in warned[0], consumer.stderr()
        assert sorted(_runs(runs)) == ["0", "1"]
        assert m.offsets("G", "fj") == {("fj", 0): 2}
        m.check_clean()
    finally:
        m.cleanup()


@pytest.mark.slow
def test_a_queue_whose_send_back_keeps_failing_still_goes_to_a_joining_member(tmp_path: Path) -> None:
    """A member whose handler and send-backs fail (a full disk) keeps the failed message
    handed out while it waits to retry the send-back. When a second member joins and the queue
    is to go to it, the due retry hands the message back, so the drop ends and the joiner gets
    the queue and the message. Before, the retry looked for the queue among those held only,
    found it being let go, and forgot it: the message stayed out, the drop waited for it for
    good, and the queue was held unread until the first member stopped."""
    import subprocess
    import sys
    mq = MQ(tmp_path / "s", tmp_path)
    mq.ok("topic", "create", "T", "--queues", "2")
    for q in (0, 1):
        mq.ok("send", "T", f"m{q}", "-q", str(q))
    log = tmp_path / "a.log"
    a = subprocess.Popen([sys.executable, "-c", f"""
import store
from store.client import retry
from store.errors import StoreIOError
def full(*a, **k):
    raise StoreIOError("cannot append: no space left on device (simulated)")
retry.send_back = full
def handler(m):
    with open({str(log)!r}, "a") as f:
        print(m.queue_id, file=f, flush=True)
    raise RuntimeError("fails")
with store.Consumer("T", group="G", path={str(mq.root)!r}, start_from="first", client_id="a-first") as c:
    c.run(handler, threads=1)
"""], stdout=subprocess.DEVNULL, stderr=open(tmp_path / "a.err", "wb"), env=mq.environ())
    try:
        wait_for(lambda: log.exists() and sorted(log.read_text().split()) == ["0", "1"], timeout=120,
                 what="the first member's handler to fail on both queues")
        b = mq.start("consume", "T", "-g", "G", "--client-id", "z-second", "-c", "1", "-o", "first")
        assert b.wait(timeout=180) == 0, b.stderr()
        assert b.lines() in ([b"m0"], [b"m1"])
    finally:
        a.terminate()
        a.wait(timeout=60)


def test_a_consumer_stopped_while_its_offsets_cannot_be_written_warns_once(
        small_fs: Path, tmp_path: Path) -> None:
    """Stopped while the disk is still full, so its last offsets cannot be written: the
    consumer says "could not persist offsets at exit" once (the persist's failure), not a
    second time when it then closes its offsets keeper."""
    m = _store(small_fs, tmp_path)
    try:
        consumer, _ = _refused_commit(m, small_fs, tmp_path)
        consumer.stop()
        warned = [ln for ln in consumer.stderr().splitlines() if "could not persist offsets at exit" in ln]
        assert len(warned) == 1, consumer.stderr()
        assert "no space left on device" in warned[0], warned
        (small_fs / "filler").unlink()
        m.check_clean()
    finally:
        m.cleanup()


def test_offsets_that_cannot_be_persisted_nor_settled_at_exit_are_warned_about_once(tmp_path: Path) -> None:
    """Both the last commit and the closing snapshot fail (a full disk, simulated here by an
    offsets store refusing them): one "could not persist offsets at exit", not
    a second one for the same failure when the offsets keeper is closed."""
    import subprocess
    import sys
    mq = MQ(tmp_path / "s", tmp_path)
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.ok("send", "T", "a")
    cp = subprocess.run([sys.executable, "-c", """
import sys
from store.errors import StoreIOError
from store.log.offsets import ClusterOffsetStore
FULL = StoreIOError("cannot append: no space left on device (simulated)")
def refusing(real, full):
    def method(self, *a, **k):
        if full(*a, **k):
            raise FULL
        return real(self, *a, **k)
    return method
def moved(group, offsets, *a, **k):   # (the join's commit of the start offsets is written)
    return any(offsets.values())
for name in ("commit", "try_commit"):
    setattr(ClusterOffsetStore, name, refusing(getattr(ClusterOffsetStore, name), moved))
ClusterOffsetStore.settle = refusing(ClusterOffsetStore.settle, lambda quiet_s=1.0: quiet_s == 0)
from mqctl.entry import main
sys.argv = ["mqctl", "consume", "T", "-g", "G", "-o", "first", "-e"]
main()
"""], capture_output=True, text=True, env=mq.environ(), timeout=120)
    assert cp.stdout == "a\n", cp.stderr
    warned = [ln for ln in cp.stderr.splitlines() if "could not persist offsets at exit" in ln]
    assert len(warned) == 1, cp.stderr


@pytest.mark.slow
def test_a_queue_given_away_while_its_offset_cannot_be_committed_is_handed_over_once_there_is_room(
        small_fs: Path, tmp_path: Path) -> None:
    """A rebalance takes a queue from a member whose last offset of it cannot be written (the
    offsets journal needs a new page on a full disk). The member does not exit: it warns once,
    keeps the queue's lock (so its messages are not handed out a second time), commits the
    offset once there is room, and then lets the queue go to the joiner, which has nothing
    left to handle. Before, the drop's persist raised and the member ended with an error."""
    m = MQ(small_fs / "store", tmp_path)
    m.ok("init", "--segment-size", "256KiB", "--max-message-size", "4KiB")
    m.ok("topic", "create", "fj", "--queues", "4")
    m.ok("send", "fj", "c", "-q", "2")
    try:
        script, gate, runs = _gated_handler(tmp_path, 0)
        a = m.start("consume", "fj", "-g", "G", "--from", "first", "--client-id", "a-first", "--exec", script)
        wait_for(lambda: _runs(runs), what="a handler to start")
        b = m.start("consume", "fj", "-g", "G", "--from", "first", "--client-id", "b-second")
        # the joiner is in: queues 2 and 3 are to go to it; 3 (idle) is let go at once, 2 once
        # a-first's handler is done with its message and its offset is committed
        wait_for(lambda: m.member_queues("G", "fj").get("a-first") == {0, 1, 2} or not a.alive(),
                 what="the first member to let queue 3 go")
        _fill_journal_page(m.root)
        fill_fs(small_fs)
        gate.unlink()
        wait_for(lambda: "could not commit offsets" in a.stderr() or not a.alive(), timeout=60,
                 what="the drop's commit to fail")
        assert a.alive(), a.stderr()
        assert m.member_queues("G", "fj").get("a-first") == {0, 1, 2}   # not handed over yet
        (small_fs / "filler").unlink()
        m.wait_balanced("G", "fj", members=2, queues=4, timeout=60)
        assert m.offsets("G", "fj")[("fj", 2)] == 1
        assert a.alive() and b.alive(), (a.stderr(), b.stderr())
        assert a.stop() == 0, a.stderr()
        assert b.stop() == 0, b.stderr()
        assert b.lines() == []   # handled once, by the first member
        assert _runs(runs) == ["0"]
        warned = [ln for ln in a.stderr().splitlines() if "could not commit offsets" in ln]
        assert len(warned) == 1, a.stderr()
        m.check_clean()
    finally:
        m.cleanup()


def test_an_orderly_member_retrying_in_place_on_a_full_disk_carries_on(small_fs: Path, tmp_path: Path) -> None:
    """An orderly member publishes how many messages it retries in place (its member record,
    for ``mqctl top``); on a full disk that record cannot be written: the member goes on
    retrying, and once the handler succeeds and there is room, its offset is committed."""
    m = MQ(small_fs / "store", tmp_path)
    m.ok("init", "--segment-size", "256KiB", "--max-message-size", "4KiB")
    m.ok("topic", "create", "fo", "--queues", "1", "--order")
    m.ok("send", "fo", "one", "--sharding-key", "k")
    try:
        gate, fail, runs = tmp_path / "gate", tmp_path / "fail", tmp_path / "runs"
        gate.touch()
        fail.touch()
        script = handler_script(tmp_path / "handler.sh", f"""
            cat > /dev/null
            echo run >> {runs}
            while [ -e {gate} ]; do sleep 0.05; done
            [ ! -e {fail} ]
        """)
        consumer = m.start("consume", "fo", "-g", "G", "--orderly", "--from", "first", "--suspend-ms", "100",
                           "--exec", script)
        wait_for(lambda: _runs(runs), what="a handler to start")
        fill_fs(small_fs)
        gate.unlink()   # the first failure comes on the full disk: the record's count cannot be written
        wait_for(lambda: len(_runs(runs)) >= 4 or not consumer.alive(), timeout=60,
                 what="retries in place on the full disk")
        assert consumer.alive(), consumer.stderr()
        (small_fs / "filler").unlink()
        fail.unlink()
        wait_for(lambda: m.offsets("G", "fo") == {("fo", 0): 1} or not consumer.alive(), timeout=60,
                 what="the offset to be committed")
        assert consumer.stop() == 0, consumer.stderr()
        m.check_clean()
    finally:
        m.cleanup()


def test_an_offsets_reset_on_a_full_disk_is_made_and_says_its_snapshot_waits(small_fs: Path, tmp_path: Path) -> None:
    """``offsets reset --execute`` on a full disk: its record goes into the offsets journal
    (which every reader applies) and the snapshot cannot be written. The reset is made, so it
    exits 0 with one warning saying the snapshot waits — not exit 1, which a script takes for
    "nothing moved" (it used to), while every reader went by the reset."""
    m = _store(small_fs, tmp_path)
    m.ok("consume", "fj", "-g", "g", "--from", "first", "-e")
    assert m.offsets("g") == {("fj", 0): 2}
    fill_fs(small_fs)
    res = m.run("offsets", "reset", "-g", "g", "--topic", "fj", "--to-earliest", "--execute")
    assert res.returncode == 0, str(res)
    warned = [ln for ln in res.stderr.splitlines() if ln.startswith("mqctl: warning: ")]
    assert len(warned) == 1 and "no space left on device" in warned[0] and "the change is made" in warned[0], warned
    assert m.offsets("g") == {("fj", 0): 0}
    (small_fs / "filler").unlink()
    assert m.ok("consume", "fj", "-g", "g", "-e").stdout.decode().split() == ["one", "two"]
