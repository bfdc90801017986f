"""What the admin views (``mqctl consumers``, ``progress``, ``top``, ``rebalance``) show of a
group's members: which are live, which expired, and the queues each holds *now*.

A member publishes the queues it was given in its JSON (``members.py``), but what it holds is
told by the queue locks (``qlocks.py``): a clustering member consumes a queue only while it
holds the queue's lock. A member stopped (SIGSTOP) or hung past ``MEMBER_EXPIRY_MS`` keeps its
process and its membership lock, and its JSON still claims the queues the others took from it
(breaking its expired locks); only when it runs again does it rewrite its claim. So the views
take a clustering member's queues from the live locks that name it, never from its claim,
and mark it ``expired`` (``MemberInfo.expired``, the rebalance's own test), as ``mqctl locks``
marks an expired lock. A broadcast member shares nothing and takes no lock: its claim is what
it reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from store.client.members import MemberInfo, live_members, peek_members
from store.layout import Layout

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable, Iterable

    from store.client.locktable import LockInfo


@dataclass(frozen=True)
class GroupMembers:
    """A group's live members (expired ones included, marked) and the queues each holds now."""

    members: list[MemberInfo]
    held: dict[str, list[tuple[str, int]]]   # clientId -> (topic, queueId) whose live lock names it

    def queues(self, m: MemberInfo) -> list[dict[str, Any]]:
        """``[{"topic", "queueId"}]`` the member holds now, sorted (see the module docstring)."""
        if not m.shares_queues:   # (a broadcast member)
            return m.queues
        return [{"topic": t, "queueId": q} for t, q in self.held.get(m.clientId, [])]

    def owners(self) -> dict[tuple[str, int], str]:
        """(topic, queueId) -> the client id of the live clustering member holding the queue
        (a broadcast member reads every queue for itself: it holds none of the group's)."""
        return {tq: m.clientId for m in self.members if m.shares_queues for tq in
                ((e["topic"], e["queueId"]) for e in self.queues(m))}

    def counted(self) -> list[MemberInfo]:
        """The members the group shares its queues among (not the expired ones)."""
        return [m for m in self.members if not m.expired]


def held_by(locks: Iterable[LockInfo]) -> dict[str, list[tuple[str, int]]]:
    """clientId -> its queues, from a group's queue locks whose OS lock is held (expired or
    not: until someone breaks it, its holder still has it)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for lk in locks:
        if lk.alive and lk.clientId is not None:
            out.setdefault(lk.clientId, []).append((lk.topic, lk.queueId))
    return {cid: sorted(qs) for cid, qs in out.items()}


def group_members(layout: Layout, group: str) -> GroupMembers:
    """The group's live members and their queues, locks probed (``Admin``)."""
    from store.client.locktable import list_locks
    return GroupMembers(live_members(layout, group), held_by(list_locks(layout, group)))


def peek_group_members(layout: Layout, group: str, held: Callable[[Path, int | None], bool | None],
                       locks: Iterable[LockInfo]) -> GroupMembers:
    """As :func:`group_members` without probing (``Monitor``): ``held`` answers from the
    kernel's lock table, ``locks`` are the group's locks listed with it."""
    return GroupMembers(peek_members(layout, group, held), held_by(lk for lk in locks if lk.group == group))
