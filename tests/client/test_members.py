"""Consumer-group membership (store/client/members.py): liveness is an OS lock, so the tests that
matter run members in separate processes and kill them."""
from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from store.client.members import Membership, live_members, members_token
from store.errors import ClientIdInUseError, InvalidNameError, OperationError
from store.layout import Layout
from tests.procs import finish, python

# A member in its own process, driven one command per stdin line ("join", "leave",
# "update {json}"); it answers each with one JSON line. Arguments: store, group, client id.
DRIVER = r"""
import json, sys
from pathlib import Path
from store.errors import ClientIdInUseError
from store.layout import Layout
from store.client.members import Membership

root, group, cid = sys.argv[1:4]
member = Membership(Layout(Path(root)), group, cid, {"topics": ["T"], "mode": "clustering"})
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    try:
        if cmd == "join":
            member.join()
        elif cmd == "leave":
            member.leave()
        elif cmd == "update":
            member.update(**json.loads(arg))
        out = "ok"
    except ClientIdInUseError as exc:
        out = {"error": str(exc), "exit_code": exc.exit_code}
    print(json.dumps(out), flush=True)
"""


class Member:
    def __init__(self, root: Path, group: str, client_id: str):
        self.proc = python(DRIVER, root, group, client_id, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
        assert self._read() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, cmd: str):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self):
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "member process did not answer"
        line = self.proc.stdout.readline()
        assert line, f"member process exited with {self.proc.wait()}"
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def members(root: Path):
    started: list[Member] = []

    def start(client_id: str, group: str = "G") -> Member:
        member = Member(root, group, client_id)
        started.append(member)
        return member

    yield start
    for member in started:
        member.close()


def ids(layout: Layout, group: str = "G") -> list[str]:
    return [m.clientId for m in live_members(layout, group)]


# -- across processes ------------------------------------------------------------------------

def test_a_client_id_used_by_a_live_process_is_refused(members):
    first, second = members("c1"), members("c1")
    assert first.ask("join") == "ok"
    refused = second.ask("join")
    assert refused == {"error": f"client id c1 is already used by a live member (pid {first.pid})",
                       "exit_code": 4}


def test_the_same_id_is_refused_in_this_process_too(layout, members):
    other = members("c1")
    assert other.ask("join") == "ok"
    with pytest.raises(ClientIdInUseError):
        Membership(layout, "G", "c1").join()
    assert ids(layout) == ["c1"]


def test_a_member_killed_with_sigkill_is_gone_at_once(members, layout):
    one, two = members("c1"), members("c2")
    assert one.ask("join") == "ok" and two.ask("join") == "ok"
    assert ids(layout) == ["c1", "c2"]
    token = members_token(layout, "G")
    one.kill()
    assert ids(layout) == ["c2"]
    assert members_token(layout, "G") != token
    assert (layout.members_dir("G") / "c1.json").exists()  # the leftover is only ignored


def test_a_dead_members_id_can_be_taken_again_without_cleaning(members, layout):
    first = members("c1")
    assert first.ask("join") == "ok"
    first.kill()
    again = members("c1")
    assert again.ask("join") == "ok"
    [member] = live_members(layout, "G")
    assert member.pid == again.pid


def test_a_member_that_leaves_frees_its_id(members, layout):
    first = members("c1")
    assert first.ask("join") == "ok"
    assert first.ask("leave") == "ok"
    assert ids(layout) == []
    assert os.listdir(layout.members_dir("G")) == []
    second = members("c1")
    assert second.ask("join") == "ok"
    assert ids(layout) == ["c1"]


def test_updates_from_another_process_are_seen(members, layout):
    member = members("c1")
    assert member.ask("join") == "ok"
    assert member.ask('update {"queues": [{"topic": "T", "queueId": 2}], "heartbeatAt": 5}') == "ok"
    [info] = live_members(layout, "G")
    assert info.queues == [{"topic": "T", "queueId": 2}]
    assert info.record["heartbeatAt"] == 5 and info.record["mode"] == "clustering"
    assert info.to_dict() == {**info.record, "group": "G", "clientId": "c1", "pid": member.pid,
                              "host": info.host, "startedAt": info.startedAt}


# -- in one process --------------------------------------------------------------------------

