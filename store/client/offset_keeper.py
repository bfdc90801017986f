"""A consumer group member's offsets while it runs: where each held queue starts, how far it
was consumed, and when that reaches the group's offset store.

Where a queue starts is RocketMQ's computePullFromWhere: the stored offset, else the first, the last, or the one at
a timestamp (a computed start is persisted at once). Consumed offsets move in memory (:meth:`OffsetKeeper.advance`)
and are persisted in batches (:meth:`persist`): every persist interval, when a queue ran ahead of its persisted
offset by the sink's lag, when the loop is idle, and before a queue is given away; a commit is one journal record,
the table's snapshot written by the offset store now and then and when the member settles (its commits quiet, or it
closing: ``ClusterOffsetStore.settle``). A lag commit that finds another member's commit under way is put off to the
next turn, at most ``MAX_PUT_OFF`` in a row.

The commits of every turn and of idle moments (:meth:`OffsetKeeper.commit_soon`) that may wait (the table's lock
taken, a snapshot due) are written by a thread of their own (:class:`~store.client.offset_writer.OffsetWriter`; the
others at once): a message that arrived meanwhile would otherwise wait behind them. The loop goes on delivering;
what it may deliver before the commit is done is bounded (:meth:`OffsetKeeper.room`), so a crash hands no more to
the next owner again than with the commit in the loop. Every other persist (the interval, a queue given away,
shutdown) first waits for the one in flight and writes in the loop's thread.

``offsets reset --force`` while the member runs is noticed by the reset epochs (:meth:`check_reset`): the queues it
moved are let go and taken again from their new offsets. The stores and their format are :mod:`store.log.offsets`'s.
"""
from __future__ import annotations

import os
import time

from store.client.holding import Holdings
from store.client.offset_writer import OffsetWriter, Refusals
from store.client.options import ConsumeOptions
from store.client.process_queue import PULL_BATCH
from store.client.startpoint import AtOpen, start_offset
from store.errors import LockHeldError, StoreIOError
from store.failpoints import failpoint
from store.log.broadcastoffsets import BroadcastOffsetStore
from store.log.messagestore import Store
from store.log.offsets import LOCK_TIMEOUT_S, ClusterOffsetStore, GroupOffsets, MemoryOffsetStore, QueueKey, Warn

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

    from store.client.stage import Stage

