"""store/watch.py: a waiter wakes on the changes a consumer cares about, fast, and only then."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from store.inotify import inotify_available, is_remote_fs
from store.watch import Watcher, consumer_paths

BACKENDS = [pytest.param("inotify", marks=pytest.mark.skipif(not inotify_available(), reason="no inotify")),
            "poll"]


_LATER: list[threading.Thread] = []


@pytest.fixture(autouse=True)
def _no_later_outlives_its_test() -> Iterator[None]:
    """What a test scheduled with :func:`later` has run by its end (a delayed write landing in
    the next test's files, or its failure reported against that test, is another test's noise)."""
    yield
    while _LATER:
        _LATER.pop().join(10)


def later(delay: float, fn) -> threading.Thread:  # type: ignore[no-untyped-def]
    def run() -> None:
        time.sleep(delay)
        try:
            fn()
        except OSError:
            pass   # the test is over (a spurious early wake): its files or process are gone
    t = threading.Thread(target=run, daemon=True)
    t.start()
    _LATER.append(t)
    return t


def settle(w: Watcher) -> None:
    """Let the fixture's own writes age past the racy window (polling reports a snapshot taken
    right after a write as one more change, to be safe), and drain what they caused."""
    time.sleep(0.03)
    while w.wait(0.03):
        pass


def timed_wait(w: Watcher, timeout: float = 5.0) -> tuple[bool, float]:
    t0 = time.monotonic()
    got = w.wait(timeout)
    return got, time.monotonic() - t0


@pytest.mark.parametrize("backend", BACKENDS)
def test_times_out_when_nothing_changes(tmp_path: Path, backend: str) -> None:
    (tmp_path / "checkpoint").write_bytes(b"x")
    with Watcher([tmp_path / "checkpoint", tmp_path], backend=backend) as w:
        assert w.backend == backend
        settle(w)
        got, dt = timed_wait(w, 0.15)
        assert got is False and 0.1 <= dt < 2.0
        assert w.changed == set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_in_place_wakes_it(tmp_path: Path, backend: str) -> None:
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"a" * 64)
    with Watcher([(cp, "file")], backend=backend) as w:
        def write() -> None:
            fd = os.open(cp, os.O_WRONLY)
            os.pwrite(fd, b"b" * 64, 0)
            os.close(fd)
        later(0.05, write)
        got, dt = timed_wait(w)
        assert got and cp in w.changed and dt < 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_atomic_replace_wakes_it(tmp_path: Path, backend: str) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    target = cfg / "consumerOffset.json"
    target.write_text("{}")
    with Watcher([cfg], backend=backend) as w:
        def replace() -> None:
            tmp = cfg / "consumerOffset.json.tmp"
            tmp.write_text('{"a": 1}')
            os.replace(tmp, target)
        later(0.05, replace)
        assert w.wait(5.0) and cfg in w.changed


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_created_and_deleted_wake_it(tmp_path: Path, backend: str) -> None:
    d = tmp_path / "members"
    d.mkdir()
    with Watcher([d], backend=backend) as w:
        later(0.05, lambda: (d / "c1.json").write_text("{}"))
        assert w.wait(5.0)
        later(0.05, lambda: (d / "c1.json").unlink())
        assert w.wait(5.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wake_from_another_thread(tmp_path: Path, backend: str) -> None:
    with Watcher([tmp_path], backend=backend) as w:
        settle(w)
        later(0.05, w.wake)
        got, dt = timed_wait(w)
        assert got and dt < 2.0 and w.changed == set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_zero_wait_reads_what_is_pending(tmp_path: Path, backend: str) -> None:
    """``wait(0)`` looks once (what an event loop calls after a descriptor became readable):
    a wake or a change already there is read, and the descriptors are quiet again."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"1")
    with Watcher([(cp, "file")], backend=backend) as w:
        settle(w)
        w.wake()
        assert w.wait(0) is True and w.changed == set()
        assert w.wait(0) is False
        time.sleep(0.02)   # mtime granularity, for polling
        cp.write_bytes(b"22")
        assert w.wait(0) is True and w.changed == {cp}
        assert w.wait(0) is False


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_change_between_waits_is_not_lost(tmp_path: Path, backend: str) -> None:
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"1")
    with Watcher([(cp, "file")], backend=backend) as w:
        settle(w)
        assert w.wait(0) is False
        time.sleep(0.02)   # mtime granularity, for polling
        cp.write_bytes(b"22")
        assert w.wait(2.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_directory_that_appears_later_is_watched(tmp_path: Path, backend: str) -> None:
    d = tmp_path / "consumers" / "g1"
    with Watcher([d], backend=backend) as w:
        later(0.05, lambda: d.mkdir(parents=True))
        assert w.wait(5.0) and d in w.changed
        while w.wait(0.05):   # whatever the creation produced
            pass
        later(0.05, lambda: (d / "m.json").write_text("{}"))
        assert w.wait(5.0) and d in w.changed


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_inotify_wakes_on_every_write(tmp_path: Path) -> None:
    """Each write wakes the waiter by an event (its wait's timeout is far beyond any poll). How
    fast is for tests/bench/bench_startup.py to measure, not for a test to assert."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"x")
    with Watcher([(cp, "file")], backend="inotify") as w:
        for _ in range(20):
            while w.wait(0.002):   # the previous write's IN_CLOSE_WRITE, if it came apart
                pass
            box: list[float] = []

            def write(box: list[float] = box) -> None:
                box.append(time.monotonic())
                with open(cp, "r+b") as fh:
                    fh.write(b"y")
            later(0.005, write)
            while True:
                assert w.wait(5.0), "a write did not wake the waiter within 5 s"
                if box:   # else a late event of the previous write: wait for this one's
                    break


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_readers_do_not_wake_it(tmp_path: Path) -> None:
    """Read-only opens (lock probes, scans) must not wake waiters, or they wake each other."""
    d = tmp_path / "locks"
    d.mkdir()
    f = d / "q0.lock"
    f.write_text("")
    with Watcher([d], backend="inotify") as w:
        def probe() -> None:
            fd = os.open(f, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.close(fd)
            os.listdir(d)
            f.read_text()
        later(0.02, probe)
        assert w.wait(0.3) is False


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_a_lock_holder_killed_wakes_it(tmp_path: Path) -> None:
    """kill -9 of a flock holder: the kernel closes its (read-write) descriptor, which
    inotify reports, so a waiter learns of the released lock without polling."""
    d = tmp_path / "locks"
    d.mkdir()
    f = d / "q0.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", str(f)],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with Watcher([d], backend="inotify") as w:
            while w.wait(0.05):
                pass
            later(0.05, lambda: os.kill(holder.pid, signal.SIGKILL))
            got, dt = timed_wait(w)
            assert got and dt < 2.0
        fd = os.open(f, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # released indeed
        finally:
            os.close(fd)
    finally:
        holder.kill()
        holder.wait()


def test_polling_sees_two_writes_in_one_clock_tick(tmp_path: Path) -> None:
    """Same size, same coarse mtime: the racy-snapshot rule still reports the second write."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"a" * 64)
    with Watcher([(cp, "file")], backend="poll", poll_min=0.001, poll_max=0.002) as w:
        settle(w)
        cp.write_bytes(b"b" * 64)
        assert w.wait(1.0)
        cp.write_bytes(b"c" * 64)   # at once: quite likely the same mtime tick
        assert w.wait(1.0)


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_an_idle_wait_costs_no_cpu(tmp_path: Path) -> None:
    with Watcher([(tmp_path / "checkpoint", "file"), tmp_path], backend="inotify") as w:
        c0 = time.thread_time()
        assert w.wait(0.5) is False
        assert time.thread_time() - c0 < 0.02


def test_consumer_paths_cover_messages_members_offsets_and_topics(tmp_path: Path) -> None:
    from store.layout import Layout
    lay = Layout(tmp_path)
    got = dict(consumer_paths(lay, "g"))
    assert got[lay.checkpoint] == "file"
    assert got[lay.members_dir("g")] == "dir"
    assert got[lay.topics_epoch] == "replaced"
    assert got[lay.consumer_offset_json] == "replaced"
    # not config/ (every commit writes its lock and temporary files there) nor locks/<group>/
    assert lay.config_dir not in got and lay.queue_locks_dir("g") not in got


def test_local_tmp_is_not_remote(tmp_path: Path) -> None:
    assert is_remote_fs(tmp_path) is None


def test_forced_polling_by_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQCTL_WATCH", "poll")
    with Watcher([tmp_path]) as w:
        assert w.backend == "poll"


def test_a_store_batch_wakes_a_watcher_on_consumer_paths(tmp_path: Path) -> None:
    """End to end: Store.put rewrites the checkpoint, which is what wakes a consumer."""
    from store.log.messagestore import Store
    from store.log.record import Draft
    with Store.open(tmp_path / "s", create=True) as st:
        st.put([Draft(topic="t", body=b"first")])
        with Watcher(consumer_paths(st.layout, "g")) as w:
            while w.wait(0.05):
                pass
            put = later(0.05, lambda: st.put([Draft(topic="t", body=b"hello")]))
            assert w.wait(5.0) and st.layout.checkpoint in w.changed
            # (a wait that returned before the put, under load, must not close the store under
            # it: the put then failed in its thread, reported against whichever test ran next)
            put.join(10)


def _inotify_fds() -> int:
    """This process's inotify descriptors, once every watcher closed before has let its own
    go (a thread of its own closes each: see Watcher.close)."""
    for t in threading.enumerate():
        if t.name == "inotify-close":
            t.join(10)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return n


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lazy_watcher_sets_up_at_its_first_wait_and_reports_every_path(tmp_path: Path, backend: str) -> None:
    """A consumer that drains and exits never waits: a lazy watcher opens nothing until then.
    Its first wait cannot know what changed before it watched, so it says everything did;
    from then on it waits as any other."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"x")
    before = _inotify_fds()
    with Watcher([(cp, "file"), tmp_path / "members"], backend=backend, lazy=True) as w:
        assert _inotify_fds() == before
        assert w.wait(5.0) is True
        assert w.changed == {cp, tmp_path / "members"}
        assert _inotify_fds() == before + (backend == "inotify")
        settle(w)
        later(0.05, lambda: cp.write_bytes(b"y" * 10))
        got, _dt = timed_wait(w)
        assert got is True and cp in w.changed
    assert _inotify_fds() == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wait_for_a_wake_alone_sets_up_nothing(tmp_path: Path, backend: str) -> None:
    """``wait_woken`` (a consumer waiting for its own offset commit, which its writer thread
    wakes it for): woken by a thread, with no limit or a timeout, it opens no inotify instance
    and a lazy watcher stays lazy; its next real wait still says every path changed."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"x")
    before = _inotify_fds()
    with Watcher([(cp, "file")], backend=backend, lazy=True) as w:
        later(0.05, w.wake)
        assert w.wait_woken(None) is True and w.woken and w.changed == set()
        assert w.wait_woken(0.05) is False and not w.woken
        cp.write_bytes(b"y")   # (unseen by those waits: the next wait says so)
        assert not w.started and _inotify_fds() == before
        assert w.wait(5.0) is True and w.changed == {cp}
    assert _inotify_fds() == before


def test_a_wait_for_a_wake_alone_with_the_pipe_above_fd_setsize(tmp_path: Path) -> None:
    """A process with over 1024 descriptors open (a server, many segments): the wake pipe's
    descriptor is above select's FD_SETSIZE, which a wait for a wake must not trip on."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard) < 1200:
        pytest.skip("the descriptor limit is under 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024   # (the lowest free numbers: the wake pipe's come after these)
        with Watcher([(tmp_path / "checkpoint", "file")], lazy=True) as w:
            later(0.05, w.wake)
            assert w.wait_woken(5.0) is True
            assert w.wait_woken(0.01) is False
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_watchers_sharing_an_instance_keep_their_watches_apart(tmp_path: Path) -> None:
    """Two watchers of one directory through one shared instance get the same watch
    descriptor from the kernel: when one closes, the other must still be woken (the watch is
    removed only with its last owner), and each sees only its own paths."""
    from store.inotify import Instance
    inst = Instance()
    released: list[str] = []
    a = Watcher([(tmp_path / "checkpoint", "file")], lazy=True)
    b = Watcher([(tmp_path / "checkpoint", "file"), (tmp_path / "other", "file")], lazy=True)
    a.share(inst, lambda: released.append("a"))
    b.share(inst, lambda: released.append("b"))
    assert a.wait(0) and b.wait(0)   # (a first wait sets the watches up)
    assert a.descriptors() == (a.fileno(),)   # the instance is the owner's to read, not ours
    (tmp_path / "other").write_bytes(b"x")
    inst.pump()                               # what the loop's reader does
    assert b.wait(0) and b.changed == {tmp_path / "other"}
    assert not a.wait(0)
    a.close()
    assert released == ["a"]
    (tmp_path / "checkpoint").write_bytes(b"y")
    inst.pump()
    assert b.wait(0) and b.changed == {tmp_path / "checkpoint"}
    b.close()
    assert released == ["a", "b"]
    inst.close()


def _queued(fd: int) -> bool:
    """Whether the kernel has queued anything on ``fd`` (nothing read)."""
    import select
    poll = select.poll()   # (not select(): a long suite's process has descriptors past FD_SETSIZE)
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_a_replaced_file_watch_queues_nothing_for_the_writes_beside_it(tmp_path: Path) -> None:
    """An offset commit writes the journal, a lock file and temporary files beside the table
    it then renames into place: a "replaced" watch has the kernel queue none of those writes
    (a "file" watch's directory queues them all, to be filtered out by name afterwards)."""
    table = tmp_path / "consumerOffset.json"
    table.write_text("{}")
    with Watcher([(table, "replaced")], backend="inotify") as w:
        settle(w)
        (tmp_path / "consumerOffset.log").write_bytes(b"record")
        (tmp_path / "consumerOffset.json.lock").write_bytes(b"")
        tmp = tmp_path / ".consumerOffset.json.1.tmp"
        tmp.write_text('{"a": 1}')
        table.write_text("{}")   # (in place: not how the table is written, so not watched)
        assert not _queued(w.fileno())
        os.replace(tmp, table)
        assert _queued(w.fileno())
        assert w.wait(0) and w.changed == {table} and not w.woken
        table.unlink()
        assert w.wait(5.0) and w.changed == {table}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replaced_file_wakes_it_when_replaced_or_deleted(tmp_path: Path, backend: str) -> None:
    epoch = tmp_path / "config" / "topics.epoch"
    epoch.parent.mkdir()
    epoch.write_text("1")
    with Watcher([(epoch, "replaced")], backend=backend) as w:
        settle(w)
        tmp = epoch.with_name(".topics.epoch.tmp")
        tmp.write_text("2")
        later(0.05, lambda: os.replace(tmp, epoch))
        got, _dt = timed_wait(w)
        assert got and w.changed == {epoch}
        settle(w)
        later(0.05, epoch.unlink)
        got, _dt = timed_wait(w)
        assert got and w.changed == {epoch}


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
@pytest.mark.parametrize("replaced_first", [True, False])
def test_watchers_sharing_an_instance_get_the_union_of_their_events(tmp_path: Path, replaced_first: bool) -> None:
    """The kernel keeps one mask per directory and instance: a "replaced" watch added after a
    "file" watch of the same directory must not narrow it (the file's in-place writes still
    wake its watcher), whichever comes first."""
    from store.inotify import Instance
    inst = Instance()
    table, cp = tmp_path / "consumerOffset.json", tmp_path / "checkpoint"
    a = Watcher([(table, "replaced")], lazy=True)
    b = Watcher([(cp, "file")], lazy=True)
    for w in ((a, b) if replaced_first else (b, a)):
        w.share(inst, lambda: None)
        assert w.wait(0)   # (a first wait sets the watches up)
    cp.write_bytes(b"in place")
    inst.pump()
    assert b.wait(0) and b.changed == {cp}
    assert not a.wait(0)
    a.close()
    b.close()
    inst.close()


def test_woken_says_a_wake_came_with_the_changes(tmp_path: Path) -> None:
    """A caller that waits on through changes it does not care about (a member, through other
    members' commits) must not wait on through a wake(): ``woken`` tells them apart."""
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"x")
    with Watcher([(cp, "file")]) as w:
        settle(w)
        cp.write_bytes(b"y")
        assert w.wait(5.0) and w.changed == {cp} and not w.woken
        cp.write_bytes(b"z")
        w.wake()
        assert w.wait(5.0) and w.woken
        assert not w.wait(0) and not w.woken


@pytest.mark.skipif(not inotify_available(), reason="no inotify")
def test_the_c_modules_inotify_calls_answer_as_libcs_through_ctypes(tmp_path: Path) -> None:
    """store/inotify.py's calls come from the store's C module where it was built, else from
    libc through ctypes: both watch a directory and tell its file system the same."""
    from store.inotify import DIR_MASK, EVENT, IN_CREATE, LibcCalls, calls
    found = calls()
    sides = [LibcCalls()] + ([found] if not isinstance(found, LibcCalls) else [])
    if os.environ.get("CI"):
        assert len(sides) == 2, "the C module has no inotify calls: built from an older source"
    for i, side in enumerate(sides):
        fd = side.inotify_open()
        try:
            assert side.inotify_add(fd, os.fsencode(tmp_path), DIR_MASK) >= 1
            assert side.inotify_add(fd, os.fsencode(tmp_path / "missing"), DIR_MASK) == -1
            (tmp_path / f"f{i}").write_bytes(b"x")
            wd, mask, _cookie, length = EVENT.unpack_from(os.read(fd, 4096))
            assert mask & IN_CREATE and wd >= 1
            side.inotify_rm(fd, wd)
        finally:
            os.close(fd)
        assert side.fs_type(os.fsencode(tmp_path)) == sides[0].fs_type(os.fsencode(tmp_path)) > 0
        assert side.fs_type(os.fsencode(tmp_path / "missing")) == -1