def test_join_publishes_the_record(layout):
    member = Membership(layout, "G", "host@1", {"topics": ["T"], "mode": "broadcasting",
                                                "orderly": True, "strategy": "circle",
                                                "pid": 999})
    member.join()
    record = json.loads((layout.members_dir("G") / "host@1.json").read_text())
    assert record["clientId"] == "host@1" and record["group"] == "G"
    assert record["pid"] == os.getpid()  # the caller cannot publish someone else's pid
    assert isinstance(record["startedAt"], int) and record["host"]
    assert (record["topics"], record["mode"], record["orderly"], record["strategy"]) == \
        (["T"], "broadcasting", True, "circle")
    [info] = live_members(layout, "G")
    assert (info.group, info.clientId, info.pid, info.startedAt) == \
        ("G", "host@1", os.getpid(), record["startedAt"])
    assert info.queues == []


def test_update_merges_fields_but_keeps_the_identity(layout):
    member = Membership(layout, "G", "c1", {"topics": ["T"]})
    member.join()
    started = member.record["startedAt"]
    member.update(queues=[{"topic": "T", "queueId": 0}], heartbeatAt=1, startedAt=0, pid=1)
    member.update(heartbeatAt=2)
    record = live_members(layout, "G")[0].record
    assert record["queues"] == [{"topic": "T", "queueId": 0}]
    assert (record["heartbeatAt"], record["topics"]) == (2, ["T"])
    assert (record["startedAt"], record["pid"]) == (started, os.getpid())


def test_leave_removes_both_files_and_is_idempotent(layout):
    member = Membership(layout, "G", "c1")
    member.join()
    assert sorted(os.listdir(layout.members_dir("G"))) == [".beats", "c1.json", "c1.lock"]
    assert os.listdir(layout.members_dir("G") / ".beats") == ["c1"]
    member.leave()
    member.leave()
    assert os.listdir(layout.members_dir("G")) == []
    assert not member.joined


def test_context_manager_joins_and_leaves(layout):
    with Membership(layout, "G", "c1") as member:
        assert member.joined and ids(layout) == ["c1"]
    assert ids(layout) == []


def test_update_before_join_or_after_losing_the_lock_file_fails(layout):
    member = Membership(layout, "G", "c1")
    with pytest.raises(OperationError):
        member.update(heartbeatAt=1)
    member.join()
    (layout.members_dir("G") / "c1.lock").unlink()
    with pytest.raises(OperationError):
        member.update(heartbeatAt=1)


def test_leftovers_without_a_lock_holder_are_ignored_and_pruned(layout):
    gone = Membership(layout, "G", "gone")
    gone.join()
    os.close(gone._fd)  # what a crash does: the lock goes, the files stay
    gone._fd = None
    alive = Membership(layout, "G", "alive")
    alive.join()
    assert ids(layout) == ["alive"]
    assert (layout.members_dir("G") / "gone.json").exists()
    assert [m.clientId for m in live_members(layout, "G", prune=True)] == ["alive"]
    assert sorted(os.listdir(layout.members_dir("G"))) == [".beats", "alive.json", "alive.lock"]
    assert os.listdir(layout.members_dir("G") / ".beats") == ["alive"]


def test_a_json_without_any_lock_file_is_not_a_member(layout):
    directory = layout.members_dir("G")
    directory.mkdir(parents=True)
    (directory / "ghost.json").write_text('{"clientId": "ghost", "pid": 1}')
    (directory / "garbage.json").write_text("not json")
    assert ids(layout) == []
    live_members(layout, "G", prune=True)
    assert os.listdir(directory) == []


def test_the_token_follows_membership_not_updates(layout):
    assert members_token(layout, "G") == ()
    one = Membership(layout, "G", "c1")
    one.join()
    after_join = members_token(layout, "G")
    one.update(heartbeatAt=123)
    assert members_token(layout, "G") == after_join == ("c1",)
    two = Membership(layout, "G", "c2")
    two.join()
    assert members_token(layout, "G") == ("c1", "c2")
    one.leave()
    assert members_token(layout, "G") == ("c2",)


def test_members_sort_by_plain_string_order(layout):
    for cid in ["c2", "c10", "c1"]:
        Membership(layout, "G", cid).join()
    assert ids(layout) == ["c1", "c10", "c2"]