MAX_PUT_OFF = 15   # lag commits put off in a row (the table busy) before one waits for it


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
        self.at_open = AtOpen()   # the topic's queues and the group's topics then (where a queue starts)
        self._reset_look: tuple[int, int, int] | None = None   # the offsets file check_reset last read
        self.offset_store: Any = None   # ClusterOffsetStore, BroadcastOffsetStore or MemoryOffsetStore
        self.stage: Stage | None = None   # an exactly-once stage commits through its outputs' batches
        self._absorbed_at = 0.0
        self._fence_look: tuple[int, int, int] | None = None   # the offsets file at the last epoch read
        self._fence_epochs: dict[str, int] = {}
        # An asyncio driver commits off the event loop: the end-of-turn persists only ask for
        # it (``persist_wanted``), and the driver runs :meth:`persist` on a thread after the turn
        self.defer_turn_persists = False
        self.persist_wanted = False
        # computed starts the driver commits off the loop before the next turn (not pulled till then)
        self.starts_wanted: dict[QueueKey, int] = {}
        # commits of every turn; ``on_commit`` (a commit was written) wakes the loop. ``threaded``
        # False: written in the loop's thread (an event loop of many members starts no thread each)
        self.on_commit: Callable[[], None] = lambda: None
        self.threaded = True
        self.held_back = False   # a pull waited for room (:meth:`room`)
        self.refusals = Refusals()   # commits the file system refused (a full disk): tried again later
        self.writer = OffsetWriter(self._commit_in_writer, self._written, self._commit_quick)

    def open(self) -> None:
        """Open the offset store the member's mode uses, and learn the reset epochs."""
        o = self.o
        queues = {o.topic: self.store.topic(o.topic).queues}   # (before the offsets: see AtOpen)
        if o.no_group:
            self.offset_store, committed = MemoryOffsetStore(), dict[QueueKey, int]()
        elif o.broadcast:
            self.offset_store = BroadcastOffsetStore(self.store.layout, o.client_id, o.group, self.warn)
            committed = self.offset_store.load()
        else:
            self.offset_store = self.store.offsets
            look = self._offsets_look()
            snap = self.offset_store.snapshot(o.group)
            self.epochs, self._reset_look, committed = dict(snap.epochs), look, snap.offsets
        self.at_open = AtOpen(queues, committed)

    def pace(self, inline: bool, every_s: float) -> None:
        """How far a queue's consumed offset may run ahead of the persisted one before the loop persists it
        (at the end of its turn): a crash hands at most that much, plus one turn's delivery, to the next owner
        again. Inline sinks persist every turn that moved an offset (at most one pull batch per queue is lost
        to a crash); pool sinks every half pull batch, plus what was in flight. An idle loop persists whatever
        moved. In-process pool sinks (``every_s`` > 0: the iterator of store.Consumer and Python handlers)
        consume far faster than an offset commit (an fsync) completes, so they persist on lag at most once per
        ``every_s``, and not on every idle moment while their batches are out: a kill -9 hands the next owner
        again at most what was consumed in the last ``every_s`` (or half a pull batch per queue, whichever is
        more), plus the batches in flight."""
        self.lag = 1 if inline else PULL_BATCH // 2
        self.every_s = every_s

    # -- starting a queue ------------------------------------------------------------------
    def start(self, keys: list[QueueKey]) -> dict[QueueKey, int]:
        """Where each of these newly held queues starts (:mod:`store.client.startpoint`): their stored offsets read
        (one read of the table for them all), the computed ones persisted in one commit."""
        if self.stage is not None:
            # A stage reads where it starts only after the store's write lock was free once and
            # the log recovered: a batch of the queue's last holder that was in its write (a
            # holder killed inside it, or one stuck past its lease) is then whole or gone.
            self.store.ensure_recovered()
        stored = self._read_stored(keys)
        starts: dict[QueueKey, int] = {}
        computed: dict[QueueKey, int] = {}
        for key in keys:
            starts[key], is_computed = start_offset(self.store, self.o, key, stored.get(key, -1), self.at_open,
                                                    self.warn)
            if is_computed:
                computed[key] = starts[key]
        if computed and self.defer_turn_persists and self.stage is None:
            self.starts_wanted.update(computed)   # (the same rule, its fsync off the event loop)
        elif computed:
            # A computed start is persisted before anything of its queue is delivered, so
            # that a queue handed over before anything was consumed continues where it
            # started, not at a newer end.
            self.commit(computed, increase_only=True)
        for key, start in starts.items():
            self.offsets[key] = start
            self.persisted[key] = start
        return starts

    def _read_stored(self, keys: list[QueueKey]) -> dict[QueueKey, int]:
        """The stored offsets of ``keys``. A topic of which no other queue is held takes the reset
        epoch read with them: one deleted and made again meanwhile is not seen as reset under the
        queues it starts (which would deliver again what they deliver from here)."""
        self.reap(wait=True)
        if self.o.broadcast or self.o.no_group:
            return {(t, q): int(self.offset_store.read(t, q)) for t, q in keys}
        snap: GroupOffsets = self.offset_store.snapshot(self.o.group)
        for topic in {t for t, _q in keys} - {t for t, _q in self.held.keys()}:
            self.epochs[topic] = snap.epochs.get(topic, 0)
        return snap.offsets

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
        """A queue was let go: its offset is no longer ours to move (nor its start to commit)."""
        self.offsets.pop(key, None)
        self.starts_wanted.pop(key, None)

    def commit(self, offsets: dict[QueueKey, int], increase_only: bool, wait: bool = True) -> set[str]:
        """Write offsets to the store; returns the topics whose offsets were reset meanwhile
        (their commits skipped). Not ``wait``: LockHeldError at once if another process is
        committing to the group's table."""
        if self.stage is not None:
            self._commit_stage(offsets)
            return set()
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
        return set(self.offset_store.commit(self.o.group, offsets, increase_only=increase_only, journal_only=True,
                                            expected_epochs=self.epochs, timeout=LOCK_TIMEOUT_S if wait else 0.0))

    def _commit_stage(self, offsets: dict[QueueKey, int]) -> None:
        """An exactly-once stage's commit: its outputs below these offsets and the offsets in
        one write batch, for the queues whose locks this member still holds (checked again
        under the store's write lock). A queue whose lock is gone keeps neither: its new owner
        starts from the last commit and makes those outputs again."""
        from store.client.stage import LostQueueError
        assert self.stage is not None
        stage, locks = self.stage, self.held.locks

        def lost() -> list[QueueKey]:
            return [k for k in offsets if k not in locks or not locks[k].is_valid(0)]

        def fence() -> None:
            # (the write lock held: a reset or deletion, which takes it, is before or after)
            if lost():
                raise LostQueueError("a queue lock was lost")
            moved = self._reset_topics({t for t, _q in offsets})
            if moved:
                raise LostQueueError("offsets were reset", moved)

        for _attempt in range(3):
            for key in lost():
                self.warn(f"{key[0]}/{key[1]}: the queue's lock is gone; its uncommitted outputs are dropped "
                          f"(the new owner makes them again)")
                stage.forget(key)
                offsets = {k: v for k, v in offsets.items() if k != key}
            if not offsets:
                return
            try:
                stage.commit(offsets, self.epochs, fence)
                break
            except LostQueueError as exc:
                if exc.topics:   # reset under us: those queues start again from the new offsets
                    self._reload_after_reset(exc.topics)
                    offsets = {k: v for k, v in offsets.items() if k[0] not in exc.topics}
        now = time.monotonic()
        if now - self._absorbed_at >= 1.0:
            # Once a second the stage's batches are made durable and taken into the offsets
            # file: the file stays current, and what readers apply on top of it stays small.
            self._absorbed_at = now
            self.offset_store.absorb(self.store.sync_written())

    def _reset_topics(self, topics: set[str]) -> set[str]:
        """Those of ``topics`` whose reset epoch moved since this member loaded it (one stat)."""
        look = self._offsets_look()
        if look is None or look != self._fence_look:
            self._fence_look = look
            self._fence_epochs = self.offset_store.epochs_of(self.o.group)
        return {t for t in topics if self._fence_epochs.get(t, 0) != self.epochs.get(t, 0)}

    def finish_stage(self) -> None:
        """At exit: the stage's commits made durable and written into the offsets file."""
        if self.stage is not None and self.offset_store is not None:
            self.offset_store.absorb(self.store.sync_written())

    def persist(self, force: bool = False, only: set[QueueKey] | None = None,
                increase_only: bool | None = None, wait: bool = True) -> bool:
        """Persist what moved (``only``: of these queues); ``increase_only`` None: as the mode
        says (concurrent: never backwards; orderly: as consumed). Not ``wait``: False, and
        nothing changed here, when another process is committing to the group's table."""
        self.reap(wait=True)
        if isinstance(self.offset_store, ClusterOffsetStore) and not force:
            self.offset_store.settle()   # (commits quiet for a second: into the snapshot)
        if self.starts_wanted:
            starts = dict(self.starts_wanted)
            self.commit(starts, increase_only=True)
            for key in starts:
                del self.starts_wanted[key]
        keys = {k for k in self.dirty if only is None or k in only}
        if not keys and not force:
            return True
        offsets = {k: self.offsets[k] for k in keys if k in self.offsets}
        failpoint("offsets-before-persist")
        if increase_only is None:
            increase_only = not self.o.orderly
        lost = {k: v for k, v in offsets.items() if self.held.not_ours(k, check_lock=not increase_only)}
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
        except StoreIOError as exc:
            if force or self.stage is not None:
                raise
            self.refused(exc)
            return True   # (tried again later, not put off to the next turn)
        failpoint("offsets-after-persist")
        if offsets or lost:   # (an empty commit wrote nothing: a refusal stands)
            self.refusals.error = None
        self.dirty -= keys
        self.persisted.update({k: v for k, v in offsets.items() if k[0] not in skipped})
        self.urgent = False
        self.last_persist = time.monotonic()
        self.put_off = 0
        if skipped:
            self._reload_after_reset(skipped)
        if isinstance(self.offset_store, ClusterOffsetStore) and force and only is None:
            self.offset_store.settle(0.0)   # (the member stops: its commits into the snapshot)
        return True

    def refused(self, exc: StoreIOError) -> None:   # (a commit the file system refused: Refusals)
        self.refusals.refused(exc, self.warn)
        self.last_persist, self.urgent = time.monotonic(), False

    def persist_lagging(self, now: float) -> None:
        """At the end of a turn: offsets reach the store at least once per pull batch of every
        queue (``lag``), so a crash hands at most one pull batch per queue to a member a
        second time (in-process sinks: at most once per ``every_s``, see :meth:`pace`), or
        ``MAX_PUT_OFF`` more when another member was committing at those moments. An inline
        sink's commit of every turn is written by the writer thread (the pulls are bounded by
        :meth:`room` meanwhile); a pool sink's, which comes once per half a pull batch, here,
        as its bound is counted from the commit."""
        # (``now`` is the turn's start: a commit reaped in this turn is later than it)
        if self.refusals.waiting():
            return
        if self.urgent and (self.every_s <= 0 or now - self.last_persist >= self.every_s):
            if self.lag == 1 or self.defer_turn_persists:
                self._turn_persist(soon=self.lag == 1)
            elif not self.persist(wait=self.put_off >= MAX_PUT_OFF):
                self.put_off += 1

    def room(self, key: QueueKey, bound: int) -> int:
        """How many more messages of ``key`` an inline sink may be handed before its offsets
        must be durable: at most ``bound`` (a pull batch) consumed past the committed offset,
        as when every turn's commit was written before the next turn. 0 until the commit in
        flight is done, when it holds a whole batch.

        While a commit may be written by the writer thread (one is out; no quick commits) a pull
        takes at most half of ``bound``: the other half is delivered meanwhile (a whole bound left
        nothing to do until it was done). Else all: its commit is quick, half as many of both."""
        off = self.offsets.get(key)
        done = self.persisted.get(key)
        if off is None or done is None or self.o.no_group:
            return bound   # (--no-group commits nothing, so no commit makes room: each pull waited ~5 s)
        whole = not self.writer.busy and isinstance(self.offset_store, ClusterOffsetStore) and not self.o.broadcast
        left = max(0, min(bound if whole else bound - bound // 2, bound - max(0, off - done)))
        if not left:
            self.held_back = True
        return left

    def _written(self) -> None:
        """(In the writer thread.) A commit was written: wake the loop only if it has work for it (offsets
        moved meanwhile, or a pull waits for room); an idle loop sleeps on, and takes the outcome at its next turn."""
        if self.dirty or self.held_back:
            self.on_commit()

    @property
    def committing(self) -> bool:
        """Whether a commit is being written by the writer thread."""
        return self.writer.busy

    def commit_soon(self) -> None:
        """Hand what moved to the writer thread (nothing if a commit is out: the loop hands
        the rest over when that one is done, :attr:`on_commit`)."""
        self.reap(wait=False)
        if self.writer.busy or not self.dirty or self.o.no_group or self.refusals.waiting():
            return
        if not self.threaded:
            self.persist()
            return
        if any(self.held.not_ours(k, check_lock=self.o.orderly) for k in self.dirty):
            self.persist()   # the lost-lock rule of persist: never set such a queue back
            return
        if self.resent:
            # the copies sent to the retry topic or the DLQ are made durable first, in this
            # thread (it is the one that writes them)
            self.store.sync_written()
            self.resent = False
        keys = set(self.dirty)
        self.dirty -= keys   # (before: a quick commit's on_done looks at what moved since)
        self.urgent = False
        failpoint("offsets-before-persist")
        try:
            self.writer.submit({k: self.offsets[k] for k in keys if k in self.offsets}, not self.o.orderly)
        except BaseException:
            self.dirty |= keys
            raise
        self.reap(wait=False)   # (a quick one is written already)

    def _commit_quick(self, offsets: dict[QueueKey, int], increase_only: bool) -> set[str] | None:
        """(OffsetWriter's ``quick``.) The commit if it is quick (``ClusterOffsetStore.try_commit``), or None."""
        if not isinstance(self.offset_store, ClusterOffsetStore) or self.o.broadcast or self.stage is not None:
            return None
        skipped = self.offset_store.try_commit(self.o.group, offsets, increase_only, self.epochs)
        if skipped is not None:
            failpoint("offsets-after-persist")
        return skipped

    def _commit_in_writer(self, offsets: dict[QueueKey, int], increase_only: bool) -> set[str]:
        skipped = self.commit(offsets, increase_only=increase_only)
        failpoint("offsets-after-persist")
        return skipped

    def reap(self, wait: bool) -> None:
        """Take the commit's outcome, if written (``wait``: once it is); a failure is raised here."""
        if not self.writer.busy:
            return
        out = self.writer.offsets_out()
        try:
            done = self.writer.take(wait)
        except BaseException as exc:
            self.dirty |= {k for k in out if k in self.offsets}
            if not isinstance(exc, StoreIOError) or self.stage is not None:
                raise
            self.refused(exc)
            return
        if done is None:
            return
        offsets, skipped = done
        if offsets:   # (an empty commit wrote nothing: a refusal stands)
            self.refusals.error = None
        self.held_back = False
        self.persisted.update({k: v for k, v in offsets.items() if k[0] not in skipped})
        self.last_persist = time.monotonic()
        if skipped:
            self._reload_after_reset(skipped)
        if any(self.offsets.get(k, -1) - self.persisted.get(k, 0) >= self.lag for k in self.dirty):
            self.urgent = True

    def unsettled(self) -> bool:   # (commits no snapshot holds yet: the loop wakes for its persist look)
        return isinstance(self.offset_store, ClusterOffsetStore) and self.offset_store.view.appended > 0

    def close(self) -> None:
        """Wait for the commit out, settle the offset store, and end the writer thread."""
        try:
            self.reap(wait=True)
            if isinstance(self.offset_store, ClusterOffsetStore):
                self.offset_store.settle(0.0)
        finally:
            self.writer.close()

    def persist_idle(self, handlers_busy: bool) -> None:
        """The loop has nothing to do: commit what moved now, unless in-process or per-message
        handlers are at work (``handlers_busy``): then the ``urgent`` rule and the persist
        interval see to it (in-process sinks: at least once per ``every_s`` while anything
        moved); after a crash, what finished since the last completion is handled again."""
        if self.dirty and not self.o.no_group and (
                not handlers_busy
                or (self.every_s > 0 and time.monotonic() - self.last_persist >= self.every_s)):
            self._turn_persist(soon=True)

    def _turn_persist(self, soon: bool) -> None:
        """An end-of-turn persist: asked of an asyncio driver's commit thread
        (``defer_turn_persists``), handed to the writer thread (``soon``), or written now."""
        if self.defer_turn_persists:
            self.persist_wanted = True
        elif soon:
            self.commit_soon()
        else:
            self.persist()

    # -- resets ----------------------------------------------------------------------------
    def check_reset(self) -> None:
        """An idle member learns of ``offsets reset --force`` here, not only when it next
        commits: compare the reset epochs of the topics it holds."""
        if self.o.broadcast:
            return
        self.reap(wait=False)
        if self.writer.busy:
            return   # our own commit is replacing the file: look next time
        # The file is only ever replaced (a reset too): unchanged since the last look, it says nothing
        # new (stat first: a replace between the stat and the read is read again next time).
        look = self._offsets_look()
        if look is not None and look == self._reset_look:
            return
        epochs = self.offset_store.reset_epochs(self.o.group)
        self._reset_look = look
        moved = {t for t in self.topics if epochs.get(t, 0) != self.epochs.get(t, 0)}
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
        """Offsets of ``topics`` were reset while we ran (``offsets reset --force``): their queues held
        or being dropped (whose last commit would undo it) whose stored offset moved are let go, taken
        again from it by the next rebalance. (An epoch is per topic: a queue read past its stored
        offset is let go too, a reset to that offset, a replay of what it read since, looks the same.)"""
        snap = self.offset_store.snapshot(self.o.group)
        self.epochs.update({t: snap.epochs.get(t, 0) for t in topics})   # (not others': hidden from their queues)
        for key in [k for k in self.held.keys() if k[0] in topics]:
            stored = self.persisted.get(key)
            if self.stage is None and snap.offsets.get(key, -1) == stored == self.offsets.get(key, stored):
                continue
            self.warn(f"offsets of {key[0]}/{key[1]} were reset; continuing from {snap.offsets.get(key, 0)}")
            if self.stage is not None:
                self.stage.forget(key)
            self.held.forget(key)
            self.offsets.pop(key, None)
            self.dirty.discard(key)
