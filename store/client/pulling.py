"""Pulling a consumer group member's held queues into their process queues.

Each turn of the loop pulls every held queue whose cache has room (RocketMQ's flow control,
:mod:`store.client.process_queue`), up to the end snapshot with ``exit_at_end``. Records are
checked as arrays where numpy is worth it (``store.log.columns``), and the queues of a topic
whose records lie side by side in the log are read together, one window of the log for all
(:func:`~store.log.sharedread.pull_many`): ``mqctl consume`` writing raw bodies gets bodies only
(written at once, nothing cached), a sink that takes :class:`store.Message` objects
(``client_messages``) gets them built straight from the records' columns; every other sink
gets decoded records, filtered by tag and deduplicated here.
"""
from __future__ import annotations

import time

from store import names
from store.client.dispatch import Dispatcher
from store.client.holding import Holdings
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions, RunState
from store.client.process_queue import PULL_BATCH, PULL_THRESHOLD_COUNT, ProcessQueue
from store.log.columns import Columns
from store.log.messagestore import Store
from store.log.offsets import QueueKey, Warn
from store.log.record import Message, java_hash

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.client.dedup import DedupLog

PULL_MAX_BYTES = 4 * 1024 * 1024   # what one pull reads at most (Store.pull's max_bytes)
PULL_MIN_BYTES = 256 * 1024        # a queue's share of a sink's cache_bytes, at least


