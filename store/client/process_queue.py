"""The process queue: messages pulled from one queue and not yet consumed (RocketMQ's
``ProcessQueue``), kept sorted by queue offset in an :class:`OffsetMap`.

Concurrent mode: any number of batches may be in flight; :meth:`remove` returns the offset to
commit, which is the smallest offset still cached (a slow message holds the offset back, as
RocketMQ's ``removeMessage``), or one past the largest seen when nothing is left.

Its messages are records, or :class:`store.Message` objects for a sink that takes those
(anything with ``queue_offset`` and ``body``). Concurrent batches are handed out, and mostly
consumed, oldest first: the bookkeeping of a batch is a slice of the sorted keys then, not a
sorted insert or delete per message.

A client consumer's pulls come as :class:`~store.client.message.MessageRows` (a pull's columns;
:meth:`ProcessQueue.put_rows`): the queue then keeps those chunks, and each cached offset maps
to its body only (what the byte count needs); a batch handed out is the chunk rows of its
offsets, and a :class:`store.Message` is built for each only when it is read. A queue holds
rows or messages, not both: messages put into a queue of rows turn its rows into messages.

Orderly mode: :meth:`take` moves the smallest offsets to the in-flight ("consuming") map;
:meth:`commit` drops them and returns the offset to commit (the next cached one, or one past the
largest seen); :meth:`make_again` puts them back so the same messages are retried, in place,
before anything later.
"""
from __future__ import annotations

import bisect
from itertools import islice
from operator import attrgetter

from store.log.record import Message

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Iterable, Iterator, Protocol, Sequence

    from store.client.message import MessageRows

    class Queued(Protocol):
        """What a process queue needs of a message (a record, or a client's message)."""

        @property
        def queue_offset(self) -> int: ...

        @property
        def body(self) -> bytes: ...


_OFFSET = attrgetter("queue_offset")
_BODY = attrgetter("body")

PULL_BATCH = 256            # messages one pull asks for (a queue's cache takes a few pulls)
PULL_THRESHOLD_COUNT = 1000
PULL_THRESHOLD_BYTES = 100 * 1024 * 1024
MAX_CHUNKS = 4   # a queue of rows rebuilds its chunks as one when it holds more


