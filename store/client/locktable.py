"""The queue lock table as monitors and operators see it (``mqctl locks``, ``mqctl unlock``,
``Admin.locks``): every lock file of a group, its record, and whether its holder still lives
(probed, or told by ``held``); removing stale, expired or (forced) live locks under the
group's mutex. The locks themselves, their files and records: ``qlocks.py`` (a consumer
loads only that)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from store.client.group_mutex import MUTEX_TIMEOUT, group_mutex
from store.client.qlocks import int_or_none, read_record, str_or_none
from store.flock import list_dir, names_same_file, now_ms, open_file, try_flock, unlink_if_exists
from store.layout import Layout
from store.names import ANY_TOPIC_RE, validate_group

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

_LOCK_FILE_RE = r"^(0|[1-9][0-9]{0,9})\.lock$"   # (compiled by re at the first listing)
Held = Callable[[Path, int | None], bool | None]   # liveness without a probe (heldlocks.py: for monitors)


@dataclass(frozen=True)
class LockInfo:
    """One row of the lock table, with the contract's field names (``mqctl locks``).

    ``group``/``topic``/``queueId`` come from the file's path; the holder fields come from the
    record and are None when it is unreadable. ``alive`` is the OS lock, probed.
    """

    group: str
    topic: str
    queueId: int
    clientId: str | None
    pid: int | None
    host: str | None
    acquiredAt: int | None
    renewedAt: int | None
    expiresAt: int | None
    alive: bool

    def expired(self, at_ms: int | None = None) -> bool:
        """True if the record says the store-side lease ran out (unknown is never expired)."""
        now = at_ms if at_ms is not None else now_ms()
        return self.expiresAt is not None and self.expiresAt < now

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _info(group: str, topic: str, queue_id: int, record: dict[str, Any] | None, alive: bool) -> LockInfo:
    rec = record or {}
    return LockInfo(
        group=group, topic=topic, queueId=queue_id,
        clientId=str_or_none(rec.get("clientId")), pid=int_or_none(rec.get("pid")),
        host=str_or_none(rec.get("host")), acquiredAt=int_or_none(rec.get("acquiredAt")),
        renewedAt=int_or_none(rec.get("renewedAt")), expiresAt=int_or_none(rec.get("expiresAt")),
        alive=alive,
    )


def _lock_files(layout: Layout, group: str, topic: str | None = None,
                queue_id: int | None = None) -> list[tuple[str, int, Path]]:
    """(topic, queueId, path) of the group's lock files, sorted, filtered."""
    found = []
    for topic_dir in _subdirs(layout.queue_locks_dir(group)):
        if topic is not None and topic_dir.name != topic:
            continue
        for entry in list_dir(topic_dir):
            match = re.match(_LOCK_FILE_RE, entry)
            if match and (queue_id is None or int(match.group(1)) == queue_id):
                found.append((topic_dir.name, int(match.group(1)), topic_dir / entry))
    return sorted(found)


def _subdirs(path: Path) -> list[Path]:
    # Only valid names (groups, and topics with a group's retry topic): skips the mutex file
    # and anything a user dropped in by hand.
    return sorted(path / name for name in list_dir(path)
                  if ANY_TOPIC_RE.match(name) and (path / name).is_dir())


def lock_groups(layout: Layout) -> list[str]:
    """Groups that have a lock directory (held, stale or empty)."""
    return [p.name for p in _subdirs(layout.queue_locks_root)]


def _probe_info(group: str, topic: str, queue_id: int, path: Path, held: Held | None) -> LockInfo | None:
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None  # released between listing and probing
    try:
        record = read_record(fd)
        alive = held(path, int_or_none((record or {}).get("pid"))) if held else not try_flock(fd, path, shared=True)
    finally:
        os.close(fd)
    return None if alive is None else _info(group, topic, queue_id, record, alive)


def list_locks(layout: Layout, group: str | None = None, held: Held | None = None) -> list[LockInfo]:
    """Every queue lock file of ``group`` (or of all groups), with its holder probed.

    ``alive=False``: nobody holds the OS lock (a crashed holder's record). Read-only: takes no
    mutex and changes no file. ``held(path, pid)`` answers instead of a probe."""
    groups = [validate_group(group)] if group is not None else lock_groups(layout)
    infos = [_probe_info(g, topic, qid, path, held) for g in groups for topic, qid, path in _lock_files(layout, g)]
    return [info for info in infos if info is not None]


def unlock(layout: Layout, group: str, topic: str | None = None, queue_id: int | None = None,
           force: bool = False, *, timeout: float = MUTEX_TIMEOUT) -> list[LockInfo]:
    """Remove stale locks (holder gone) and expired ones (holder stuck past the store lease).

    With ``force`` live locks are broken too; their holders' ``is_valid`` turns False before
    their next batch. Returns what was removed, as it was just before. LockHeldError if the
    group's mutex stays busy for ``timeout`` seconds.
    """
    validate_group(group)
    if not layout.queue_locks_dir(group).is_dir():
        return []
    released = []
    with group_mutex(layout, group, timeout):
        for t, qid, path in _lock_files(layout, group, topic, queue_id):
            info = _remove_if_allowed(group, t, qid, path, force)
            if info is not None:
                released.append(info)
    return released


def _remove_if_allowed(group: str, topic: str, queue_id: int, path: Path,
                       force: bool) -> LockInfo | None:
    # Called under the group mutex. A free file is locked before it is unlinked, so nobody
    # can be taking it at that moment; a held one is unlinked under its holder.
    try:
        fd = open_file(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        record = read_record(fd)
        alive = not try_flock(fd, path)
        info = _info(group, topic, queue_id, record, alive)
        if alive and not force and not info.expired():
            return None
        if names_same_file(fd, path):
            unlink_if_exists(path)
        return info
    finally:
        os.close(fd)
