"""Which queues a consumer group member holds: RocketMQ's rebalance, with queue locks.

Every rebalance allocates the subscribed topics' queues among the group's live members
(:mod:`store.client.allocate`), drops the queues no longer allocated to this member and adds
the new ones. Clustering members own every queue they consume under a queue lock
(:mod:`store.client.qlocks`, orderly and concurrent alike): a new owner starts only after the
previous one persisted and released it, died (the OS drops the lock), or let its lease
expire. A queue given away is released only after its in-flight batch finished and its offset
was persisted (:meth:`Rebalancer.settle_drops`). The member record tells the group which
queues this member holds (:mod:`store.client.members`).

One round settles a group: every member computes the same allocation from the same sorted
member list, so each knows its share without asking the others; a member gives away what is
no longer its own at once (after the batch in hand), and one waiting for a queue still locked
by its previous owner watches that lock file (:attr:`Rebalancer.waiting_for`) and takes it the
moment it is released, instead of polling on a timer.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from store.client.allocate import member_share, queues_of
from store.client.holding import Holdings
from store.client.leases import MEMBER_EXPIRY_MS
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions
from store.client.process_queue import ProcessQueue
from store.errors import StoreIOError
from store.failpoints import failpoint
from store.log.messagestore import Store
from store.log.offsets import QueueKey, Warn
from store.names import tag_text

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from store.client.members import MemberInfo, Membership
    from store.client.subscriptions import SubscriptionCheck
    from store.watch import Watcher


class Rebalancer:
    """The member's share of the group's queues (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, held: Holdings, keeper: OffsetKeeper,
                 topics: list[str], warn: Warn) -> None:
        self.store = store
        self.o = opts
        self.held = held
        self.keeper = keeper
        self.topics = topics
        self.warn = warn
        self.locked = not opts.broadcast and not opts.no_group
        self.membership: Membership | None = None
        self.published_queues: list[dict[str, Any]] | None = None   # as the member record says
        self.published_retrying = 0   # (orderly) its retryingInPlace
        self.rebalanced_once = False
        # the live members (client ids, sorted) the last allocation was computed among
        self.members_seen: tuple[str, ...] | None = None
        # queues allocated to this member whose locks someone else still holds: the runtime
        # watches their lock files and rebalances when one is released
        self.waiting_for: set[QueueKey] = set()
        self._topics_stamp: tuple[int, int] | None = None   # the topic table's epoch as last seen
        self.subscriptions: SubscriptionCheck | None = None   # (once another member is seen)

    # -- membership ------------------------------------------------------------------------
    def join(self) -> None:
        """Join the group (a member record, under the member's flock)."""
        o = self.o
        from store.client.members import Membership
        self.membership = Membership(self.store.layout, o.group, o.client_id, {
            "topics": [o.topic], "mode": "broadcasting" if o.broadcast else "clustering",
            "orderly": o.orderly, "strategy": o.strategy, "queues": [], "tags": tag_text(o.tags),
            # (config: the member's own queue ids, which `mqctl rebalance` shows as the allocation)
            **({"configQueues": sorted(set(o.config_queues or []))} if o.strategy == "config" else {})},
            beats=not o.broadcast)
        from store.errors import ClientIdInUseError
        try:
            self.membership.join()
        except ClientIdInUseError as exc:
            if o.broadcast and not o.client_id_given:
                from store.client.rules import spelling
                raise ClientIdInUseError(
                    f"{exc}: a broadcast consumer's default client id ({o.client_id}) is one per "
                    f"host and group; give each broadcast consumer of group {o.group} on this host "
                    f"its own {spelling(o.arg_names)['client_id']} (it keeps its offsets under that id)") from exc
            raise
        if o.broadcast:   # (a clustering member looks at the others at its first allocation)
            from store.client.members import live_members
            self._check_subscriptions(live_members(self.store.layout, o.group))

    def _check_subscriptions(self, members: list[MemberInfo]) -> None:
        """Warn once about each live member that subscribes otherwise than this one
        (``subscriptions.py``): not refused, as a rolling change passes through that."""
        if self.membership is None or all(m.clientId == self.o.client_id for m in members):
            return   # (alone: nothing to compare, nor to import for it)
        if self.subscriptions is None:
            from store.client.subscriptions import Subscription, SubscriptionCheck
            self.subscriptions = SubscriptionCheck(self.o.group, Subscription.of(self.membership.record))
        for line in self.subscriptions.look(self.o.client_id, members):
            self.warn(line)

    def leave(self, running: dict[Any, tuple[Any, ...]] | None = None) -> None:
        """Release every queue lock (under one take of the group's mutex) and leave the group
        (offsets persisted before); but the locks of queues with handler calls still running
        (``running``: ``Dispatcher.futures``, a shutdown that did not wait for them) are kept
        until those calls end (:meth:`Holdings.keep_while_running`)."""
        self.held.left = True
        if running:
            self.held.keep_while_running(running)
        locks = [self.held.locks.pop(key) for key in list(self.held.locks)]
        if locks:
            from store.client.qlocks import release_all
            release_all(locks)
        if self.membership is not None:
            self.membership.leave()

    def publish_queues(self) -> None:
        """Tell the group which queues this member holds. A queue being dropped still counts
        until its offset is persisted: a concurrent-mode newcomer waits for that."""
        if self.membership is None:
            return
        queues = [{"topic": t, "queueId": q} for t, q in sorted(self.held.keys())]
        retrying = self._retrying_in_place()
        if queues == self.published_queues and retrying == self.published_retrying \
                and self.membership.json_path.exists():
            # Liveness is the member's flock, not a heartbeat: rewriting an unchanged record
            # would only wake every member of the group (they watch its directory).
            return
        extra = {"retryingInPlace": retrying} if self.o.orderly else {}
        self.membership.update(queues=queues, heartbeatAt=int(time.time() * 1000), **extra)
        self.published_queues, self.published_retrying = queues, retrying

    def _retrying_in_place(self) -> int:
        """(Orderly.) Messages of the held queues that failed and wait for their retry in place:
        no retry topic holds them, so the member record says how many (``mqctl top``)."""
        return sum(len(pq.retries) for pq in self.held.pqs.values()) if self.o.orderly else 0

    def beat(self) -> bool:
        """Prove that this member is not stuck (``members.py``). True when it was, for so long
        that the group stopped counting it: it rejoins (its record rewritten wakes the others)
        and rebalances; its queue locks, checked before every batch, say which it lost."""
        m = self.membership
        if not self.locked or m is None or not m.joined or not m.beat():   # (broadcast: nothing shared)
            return False
        self.warn(f"client {self.o.client_id} was not heard from for over "
                  f"{MEMBER_EXPIRY_MS / 1000:g} s (stopped?): the group shared its queues "
                  f"without it; rejoining")
        m.update(heartbeatAt=int(time.time() * 1000))
        return True

    # -- rebalance -------------------------------------------------------------------------
    def rebalance(self) -> bool:
        """Bring the held queues in line with the allocation. False: try again soon."""
        held = self.held
        balanced = True
        if held.locks:
            # An idle queue hands out no batch, so the per-batch check would notice a deleted
            # or broken lock only at the next renewal (20 s): check them all here too (one
            # stat each), so the queue is locked again within a rebalance interval.
            for key, lock in list(held.locks.items()):
                if key in held.pqs and not lock.is_valid():
                    if lock.held:
                        self.warn(f"the lock of {key[0]}/{key[1]} was not renewed in time; dropping the queue")
                    held.lose(key)
        wanted = self._allocation()
        for key in [k for k in held.pqs if k not in wanted]:
            held.drop(key)
        locked: list[QueueKey] = []
        self.waiting_for = set()
        for key in sorted(wanted - set(held.pqs)):
            if key in held.dropping:
                balanced = False
                continue
            if not self._lock(key):
                balanced = False
                self.waiting_for.add(key)
                continue
            failpoint("rebalance-after-lock")
            locked.append(key)
        if locked:
            self._add(locked)
        self.rebalanced_once = True
        self.publish_queues()
        return balanced

    def topics_changed(self) -> bool:
        """Whether the topic table changed (``config/topics.epoch`` replaced) since the last
        look (one stat): a topic made or changed (the retry topic, say) is a reason to
        rebalance at once."""
        try:
            st = os.stat(self.store.layout.topics_epoch)
            stamp: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except OSError:
            stamp = None
        changed = stamp != self._topics_stamp
        self._topics_stamp = stamp
        return changed

    def _allocation(self) -> set[QueueKey]:
        """The queues of the subscribed topics allocated to this member now."""
        from store.client.members import live_members, sharing
        o = self.o
        members = None
        if not o.broadcast and not o.no_group:
            every = live_members(self.store.layout, o.group, prune=True, counted_only=True)
            seen = tuple(m.clientId for m in every)
            if seen != self.members_seen:   # (a member joined: does it subscribe alike?)
                self._check_subscriptions(every)
            self.members_seen = seen
            # (a broadcast member of the topic has no share: it reads every queue for itself)
            members = sorted({m.clientId for m in sharing(every, o.topic)} | {o.client_id})
        wanted: set[QueueKey] = set()
        for t in self.topics:
            if not self.store.has_topic(t):
                continue
            n = self.store.topic(t).queues
            if o.broadcast or o.no_group:
                mine = queues_of(t, range(n))
            else:
                mine = member_share(o.strategy, o.client_id, t, o.topic, n, members or [], o.config_queues or [])
            wanted.update((mq.topic, mq.queue_id) for mq in mine)
        return wanted

    def _lock(self, key: QueueKey) -> bool:
        """Take a queue's lock (clustering members); False when another member holds it."""
        if self.locked:
            # The previous owner releases the queue's lock only after persisting the offset of
            # everything it delivered from it (``settle_drops``), so the offset read after
            # this (``_add``) is where it stopped; a dead owner's lock is dropped by the OS at once.
            from store.client.qlocks import QueueLock
            t, q = key
            lock = QueueLock(self.store.layout, self.o.group, t, q, self.o.client_id, warn=self.warn)
            if not lock.try_acquire():
                return False
            self.held.locks[key] = lock
        return True

    def _add(self, keys: list[QueueKey]) -> None:
        """Start consuming queues whose locks were taken, each from its start offset."""
        for key, start in self.keeper.start(keys).items():
            pq = ProcessQueue(*key)
            pq.next_pull = start
            pq.max_seen = start - 1
            self.held.pqs[key] = pq

    def settle_drops(self) -> None:
        """Release the dropped queues whose last batch is done, their offsets persisted.
        (Orderly: at every turn, so the member record's count of retries in place is current.)"""
        held = self.held
        if self.o.orderly and self.membership is not None and self.membership.joined \
                and self._retrying_in_place() != self.published_retrying:
            try:
                self.publish_queues()
            except StoreIOError:   # (a full disk: a count for top is not worth ending the member for)
                self.published_retrying = self._retrying_in_place()
        if not held.dropping:
            return
        if self.keeper.refusals.waiting():
            return   # (a full disk refused the last commit: the drops wait for its retry)
        settled = False
        for key, pq in list(held.dropping.items()):
            if pq.busy or pq.in_flight:
                continue  # never give a queue away mid-batch
            # A lost queue's offset used to be thrown away with the queue, so the next holder
            # (often this very process, a rebalance later) started from the last periodic
            # persist and handed everything since then to the handler again.
            try:
                self.keeper.persist(force=True, only={key}, increase_only=True if pq.lost else None)
            except StoreIOError as exc:
                if self.keeper.stage is not None:
                    raise
                # A full disk: keep the queue (and its lock, so its next holder does not handle
                # again what this member did), and the other drops (the same disk refuses them);
                # the commit is tried again with the refused ones (warned about once), the
                # queues let go then. A disk that stays full keeps them: nothing is handed twice.
                self.keeper.refused(exc)
                return
            del held.dropping[key]
            failpoint("rebalance-before-unlock")
            self.keeper.forget(key)
            held.release_lock(key)
            settled = True
        if settled and self.membership is not None and self.membership.joined:
            self.publish_queues()

    def renew_locks(self) -> bool:
        """Renew the held queues' locks, under one take of the group's mutex (the runtime
        says when: ``RENEW_INTERVAL_S``). True if one was lost (a rebalance takes it again)."""
        from store.client.qlocks import renew_all
        lost = renew_all(list(self.held.locks.values()))
        for key, lock in list(self.held.locks.items()):
            if lock in lost and key in self.held.pqs:
                self.warn(f"lost the lock of {key[0]}/{key[1]}; dropping the queue")
                self.held.lose(key)
        return bool(lost)

    def lock_file(self, key: QueueKey) -> Path:
        return self.store.layout.queue_lock(self.o.group, *key)

    def watch_locks(self, wake: Watcher, watched: set[Path]) -> set[Path]:
        """Watch the lock files of the queues the member holds (one deleted by ``mqctl unlock
        --force`` is taken again at once, even while its queue is idle) and of those it waits
        for (taken the moment they are released); no others. Returns what is watched."""
        want = {self.lock_file(k) for k in self.waiting_for | set(self.held.locks)}
        for path in watched - want:
            wake.unwatch(path)
        for path in want - watched:
            wake.watch(path, kind="file")
        return want
