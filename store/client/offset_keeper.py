"""A consumer group member's offsets while it runs: where each held queue starts, how far it
was consumed, and when that reaches the group's offset store.

Where a queue starts is RocketMQ's computePullFromWhere: the stored offset, else the first,
the last, or the one at a timestamp (a computed start is persisted at once). Consumed offsets
move in memory (:meth:`OffsetKeeper.advance`) and are persisted in batches (:meth:`persist`):
every persist interval, when a queue ran ahead of its persisted offset by the sink's lag, when
the loop is idle, and before a queue is given away. A commit for lag does not wait behind
another member's commit of the group's table: it is put off to the next turn instead, at most
``MAX_PUT_OFF`` turns in a row (members of one group would otherwise take turns at the table's
lock, each waiting for the others' fsyncs instead of consuming). ``offsets reset --force`` while the member
runs is noticed by the reset epochs (:meth:`check_reset`): the queues of a reset topic are let
go and taken again from their new offsets.

The stores themselves (the group's offset table, a broadcast client's file) and their format
are :mod:`store.log.offsets`'s.
"""
from __future__ import annotations

import os
import time
from typing import Any

from store import names
from store.client.holding import Holdings
from store.client.options import ConsumeOptions
from store.client.process_queue import PULL_BATCH
from store.errors import LockHeldError
from store.failpoints import failpoint
from store.log.messagestore import Store
from store.log.offsets import LOCK_TIMEOUT_S, QueueKey, Warn

MAX_PUT_OFF = 15   # lag commits put off in a row (the table busy) before one waits for it


class MemoryOffsetStore:
    """Offsets of a read without a group (``--no-group``): kept in memory, never written."""

    def __init__(self) -> None:
        self._table: dict[QueueKey, int] = {}

    def read(self, topic: str, queue_id: int) -> int:
        return self._table.get((topic, queue_id), -1)

    def update(self, topic: str, queue_id: int, offset: int, increase_only: bool = True) -> None:
        old = self._table.get((topic, queue_id), -1)
        self._table[(topic, queue_id)] = max(old, offset) if increase_only else offset

    def persist(self, owned: Any) -> None:
        return None


