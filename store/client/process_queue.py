"""The process queue: messages pulled from one queue and not yet consumed (RocketMQ's
``ProcessQueue``), kept sorted by queue offset in an :class:`OffsetMap`.

Concurrent mode: any number of batches may be in flight; :meth:`remove` returns the offset to
commit, which is the smallest offset still cached (a slow message holds the offset back, as
RocketMQ's ``removeMessage``), or one past the largest seen when nothing is left.

Its messages are records, or :class:`store.Message` objects for a sink that takes those
(anything with ``queue_offset`` and ``body``). Concurrent batches are handed out, and mostly
consumed, oldest first: the bookkeeping of a batch is a slice of the sorted keys then, not a
sorted insert or delete per message.

Orderly mode: :meth:`take` moves the smallest offsets to the in-flight ("consuming") map;
:meth:`commit` drops them and returns the offset after the last one; :meth:`make_again` puts
them back so the same messages are retried, in place, before anything later.
"""
from __future__ import annotations

import bisect
import threading
import time
from itertools import islice
from operator import attrgetter
from typing import Any, Iterable, Iterator, Protocol, Sequence

from sortedcontainers import SortedDict

from store.log.record import Message


class Queued(Protocol):
    """What a process queue needs of a message (a record, or a client's message)."""

    @property
    def queue_offset(self) -> int: ...

    @property
    def body(self) -> bytes: ...


_OFFSET = attrgetter("queue_offset")
_BODY = attrgetter("body")

PULL_THRESHOLD_COUNT = 1000
PULL_THRESHOLD_BYTES = 100 * 1024 * 1024


class OffsetMap:
    """Queue offset -> message, in offset order: a dict, and its keys as a sorted list whose
    first ``lo`` entries are gone. Messages are cached and consumed mostly in queue order, so
    an insert is mostly an append and a removal mostly a prefix: the dict loses the prefix's
    keys and ``lo`` moves, the list is compacted only once the dead prefix is half of it.
    (A ``SortedDict`` rebuilt its sorted list for every prefix a batch consumed.)"""

    __slots__ = ("_d", "_keys", "_lo")

    def __init__(self) -> None:
        self._d: dict[int, Any] = {}
        self._keys: list[int] = []
        self._lo = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __getitem__(self, key: int) -> Any:
        return self._d[key]

    def __setitem__(self, key: int, value: Any) -> None:
        if key not in self._d:
            keys = self._keys
            if len(keys) == self._lo or key > keys[-1]:
                keys.append(key)
            else:
                bisect.insort(keys, key, self._lo)
        self._d[key] = value

    def __iter__(self) -> Iterator[int]:
        return islice(self._keys, self._lo, None)

    def first(self) -> int:
        return self._keys[self._lo]

    def last(self) -> int:
        return self._keys[-1]

    def head(self, n: int) -> list[int]:
        """The ``n`` smallest keys (fewer if there are not so many)."""
        return self._keys[self._lo:self._lo + n]

    def after(self, key: int, n: int) -> list[int]:
        """The ``n`` smallest keys above ``key``."""
        i = bisect.bisect_right(self._keys, key, self._lo)
        return self._keys[i:i + n]

    def values_of(self, keys: list[int]) -> list[Any]:
        return list(map(self._d.__getitem__, keys))

    def append_run(self, keys: list[int], values: Sequence[Any]) -> None:
        """Add ascending ``keys``, all above the last key."""
        self._d.update(zip(keys, values))
        self._keys += keys

    def update(self, items: dict[int, Any]) -> None:
        """Add keys not present yet, in any order."""
        d, keys = self._d, self._keys
        d.update(items)
        new = sorted(items)
        if len(keys) == self._lo or new[0] > keys[-1]:
            keys += new
        else:
            merged = sorted(islice(keys, self._lo, None))
            merged += new
            merged.sort()
            self._keys, self._lo = merged, 0

    def drop_head(self, n: int) -> None:
        """Forget the ``n`` smallest keys."""
        d, keys, lo = self._d, self._keys, self._lo
        for k in keys[lo:lo + n]:
            del d[k]
        lo += n
        if 2 * lo >= len(keys):
            del keys[:lo]
            lo = 0
        self._lo = lo

    def pop(self, key: int, default: Any = None) -> Any:
        if key not in self._d:
            return default
        keys, lo = self._keys, self._lo
        if keys[lo] == key:
            self._lo = lo + 1
            if 2 * self._lo >= len(keys):
                del keys[:self._lo]
                self._lo = 0
        else:
            del keys[bisect.bisect_left(keys, key, lo)]
        return self._d.pop(key)

    def pop_first(self) -> tuple[int, Any]:
        key = self._keys[self._lo]
        return key, self.pop(key)

    def clear(self) -> None:
        self._d.clear()
        self._keys = []
        self._lo = 0


