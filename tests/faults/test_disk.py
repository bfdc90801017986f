"""Disk faults: a file-size limit, a full file system, a read-only store, and files deleted
under a running consumer. Each gives one clear error line and a non-zero exit (or recovers),
leaves nothing partial visible, and the store still opens with a clean check.

The full and read-only file systems are real mounts (a 2 MiB tmpfs; a read-only bind mount),
which needs root in a sandbox that allows ``mount``; where it does not, those tests are
skipped with the reason (what was tried and what the kernel said).
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from store.layout import Layout
from tests.faults.faultutil import fill_fs, is_dirty, mount, small_tmpfs, umount
from tests.procs import KILLED, MQ, MQCTL, one_error, wait_for


def sizes(root: Path) -> dict[str, int]:
    """Every file of the commit log and consume queues, with its size."""
    lay = Layout(root)
    out = {}
    for d in (lay.commitlog_dir, lay.consumequeue_dir):
        for p in d.rglob("*"):
            if p.is_file():
                out[str(p.relative_to(root))] = p.stat().st_size
    return out


def limit_fsize(n: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return set_limit


def lines(n: int, width: int, prefix: str = "m") -> bytes:
    return b"".join(f"{prefix}{i:06d}-{'x' * width}\n".encode() for i in range(n))


# -- RLIMIT_FSIZE ---------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["commitlog", "index"])
def test_file_size_limit(mq: MQ, where: str) -> None:
    """``where``: the write that crosses the limit — the commit log itself (a batch bigger than
    the limit), or the key index (the log fits, the index file is already past the limit: the
    batch's consume-queue entries were written and must be cut back)."""
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("send", "t", "--keys", "k", input=lines(20, 50))
    before = sizes(mq.root)
    good = sorted(e["body"] for e in mq.drain("t", "before"))
    limit = 4096 if where == "commitlog" else 300 * 1024
    res = mq.run("send", "t", "--keys", "k", "--json", input=lines(200, 100, "big"), preexec_fn=limit_fsize(limit))
    msg = one_error(res, 1)
    assert "file size limit exceeded" in msg and where in msg, msg
    assert res.stdout == b""  # nothing acknowledged
    assert sizes(mq.root) == before, "a partial batch is left in the files"
    assert not is_dirty(mq.root)
    mq.check_clean()
    assert sorted(e["body"] for e in mq.drain("t", "after")) == good
    # without the limit, the same batch goes through
    assert len(mq.ok("send", "t", "--json", input=lines(200, 100, "big")).json_lines()) == 200
    assert len(mq.drain("t", "after2")) == 220
    mq.check_clean()


def test_an_index_file_that_cannot_be_made_says_its_size(tmp_path: Path) -> None:
    """An index file is made whole (its slot table written as zeros, so slot writes never
    need a block): when it does not fit, the error says how big it is, and nothing is sent."""
    m = MQ(tmp_path / "store", tmp_path)
    try:
        m.ok("init", "--segment-size", "256KiB", "--max-message-size", "4KiB")
        m.ok("topic", "create", "t", "--queues", "1")
        msg = one_error(m.run("send", "t", "x", preexec_fn=limit_fsize(64 * 1024)), 1)
        assert msg.startswith("mqctl: error: cannot create index file ") and " bytes, written whole): file size limit exceeded" in msg, msg
        assert m.drain("t", "G") == []
        m.check_clean()
    finally:
        m.cleanup()


def test_file_size_limit_on_small_files(mq: MQ) -> None:
    """JSON metadata (topics, offsets) written under the limit: an error, the old copy stays."""
    mq.ok("send", "t", "-q", "0", "one")
    mq.ok("consume", "t", "-g", "G", "--from", "first", "-e")
    topics = (mq.root / "config" / "topics" / "t.json").read_bytes()
    res = mq.run("topic", "create", "u", preexec_fn=limit_fsize(64))
    one_error(res, 1)
    assert (mq.root / "config" / "topics" / "t.json").read_bytes() == topics
    assert not (mq.root / "config" / "topics" / "u.json").exists()
    assert not (mq.root / "consumequeue" / "u").exists(), "a failed creation leaves no queues behind"
    assert not list((mq.root / "config").glob("**/.*.tmp"))  # the temp file is cleaned up
    mq.ok("send", "t", "-q", "0", "two")
    res = mq.run("consume", "t", "-g", "G", "-e", preexec_fn=limit_fsize(64))
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, str(res)
    if res.returncode:
        one_error(res, 1, allow_warnings=True)
    mq.check_clean()
    assert [e["body"] for e in mq.drain("t", "H")] == ["one", "two"]


# -- mounts ---------------------------------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path: Path):
    yield from small_tmpfs(tmp_path, "2m")


def test_full_file_system(small_fs: Path, tmp_path: Path) -> None:
    m = MQ(small_fs / "store", tmp_path)
    try:
        m.ok("topic", "create", "t", "--queues", "2")
        # one send, batch by batch: ~0.8 MiB fits, then one 1.3 MiB message does not
        feeder = m.feed("t")
        first = [ln.decode() for ln in lines(800, 1000, "fits").splitlines()]
        assert feeder.batch(first)
        assert not feeder.batch(["big-" + "y" * (1300 * 1024)])
        rc = feeder.close()
        assert rc == 1 and "Traceback" not in feeder.stderr, feeder.stderr
        errors = [ln for ln in feeder.stderr.splitlines() if ln.startswith("mqctl: error: ")]
        assert len(errors) == 1 and "no space left on device" in errors[0], feeder.stderr
        acked = feeder.acked
        assert len(acked) == 800, "the batches before the full one are acknowledged"
        assert not is_dirty(m.root)
        m.check_clean()
        served = m.drain("t", "reader")
        # exactly what was acknowledged is there: nothing of the failed batch is visible
        assert sorted(e["msgId"] for e in served) == sorted(r["msgId"] for r in acked)
        # fill it to the last byte: writers fail cleanly, readers still read
        fill_fs(small_fs)
        for args in (["send", "t", "x" * 5000], ["topic", "create", "u"]):
            one_error(m.run(*args), 1)
        res = m.run("consume", "t", "-g", "late", "--from", "first", "-e")
        assert res.returncode in (0, 1) and "Traceback" not in res.stderr, str(res)
        if res.returncode:
            assert "no space left on device" in one_error(res, 1, allow_warnings=True)
        assert m.ok("msg", "show", acked[0]["msgId"], "--json").json_lines()[0]["msgId"] == acked[0]["msgId"]
        m.ok("topic", "list")
        m.check_clean()
        (small_fs / "filler").unlink(missing_ok=True)
        m.ok("send", "t", "after")
        assert len(m.drain("t", "reader")) == 1
        m.check_clean()
    finally:
        m.cleanup()


def test_a_join_that_fails_on_a_full_disk_leaves_no_group_behind(small_fs: Path, tmp_path: Path) -> None:
    """A consumer that cannot join its group (its member record does not fit) leaves nothing
    that makes the group known: ``offsets show`` still says there is no such group (exit 3),
    as before the attempt; once there is room, the same group joins and consumes."""
    m = MQ(small_fs / "store", tmp_path)
    try:
        m.ok("topic", "create", "t", "--queues", "1")
        m.ok("send", "t", "one")
        fill_fs(small_fs)
        assert "no space left on device" in one_error(m.run("consume", "t", "-g", "G", "--from", "first", "-e"), 1)
        assert not (m.root / "consumers" / "G").exists()
        one_error(m.run("offsets", "show", "-g", "G"), 3, "consumer group 'G' does not exist")
        (small_fs / "filler").unlink()
        assert m.ok("consume", "t", "-g", "G", "--from", "first", "-e").out.split() == ["one"]
        m.ok("offsets", "show", "-g", "G")
        m.check_clean()
    finally:
        m.cleanup()


def test_a_topic_creation_cut_short_by_a_full_disk_leaves_no_part_of_the_topic(small_fs: Path, tmp_path: Path) -> None:
    """A creation whose files fit only in part (the config written, the epoch after it not):
    the error, and no config without its queues and mirror (which ``store check`` would call a
    damaged topic); with room for all, the topic is made. Each page count from 1 to 4 stops
    the creation at another of its writes (a tmpfs takes a page per small file)."""
    m = MQ(small_fs / "store", tmp_path)
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        m.ok("topic", "create", "t", "--queues", "2")
        for pages in range(1, 5):
            (small_fs / "spare").write_bytes(b"\0" * (pages * page))
            fill_fs(small_fs)
            (small_fs / "spare").unlink()   # exactly that many pages free
            name = f"u{pages}"
            res = m.run("topic", "create", name, "--queues", "2")
            made = name in m.ok("topic", "list").out.split()
            if res.returncode:
                assert "no space left on device" in one_error(res, 1), res
                assert not made
                assert not (m.root / "config" / "topics" / f"{name}.json").exists(), pages
                assert not (m.root / "consumequeue" / name).exists(), pages
            else:
                assert made, res
            m.check_clean()
            (small_fs / "filler").unlink()
        m.ok("topic", "create", "u2", "--queues", "2")
        m.ok("send", "u2", "-q", "1", "after")
        assert [e["body"] for e in m.drain("u2", "G")] == ["after"]
        m.check_clean()
    finally:
        m.cleanup()


@pytest.fixture
def ro_view(mq: MQ, tmp_path: Path):
    """A read-only bind mount of ``mq``'s store (root ignores file modes: the mount does not)."""
    view = tmp_path / "ro"
    view.mkdir()
    why = mount(["--bind", str(mq.root), str(view)])
    if why is None:
        why = mount(["-o", "remount,bind,ro", str(view)])
        if why is not None:
            umount(view)
    if why is not None:
        pytest.skip(f"cannot make a read-only view of the store (tried a read-only bind mount): {why}")
    yield view
    umount(view)


def test_read_only_store(mq: MQ, ro_view: Path, tmp_path: Path) -> None:
    mq.ok("send", "t", "-q", "0", "--keys", "k", "one")
    mq.ok("send", "t", "-q", "0", "two")
    ro = MQ(ro_view, tmp_path)
    for args in (["send", "t", "three"], ["topic", "create", "u"], ["consume", "t", "-g", "G", "-e"],
                 ["store", "recover"], ["tx", "send", "t", "x"]):
        msg = one_error(ro.run(*args), 1, allow_warnings=True)
        assert "read-only file system" in msg, msg
    assert ro.ok("msg", "query", "--topic", "t", "--key", "k", "--json").json_lines()[0]["body"] == "one"
    ro.ok("topic", "list")
    ro.ok("tx", "list")
    ro.check_clean()
    assert sizes(mq.root) == sizes(ro_view)
    # a store left dirty by a killed writer is still readable: what is complete, with a warning
    assert mq.run("send", "t", "-q", "0", "torn", failpoints="put-after-log").returncode == KILLED
    res = ro.run("topic", "status", "t", "--json")
    assert res.returncode == 0 and "cannot be written" in res.stderr, str(res)
    ro.ok("store", "check")
    mq.check_clean()  # the writable path recovers it
    assert [e["body"] for e in mq.drain("t", "G")] == ["one", "two", "torn"]


@pytest.mark.parametrize("damage", ["slots", "offsets"])
def test_key_index_damaged_in_its_middle_on_a_read_only_store_is_refused_not_denied(mq: MQ, ro_view: Path,
                                                                                      tmp_path: Path, damage: str) -> None:
    """A lookup whose walk finds the index damaged, or whose entries lead where no record
    starts, and that cannot repair it says so (exit 5, naming ``mqctl store recover``) instead
    of "no message with id"; nothing is written."""
    res = mq.ok("send", "t", "special", "-k", "findme", "--json")
    msg_id = res.json_lines()[0]["msgId"]
    path = Layout(mq.root).index_dir / f"{0:020d}"
    data = bytearray(path.read_bytes())
    if damage == "slots":
        for at in range(40, 40 + 4 * 131072, 4):   # every slot in use pointed past the entries
            v = int.from_bytes(data[at:at + 4], "big")
            if v:
                data[at:at + 4] = (v + 7).to_bytes(4, "big")
    else:
        for n in range(1, int.from_bytes(data[36:40], "big")):   # a bit of every entry's phyOffset
            data[40 + 4 * 131072 + n * 20 + 11] ^= 1
    path.write_bytes(bytes(data))
    before = sizes(mq.root)
    ro = MQ(ro_view, tmp_path)
    for args in (["msg", "show", msg_id], ["msg", "query", "--topic", "t", "--key", "findme"]):
        msg = one_error(ro.run(*args), 5, allow_warnings=True)
        assert "key index" in msg and "mqctl store recover" in msg, msg
    assert sizes(mq.root) == before
    assert mq.ok("msg", "show", msg_id, "--json").json_lines()[0]["body"] == "special"


def test_cut_queue_on_a_read_only_store_is_warned_about_once(mq: MQ, ro_view: Path, tmp_path: Path) -> None:
    """A consume queue cut by hand (``tests/faults/test_cut_queue.py``) that this process cannot
    repair: what the queue has is shown, with one warning naming the queue and ``mqctl store
    recover``; nothing is written; the writable store then repairs it and loses nothing."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"{i}\n" for i in range(1, 11)))
    os.truncate(Layout(mq.root).queue_dir("t", 0) / f"{0:020d}", 4 * 20)
    before = sizes(mq.root)
    res = MQ(ro_view, tmp_path).run("topic", "status", "t", "--json")
    assert res.returncode == 0 and res.json_lines()[0]["maxOffset"] == 4, str(res)
    lines = [ln for ln in res.stderr.split("\n") if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mqctl: warning: consume queue t/0 "), str(res)
    assert "mqctl store recover" in lines[0] and "from offset 4 on are not read" in lines[0], lines[0]
    assert sizes(mq.root) == before
    assert [e["body"] for e in mq.drain("t", "G")] == [str(i) for i in range(1, 11)]
    mq.check_clean()


@pytest.mark.parametrize("cut_to", [2, 7])   # entries left: below the group's offset (4), above it
def test_lag_of_a_cut_queue_on_a_read_only_store_is_counted_as_the_log_has_it(mq: MQ, ro_view: Path,
                                                                              tmp_path: Path, cut_to: int) -> None:
    """``progress`` counted the lag to the end of what the cut queue has: 0 (and a warning
    that the group's offset is past the end, "the topic was re-created?") or 3, where the
    group has 6 messages to get, which a consumer (it repairs the queue) or ``store recover``
    serves. Now the lag is the log's, with the one warning naming the queue; nothing written."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"{i}\n" for i in range(1, 11)))
    mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "4")
    os.truncate(Layout(mq.root).queue_dir("t", 0) / f"{0:020d}", cut_to * 20)
    before = sizes(mq.root)
    res = MQ(ro_view, tmp_path).run("progress", "-g", "g", "--json")
    assert res.returncode == 0, str(res)
    row = res.json_lines()[0]
    assert (row["brokerOffset"], row["consumerOffset"], row["lag"]) == (10, 4, 6), row
    lines = [ln for ln in res.stderr.split("\n") if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mqctl: warning: consume queue t/0 "), str(res)
    assert "mqctl store recover" in lines[0], lines[0]
    assert sizes(mq.root) == before
    assert mq.ok("consume", "t", "-g", "g", "-e").out.split() == [str(i) for i in range(5, 11)]
    mq.check_clean()


def test_deleted_key_index_on_a_read_only_store_is_warned_about(mq: MQ, ro_view: Path, tmp_path: Path) -> None:
    """The key index deleted by hand, on a store this process cannot repair: ``msg query`` says
    why it may miss messages and that ``mqctl store recover`` repairs it; nothing is written."""
    mq.ok("send", "t", "-q", "0", "--keys", "k", "one")
    shutil.rmtree(Layout(mq.root).index_dir)
    before = sizes(mq.root)
    res = MQ(ro_view, tmp_path).run("msg", "query", "--topic", "t", "--key", "k")
    assert res.returncode == 0, str(res)
    lines = [ln for ln in res.stderr.split("\n") if ln.startswith("mqctl: ")]
    assert len(lines) == 1 and lines[0].startswith("mqctl: warning: key index "), str(res)
    assert "mqctl store recover" in lines[0] and "may miss messages" in lines[0], lines[0]
    assert sizes(mq.root) == before
    assert "one" in mq.ok("msg", "query", "--topic", "t", "--key", "k").out
    mq.check_clean()


# -- files deleted under a running consumer ---------------------------------------------------------

def _stdout_lines(proc) -> list[str]:
    return proc.stdout().decode().split()


@pytest.mark.parametrize("victim", ["queue-lock", "member-lock", pytest.param("member-json", marks=pytest.mark.slow),
                                    pytest.param("offsets-json", marks=pytest.mark.slow)])
def test_state_file_deleted_under_a_running_consumer(mq: MQ, victim: str) -> None:
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("send", "t", "-q", "0", input=lines(5, 0, "a"))
    c = mq.start("consume", "t", "-g", "G", "--orderly", "--from", "first", "--rebalance-interval", "0.2")
    wait_for(lambda: len(_stdout_lines(c)) == 5, what="the first messages")
    wait_for(lambda: (mq.root / "locks" / "G" / "t" / "0.lock").exists(), what="the queue lock")
    targets = {
        "queue-lock": [mq.root / "locks" / "G" / "t" / "0.lock"],
        "member-json": list((mq.root / "consumers" / "G").glob("*.json")),
        "member-lock": list((mq.root / "consumers" / "G").glob("*.lock")),
        "offsets-json": [mq.root / "config" / "consumerOffset.json"],
    }[victim]
    assert targets
    for p in targets:
        p.unlink()
    mq.ok("send", "t", "-q", "0", input=lines(5, 0, "b"))
    # Either it carries on (re-takes its lock, re-publishes its record) or it stops with one
    # clear error line; never a traceback, never a message skipped.
    wait_for(lambda: len(_stdout_lines(c)) >= 10 or not c.alive(), timeout=30, what="delivery or a clean stop")
    assert "Traceback" not in c.stderr()
    if c.alive():
        if victim in ("queue-lock", "member-json"):  # re-taken / re-published
            wait_for(lambda: all(p.exists() for p in targets), timeout=30, what=f"{victim} recreated")
        assert c.stop() == 0, c.stderr()
    else:
        errors = [ln for ln in c.stderr().splitlines() if ln.startswith("mqctl: error: ")]
        assert c.p.returncode == 1 and len(errors) == 1, c.stderr()
    got = _stdout_lines(c) + mq.ok("consume", "t", "-g", "G", "-e").out.split()
    assert got[:5] == [f"a{i:06d}-" for i in range(5)]
    assert set(got[5:]) == {f"b{i:06d}-" for i in range(5)}  # the rest, by the running one or the next
    mq.check_clean()
    # the offsets were persisted: nothing is redelivered
    assert mq.ok("consume", "t", "-g", "G", "-e").stdout == b""


def _delete_queue_under_consumer(mq: MQ):
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", input=lines(5, 0, "a"))
    c = mq.start("consume", "t", "-g", "G", "--from", "first")
    wait_for(lambda: len(_stdout_lines(c)) == 5, what="the first messages")
    seg = next((mq.root / "consumequeue" / "t" / "0").iterdir())
    seg.unlink()
    time.sleep(0.5)
    assert c.alive(), c.stderr()
    return c


def test_consume_queue_deleted_under_a_running_consumer(mq: MQ) -> None:
    """A consume-queue segment removed: ``store check`` says which queue lost entries, and
    ``store recover`` rebuilds it from the log; consumers go on from their offsets."""
    c = _delete_queue_under_consumer(mq)
    res = mq.check()
    assert res.returncode == 1, str(res)
    assert any("consumequeue/t/0" in p.get("file", "") for p in res.json_lines()), res.out
    mq.ok("store", "recover")
    mq.check_clean()
    assert c.stop() == 0 and "Traceback" not in c.stderr()
    mq.ok("send", "t", input=lines(3, 0, "b"))
    assert mq.ok("consume", "t", "-g", "G", "-e").out.split() == [f"b{i:06d}-" for i in range(3)]
    assert [e["body"] for e in mq.drain("t", "fresh")] == [f"a{i:06d}-" for i in range(5)] + [f"b{i:06d}-" for i in range(3)]


@pytest.mark.slow
def test_running_consumer_goes_on_after_its_queue_is_rebuilt(mq: MQ) -> None:
    c = _delete_queue_under_consumer(mq)
    mq.ok("store", "recover")
    mq.ok("send", "t", input=lines(3, 0, "b"))
    try:
        wait_for(lambda: len(_stdout_lines(c)) == 8, timeout=8, what="delivery after the rebuild")
    finally:
        c.stop()


@pytest.mark.slow
def test_deleted_write_lock_file_still_excludes(mq: MQ) -> None:
    from store.log.messagestore import Store
    mq.ok("send", "t", "-q", "0", "one")
    with Store.open(mq.root) as store, store.write_lock():
        (mq.root / "lock").unlink()
        p = subprocess.Popen(["timeout", "3", *MQCTL, "send", "t", "-q", "0", "two"],
                             env=mq.environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rc = p.wait(timeout=30)
    assert rc == 124, "a second writer got the write lock while this process held it"