class OffsetKeeper:
    """The member's offsets (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, held: Holdings, topics: list[str],
                 warn: Warn) -> None:
        self.store = store
        self.o = opts
        self.held = held
        self._pqs, self._dropping = held.pqs, held.dropping   # (advance runs once per batch)
        self.topics = topics
        self.warn = warn
        self.offsets: dict[QueueKey, int] = {}
        self.dirty: set[QueueKey] = set()
        self.persisted: dict[QueueKey, int] = {}   # what the offset store has, per queue
        self.urgent = False   # a queue ran ahead of its persisted offset (see pace)
        self.lag = PULL_BATCH // 2
        self.every_s = 0.0     # in-process sinks: the least time between lag persists
        self.last_persist = time.monotonic()
        self.resent = False   # a copy went to the retry topic or DLQ since the last commit
        self.put_off = 0      # lag commits put off in a row because the table was busy
        self.epochs: dict[str, int] = {}
        self._reset_look: tuple[int, int, int] | None = None   # the offsets file check_reset last read
        self.offset_store: Any = None   # ClusterOffsetStore, BroadcastOffsetStore or MemoryOffsetStore

    def open(self) -> None:
        """Open the offset store the member's mode uses, and learn the reset epochs."""
        o = self.o
        from store.log.offsets import BroadcastOffsetStore, ClusterOffsetStore
        if o.no_group:
            self.offset_store = MemoryOffsetStore()
        elif o.broadcast:
            self.offset_store = BroadcastOffsetStore(self.store.layout, o.client_id, o.group)
            self.offset_store.load()
        else:
            self.offset_store = ClusterOffsetStore(self.store.layout)
            look = self._offsets_look()
            self.epochs = dict(self.offset_store.snapshot(o.group).epochs)
            self._reset_look = look

    def pace(self, inline: bool, every_s: float) -> None:
        """How far a queue's consumed offset may run ahead of the persisted one before the loop
        persists it (at the end of its turn): a crash hands at most that much, plus one turn's
        delivery, to the next owner again. Inline sinks persist every turn that moved an
        offset (at most one pull batch per queue is lost to a crash); pool sinks every half
        pull batch, plus what was in flight. An idle loop persists whatever moved.

        In-process pool sinks (``every_s`` > 0: the iterator of store.Consumer and Python
        handlers) consume far faster than an offset commit (an fsync) completes, so they
        persist on lag at most once per ``every_s``, and not on every idle moment while their
        batches are out: a kill -9 hands the next owner again at most what was consumed in
        the last ``every_s`` (or half a pull batch per queue, whichever is more), plus the
        batches in flight."""
        self.lag = 1 if inline else PULL_BATCH // 2
        self.every_s = every_s

    # -- starting a queue ------------------------------------------------------------------
    def start(self, keys: list[QueueKey]) -> dict[QueueKey, int]:
        """Where each of these newly held queues starts: their stored offsets read (one read
        of the table for them all), the computed ones persisted in one commit."""
        stored = self._read_stored(keys)
        starts: dict[QueueKey, int] = {}
        computed: dict[QueueKey, int] = {}
        for key in keys:
            starts[key], is_computed = self._start_offset(key, stored.get(key, -1))
            if is_computed:
                computed[key] = starts[key]
        if computed:
            # A computed start is persisted at once so that a queue handed over before
            # anything was consumed continues where it started, not at a newer end.
            self.commit(computed, increase_only=True)
        for key, start in starts.items():
            self.offsets[key] = start
            self.persisted[key] = start
        return starts

    def _start_offset(self, key: QueueKey, stored: int) -> tuple[int, bool]:
        """RocketMQ's computePullFromWhere: the stored offset, else first/last/timestamp
        (then True: the caller persists it)."""
        t, q = key
        o = self.o
        lo, hi = self.store.min_offset(t, q), self.store.max_offset(t, q)
        if stored >= 0:
            if stored < lo:
                self.warn(f"{t}/{q}: committed offset {stored} is no longer stored; starting at {lo}")
            return min(max(stored, lo), hi), False
        if names.is_retry_topic(t) or o.from_where == "first":
            start = lo
        elif o.from_where == "timestamp" and o.from_timestamp is not None:
            start = self.store.search_offset(t, q, o.from_timestamp)
        elif o.from_where == "offset" and o.from_offset is not None:   # kcat's -o N
            start = min(max(o.from_offset, lo), hi)
        elif o.from_where == "tail" and o.from_offset is not None:     # kcat's -o -N
            start = max(lo, hi - o.from_offset)
        else:
            start = hi
        return start, True

    def _read_stored(self, keys: list[QueueKey]) -> dict[QueueKey, int]:
        if self.o.broadcast or self.o.no_group:
            return {(t, q): int(self.offset_store.read(t, q)) for t, q in keys}
        offsets: dict[QueueKey, int] = self.offset_store.read_group(self.o.group)
        return offsets

    # -- consuming -------------------------------------------------------------------------
    def advance(self, key: QueueKey, off: int) -> None:
        """A queue was consumed up to ``off`` (orderly: set to it)."""
        if key in self._pqs or key in self._dropping:
            if self.o.orderly or off > self.offsets.get(key, -1):
                self.offsets[key] = off
                self.dirty.add(key)
                if off - self.persisted.get(key, off) >= self.lag:
                    self.urgent = True

    def forget(self, key: QueueKey) -> None:
        """A queue was let go: its offset is no longer ours to move."""
        self.offsets.pop(key, None)

    def commit(self, offsets: dict[QueueKey, int], increase_only: bool, wait: bool = True) -> set[str]:
        """Write offsets to the store; returns the topics whose offsets were reset meanwhile
        (their commits skipped). Not ``wait``: LockHeldError at once if another process is
        committing to the group's table."""
        if self.resent:
            # Offsets past messages sent to the retry topic or the DLQ are durable only after
            # those copies are: else a power cut could keep the offset and lose the message.
            self.store.sync_written()
            self.resent = False
        if self.o.broadcast:
            for (t, q), off in offsets.items():
                self.offset_store.update(t, q, off, increase_only=increase_only)
            self.offset_store.persist(self.held.keys() | set(offsets))
            return set()
        skipped: set[str] = self.offset_store.commit(self.o.group, offsets, increase_only=increase_only,
                                                     expected_epochs=self.epochs,
                                                     timeout=LOCK_TIMEOUT_S if wait else 0.0)
        return skipped

    def persist(self, force: bool = False, only: set[QueueKey] | None = None,
                increase_only: bool | None = None, wait: bool = True) -> bool:
        """Persist what moved (``only``: of these queues); ``increase_only`` None: as the mode
        says (concurrent: never backwards; orderly: as consumed). Not ``wait``: False, and
        nothing changed here, when another process is committing to the group's table."""
        keys = {k for k in self.dirty if only is None or k in only}
        if not keys and not force:
            return True
        offsets = {k: self.offsets[k] for k in keys if k in self.offsets}
        failpoint("offsets-before-persist")
        if increase_only is None:
            increase_only = not self.o.orderly
        dropping = self.held.dropping
        lost = {k: v for k, v in offsets.items() if k in dropping and dropping[k].lost}
        skipped = set()
        try:
            if lost and not increase_only:
                # Never set back a queue whose lock we lost: someone else may hold it now.
                skipped |= self.commit(lost, increase_only=True, wait=wait)
                offsets = {k: v for k, v in offsets.items() if k not in lost}
            skipped |= self.commit(offsets, increase_only=increase_only, wait=wait)
        except LockHeldError:
            if wait:
                raise
            return False   # (a commit of the lost queues alone is made again: increase-only)
        failpoint("offsets-after-persist")
        self.dirty -= keys
        self.persisted.update(offsets)
        self.urgent = False
        self.last_persist = time.monotonic()
        self.put_off = 0
        if skipped:
            self._reload_after_reset(skipped)
        return True

    def persist_lagging(self, now: float) -> None:
        """At the end of a turn: offsets reach the store at least once per pull batch of every
        queue (``lag``), so a crash hands at most one pull batch per queue to a member a
        second time (in-process sinks: at most once per ``every_s``, see :meth:`pace`), or
        ``MAX_PUT_OFF`` more when another member was committing at those moments."""
        if self.urgent and now - self.last_persist >= self.every_s:
            if not self.persist(wait=self.put_off >= MAX_PUT_OFF):
                self.put_off += 1

    def persist_idle(self, handlers_busy: bool) -> None:
        """The loop has nothing to do: make what moved durable now, unless in-process or
        per-message handlers are at work (``handlers_busy``). Such a handler is cheaper than
        the fsync, so while its batches run the ``urgent`` rule and the persist interval see
        to it instead (in-process sinks: at least once per ``every_s`` while anything moved);
        a handler that is a process spawn costs more than the fsync, and the redelivery window
        after a crash stays what finished since the last completion."""
        if self.dirty and not self.o.no_group and (
                not handlers_busy
                or (self.every_s > 0 and time.monotonic() - self.last_persist >= self.every_s)):
            self.persist()

    # -- resets ----------------------------------------------------------------------------
    def check_reset(self) -> None:
        """An idle member learns of ``offsets reset --force`` here, not only when it next
        commits: compare the reset epochs of the topics it holds."""
        if self.o.broadcast:
            return
        # The file is only ever replaced (a reset too): unchanged since the last look, it
        # says nothing new. (Stat first: a replace between the stat and the read is read
        # again next time.) An idle member then reads nothing every 5 s but a stat.
        look = self._offsets_look()
        if look is not None and look == self._reset_look:
            return
        snap = self.offset_store.snapshot(self.o.group)
        self._reset_look = look
        moved = {t for t in self.topics if snap.epochs.get(t, 0) != self.epochs.get(t, 0)}
        if moved:
            self._reload_after_reset(moved)

    def _offsets_look(self) -> tuple[int, int, int] | None:
        """The offsets file's identity and size now (None: it cannot be looked at)."""
        path = getattr(self.offset_store, "path", None)
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _reload_after_reset(self, topics: set[str]) -> None:
        """Offsets were reset while we ran (``offsets reset --force``): let the queues of
        those topics go; the next rebalance takes them again from their new offsets."""
        snap = self.offset_store.snapshot(self.o.group)
        self.epochs = dict(snap.epochs)
        for key in [k for k in self.held.pqs if k[0] in topics]:
            self.warn(f"offsets of {key[0]}/{key[1]} were reset; continuing from {snap.offsets.get(key, 0)}")
            self.held.forget(key)
            self.offsets.pop(key, None)
            self.dirty.discard(key)
