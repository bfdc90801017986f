"""Consumer-group membership: who is consuming, told apart from who merely was.

A running ``mqctl consume`` is a member of its group. RocketMQ learns its members from client
heartbeats and forgets one after a timeout; here a member proves it is alive by holding an OS
file lock (``flock`` through portalocker) for its whole life. The kernel drops the lock the
instant the process ends, however it ends (``kill -9`` included), so liveness never waits for
a lease or a heartbeat to run out.

Files (under the store root)::

    consumers/<group>/                 0700, created by the first member to join
    consumers/<group>/<clientId>.lock  empty; exclusively locked by the live member
    consumers/<group>/<clientId>.json  what the member publishes, written atomically
    consumers/<group>/.beats/<clientId>  empty; its mtime: when the member last proved it runs

A member's JSON (``fsutil.atomic_write_json``: sorted keys, no ``.bak``, not fsynced — after a
machine crash there are no live members to describe)::

    {"clientId": "host@4242", "group": "G", "host": "host", "pid": 4242,
     "startedAt": 1700000000000,               ms since the epoch
     ...whatever the consumer passes at join or update, by convention:
     "topics": ["T"], "mode": "clustering" | "broadcasting", "orderly": true,
     "strategy": "averagely", "queues": [{"topic": "T", "queueId": 0}],
     "heartbeatAt": 1700000020000}

``strategy`` is the member's allocation strategy (a Python ``store.Consumer``: ``averagely``;
a record without it, from an older version: ``averagely``); members that disagree on it are
warned about as members that subscribe otherwise are (``subscriptions.py``).

A member is live when its JSON exists *and* its lock is held. The lock is taken before the
JSON is written and the JSON is removed before the lock is given up, so a live member with no
JSON is one still joining, and a JSON whose lock is free was left by a dead process (ignored;
``live_members(..., prune=True)`` removes it).

Stuck members. A process stopped (SIGSTOP), swapped out or hung keeps its lock, so the lock
alone would let it keep its share of the group's queues for ever. So a member also proves
now and then that it runs (:meth:`Membership.beat`, with its lease renewals: every 20 s while
it consumes, every 40 s idle, ``leases.py``): it sets the mtime of
``consumers/<group>/.beats/<clientId>``, one ``utime`` in a subdirectory, which wakes no
member (inotify does not look into subdirectories). One not heard from for
``MEMBER_EXPIRY_MS`` (120 s, RocketMQ's channel expiry) is live but not *counted*
(``live_members(..., counted_only=True)``, :func:`members_token`): the others share the queues
without it and break its queue locks, whose 60 s lease ran out by then. When it runs again
its next beat finds its last one that old, and it rejoins: it rewrites its JSON (which wakes
the group) and is counted again; its queue locks, checked before every batch, tell it which
queues it lost meanwhile. A member with no beat file (one of an older version) always counts.

Unlinking lock files. A lock file is unlinked only by a process that holds its lock (the
leaving member, or a pruner that took the lock of a dead one), always after the JSON. Anyone
who takes a lock then checks that the path still names the file it locked; a joiner that
opened the old file just before the unlink ends up locking an orphan inode, notices, and opens
the new one (``flock.open_exclusive``). So a lock file can be deleted without ever letting two
processes believe they hold the same client id, and ``consumers/<group>/`` does not fill up
with the files of every ``HOST@PID`` that ever ran.

Probes take a *shared* lock and drop it at once: probes never block each other, and a joiner
that meets a probe (or a pruner's brief exclusive lock) retries for ``JOIN_GRACE`` seconds
before deciding that the client id is in use.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from store.client.leases import MEMBER_EXPIRY_MS
from store.errors import ClientIdInUseError, OperationError, io_error
from store.flock import (
    close_kept,
    keep,
    list_dir,
    names_same_file,
    now_ms,
    open_exclusive,
    probe_held,
    unlink_if_exists,
)
from store.fsutil import atomic_write_json, ensure_dir
from store.layout import Layout
from store.names import CLIENT_ID_RE, validate_client_id, validate_group

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

JOIN_GRACE = 0.25  # seconds a joiner keeps retrying a lock that a probe or pruner may hold
_RESERVED_FIELDS = ("clientId", "group", "pid", "host", "startedAt")


@dataclass(frozen=True)
class MemberInfo:
    """A live member as it describes itself. ``record`` is its whole JSON object."""

    group: str
    clientId: str
    pid: int | None
    host: str | None
    startedAt: int | None
    record: dict[str, Any] = field(default_factory=dict)
    # not heard from for ``MEMBER_EXPIRY_MS`` (stopped, hung): live, but the group shares its
    # queues without it (see the module docstring)
    expired: bool = False
    beatAt: int | None = None   # its beat file's time (ms), as listed; None: it has none

    @property
    def heard_from(self) -> int | None:
        """When it last proved it runs (ms): the later of the ``heartbeatAt`` it published (its
        JSON is rewritten at a rebalance, not at each beat) and :attr:`beatAt` (set at every
        beat); None when it published neither."""
        hb = _int_field(self.record, "heartbeatAt")
        return hb if self.beatAt is None else self.beatAt if hb is None else max(hb, self.beatAt)

    def to_dict(self) -> dict[str, Any]:
        """The published record, with the identity fields as this listing established them."""
        return {**self.record, "group": self.group, "clientId": self.clientId, "pid": self.pid,
                "host": self.host, "startedAt": self.startedAt}

    @property
    def shares_queues(self) -> bool:
        """Whether it takes a share of the group's queues: a member consuming in clustering
        mode (so is one whose record has no ``mode``, of an older version). A broadcast member
        reads every queue for itself: the others share the queues without it (RocketMQ's
        allocation counts the clustering members only)."""
        return self.record.get("mode") in (None, "clustering")

    def consumes(self, topic: str) -> bool:
        """Whether it consumes ``topic`` (a record naming no topics: taken to)."""
        return topic in (self.record.get("topics") or [topic])

    @property
    def queues(self) -> list[dict[str, Any]]:
        """The queues the member published as held (``[{"topic", "queueId"}]``)."""
        queues = self.record.get("queues")
        return queues if isinstance(queues, list) else []


def sharing(members: list[MemberInfo], topic: str) -> list[MemberInfo]:
    """The ``members`` that share ``topic``'s queues: those consuming it in clustering mode
    (:attr:`MemberInfo.shares_queues`; a record naming no topics counts as consuming it)."""
    return [m for m in members if m.shares_queues and m.consumes(topic)]


def _lock_path(layout: Layout, group: str, client_id: str) -> Path:
    return layout.member_lock(group, client_id)


def _json_path(layout: Layout, group: str, client_id: str) -> Path:
    return layout.member_json(group, client_id)


def _beat_ms(layout: Layout, group: str, client_id: str) -> int | None:
    """When the member last proved it runs (ms), or None (no beat file)."""
    try:
        return os.stat(layout.member_beat(group, client_id)).st_mtime_ns // 1_000_000
    except OSError:
        return None


class Membership:
    """This process's membership of a consumer group, from ``join()`` to ``leave()``."""

    def __init__(self, layout: Layout, group: str, client_id: str,
                 info: dict[str, Any] | None = None, beats: bool = True) -> None:
        self.layout = layout
        # (False: a broadcast member, which shares nothing: no beat file, never expires)
        self.beats = beats
        self.group = validate_group(group)
        self.client_id = validate_client_id(client_id)
        self.lock_path = _lock_path(layout, group, client_id)
        self.json_path = _json_path(layout, group, client_id)
        self.beat_path = layout.member_beat(group, client_id)
        self.beat_at = 0   # when this member last proved it runs (ms), 0: not yet
        self._info = dict(info or {})
        self._record: dict[str, Any] = {}
        self._fd: int | None = None

    @property
    def joined(self) -> bool:
        return self._fd is not None

    @property
    def record(self) -> dict[str, Any]:
        """What this member last published."""
        return dict(self._record)

    def join(self) -> None:
        """Become a live member: lock ``<clientId>.lock`` for good, then publish the JSON.

        ClientIdInUseError (exit 4) if a live process already holds the client id.
        """
        if self._fd is not None:
            return
        # The group's directory is what makes a group known (``groups.py``): one made here
        # goes again if the join fails (a full disk), unless another member is in it by then.
        group_dir = self.layout.members_dir(self.group)
        made = not group_dir.is_dir()
        ensure_dir(group_dir, durable=False)
        try:
            fd = self._lock_within_grace()
            if fd is None:
                pid = _read_json(self.json_path).get("pid")
                shown = pid if isinstance(pid, int) else "unknown"
                raise ClientIdInUseError(
                    f"client id {self.client_id} is already used by a live member (pid {shown})")
            self._fd = keep(fd, self._forget)
            base = {"clientId": self.client_id, "group": self.group, "pid": os.getpid(),
                    "host": os.uname().nodename, "startedAt": now_ms()}
            try:
                if self.beats:
                    self.beat()
                self._publish({**self._info, **base})
            except BaseException:
                self._give_up_lock()
                raise
        except BaseException:
            if made:
                try:
                    group_dir.rmdir()   # (its ``.beats`` went with the lock: _give_up_lock)
                except OSError:
                    pass   # another member's files are in it: the group is known
            raise

    def _lock_within_grace(self) -> int | None:
        deadline = time.monotonic() + JOIN_GRACE
        while True:
            try:
                fd = open_exclusive(self.lock_path)
            except FileNotFoundError as exc:   # the directory removed by a joiner that failed
                if time.monotonic() >= deadline:
                    raise io_error(exc, f"open {self.lock_path}") from exc
                ensure_dir(self.lock_path.parent, durable=False)
                continue
            if fd is not None or time.monotonic() >= deadline:
                return fd
            time.sleep(0.01)

    def update(self, **fields: Any) -> None:
        """Publish more or newer fields (the queues held, ``heartbeatAt``, ...)."""
        if self._fd is None:
            raise OperationError(f"client {self.client_id} has not joined group {self.group}")
        if not names_same_file(self._fd, self.lock_path):
            # Someone removed our lock file by hand: another process may now hold the id, and
            # writing the JSON would overwrite its record with ours.
            raise OperationError(f"membership of {self.client_id} in group {self.group} was "
                                 f"lost: {self.lock_path} was removed or replaced")
        fixed = {k: self._record[k] for k in _RESERVED_FIELDS}
        self._publish({**self._record, **fields, **fixed})

    def beat(self) -> bool:
        """Prove that this member runs (see the module docstring). True when its previous
        proof was older than ``MEMBER_EXPIRY_MS``: the group stopped counting it meanwhile, and
        it should rejoin (:meth:`update`, which wakes the group)."""
        now = now_ms()
        lapsed = self.beat_at > 0 and now - self.beat_at > MEMBER_EXPIRY_MS
        for attempt in range(3):
            try:
                try:
                    os.utime(self.beat_path)
                except FileNotFoundError:
                    ensure_dir(self.beat_path.parent, durable=False)
                    os.close(os.open(self.beat_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
                break
            except FileNotFoundError as exc:   # the last member to leave removed ``.beats`` just then
                if attempt == 2:
                    raise io_error(exc, f"touch {self.beat_path}") from exc
            except OSError as exc:
                raise io_error(exc, f"touch {self.beat_path}") from exc
        self.beat_at = now
        return lapsed

    def _publish(self, record: dict[str, Any]) -> None:
        atomic_write_json(self.json_path, record, keep_bak=False, sync=False)
        self._record = record

    def leave(self) -> None:
        """Stop being a member: remove the JSON, then the lock file, then drop the lock."""
        if self._fd is None:
            return
        if names_same_file(self._fd, self.lock_path):
            unlink_if_exists(self.json_path)
        self._give_up_lock()

    def counted(self) -> bool:
        """Whether the group counts this member now (its last beat is recent enough)."""
        return now_ms() - self.beat_at <= MEMBER_EXPIRY_MS

    def _give_up_lock(self) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None and names_same_file(fd, self.lock_path):
                _remove_beat(self.layout, self.group, self.client_id)
                unlink_if_exists(self.lock_path)  # still holding the lock: see the docstring
        finally:
            if fd is not None:
                close_kept(fd)

    def _forget(self) -> None:
        # (in a forked child: the parent's membership, which the child must not end)
        self._fd = None

    def __enter__(self) -> Membership:
        self.join()
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()


def _read_json(path: Path) -> dict[str, Any]:
    """A member's JSON, or {} if it is missing or unreadable."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _published_ids(layout: Layout, group: str) -> list[str]:
    """Client ids with a JSON in the group's directory, sorted (RocketMQ sorts cidAll so)."""
    ids = []
    for name in list_dir(layout.members_dir(group)):
        # Temp files (``fsutil.temp_path``: ``.X.json.PID.tmp``) and backups end otherwise, so the suffix suffices.
        cid = name[:-5]
        if name.endswith(".json") and CLIENT_ID_RE.match(cid) and cid not in (".", ".."):
            ids.append(cid)
    return sorted(ids)


def _remove_beat(layout: Layout, group: str, client_id: str) -> None:
    """Remove a member's beat file, and ``.beats`` if it was the last (no litter once
    every member left: a joiner that meets the directory removed makes it again)."""
    path = layout.member_beat(group, client_id)
    unlink_if_exists(path)
    try:
        path.parent.rmdir()
    except OSError:
        pass   # other members' beats are in it (or it is gone)


def _prune(layout: Layout, group: str, client_id: str) -> None:
    """Remove a dead member's leftovers, holding its lock so no joiner can be mid-way."""
    lock_path = _lock_path(layout, group, client_id)
    fd = open_exclusive(lock_path)
    if fd is None:
        return  # it has come alive (a new process took the id): leave it be
    try:
        unlink_if_exists(_json_path(layout, group, client_id))
        _remove_beat(layout, group, client_id)
        unlink_if_exists(lock_path)
    finally:
        os.close(fd)


def live_members(layout: Layout, group: str, *, prune: bool = False,
                 counted_only: bool = False) -> list[MemberInfo]:
    """The group's live members, sorted by client id. A member is live while its lock is
    held; leftovers of dead ones are skipped, and removed when ``prune`` is set.
    ``counted_only``: without the stuck ones (not heard from for ``MEMBER_EXPIRY_MS``), as
    the queues are shared."""
    validate_group(group)
    members = []
    now = now_ms()
    for cid in _published_ids(layout, group):
        if probe_held(_lock_path(layout, group, cid)):
            beat = _beat_ms(layout, group, cid)
            expired = _expired(beat, now)
            if counted_only and expired:
                continue
            members.append(_member_info(layout, group, cid, expired, beat))
        elif prune:
            _prune(layout, group, cid)
    return members


def peek_members(layout: Layout, group: str, held: Callable[[Path, int | None], bool | None]) -> list[MemberInfo]:
    """The group's live members, like :func:`live_members`, without probing their locks:
    ``held(path, pid)`` answers from the kernel's lock table (``heldlocks.HeldLocks.held``),
    so a monitor never makes a joiner retry."""
    validate_group(group)
    members = []
    now = now_ms()
    for cid in _published_ids(layout, group):
        info = _member_info(layout, group, cid)
        if held(_lock_path(layout, group, cid), info.pid):
            beat = _beat_ms(layout, group, cid)
            members.append(replace(info, expired=_expired(beat, now), beatAt=beat))
    return members


def _expired(beat: int | None, now: int) -> bool:
    """Not heard from for ``MEMBER_EXPIRY_MS`` (a member without a beat file never is)."""
    return beat is not None and beat + MEMBER_EXPIRY_MS < now


def _member_info(layout: Layout, group: str, client_id: str, expired: bool = False,
                 beat: int | None = None) -> MemberInfo:
    # The id comes from the file name, which the lock vouches for; the rest is as published.
    record = _read_json(_json_path(layout, group, client_id))
    host = record.get("host")
    return MemberInfo(group=group, clientId=client_id, pid=_int_field(record, "pid"),
                      host=host if isinstance(host, str) else None,
                      startedAt=_int_field(record, "startedAt"), record=record, expired=expired,
                      beatAt=beat)


def _int_field(record: dict[str, Any], key: str) -> int | None:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _expiry(layout: Layout, group: str, client_id: str) -> int | None:
    """When the member stops being counted (ms); None: never (no beat file: a broadcast
    member, one still joining, or one of an older version)."""
    beat = _beat_ms(layout, group, client_id)
    return None if beat is None else beat + MEMBER_EXPIRY_MS


def members_token(layout: Layout, group: str) -> tuple[str, ...]:
    """A cheap fingerprint of the group's membership for the rebalance loop to poll
    (:func:`members_look`'s first half)."""
    return members_look(layout, group)[0]


def members_look(layout: Layout, group: str, own: str | None = None) -> tuple[tuple[str, ...], int | None]:
    """A cheap fingerprint of the group's membership for the rebalance loop to poll, and
    when it may change next by itself (ms, or None).

    It is the sorted ids of the counted members: one directory listing, one lock probe and
    one ``stat`` (of its beat) per member, no JSON read. It changes when a member joins,
    leaves, dies (a death changes no file, so file times alone would miss it) or stops being
    counted (nor does that: hence the time, when the first of them but ``own`` would), and not
    when members publish updates or beat; allocation depends on the ids alone, so an
    unchanged token needs no rebalance.
    """
    validate_group(group)
    now = now_ms()
    ids, soonest = [], None
    for cid in _published_ids(layout, group):
        if probe_held(_lock_path(layout, group, cid)):
            expiry = _expiry(layout, group, cid)
            if expiry is not None and expiry < now:
                continue
            ids.append(cid)
            if expiry is not None and cid != own and (soonest is None or expiry < soonest):
                soonest = expiry
    return tuple(ids), soonest
