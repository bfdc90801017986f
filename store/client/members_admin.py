"""The members part of :class:`store.Admin`: queue locks, live members, rebalance previews and
dead letters."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from store import names
from store.client.admin_base import AdminBase
from store.client.admin_rows import (
    AllocationRow,
    LockRow,
    MemberRow,
    RebalancePreview,
    UnlockResult,
    lock_row,
    lock_state,
)
from store.client.groups import require_group
from store.client.rules import check_flags, usage
from store.errors import UsageError

if TYPE_CHECKING:
    from store.client.dlq import DeadLetter, Progress, ResendResult, ResentLetter
    from store.client.members import MemberInfo
    from store.client.memberview import GroupMembers


def _strategy_of(m: MemberInfo, retry: bool = False) -> str:
    """A member's allocation strategy (a record that does not say: averagely; a config member
    shares its group's ``retry`` topic averagely, as ``rebalance.py`` does)."""
    s = m.record.get("strategy")
    return "averagely" if not isinstance(s, str) or (retry and s == "config") else s


def _own_shares(group: str, topic: str, nqueues: int, members: list[MemberInfo],
                view: GroupMembers) -> RebalancePreview:
    """The shares of live members that disagree on the strategy, each by its own, as
    ``rebalance.py`` computes it (a config member: its own queue ids on its topic, its share
    by averagely on another, its retry topic)."""
    from store.client.allocate import member_share
    cids = [m.clientId for m in members]
    rows = []
    for m in members:
        strategy, own, topics = _strategy_of(m), m.record.get("configQueues"), m.record.get("topics")
        ids = [q for q in own if isinstance(q, int) and 0 <= q < nqueues] if isinstance(own, list) else []
        mine = member_share(strategy, m.clientId, topic, topics[0] if isinstance(topics, list) and topics else "",
                            nqueues, cids, ids)
        rows.append(AllocationRow(group, topic, strategy, m.clientId, sorted(mq.queue_id for mq in mine),
                                  _queue_ids(view.queues(m), topic)))
    return RebalancePreview(group, topic, "mixed", nqueues, cids, rows)


def _queue_ids(queues: list[dict[str, Any]], topic: str) -> list[int]:
    return sorted(q["queueId"] for q in queues if isinstance(q, dict) and q.get("topic") == topic
                  and isinstance(q.get("queueId"), int))


def _broadcast_rows(group: str, topic: str, strategy: str, client_ids: list[str]) -> list[AllocationRow]:
    """The rows of a preview's broadcast members: no share of the queues (each reads every
    queue for itself), none held."""
    return [AllocationRow(group, topic, strategy, cid, [], []) for cid in client_ids]