class ProcessQueue:
    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.msgs = OffsetMap()                    # queue offset -> Message, cached
        self.consuming: SortedDict = SortedDict()  # orderly: taken, in flight
        self.in_flight: set[int] = set()           # concurrent: offsets handed out
        self.handed_max = -1         # concurrent: the highest offset handed out while any is out
        self.gaps = False            # concurrent: a cached offset below handed_max is not out
        self.max_seen = -1
        self.bytes = 0
        self.dropped = False
        self.lost = False            # orderly: dropped because its queue lock was lost
        self.busy = False            # orderly: a batch of this queue is in a handler
        self.suspended_until = 0.0   # orderly: failure → wait before retrying in place
        self.next_pull = 0           # next offset to pull from the store
        self.last_pull = time.monotonic()
        self.retries: dict[int, int] = {}  # orderly: local reconsume count per offset
        self.consume_lock = threading.Lock()  # a drop waits for the batch in the handler

    # -- filling ---------------------------------------------------------------------------
    def put(self, messages: Iterable[Queued]) -> int:
        msgs, consuming = self.msgs, self.consuming
        fresh = {m.queue_offset: m for m in messages
                 if m.queue_offset not in msgs and m.queue_offset not in consuming}
        if fresh:
            msgs.update(fresh)  # one bulk insert: cheaper than one sorted insert per message
            self.bytes += sum(len(m.body) for m in fresh.values())
            top = max(fresh)
            if top > self.max_seen:
                self.max_seen = top
            if self.in_flight and min(fresh) <= self.handed_max:
                self.gaps = True
        return len(fresh)

    def put_run(self, offsets: list[int], messages: Sequence[Queued], nbytes: int) -> int:
        """A pull's messages (``offsets`` ascending, ``nbytes`` their bodies' length): when
        they all come after what is cached, one bulk insert with no test per message."""
        msgs = self.msgs
        if not messages or self.consuming or (msgs and offsets[0] <= msgs.last()):
            return self.put(messages)
        msgs.append_run(offsets, messages)
        self.bytes += nbytes
        if offsets[-1] > self.max_seen:
            self.max_seen = offsets[-1]
        if self.in_flight and offsets[0] <= self.handed_max:
            self.gaps = True
        return len(messages)

    def full(self) -> bool:
        """RocketMQ's pull flow control: at most 1000 messages or 100 MiB cached per queue."""
        n = len(self.msgs) + len(self.consuming)
        return n >= PULL_THRESHOLD_COUNT or self.bytes >= PULL_THRESHOLD_BYTES

    def cached(self) -> int:
        return len(self.msgs) + len(self.consuming)

    # -- concurrent ------------------------------------------------------------------------
    def next_batch(self, n: int) -> list[Message]:
        """Up to ``n`` cached messages not yet handed out, oldest first (concurrent mode)."""
        msgs, in_flight = self.msgs, self.in_flight
        if not in_flight:
            self.gaps = False
            keys = msgs.head(n)
        elif not self.gaps:
            # every cached offset up to handed_max is out: the next ones follow it
            keys = msgs.after(self.handed_max, n)
        else:
            keys = []
            for off in msgs:
                if off not in in_flight:
                    keys.append(off)
                    if len(keys) >= n:
                        break
        if keys:
            self.handed_max = max(self.handed_max, keys[-1]) if in_flight else keys[-1]
        in_flight.update(keys)
        return msgs.values_of(keys)

    def remove(self, messages: list[Message]) -> int:
        """Forget consumed messages; the offset to commit (or -1 if nothing was cached)."""
        msgs = self.msgs
        if not msgs:
            return -1
        n = len(messages)
        offs = list(map(_OFFSET, messages))
        if n and msgs.first() == offs[0] and msgs.head(n) == offs:
            # the oldest n cached, in order (batches are handed out so)
            if n == len(msgs):
                # the common case: everything cached was consumed
                self.bytes = 0
                msgs.clear()
                self.in_flight.clear()
                return self.max_seen + 1
            self.in_flight.difference_update(offs)
            self.bytes -= sum(map(len, map(_BODY, messages)))
            msgs.drop_head(n)
        else:
            for m in messages:
                got = msgs.pop(m.queue_offset, None)
                self.in_flight.discard(m.queue_offset)
                if got is not None:
                    self.bytes -= len(got.body)
        if not self.in_flight:
            self.gaps = False
        if msgs:
            return msgs.first()
        return self.max_seen + 1

    def release(self, messages: Iterable[Message]) -> None:
        """Hand messages back (concurrent mode) so a later batch takes them again."""
        for m in messages:
            self.in_flight.discard(m.queue_offset)
        # what was handed back lies below handed_max and is not out any more
        self.gaps = bool(self.in_flight)

    # -- orderly ---------------------------------------------------------------------------
    def take(self, n: int) -> list[Message]:
        out: list[Message] = []
        while self.msgs and len(out) < n:
            off, m = self.msgs.pop_first()
            self.consuming[off] = m
            out.append(m)
        return out

    def commit(self) -> int:
        """Drop the in-flight messages; the offset after the last one (or -1)."""
        if not self.consuming:
            return -1
        last = self.consuming.keys()[-1]
        for off, m in self.consuming.items():
            self.bytes -= len(m.body)
            self.retries.pop(off, None)
        self.consuming.clear()
        return int(last) + 1

    def make_again(self) -> None:
        """Put the in-flight messages back in front, to be consumed again."""
        for off, m in self.consuming.items():
            self.msgs[off] = m
        self.consuming.clear()

    def clear(self) -> None:
        self.msgs.clear()
        self.consuming.clear()
        self.in_flight.clear()
        self.bytes = 0
