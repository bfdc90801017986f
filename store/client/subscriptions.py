"""A group member's subscription (topic, tag expression, mode, orderly), as its member record
publishes it, and the check that the members of one group subscribe alike.

RocketMQ requires every member of a consumer group to subscribe alike: the members share the
group's queues (and its retry topic ``%RETRY%GROUP``) as if they ran one program, so a member
of another topic takes the failed messages of the first topic for retries and hands them to
the wrong handler, and a member with another tag filter skips, and commits, the messages of
the queues it holds that the other members wanted (its console calls that "subscription
inconsistency"). Nothing refuses a mixed group here either (a rolling change of a group's
subscription passes through one), but each member warns once about every live member that
subscribes otherwise, when it joins and when a new member joins (one line for the members
of one subscription), and ``mqctl consumers`` shows it (:func:`mismatched`). A broadcast
member shares neither queues nor retries: what a mixed group does then is :func:`harm`'s.

Clustering members must also use one allocation strategy (``--strategy``): each computes its
own share with its own strategy, so members of two strategies leave queues that no member
takes (they wait, unconsumed, until the group agrees) and want queues another one holds. That
is warned about and shown the same way (:data:`STRATEGY`), naming both strategies.

Records written before ``tags`` was published have no tag expression: it is left out of
their comparison (unknown, not "every message"). Records with no ``strategy`` (older ones,
and a Python ``store.Consumer``'s, which has no strategy parameter) use ``averagely``.
"""
from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class Subscription:
    """What a member consumes; None where its record does not say (an older record)."""

    topics: tuple[str, ...] | None
    tags: str | None
    mode: str | None
    orderly: bool | None
    strategy: str = "averagely"   # (how a clustering member takes its share: not compared for broadcast ones)

    @classmethod
    def of(cls, record: dict[str, Any]) -> Subscription:
        topics, tags = record.get("topics"), record.get("tags")
        mode, orderly = record.get("mode"), record.get("orderly")
        strategy = record.get("strategy")
        return cls(tuple(sorted(t for t in topics if isinstance(t, str))) if isinstance(topics, list) else None,
                   tags if isinstance(tags, str) else None,
                   mode if isinstance(mode, str) else None,
                   orderly if isinstance(orderly, bool) else None,
                   strategy if isinstance(strategy, str) else "averagely")

    def subscribes_otherwise(self, other: Subscription) -> bool:
        """Whether the two differ in what both records say of what they consume."""
        pairs = ((self.topics, other.topics), (self.tags, other.tags), (self.mode, other.mode),
                 (self.orderly, other.orderly))
        return any(a is not None and b is not None and a != b for a, b in pairs)

    def allocates_otherwise(self, other: Subscription) -> bool:
        """Whether the two share queues (neither is a broadcast member) with other strategies."""
        return "broadcasting" not in (self.mode, other.mode) and self.strategy != other.strategy

    def differs(self, other: Subscription) -> bool:
        """Whether the two differ in what they consume, or in how they share the queues."""
        return self.subscribes_otherwise(other) or self.allocates_otherwise(other)

    def describe(self, strategy: bool = False) -> str:
        """``topic orders (tags 'A || B', clustering, concurrently)`` (what is known; with
        ``strategy``, a clustering member's strategy too: ``..., strategy circle)``)."""
        parts = []
        if self.tags is not None:
            parts.append(f"tags {self.tags!r}" if self.tags != "*" else "tags *")
        if self.mode is not None:
            parts.append(self.mode)
        if self.orderly is not None:
            parts.append("orderly" if self.orderly else "concurrently")
        if strategy and self.mode != "broadcasting":
            parts.append(f"strategy {self.strategy}")
        what = ", ".join(parts)
        if self.topics is None:
            return what or "unknown"
        topics = f"topic{'s' if len(self.topics) != 1 else ''} {', '.join(self.topics) or '(none)'}"
        return f"{topics} ({what})" if what else topics

    def to_json(self) -> dict[str, Any]:
        return {"topics": list(self.topics) if self.topics is not None else None, "tags": self.tags,
                "mode": self.mode, "orderly": self.orderly, "strategy": self.strategy}


# What a mixed group does, worst last (see :func:`harm`).
APART = ("broadcast members take no messages from one another (each reads every queue for itself), "
         "but RocketMQ has members of one group subscribe alike, and what acts on the whole group "
         "(deleting its offsets, say) acts on them all: give each subscription a group of its own")
