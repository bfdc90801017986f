"""Queue locks (store/client/qlocks.py), with real processes wherever ownership crosses processes:
flock locks belong to open file descriptions, so only separate processes show what a crash,
a kill -9 or a SIGSTOP does to them."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from store.client.group_mutex import group_mutex
from store.client.locktable import list_locks, unlock
from store.client.qlocks import QueueLock
from store.errors import InvalidNameError, LockHeldError, UsageError
from store.layout import Layout
from tests.procs import finish, python

# A lock holder in its own process, driven one command per stdin line; it answers each with
# one JSON line. Arguments: store, group, topic, queueId, clientId, lease ms, client lease ms,
# and "function:seconds" to slow one step of store.client.qlocks down (or "").
DRIVER = r"""
import json, subprocess, sys
from pathlib import Path
from store.layout import Layout
from store.client.qlocks import QueueLock

root, group, topic, qid, cid, lease, client_lease, delay = sys.argv[1:9]
if delay:
    # Widen a race window on purpose: the named step sleeps before it runs.
    import time
    import store.client.qlocks as qlocks
    name, seconds = delay.split(":")
    step = getattr(qlocks, name)
    def slowed(*args, **kwargs):
        time.sleep(float(seconds))
        return step(*args, **kwargs)
    setattr(qlocks, name, slowed)
warnings = []
lock = QueueLock(Layout(Path(root)), group, topic, int(qid), cid, warn=warnings.append,
                 lease_ms=int(lease), client_lease_ms=int(client_lease))
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "acquire":
        out = lock.try_acquire()
    elif cmd == "renew":
        out = lock.renew()
    elif cmd == "valid":
        out = lock.is_valid()
    elif cmd == "release":
        out = lock.release()
    elif cmd == "warnings":
        out = warnings
    elif cmd == "spawn":
        # close_fds=False: a lock descriptor without close-on-exec would leak into the child.
        out = subprocess.Popen(["sleep", "60"], close_fds=False).pid
    else:
        out = "unknown command " + cmd
    print(json.dumps(out), flush=True)