def offsets_of(batch: Sequence[Queued] | MessageRows) -> list[int]:
    """The queue offsets of a batch (of rows: with no message built). A batch is a list of
    messages or a pull's rows: told apart without store.client.message, which a consumer of
    records (``mqctl consume``) never loads."""
    if isinstance(batch, (list, tuple)):
        return list(map(_OFFSET, batch))
    rows: MessageRows = batch   # type: ignore[assignment]
    return rows.offsets


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
        self.msgs = OffsetMap()                    # queue offset -> Message (or body: see chunks), cached
        self.chunks: list[MessageRows] = []        # rows put: the cached ones' columns (and spent ones)
        # orderly: taken, in flight (a plain dict: a few entries, ordered where it matters —
        # sortedcontainers' import was ~2 ms of every consumer's start-up)
        self.consuming: dict[int, Message] = {}
        self.in_flight: set[int] = set()           # concurrent: offsets handed out
        self.handed_max = -1         # concurrent: the highest offset handed out while any is out
        self.gaps = False            # concurrent: a cached offset below handed_max is not out
        self.max_seen = -1
        self.bytes = 0
        self.lost = False            # dropped because its queue lock was lost
        self.busy = False            # orderly: a batch of this queue is in a handler
        self.suspended_until = 0.0   # orderly: failure → wait before retrying in place
        self.next_pull = 0           # next offset to pull from the store
        self.retries: dict[int, int] = {}  # orderly: local reconsume count per offset

    # -- filling ---------------------------------------------------------------------------
    def put(self, messages: Iterable[Queued]) -> int:
        if self.chunks:
            self._materialize()
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
        if not messages or self.consuming or self.chunks or (msgs and offsets[0] <= msgs.last()):
            return self.put(messages)
        msgs.append_run(offsets, messages)
        self.bytes += nbytes
        if offsets[-1] > self.max_seen:
            self.max_seen = offsets[-1]
        if self.in_flight and offsets[0] <= self.handed_max:
            self.gaps = True
        return len(messages)

    def put_rows(self, rows: MessageRows, nbytes: int) -> int:
        """A pull's rows (offsets ascending; ``nbytes`` their bodies' length), kept as they
        are: the offsets map to the bodies. Offsets cached already are left out."""
        msgs, offsets = self.msgs, rows.offsets
        if not offsets:
            return 0
        if self.consuming or (msgs and not self.chunks):
            return self.put_run(offsets, list(rows), nbytes)   # (a queue of messages)
        if msgs and offsets[0] <= msgs.last():
            keep = [i for i, off in enumerate(offsets) if off not in msgs]
            if not keep:
                return 0
            rows = _pick(rows, keep)
            offsets = rows.offsets
            msgs.update(dict(zip(offsets, rows.bodies)))
            nbytes = sum(map(len, rows.bodies))
        else:
            msgs.append_run(offsets, rows.bodies)
        self.chunks.append(rows)
        self.bytes += nbytes
        if offsets[-1] > self.max_seen:
            self.max_seen = offsets[-1]
        if self.in_flight and offsets[0] <= self.handed_max:
            self.gaps = True
        if len(self.chunks) > MAX_CHUNKS:
            # (chunks spent but for a message or two: keep only the rows still cached)
            self.chunks = [self._rows_of(list(msgs))]
        return len(offsets)

    def _rows_of(self, keys: list[int]) -> MessageRows:
        """The rows of the cached offsets ``keys`` (ascending), from the chunks: a slice of
        one chunk when they lie in a row there, as they mostly do."""
        out: MessageRows | None = None
        rest = keys
        while rest:
            first = rest[0]
            for c in self.chunks:
                offs = c.offsets
                i = bisect.bisect_left(offs, first)
                if i < len(offs) and offs[i] == first:
                    break
            else:
                raise KeyError(first)
            k = min(len(rest), len(offs) - i)
            if i == 0 and k == len(offs) == len(keys) and offs[-1] == keys[-1] == first + k - 1:
                return c   # the whole chunk, the common case (one run of offsets: the keys)
            if offs[i:i + k] != rest[:k]:
                k = 1
                while k < len(rest) and i + k < len(offs) and offs[i + k] == rest[k]:
                    k += 1
            part = c[i:i + k]
            out = part if out is None else out + part
            rest = rest[k:]
        if out is not None:
            return out
        from store.client.message import MessageRows  # (loaded already: rows were put)
        return MessageRows(self.topic, self.queue_id, [], [], [], [], [], [], [])

    def _materialize(self) -> None:
        """Turn a queue of rows into one of messages (messages are put into it)."""
        keys = list(self.msgs)
        for off, m in zip(keys, self._rows_of(keys)):
            self.msgs[off] = m   # (a key present: only its value changes)
        self.chunks = []

    def _spent(self) -> None:
        """Forget the chunks no cached offset needs (all of them when nothing is cached)."""
        msgs = self.msgs
        if not msgs:
            self.chunks = []
            return
        first = msgs.first()
        while self.chunks and self.chunks[0].offsets[-1] < first:
            del self.chunks[0]

    def full(self) -> bool:
        """RocketMQ's pull flow control: at most 1000 messages or 100 MiB cached per queue."""
        n = len(self.msgs) + len(self.consuming)
        return n >= PULL_THRESHOLD_COUNT or self.bytes >= PULL_THRESHOLD_BYTES

    def cached(self) -> int:
        return len(self.msgs) + len(self.consuming)

    # -- concurrent ------------------------------------------------------------------------
    def next_batch(self, n: int) -> list[Message]:
        """Up to ``n`` cached messages not yet handed out, oldest first (concurrent mode); of
        a queue of rows, their :class:`MessageRows`."""
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
        if self.chunks:
            return self._rows_of(keys)   # type: ignore[return-value]  # (read as client messages)
        return msgs.values_of(keys)

    def remove(self, messages: list[Message]) -> int:
        """Forget consumed messages; the offset to commit (or -1 if nothing was cached)."""
        msgs = self.msgs
        if not msgs:
            return -1
        n = len(messages)
        offs = offsets_of(messages)
        if n and msgs.first() == offs[0] and msgs.head(n) == offs:
            # the oldest n cached, in order (batches are handed out so)
            if n == len(msgs):
                # the common case: everything cached was consumed
                self.bytes = 0
                msgs.clear()
                self.chunks = []
                self.in_flight.clear()
                return self.max_seen + 1
            self.in_flight.difference_update(offs)
            self.bytes -= sum(map(len, map(_BODY, messages) if isinstance(messages, list) else messages.bodies))
            msgs.drop_head(n)
        else:
            bodies = bool(self.chunks)   # (a queue of rows maps offsets to bodies)
            for off in offs:
                got = msgs.pop(off, None)
                self.in_flight.discard(off)
                if got is not None:
                    self.bytes -= len(got if bodies else got.body)
        if not self.in_flight:
            self.gaps = False
        if self.chunks:
            self._spent()
        if msgs:
            return msgs.first()
        return self.max_seen + 1

    def release(self, messages: Sequence[Message]) -> None:
        """Hand messages back (concurrent mode) so a later batch takes them again."""
        self.in_flight.difference_update(offsets_of(messages))
        # what was handed back lies below handed_max and is not out any more
        self.gaps = bool(self.in_flight)

    # -- orderly ---------------------------------------------------------------------------
    def take(self, n: int) -> list[Message]:
        if self.chunks:
            self._materialize()
        out: list[Message] = []
        while self.msgs and len(out) < n:
            off, m = self.msgs.pop_first()
            self.consuming[off] = m
            out.append(m)
        return out

    def commit(self) -> int:
        """Drop the in-flight messages; the offset to commit (or -1): the next one cached, or
        one past the largest seen when nothing is left (as :meth:`remove`). Not just the one
        after the last consumed: what a pull left out after it (``--dedup``'s skipped copies,
        another tag's messages) is consumed too, or a queue that ends with them never drains."""
        if not self.consuming:
            return -1
        last = max(self.consuming)
        for off, m in self.consuming.items():
            self.bytes -= len(m.body)
            self.retries.pop(off, None)
        self.consuming.clear()
        return max(int(last) + 1, self.msgs.first() if self.msgs else self.max_seen + 1)

    def make_again(self) -> None:
        """Put the in-flight messages back in front, to be consumed again."""
        for off, m in sorted(self.consuming.items()):
            self.msgs[off] = m
        self.consuming.clear()

    def clear(self) -> None:
        self.msgs.clear()
        self.chunks = []
        self.consuming.clear()
        self.in_flight.clear()
        self.bytes = 0


def _pick(rows: MessageRows, keep: list[int]) -> MessageRows:
    """The rows at the indexes ``keep``."""
    from store.client.message import MessageRows  # (loaded already: ``rows`` are)
    at = keep.__iter__
    return MessageRows(rows.topic, rows.queue_id, list(map(rows.offsets.__getitem__, at())),
                       list(map(rows.bodies.__getitem__, at())), list(map(rows.born.__getitem__, at())),
                       list(map(rows.stored.__getitem__, at())), list(map(rows.phys.__getitem__, at())),
                       list(map(rows.reconsume.__getitem__, at())), list(map(rows.props.__getitem__, at())))