BESIDE = ("a broadcast member and clustering members take no messages from one another (it reads "
          "every queue for itself; they share the queues without it), but RocketMQ has members of one "
          "group subscribe alike, and what acts on the whole group (deleting its offsets, say) acts on "
          "them all: give each subscription a group of its own")
STRATEGY = ("clustering members of one group must use one allocation strategy (as in RocketMQ): each takes "
            "its own strategy's share, so queues that no member's strategy gives it wait, unconsumed; start "
            "them all with one --strategy (a Python consumer uses averagely)")
SHARED = ("members of one group must subscribe alike (as in RocketMQ), or messages go to the wrong "
          "handler or are skipped")
HARMS = (APART, BESIDE, STRATEGY, SHARED)


def harm(mine: Subscription, theirs: Subscription) -> str:
    """What two members that subscribe otherwise do to each other, as a warning says it.

    Clustering members share the group's queues and its retry topic: one of another topic
    takes the others' retries to its own handler, one with other tags skips, and commits,
    what the others wanted (:data:`SHARED`). A broadcast member shares neither: it reads every
    queue for itself, with offsets of its own, and has no retry topic, so two broadcast
    members take nothing from each other (:data:`APART`); nor do a broadcast member and the
    clustering ones, which share the queues of their topics without it (the allocation counts
    clustering members only, ``members.sharing``), of the same topic or not (:data:`BESIDE`).
    Clustering members that subscribe alike with other strategies leave queues that no member
    takes (:data:`STRATEGY`)."""
    modes = {mine.mode, theirs.mode}
    if modes == {"broadcasting"}:
        return APART
    if modes == {"broadcasting", "clustering"}:
        return BESIDE
    return SHARED if mine.subscribes_otherwise(theirs) else STRATEGY


def group_harm(subs: list[Subscription]) -> str:
    """What the members of a group that subscribe as ``subs`` do to each other: the worst of
    what each two that differ do (``mqctl consumers``' warning)."""
    worst = 0
    for i, a in enumerate(subs):
        for b in subs[i + 1:]:
            if a.differs(b):
                worst = max(worst, HARMS.index(harm(a, b)))
    return HARMS[worst]


def mismatch_warning(group: str, client_ids: list[str], theirs: Subscription, mine: Subscription,
                     own_id: str | None = None) -> str:
    """The one line a member warns with about ``client_ids``, the members that subscribe
    ``theirs``, otherwise than this one (one line for all of them: a group of many members)."""
    if len(client_ids) == 1:
        who = f"member {client_ids[0]} subscribes"
    else:
        who = f"{len(client_ids)} members ({', '.join(client_ids)}) subscribe"
    strategy = mine.allocates_otherwise(theirs)   # (named when it is what differs)
    me = f"this consumer ({own_id})" if own_id else "this consumer"
    return (f"group {group}: {who} {theirs.describe(strategy)}, unlike {me}: {mine.describe(strategy)}; "
            f"{harm(mine, theirs)}")


class SubscriptionCheck:
    """A member's check of the others' subscriptions: each one that differs is warned about
    once (by client id and start time: one restarted with another subscription is new), in
    one line per subscription of those looked at together."""

    def __init__(self, group: str, mine: Subscription) -> None:
        self.group = group
        self.mine = mine
        self._seen: set[tuple[str, Any]] = set()

    def look(self, own_id: str, members: list[Any]) -> list[str]:
        """The warnings about the members (``MemberInfo``) not looked at before: a line for
        each subscription of theirs that differs, naming the members that have it."""
        if len(self._seen) > 4 * len(members) + 64:   # (members long gone: forgotten)
            self._seen &= {(m.clientId, m.startedAt) for m in members}
        differing: dict[Subscription, list[str]] = {}
        for m in members:
            key = (m.clientId, m.startedAt)
            if m.clientId == own_id or key in self._seen:
                continue
            self._seen.add(key)
            theirs = Subscription.of(m.record)
            if theirs.differs(self.mine):
                differing.setdefault(theirs, []).append(m.clientId)
        return [mismatch_warning(self.group, ids, theirs, self.mine, own_id) for theirs, ids in differing.items()]


def mismatched(subs: dict[str, Subscription]) -> set[str]:
    """The client ids whose subscription differs from another member's in ``subs`` (client id
    → subscription): every member of a mixed group, none of a consistent one."""
    ids = sorted(subs)
    return {a for a in ids for b in ids if a != b and subs[a].differs(subs[b])}
