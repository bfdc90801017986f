"""Where a consumer starts a queue it has no offset for, or one whose offset is gone: RocketMQ's
``computePullFromWhere``, with kcat's ``-o N`` and ``-o -N`` and rpk's ``-o +N`` beside ``--from``.

The start position (``--from``, ``start_from``) is where a group *new to the topic* starts: one
(a broadcast client: its own offsets) with no committed offset in any queue of the topic when
the member opened. Every other queue without a committed offset holds only messages newer than
the group, and starts at its first stored message whatever the start position says:

- a queue added (``topic update``) while the member runs;
- a queue without a committed offset in a topic the group already had offsets in when the member
  opened: added while the group was stopped, or one no member of it ever took (a group whose
  members read some queues only). Its messages are at least as new as the group's interest in
  the topic, and skipping them would lose them for good (reading them at worst gives what a
  ``--from first`` reader would have had). RocketMQ's broker answers the same for a young queue
  (``queryConsumerOffset``: a queue whose messages begin at 0 and are still held starts at 0).

"New to the topic" is read once, when the member opens, before it joins: members of a new group
started together all see it new, whichever of them commits its starts first. A group whose
offsets were deleted (``offsets delete``) is new again; retry topics always start at their first.
"""
from __future__ import annotations

from store import names

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable, Mapping

    from store.client.options import ConsumeOptions
    from store.log.messagestore import Store


class AtOpen:
    """What a member found when it opened: each topic's queue count (``queues``), and the topics
    its group (a broadcast client: the client) had committed offsets in (``known``)."""

    def __init__(self, queues: Mapping[str, int] | None = None,
                 committed: Mapping[tuple[str, int], int] | None = None) -> None:
        # (the queue counts are read before the offsets: a queue added between the two reads
        # is then counted as added, never as there when a new group opened)
        self.queues = dict(queues or {})
        self.known = {t for (t, _q), off in (committed or {}).items() if off >= 0}

    def only_newer(self, topic: str, queue_id: int) -> bool:
        """Whether a queue without a committed offset holds only messages newer than the group,
        so that it starts at its first (the module docstring)."""
        return (names.is_retry_topic(topic) or topic in self.known
                or queue_id >= self.queues.get(topic, queue_id + 1))


def start_offset(store: Store, o: ConsumeOptions, key: tuple[str, int], stored: int,
                 at_open: AtOpen, warn: Callable[[str], None]) -> tuple[int, bool]:
    """The stored offset (``stored``, -1: none) within what the queue holds, else where
    ``--from`` / ``-o`` say for a group new to the topic (``at_open``: the module docstring),
    else the queue's first message; then with True: the caller persists it."""
    t, q = key
    lo, hi = store.min_offset(t, q), store.max_offset(t, q)
    if stored >= 0:
        if stored < lo:
            warn(f"{t}/{q}: committed offset {stored} is no longer stored; starting at {lo}")
        return min(max(stored, lo), hi), False
    if at_open.only_newer(t, q) or o.from_where == "first":
        start = lo
    elif o.from_where == "timestamp" and o.from_timestamp is not None:
        start = store.search_offset(t, q, o.from_timestamp)
    elif o.from_where == "offset" and o.from_offset is not None:   # kcat's -o N
        start = min(max(o.from_offset, lo), hi)
    elif o.from_where == "tail" and o.from_offset is not None:     # kcat's -o -N
        start = max(lo, hi - o.from_offset)
    elif o.from_where == "head" and o.from_offset is not None:     # rpk's -o +N
        start = min(lo + o.from_offset, hi)
    else:   # last
        start = hi
        if hi > lo and o.on_start_at_end is not None:
            o.on_start_at_end(t, q, hi - lo)
    return start, True