class MembersAdmin(AdminBase):
    """Locks, members, rebalance previews and dead letters (a part of :class:`store.Admin`)."""

    # -- locks and members -------------------------------------------------------------------
    def locks(self, group: str | None = None) -> list[LockRow]:
        """Orderly consumers' queue locks (of ``group``, or of every group), holders probed."""
        from store.client.locktable import list_locks
        from store.flock import now_ms
        store = self.store
        if group is not None:
            require_group(store, group)
        now = now_ms()
        return [lock_row(i, now) for i in list_locks(store.layout, group)]

    def consumers(self, group: str) -> list[MemberRow]:
        """The live members of ``group`` (Python and command line alike) and the queues each
        holds now (those whose queue locks it holds; a broadcast member: those it reads). A
        member not heard from for the member expiry (stopped, hung) is listed with ``state``
        ``"expired"``: the others share the queues without it."""
        from store.client.memberview import group_members
        from store.client.subscriptions import Subscription, group_harm, mismatched
        store = self.store
        require_group(store, group)
        view = group_members(store.layout, group)
        subs = {m.clientId: Subscription.of(m.record) for m in view.members}
        mixed = mismatched(subs)
        harm = group_harm(list(subs.values())) if mixed else None
        rows = []
        for m in view.members:
            rec = m.record
            tags = rec.get("tags")
            rows.append(MemberRow(group, m.clientId, m.pid, m.host, rec.get("mode"), rec.get("orderly"),
                                  rec.get("strategy"), rec.get("topics"), view.queues(m), m.startedAt,
                                  m.heard_from, "expired" if m.expired else "live",
                                  tags if isinstance(tags, str) else None, m.clientId not in mixed,
                                  harm if m.clientId in mixed else None))
        return rows

    def unlock(self, group: str, topic: str | None = None, queue: int | None = None, *, force: bool = False,
               dry_run: bool = False) -> UnlockResult:
        """Release the group's orderly queue locks whose holder is gone (stale) or stuck past
        the store lease (expired); with ``force`` live holders' locks too (a holder notices
        before its next batch and stops consuming the queue). ``topic`` / ``queue``: only
        those (a queue needs its topic). ``dry_run``: report what would go, change nothing."""
        from store.client.locktable import list_locks
        from store.client.locktable import unlock as release
        from store.flock import now_ms
        if queue is not None and topic is None:
            raise usage("{queue} needs {topic}: queue ids are per topic", self.arg_names)
        if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int) or queue < 0):
            raise UsageError(f"queue must be an int >= 0, not {queue!r}")
        names.validate_group(group)
        check_flags(force=force, dry_run=dry_run)
        store = self.store
        if topic is not None:
            names.validate_any_topic(topic)
            cfg = store.find_topic(topic)
            if cfg is not None and queue is not None and queue >= cfg.queues:
                raise UsageError(f"queue {queue} does not exist: topic {topic} has queues 0-{cfg.queues - 1}")
        require_group(store, group)
        now = now_ms()
        present = [i for i in list_locks(store.layout, group)
                   if (topic is None or i.topic == topic) and (queue is None or i.queueId == queue)]
        if dry_run:
            released = [i for i in present if force or lock_state(i, now) != "held"]
        else:
            released = release(store.layout, group, topic, queue, force)
        return UnlockResult(group, [lock_row(i, now) for i in released], len(present) - len(released), dry_run)

    # -- rebalance ---------------------------------------------------------------------------
    def rebalance_preview(self, topic: str, group: str, consumers: Sequence[str] | None = None,
                          strategy: str | None = None, queues: Sequence[int] | None = None) -> RebalancePreview:
        """How a strategy shares ``topic``'s queues, computed by the live rebalance's own code;
        nothing changes.

        ``consumers``: the client ids to allocate to (default: the group's live members
        consuming ``topic`` in clustering mode, of its retry topic every clustering member,
        expired ones left out as the members leave them
        out; none: an empty preview, ``consumers`` []; ``GroupNotFoundError`` for a group the
        store does not know). Live broadcast members of ``topic`` have no share (each reads
        every queue for itself): without ``consumers``, each gets a row with no queues, after
        the allocation's (``broadcast``). ``strategy``:
        ``averagely``, ``circle``, ``hash`` or ``config`` (default: the one the live members
        use when they agree, else ``averagely``). ``queues``: the queue ids of the ``config``
        strategy (needed by it, refused by the others; without them, when every live member
        uses ``config``, each member's own queue ids: the live allocation). Rows come in the allocation's order,
        each with what the consumer holds now. Live members that disagree on the strategy
        (neither ``strategy`` nor ``consumers`` given): each one's row is the share its own
        strategy gives it (the row's ``strategy``), as they take them, and the preview's
        ``strategy`` is ``"mixed"`` (:attr:`RebalancePreview.unowned`: the queues no one's share).
        """
        from store.client.allocate import allocate_all, queues_of
        from store.client.members import sharing
        from store.client.memberview import group_members
        a = self.arg_names
        if queues is not None and strategy != "config":
            raise usage("{queues} needs {strategy} config", a)
        if isinstance(consumers, str):
            raise UsageError(f"consumers must be a list of client ids, not {consumers!r}")
        names.validate_any_topic(topic)
        names.validate_group(group)
        store = self.store
        cfg = store.topic(topic)
        view = group_members(store.layout, group)
        # (as the members share; the group's retry topic: every clustering member consumes it)
        retry = topic == names.retry_topic(group)
        members = [m for m in view.counted() if m.shares_queues] if retry else sharing(view.counted(), topic)
        broadcast: list[str] = []
        if consumers is not None:
            cids = [names.validate_client_id(c.strip()) for c in consumers if c.strip()]
            if not cids:
                raise usage("{consumers}: give at least one client id, e.g. {consumers_example}", a)
            if len(set(cids)) < len(cids):
                # client ids are unique in a group (RocketMQ's too): a repeated one would be
                # counted twice by the strategy and shown once
                dup = next(c for c in cids if cids.count(c) > 1)
                raise usage("{consumers}: client id {cid} is given twice; client ids are unique in a group", a, cid=dup)
        else:
            require_group(store, group)
            cids = [m.clientId for m in members]
            broadcast = [m.clientId for m in view.members if not m.shares_queues and m.consumes(topic)]
            if not cids:
                # a known group with no live clustering member: nothing to allocate (not "not found")
                strategy = strategy or "averagely"
                return RebalancePreview(group, topic, strategy, cfg.queues, [],
                                        _broadcast_rows(group, topic, strategy, broadcast), broadcast)
        used = {_strategy_of(m, retry) for m in members}
        if strategy is None and consumers is None and len(used) > 1:
            # Each member takes the share its own strategy gives it: the split is theirs, not
            # one strategy's (some queues nobody's, some wanted by two)
            preview = _own_shares(group, topic, cfg.queues, members, view)
            preview.rows += _broadcast_rows(group, topic, "mixed", broadcast)
            preview.broadcast = broadcast
            return preview
        if strategy is None:
            strategy = next(iter(used)) if len(used) == 1 else "averagely"
            if strategy == "config" and not queues and consumers is not None:
                raise usage("the live members use {strategy} config: give {queues}, e.g. {queues_example}", a)
        if strategy == "config" and not queues:
            if consumers is not None or used != {"config"}:
                raise usage("{strategy} config needs {queues}, e.g. {queues_example}", a)
            # Each live config member reads the queues it was given: that is the allocation.
            preview = self._configured_members(group, topic, cfg.queues, members, view)
            preview.rows += _broadcast_rows(group, topic, "config", broadcast)
            preview.broadcast = broadcast
            return preview
        config = None
        if queues:
            ids = sorted(set(queues))
            if any(isinstance(q, bool) or not isinstance(q, int) for q in ids) or ids[0] < 0:
                raise UsageError(f"queues must be queue ids >= 0, not {list(queues)!r}")
            if ids[-1] >= cfg.queues:
                raise usage("{queues}: queue {qid} does not exist: topic {name} has queues 0-{last}", a,
                            qid=ids[-1], name=topic, last=cfg.queues - 1)
            config = queues_of(topic, ids)
        assignment = allocate_all(strategy, queues_of(topic, range(cfg.queues)), cids, config)
        held = {m.clientId: _queue_ids(view.queues(m), topic) for m in members}
        rows = [AllocationRow(group, topic, strategy, cid, [mq.queue_id for mq in mqs], held.get(cid))
                for cid, mqs in assignment.items()]
        rows += _broadcast_rows(group, topic, strategy, broadcast)
        return RebalancePreview(group, topic, strategy, cfg.queues, cids, rows, broadcast)

    @staticmethod
    def _configured_members(group: str, topic: str, nqueues: int, members: list[MemberInfo],
                            view: GroupMembers) -> RebalancePreview:
        """The live allocation of ``--strategy config`` members: each one's own queue ids
        (those the topic has; a member from before ``configQueues`` was published: what it
        holds)."""
        rows = []
        for m in members:
            held = _queue_ids(view.queues(m), topic)
            own = m.record.get("configQueues")
            mine = sorted(q for q in own if isinstance(q, int) and 0 <= q < nqueues) if isinstance(own, list) else held
            rows.append(AllocationRow(group, topic, "config", m.clientId, mine, held))
        return RebalancePreview(group, topic, "config", nqueues, [m.clientId for m in members], rows)

    # -- dead letters ------------------------------------------------------------------------
    def dead_letters(self, group: str) -> Iterator[DeadLetter]:
        """The group's dead letters (``%DLQ%<group>``), oldest first, read lazily: each a
        :class:`~store.client.dlq.DeadLetter` with the message, where it came from, and
        whether it was resent. Nothing when none of the group's messages was dead-lettered."""
        from store.client.dlq import dead_letters
        store = self.store
        require_group(store, group)
        return dead_letters(store, group)

    def resend_dead_letters(self, group: str, msg_id: str | None = None, *, force: bool = False,
                            dry_run: bool = False, progress: Progress | None = None,
                            on_row: Callable[[ResentLetter], None] | None = None) -> ResendResult:
        """Give the group's dead letters another chance: copy them to its retry topic
        ``%RETRY%<group>`` with ``reconsume_times`` 0, where the group's concurrent consumers
        get them again under their original topic.

        Every dead letter not resent before, or only the one(s) ``msg_id`` names (unique key
        or offset id; ``MessageNotFoundError`` when none does). What was resent is recorded,
        so a second call skips it; ``force`` resends it anyway. ``dry_run``: report, change
        nothing. ``progress(done, total)`` follows the DLQ entries scanned; ``on_row`` gets
        each :class:`~store.client.dlq.ResentLetter` as it is resent (instead of the result's
        ``rows``). Returns a :class:`~store.client.dlq.ResendResult`.
        """
        from store.client.dlq import resend_dead_letters
        check_flags(force=force, dry_run=dry_run)
        store = self.store
        require_group(store, group)
        return resend_dead_letters(store, group, msg_id, force=force, dry_run=dry_run, progress=progress,
                                   on_row=on_row)