def test_bad_names_are_refused(layout):
    with pytest.raises(InvalidNameError):
        Membership(layout, "G", "../x")
    with pytest.raises(InvalidNameError):
        Membership(layout, "a/b", "c1")


def test_member_files_are_private(layout):
    Membership(layout, "G", "c1").join()
    directory = layout.members_dir("G")
    assert directory.stat().st_mode & 0o777 == 0o700
    for name in ("c1.json", "c1.lock"):
        assert (directory / name).stat().st_mode & 0o777 == 0o600


# -- the unlink protocol under churn -----------------------------------------------------------

CHURN = r"""
import os, sys, time
from pathlib import Path
from store.errors import ClientIdInUseError
from store.layout import Layout
from store.client.members import Membership, live_members

root, marker, seconds = sys.argv[1:4]
layout = Layout(Path(root))
deadline, held = time.monotonic() + float(seconds), 0
while time.monotonic() < deadline:
    member = Membership(layout, "G", "shared")
    try:
        member.join()
    except ClientIdInUseError:
        live_members(layout, "G", prune=True)
        continue
    # One holder of the id at a time: O_EXCL fails if another holder's marker is there.
    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    time.sleep(0.0005)
    os.unlink(marker)
    member.leave()
    held += 1
print(held)
"""


def test_joining_leaving_and_pruning_one_id_never_gives_two_holders(root, tmp_path):
    marker = tmp_path / "holder"
    procs = [python(CHURN, root, marker, 1.5, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    assert sum(int(out) for out in finish(*procs, timeout=60)) > 20


def test_a_joiner_whose_group_directory_goes_under_it_makes_it_again(layout, monkeypatch):
    """A join that fails on a full disk removes the group's directory it made (``offsets show``
    must still say the group does not exist); another process joining at that moment finds the
    directory gone before it locks its file, and makes it again instead of failing."""
    import store.client.members as members_mod
    real = members_mod.open_exclusive
    removed = []

    def gone_once(path: Path):
        if not removed:
            os.rmdir(path.parent)   # (as the failed joiner's clean-up does, between the two steps)
            removed.append(path.parent)
        return real(path)

    monkeypatch.setattr(members_mod, "open_exclusive", gone_once)
    member = Membership(layout, "G", "c1")
    member.join()
    assert removed == [layout.members_dir("G")]
    assert json.loads((layout.members_dir("G") / "c1.json").read_text())["clientId"] == "c1"
    member.leave()


def test_a_failed_join_removes_the_group_directory_it_made_and_only_that(layout, monkeypatch):
    import store.client.members as members_mod

    def full(self, record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(members_mod.Membership, "_publish", full)
    with pytest.raises(OSError):
        Membership(layout, "G", "c1").join()
    assert not layout.members_dir("G").exists()
    layout.members_dir("H").mkdir(parents=True)   # a group known before (a past member)
    with pytest.raises(OSError):
        Membership(layout, "H", "c1").join()
    assert layout.members_dir("H").is_dir()


def test_a_member_not_heard_from_for_the_expiry_is_live_but_not_counted(layout):
    # (a stopped member kept its queues for ever: its flock alone made it count)
    from store.client.leases import MEMBER_EXPIRY_MS
    from store.client.members import members_look
    stuck, other = Membership(layout, "G", "stuck"), Membership(layout, "G", "other")
    stuck.join()
    other.join()
    token, soonest = members_look(layout, "G", "other")
    beat = os.stat(layout.member_beat("G", "stuck")).st_mtime_ns // 1_000_000
    assert token == ("other", "stuck") and soonest == beat + MEMBER_EXPIRY_MS
    old = time.time() - MEMBER_EXPIRY_MS / 1000 - 1
    os.utime(layout.member_beat("G", "stuck"), (old, old))   # what a stop that long leaves
    assert [m.clientId for m in live_members(layout, "G", prune=True, counted_only=True)] == ["other"]
    assert [m.clientId for m in live_members(layout, "G")] == ["other", "stuck"]   # still live
    assert members_token(layout, "G") == ("other",)
    stuck.beat_at = int(old * 1000)
    assert stuck.beat() is True                # it notices it lapsed ...
    assert members_token(layout, "G") == ("other", "stuck")   # ... and counts again
    assert stuck.beat() is False
