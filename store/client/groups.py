"""The consumer groups a store knows, and where their offsets and members are.

What a group is: a name that has committed offsets (``config/consumerOffset.json`` or a
broadcast client's ``offsets/<clientId>/<group>/offsets.json``), live or past members
(``consumers/<group>/``), queue locks, or a retry or dead-letter topic. Anything else is an
unknown group (``GroupNotFoundError``): a typo must not look like a group that simply has
nothing to show.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from store import names
from store.errors import GroupNotFoundError

if TYPE_CHECKING:
    from store.log.messagestore import Store


def broadcast_clients(store: Store, group: str) -> list[str]:
    """Client ids that keep broadcast offsets for ``group`` (``offsets/<cid>/<group>/``)."""
    from store.log.broadcastoffsets import broadcast_offset_files
    return [cid for cid, _group in broadcast_offset_files(store.layout, group)]


def known_groups(store: Store, offset_groups: Iterable[str] | None = None) -> list[str]:
    """Every group the store knows of, sorted (offsets or ``offset_groups``, members, locks,
    broadcast offsets, retry/DLQ topics)."""
    from store.log.broadcastoffsets import broadcast_offset_files
    groups = set(store.offsets.groups() if offset_groups is None else offset_groups)
    for d in (store.layout.members_root, store.layout.queue_locks_root):
        try:
            groups.update(n for n in os.listdir(d) if names.NAME_RE.match(n))
        except (FileNotFoundError, NotADirectoryError):
            continue
    groups.update(group for _cid, group in broadcast_offset_files(store.layout))
    for t in store.topics():
        for prefix in (names.RETRY_PREFIX, names.DLQ_PREFIX):
            if t.startswith(prefix):
                groups.add(t[len(prefix):])
    return sorted(groups)


def group_exists(store: Store, group: str) -> bool:
    """Whether the store knows ``group`` (see the module docstring)."""
    # (a damaged table is warned of once per handle: by this look, or by the command's own read)
    if store.offsets.topics_of(group):
        return True
    if (store.layout.members_dir(group).is_dir() or store.layout.queue_locks_dir(group).is_dir()
            or broadcast_clients(store, group)):
        return True
    return store.has_topic(names.retry_topic(group)) or store.has_topic(names.dlq_topic(group))


def require_group(store: Store, group: str) -> None:
    """``GroupNotFoundError`` (exit 3) unless the store knows ``group``."""
    names.validate_group(group)
    if not group_exists(store, group):
        raise GroupNotFoundError(
            f"consumer group {group!r} does not exist in this store (no offsets, members or "
            f"dead letters); known groups: {some_groups(group, known_groups(store))}")


SHOWN_GROUPS = 10   # (a store of hundreds of groups: an error line, not a wall of names)


def some_groups(wanted: str, groups: list[str]) -> str:
    """At most :data:`SHOWN_GROUPS` of ``groups`` for an error about ``wanted``, those whose
    names are closest to it first, then "and N more" ("none": no group)."""
    if len(groups) <= SHOWN_GROUPS:
        return ", ".join(groups) or "none"
    from difflib import get_close_matches
    close = get_close_matches(wanted, groups, SHOWN_GROUPS, 0.6)
    shown = close + [g for g in groups if g not in close][:SHOWN_GROUPS - len(close)]
    return f"{', '.join(shown)} and {len(groups) - len(shown)} more"


@dataclass(frozen=True)
class OffsetSet:
    """One set of committed offsets of a group: the clustering table (``client_id`` None) or
    one broadcast client's file."""

    client_id: str | None
    offsets: dict[tuple[str, int], int]


def group_offsets(store: Store, group: str, strict: bool = False) -> list[OffsetSet]:
    """The group's clustering offsets (always first, possibly empty), then one set per
    broadcast client. A client's file that cannot be read (nor its ``.bak``) is passed over
    with a warning, or with ``strict`` (a person asking for this group's offsets: ``offsets
    show``, ``progress``) raises, as the clustering table's damage does: an empty answer
    would say the client has committed nothing."""
    from store.errors import StoreError
    from store.log.broadcastoffsets import BroadcastOffsetStore
    sets = [OffsetSet(None, store.offsets.read_group(group))]
    for cid in broadcast_clients(store, group):
        try:
            b = BroadcastOffsetStore(store.layout, cid, group, warn=store.warn)
            sets.append(OffsetSet(cid, b.load()))
        except StoreError as exc:  # one bad client file must not hide the rest
            if strict:
                raise
            store.warn(f"broadcast offsets of {cid}: {exc}")
    return sets


def holders(store: Store, group: str) -> dict[tuple[str, int], str]:
    """(topic, queueId) -> client id of the live member that holds the queue now (its lock:
    ``memberview.py``)."""
    from store.client.memberview import group_members
    return group_members(store.layout, group).owners()
