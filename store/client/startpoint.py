"""Where a consumer starts a queue it has no offset for, or one whose offset is gone: RocketMQ's
``computePullFromWhere``, with kcat's ``-o N`` and ``-o -N`` and rpk's ``-o +N`` beside ``--from``."""
from __future__ import annotations

from store import names

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable, Mapping

    from store.client.options import ConsumeOptions
    from store.log.messagestore import Store


def start_offset(store: "Store", o: "ConsumeOptions", key: tuple[str, int], stored: int,
                 queues_at_open: Mapping[str, int], warn: Callable[[str], None]) -> tuple[int, bool]:
    """The stored offset (``stored``, -1: none) within what the queue holds, else where
    ``--from`` / ``-o`` say, then with True: the caller persists it. ``queues_at_open``: each
    topic's queue count when the member started (a queue added since holds only newer
    messages, so ``last`` starts it at its first)."""
    t, q = key
    lo, hi = store.min_offset(t, q), store.max_offset(t, q)
    if stored >= 0:
        if stored < lo:
            warn(f"{t}/{q}: committed offset {stored} is no longer stored; starting at {lo}")
        return min(max(stored, lo), hi), False
    if names.is_retry_topic(t) or o.from_where == "first":
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
        start = hi if q < queues_at_open.get(t, q + 1) else lo
    return start, True