class Puller:
    """The member's pulls (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, run: RunState, held: Holdings,
                 keeper: OffsetKeeper, dispatcher: Dispatcher, warn: Warn) -> None:
        self.store = store
        self.o = opts
        self.run = run
        self.held = held
        self.keeper = keeper
        self.dispatcher = dispatcher
        self.warn = warn
        self.tag_codes = frozenset(java_hash(t) for t in opts.tags) if opts.tags else None
        self.end_snapshot: dict[QueueKey, int] = {}
        self.dedup: DedupLog | None = None

    def snapshot_ends(self, topics: list[str]) -> None:
        """Remember where every queue of ``topics`` ends now (``exit_at_end`` drains up to
        there and no further)."""
        self.end_snapshot = {}
        for t in topics:
            if self.store.has_topic(t):
                for q in range(self.store.topic(t).queues):
                    self.end_snapshot[(t, q)] = self.store.max_offset(t, q)

    def backlog(self) -> bool:
        """Whether messages wait for this member: cached in a held queue, in the log past its
        next pull (``exit_at_end``: up to its end at start), or a pull waits for a commit to
        make room. ``idle_timeout_s`` counts only time with none: their wait restarts it."""
        store, ends, exit_at_end = self.store, self.end_snapshot, self.o.exit_at_end
        waiting = self.keeper.held_back or any(
            pq.cached() or pq.next_pull < (ends.get(key, 0) if exit_at_end else store.max_offset(*key))
            for key, pq in self.held.pqs.items())
        if waiting:
            self.dispatcher.last_activity = time.monotonic()
        return waiting

    def pull_all(self) -> bool:
        """Pull every held queue that has room and something new. True: something came."""
        worked = False
        o, store, pqs = self.o, self.store, self.held.pqs
        raw_fast, client_fast = self.dispatcher.raw_fast, self.dispatcher.client_fast
        pool = self.dispatcher.pool
        pool_batch = pool.batch if pool is not None else 0
        # A sink may bound what its client-message pulls keep in memory (the iterator: a few
        # MiB in all, shared by the queues held): bodies read into pages the process already
        # has, rather than a cache of up to 1000 messages a queue faulted in afresh.
        cache_bytes = getattr(pool, "cache_bytes", 0) if client_fast and pqs else 0
        queue_bytes = max(PULL_MIN_BYTES, cache_bytes // len(pqs)) if cache_bytes else 0
        inline = self.dispatcher.inline is not None
        room = self.keeper.room
        # Raw and client-message pulls of several queues of a topic are read together
        # (pull_many): one read of the log serves them all. Not with --count, whose budget is
        # taken queue by queue.
        shared: dict[QueueKey, tuple[bool, int, int]] = {}
        unpersisted = self.keeper.starts_wanted   # (nothing of a queue before its start is durable)
        for key, pq in pqs.items():
            if pq.full() or (o.orderly and pq.suspended_until > time.monotonic()) or key in unpersisted:
                continue
            t, q = key
            # The retry topic is subscribed with '*' (RocketMQ): its messages passed the
            # filter when they were first delivered.
            tag_codes, tags = (None, None) if t != o.topic else (self.tag_codes, o.tags)
            raw = raw_fast and tag_codes is None and not pq.cached() and not pq.in_flight
            client = client_fast and tag_codes is None and not names.is_retry_topic(t)
            # The raw path caches nothing, so it may take what flow control allows a queue's
            # cache (1000 messages): fewer, larger pulls and writes. So may the path that builds
            # client messages from columns, up to what the cache has room for.
            # A pool sink's --batch may be bigger than a pull: pull a whole batch (up to what
            # the queue's cache holds), or its handler gets 256 at a time.
            want = (PULL_THRESHOLD_COUNT if raw else PULL_THRESHOLD_COUNT - pq.cached() if client
                    else max(PULL_BATCH, min(pool_batch, PULL_THRESHOLD_COUNT)))
            max_bytes = min(PULL_MAX_BYTES, queue_bytes - pq.bytes) if client and queue_bytes else PULL_MAX_BYTES
            if client and pq.cached() and (want < PULL_THRESHOLD_COUNT // 2 or max_bytes < queue_bytes // 2):
                # A pull costs about as much to set up as a few hundred messages cost to
                # check and build: a queue with more than half its cache still to consume
                # waits for a bigger pull (handlers finishing 200 messages at a time would
                # otherwise cause a pull of 200 each).
                continue
            if inline:
                # an inline sink's offsets are committed by the writer thread while the loop
                # goes on: no more than a pull batch past the committed offset, as when every
                # turn's commit was written before the next turn
                want = min(want, room(key, PULL_THRESHOLD_COUNT if raw else PULL_BATCH))
                if want <= 0:
                    continue
            if o.exit_at_end:
                # -e drains each queue up to its end at start and no further: what arrives
                # later is neither waited for nor taken (it stays for the next run).
                want = min(want, self.end_snapshot.get(key, 0) - pq.next_pull)
                if want <= 0:
                    continue
            elif pq.next_pull >= store.max_offset(t, q):
                continue   # nothing new: no need to look at retention either
            # retention may have removed what we were about to read (checked only when pulling)
            lo = store.min_offset(t, q)
            if pq.next_pull < lo:
                self.warn(f"{t}/{q}: offset {pq.next_pull} is no longer stored; moving to {lo}")
                pq.next_pull = lo
            if (raw or client) and o.count is None:
                lock = self.held.locks.get(key)
                if lock is None or lock.is_valid():
                    shared[key] = (raw, want, max_bytes)
                continue
            if raw:
                worked |= self._pull_raw(key, pq, want)
                continue
            if client:
                worked |= self._pull_client(key, pq, want, max_bytes)
                continue
            res = store.pull(t, q, pq.next_pull, want, tag_codes, tags)
            for qoff, why in res.damaged:
                self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
            if res.next_offset == pq.next_pull:
                continue
            worked = True
            fresh = [m for m in res.messages if m.queue_offset >= pq.next_pull]
            if self.dedup is not None and fresh:
                fresh = self._skip_duplicates(fresh)
            pq.put(fresh)
            pq.max_seen = max(pq.max_seen, res.next_offset - 1)
            pq.next_pull = res.next_offset
            if not pq.cached() and not pq.in_flight:
                self.keeper.advance(key, res.next_offset)
        if shared:
            worked |= self._pull_shared(shared)
        return worked

    def _pull_shared(self, plan: dict[QueueKey, tuple[bool, int, int]]) -> bool:
        """Raw and client-message pulls (``plan``: queue -> (raw, how many, how many bytes)),
        each topic's queues read together, window by window
        (:func:`~store.log.sharedread.pull_many`), until every queue got what one pull of its
        own would have (its count and bytes) or no window serves it any more; what is left is
        pulled queue by queue."""
        worked = False
        pqs, run = self.held.pqs, self.run
        left = {key: [want, max_bytes] for key, (_raw, want, max_bytes) in plan.items()}
        for topic in sorted({k[0] for k in plan}):
            for raw in (True, False):
                keys = [k for k in plan if k[0] == topic and plan[k][0] == raw]
                # Client rows: a queue's runs of every window joined into one put (one chunk
                # of its cache, so a batch handed out is a slice of it, not a join of several)
                joined: dict[QueueKey, tuple[Columns, int]] = {}
                at = {k: pqs[k].next_pull for k in keys}
                while len(keys) > 1 and not run.stop_requested:
                    got = self.store.pull_many(topic, [(k[1], at[k], left[k][0], left[k][1]) for k in keys],
                                               full=not raw)
                    if not got:
                        break
                    for key in keys:
                        c = got.get(key[1])
                        if c is None:
                            continue
                        nbytes = sum(map(len, c.bodies))
                        if raw:
                            worked |= self._pull_raw(key, pqs[key], 0, c)
                        elif key in joined:
                            joined[key][0].extend(c)
                            joined[key] = (joined[key][0], joined[key][1] + nbytes)
                        else:
                            joined[key] = (c, nbytes)
                        at[key] = c.next_offset
                        left[key][0] -= len(c)
                        left[key][1] -= nbytes
                    keys = [k for k in keys if k[1] in got and left[k][0] > 0 and left[k][1] > 0
                            and k in pqs and at[k] < got[k[1]].max_offset]
                    # A raw read's bodies are views into its buffer: free it before the next
                    # read, which then reuses its memory instead of faulting in fresh pages.
                    del got, c
                for key, (c, nbytes) in joined.items():
                    pq = pqs.get(key)
                    if pq is not None:
                        worked |= self._pull_client(key, pq, 0, pre=c, nbytes=nbytes)
        for key, (raw, want, max_bytes) in plan.items():
            held = pqs.get(key)
            if held is None or left[key][0] < want or run.stop_requested:
                continue   # served (in part) by a shared read: the rest comes next turn
            worked |= self._pull_raw(key, held, want) if raw else self._pull_client(key, held, want, max_bytes)
        return worked

    def _pull_client(self, key: QueueKey, pq: ProcessQueue, want: int, max_bytes: int = PULL_MAX_BYTES,
                     pre: Columns | None = None, nbytes: int | None = None) -> bool:
        """A pull for a sink that takes :class:`store.Message` objects: the records' columns
        (every record checked as by :meth:`Store.pull`), kept as they are; each message is
        built from them as it is handed out, its properties parsed only when read; no record is
        decoded on the way. ``pre``: the columns read already (:meth:`_pull_shared`), and
        ``nbytes`` their bodies' length."""
        t, q = key
        c = self.store.pull_records(t, q, pq.next_pull, want, max_bytes) if pre is None else pre
        for qoff, why in c.damaged:
            self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
        if c.next_offset == pq.next_pull:
            return False
        bodies: list[bytes] = c.bodies   # type: ignore[assignment]  # (full reads copy the bodies out: no views)
        from store.client.message import MessageRows  # (a client sink's: a raw consumer never loads it)
        pq.put_rows(MessageRows(t, q, c.offsets, bodies, c.born, c.stored, c.phys, c.reconsume, c.props),
                    sum(map(len, bodies)) if nbytes is None else nbytes)
        pq.max_seen = max(pq.max_seen, c.next_offset - 1)
        pq.next_pull = c.next_offset
        if not pq.cached() and not pq.in_flight:
            self.keeper.advance(key, c.next_offset)
        return True

    def _pull_raw(self, key: QueueKey, pq: ProcessQueue, want: int, pre: Columns | None = None) -> bool:
        """Raw bodies to stdout with nothing to filter or dedup: pull only the bodies (every
        record still checked) and write them at once; no Message, no process queue. The
        offset moves only after the write returned, as on the general path. ``pre``: the
        bodies read already (:meth:`_pull_shared`, which checked the lock)."""
        t, q = key
        res: Columns
        if pre is None:
            want = min(want, self.dispatcher.budget())
            if want <= 0:
                return False
            lock = self.held.locks.get(key)
            if lock is not None and not lock.is_valid():
                return False  # the next rebalance drops the queue through the normal path
            # (columns, not pull_bodies' result: its module's dataclasses cost a member ~2 ms
            # to import at its first message)
            res = self.store.pull_columns(t, q, pq.next_pull, want, bodies_only=True, views=True)
        else:
            res = pre
        for qoff, why in res.damaged:
            self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
        if res.next_offset == pq.next_pull:
            return False
        if res.bodies and not self.dispatcher.write_raw(key, res.bodies, res.offsets, res.next_offset):
            return True   # a stop cut the write short: its offset is where the lines written whole end
        pq.max_seen = max(pq.max_seen, res.next_offset - 1)
        pq.next_pull = res.next_offset
        self.keeper.advance(key, res.next_offset)
        self.held.lapsed(key, len(res.bodies), self.warn)   # (written past its lock's lease: let go)
        return True

    def _skip_duplicates(self, msgs: list[Message]) -> list[Message]:
        """``msgs`` less the ids the dedup log has, and less a second copy of one id in the
        same pull (a producer's resend stored next to the first: neither is recorded yet)."""
        assert self.dedup is not None
        self.dedup.refresh()
        out = []
        pulled: set[str] = set()
        for m in msgs:
            uk = m.uniq_key
            if uk:
                if uk in pulled or self.dedup.seen(uk):
                    continue
                pulled.add(uk)
            out.append(m)
        return out