"""


class Holder:
    """A QueueLock living in another process."""

    def __init__(self, root: Path, client_id: str, *, group: str = "G", topic: str = "T",
                 queue_id: int = 0, lease_ms: int = 60_000, client_lease_ms: int = 30_000,
                 delay: str = ""):
        self.proc = python(DRIVER, root, group, topic, queue_id, client_id, lease_ms,
                           client_lease_ms, delay, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._read() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, cmd: str):
        self.send(cmd)
        return self.answer()

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def answer(self):
        return self._read()

    def _read(self):
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "lock holder process did not answer"
        line = self.proc.stdout.readline()
        assert line, f"lock holder process exited with {self.proc.wait()}"
        return json.loads(line)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def holders(root: Path):
    started: list[Holder] = []

    def start(client_id: str, **kw) -> Holder:
        holder = Holder(root, client_id, **kw)
        started.append(holder)
        return holder

    yield start
    for holder in started:
        holder.close()


def read_record(layout: Layout, group="G", topic="T", queue_id=0) -> dict:
    return json.loads(layout.queue_lock(group, topic, queue_id).read_text())


# -- across processes ------------------------------------------------------------------------

def test_a_second_process_cannot_take_a_held_queue(holders):
    first, second = holders("c1"), holders("c2")
    assert first.ask("acquire") is True
    assert second.ask("acquire") is False
    assert first.ask("valid") is True


def test_a_lock_in_this_process_excludes_another_object_in_it_too(layout):
    one = QueueLock(layout, "G", "T", 0, "c1")
    other = QueueLock(layout, "G", "T", 0, "c2")
    assert one.try_acquire()
    assert not other.try_acquire()


def test_kill_9_of_the_holder_frees_the_queue_at_once(holders, layout):
    holder = holders("c1")  # default 60 s lease: taking over must not wait for it
    assert holder.ask("acquire") is True
    holder.kill()
    contender = QueueLock(layout, "G", "T", 0, "c2")
    started = time.monotonic()
    assert contender.try_acquire()
    assert time.monotonic() - started < 2
    assert read_record(layout)["clientId"] == "c2"


def test_a_handler_started_by_the_holder_does_not_inherit_the_lock(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    child = holder.ask("spawn")
    try:
        holder.kill()
        assert QueueLock(layout, "G", "T", 0, "c2").try_acquire()
    finally:
        os.kill(child, signal.SIGKILL)


def test_is_valid_detects_a_deleted_lock_file(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    layout.queue_lock("G", "T", 0).unlink()
    assert holder.ask("valid") is False
    assert holder.ask("renew") is False
    warnings = holder.ask("warnings")
    assert len(warnings) == 1 and "deleted" in warnings[0]


def test_is_valid_detects_a_replaced_lock_file(layout):
    warnings: list[str] = []
    lock = QueueLock(layout, "G", "T", 0, "c1", warn=warnings.append)
    assert lock.try_acquire()
    path = layout.queue_lock("G", "T", 0)
    replacement = path.with_name("new")
    replacement.write_text("{}")
    os.replace(replacement, path)
    assert not lock.is_valid()
    assert not lock.held
    assert len(warnings) == 1 and "replaced" in warnings[0]


def test_a_crashed_holders_record_is_listed_as_not_alive(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    [live] = list_locks(layout)
    assert (live.group, live.topic, live.queueId, live.clientId, live.pid, live.alive) == \
        ("G", "T", 0, "c1", holder.pid, True)
    holder.kill()
    [stale] = list_locks(layout, "G")
    assert stale.alive is False
    assert (stale.clientId, stale.pid, stale.renewedAt) == ("c1", holder.pid, live.renewedAt)


def test_unlock_leaves_a_live_lock_alone_and_force_breaks_it(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    assert unlock(layout, "G") == []
    assert layout.queue_lock("G", "T", 0).exists()
    assert holder.ask("valid") is True

    [broken] = unlock(layout, "G", force=True)
    assert (broken.clientId, broken.alive) == ("c1", True)
    assert holder.ask("valid") is False
    assert any("deleted" in w for w in holder.ask("warnings"))
    assert QueueLock(layout, "G", "T", 0, "c2").try_acquire()


def test_unlock_removes_a_stale_lock(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    holder.kill()
    [released] = unlock(layout, "G", "T", 0)
    assert (released.clientId, released.alive) == ("c1", False)
    assert not layout.queue_lock("G", "T", 0).exists()
    assert list_locks(layout) == []


def test_a_stopped_holder_past_its_lease_is_broken_and_sees_it_on_resume(holders, layout):
    holder = holders("c1", lease_ms=1500, client_lease_ms=700)
    assert holder.ask("acquire") is True
    expires = read_record(layout)["expiresAt"]
    holder.kill(signal.SIGSTOP)
    contender = QueueLock(layout, "G", "T", 0, "c2", warn=lambda m: None)
    assert not contender.try_acquire()  # held and not expired yet
    time.sleep(max(0.0, expires / 1000 - time.time()) + 0.1)
    assert contender.try_acquire()
    [row] = list_locks(layout)
    assert (row.clientId, row.pid, row.alive) == ("c2", os.getpid(), True)

    holder.kill(signal.SIGCONT)
    assert holder.ask("renew") is False  # a renewal alone would pass: the file was replaced
    assert holder.ask("valid") is False
    assert any("replaced" in w for w in holder.ask("warnings"))
    assert contender.is_valid()
    assert read_record(layout)["clientId"] == "c2"


def test_contenders_racing_for_an_expired_lock_break_it_only_once(holders, layout):
    stuck = holders("stuck", lease_ms=800, client_lease_ms=400)
    assert stuck.ask("acquire") is True
    stuck.kill(signal.SIGSTOP)
    time.sleep(0.9)
    # Both decide "expired" on the stuck holder's record, then act at different times: without
    # the group mutex the later one would unlink the earlier one's fresh lock and take it too.
    early = holders("early", delay="_record_expired:0.3")
    late = holders("late", delay="_record_expired:0.6")
    early.send("acquire")
    late.send("acquire")
    results = {"early": early.answer(), "late": late.answer()}
    assert sorted(results.values()) == [False, True]
    winner = early if results["early"] else late
    assert winner.ask("valid") is True
    assert [r.clientId for r in list_locks(layout)] == [k for k, v in results.items() if v]


def test_a_renewal_racing_a_break_cannot_keep_the_queue(holders, layout):
    stuck = holders("stuck", lease_ms=800, client_lease_ms=400)
    assert stuck.ask("acquire") is True
    stuck.kill(signal.SIGSTOP)
    time.sleep(0.9)
    breaker = holders("breaker", delay="_record_expired:0.8")
    breaker.send("acquire")
    time.sleep(0.3)  # the breaker has judged the record expired and is about to act
    stuck.kill(signal.SIGCONT)
    assert stuck.ask("renew") is False  # waited for the break, then found the file replaced
    assert stuck.ask("valid") is False
    assert breaker.answer() is True


def test_a_new_holder_is_not_broken_before_its_record_is_written(holders, layout):
    dead = holders("dead", lease_ms=300, client_lease_ms=100)
    assert dead.ask("acquire") is True
    dead.kill()
    time.sleep(0.4)  # the file now carries an expired record and nobody holds it
    slow = holders("slow", delay="_write_record:0.8")
    slow.send("acquire")
    time.sleep(0.3)  # slow holds the OS lock, its record not yet written
    assert not QueueLock(layout, "G", "T", 0, "c2", warn=lambda m: None).try_acquire()
    assert slow.answer() is True
    assert slow.ask("valid") is True


def test_garbage_in_a_held_lock_file_lets_nobody_in_and_renew_repairs_it(holders, layout):
    holder = holders("c1")
    assert holder.ask("acquire") is True
    path = layout.queue_lock("G", "T", 0)
    with open(path, "r+b") as f:  # same inode: the holder's lock stays valid
        f.write(b"\x00garbage{{{" * 100)
    [row] = list_locks(layout)
    assert (row.clientId, row.pid, row.expiresAt, row.alive) == (None, None, None, True)
    assert not row.expired()
    assert not QueueLock(layout, "G", "T", 0, "c2").try_acquire()
    assert unlock(layout, "G") == []
    assert holder.ask("renew") is True
    assert read_record(layout)["clientId"] == "c1"


def test_an_expired_record_whose_holder_died_is_simply_taken(holders, layout):
    holder = holders("c1", lease_ms=300, client_lease_ms=100)
    assert holder.ask("acquire") is True
    holder.kill()
    time.sleep(0.4)
    warnings: list[str] = []
    lock = QueueLock(layout, "G", "T", 0, "c2", warn=warnings.append)
    assert lock.try_acquire()
    assert warnings == []  # nothing was broken: the OS lock was free


# -- in one process --------------------------------------------------------------------------

def test_the_record_describes_the_holder_and_its_lease(layout):
    lock = QueueLock(layout, "G", "T", 3, "host@1")
    before = int(time.time() * 1000)
    assert lock.try_acquire()
    rec = read_record(layout, queue_id=3)
    assert set(rec) == {"group", "topic", "queueId", "clientId", "pid", "host", "acquiredAt",
                        "renewedAt", "expiresAt"}
    assert (rec["group"], rec["topic"], rec["queueId"], rec["clientId"], rec["pid"]) == \
        ("G", "T", 3, "host@1", os.getpid())
    assert before <= rec["acquiredAt"] == rec["renewedAt"] <= int(time.time() * 1000)
    assert rec["expiresAt"] - rec["renewedAt"] == 60_000
    time.sleep(0.01)
    assert lock.renew()
    again = read_record(layout, queue_id=3)
    assert again["acquiredAt"] == rec["acquiredAt"] < again["renewedAt"]
    assert again["expiresAt"] == again["renewedAt"] + 60_000


def test_is_valid_needs_a_renewal_within_the_client_lease(layout):
    lock = QueueLock(layout, "G", "T", 0, "c1", lease_ms=1000, client_lease_ms=150)
    assert lock.try_acquire() and lock.is_valid()
    time.sleep(0.2)
    assert not lock.is_valid()
    assert lock.held  # the lease ran down but nobody took the queue: a renewal restores it
    assert lock.renew() and lock.is_valid()


def test_release_removes_the_file_and_lets_the_next_one_in(layout):
    lock = QueueLock(layout, "G", "T", 0, "c1")
    assert lock.try_acquire()
    lock.release()
    assert not lock.held and not lock.is_valid()
    assert not layout.queue_lock("G", "T", 0).exists()
    lock.release()  # a second release is harmless
    assert QueueLock(layout, "G", "T", 0, "c2").try_acquire()


def test_acquiring_again_while_holding_renews(layout):
    lock = QueueLock(layout, "G", "T", 0, "c1")
    assert lock.try_acquire()
    first = lock.renewed_at
    time.sleep(0.01)
    assert lock.try_acquire()
    assert lock.renewed_at > first and lock.acquired_at == first


def test_listing_probes_without_taking_or_changing_anything(layout):
    lock = QueueLock(layout, "G", "T", 0, "c1")
    assert lock.try_acquire()
    path = layout.queue_lock("G", "T", 0)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    list_locks(layout)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert lock.is_valid()


def test_list_and_unlock_filter_by_group_topic_and_queue(layout):
    for group, topic, qid in [("G", "T", 0), ("G", "T", 1), ("G", "U", 0), ("H", "T", 0)]:
        lock = QueueLock(layout, group, topic, qid, "c1")
        assert lock.try_acquire()
        lock._close()  # drop the OS lock without cleaning up, as a crash would
    assert [(r.group, r.topic, r.queueId) for r in list_locks(layout)] == \
        [("G", "T", 0), ("G", "T", 1), ("G", "U", 0), ("H", "T", 0)]
    assert [(r.topic, r.queueId) for r in list_locks(layout, "H")] == [("T", 0)]
    assert [(r.topic, r.queueId) for r in unlock(layout, "G", "T", 1)] == [("T", 1)]
    assert [(r.topic, r.queueId) for r in unlock(layout, "G", "U")] == [("U", 0)]
    assert [(r.group, r.topic, r.queueId) for r in list_locks(layout)] == \
        [("G", "T", 0), ("H", "T", 0)]


def test_an_empty_or_missing_table_lists_nothing(layout):
    assert list_locks(layout) == []
    assert list_locks(layout, "G") == []
    assert unlock(layout, "G", force=True) == []


def test_a_busy_group_mutex_makes_acquisition_fail_softly(layout):
    warnings: list[str] = []
    lock = QueueLock(layout, "G", "T", 0, "c1", warn=warnings.append, mutex_timeout=0.1)
    with group_mutex(layout, "G"):
        assert not lock.try_acquire()
        with pytest.raises(LockHeldError) as err:
            unlock(layout, "G", timeout=0.1)
    assert err.value.exit_code == 4
    assert len(warnings) == 1 and "busy" in warnings[0]
    assert lock.try_acquire()
    with group_mutex(layout, "G"):
        assert lock.renew()  # deferred, not lost
        assert lock.is_valid()


def test_bad_arguments_are_refused(layout):
    with pytest.raises(InvalidNameError):
        QueueLock(layout, "../x", "T", 0, "c1")
    with pytest.raises(InvalidNameError):
        QueueLock(layout, "G", "T", 0, "a/b")
    with pytest.raises(UsageError):
        QueueLock(layout, "G", "T", -1, "c1")
    with pytest.raises(UsageError):
        QueueLock(layout, "G", "T", 0, "c1", lease_ms=1000, client_lease_ms=1000)


def test_lock_files_are_private(layout):
    assert QueueLock(layout, "G", "T", 0, "c1").try_acquire()
    path = layout.queue_lock("G", "T", 0)
    assert path.stat().st_mode & 0o777 == 0o600
    assert layout.queue_locks_dir("G").stat().st_mode & 0o777 == 0o700


# -- the unlink protocol under churn -----------------------------------------------------------

CHURN = r"""
import os, sys, time
from pathlib import Path
from store.layout import Layout
from store.client.locktable import list_locks, unlock
from store.client.qlocks import QueueLock

root, cid, marker, seconds = sys.argv[1:5]
layout = Layout(Path(root))
lock = QueueLock(layout, "G", "T", 0, cid, warn=lambda m: None)
deadline, held = time.monotonic() + float(seconds), 0
while time.monotonic() < deadline:
    if not lock.try_acquire():
        list_locks(layout); unlock(layout, "G")
        continue
    assert lock.is_valid()
    # Only one owner at a time may exist: O_EXCL fails if another owner's marker is there.
    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    time.sleep(0.0005)
    os.unlink(marker)
    lock.release()
    held += 1
print(held)
"""


def test_acquire_release_probe_and_unlock_churn_never_gives_two_owners(root, tmp_path):
    marker = tmp_path / "owner"
    procs = [python(CHURN, root, f"c{i}", marker, 1.5, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(4)]
    assert sum(int(out) for out in finish(*procs, timeout=60)) > 20


def test_a_member_leaving_takes_the_groups_mutex_once_for_all_its_locks(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member that stops releases each queue's lock (its file unlinked while the OS lock is
    held, under the group's mutex): all of them under one take of the mutex, not one each."""
    import store
    import store.client.qlocks as qlocks
    with store.Producer(root) as p:
        for q in range(8):
            p.send("T", b"m%d" % q, queue=q)
    takes: list[str] = []
    real = qlocks.group_mutex

    def counting(layout: Layout, group: str, timeout: float = qlocks.MUTEX_TIMEOUT):  # type: ignore[no-untyped-def]
        takes.append(group)
        return real(layout, group, timeout)
    c = store.Consumer("T", "G", root, start_from="first")
    try:
        assert len(list(c.messages(exit_at_end=True))) == 8
        lock_dir = Layout(root).queue_locks_dir("G") / "T"
        assert len(list(lock_dir.glob("*.lock"))) == 8
        monkeypatch.setattr(qlocks, "group_mutex", counting)
    finally:
        c.close()
    assert takes == ["G"]
    assert list(lock_dir.glob("*.lock")) == []
