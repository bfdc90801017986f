"""The offsets part of :class:`store.Admin`: a group's committed offsets, its lag, resetting
and deleting offsets."""
from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from typing import Any, Callable

from store import names
from store.client.admin_base import AdminBase
from store.client.admin_rows import LagRow, OffsetRow, OffsetsDeletion, PlanRow, ResetPlan, ResetTarget
from store.client.groups import broadcast_clients, group_exists, group_offsets, holders
from store.client.rules import check_flags
from store.errors import ConflictError, LockHeldError, NotFoundError, UsageError
from store.log.schedule import scheduled_for


def _ms(t: _dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.astimezone()  # a naive datetime is local time, as datetime.timestamp() reads it
    return (t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)) // _dt.timedelta(milliseconds=1)


class OffsetsAdmin(AdminBase):
    """Offsets and lag (a part of :class:`store.Admin`)."""

    def offsets(self, group: str, topic: str | None = None) -> list[OffsetRow]:
        """The group's committed offsets per queue (the next offset to consume), clustering
        first, then each broadcast client's."""
        store = self._group(group, topic)
        rows = []
        sets = group_offsets(store, group, strict=True)
        live = self._live_clients(group) if len(sets) > 1 else set()
        for s in sets:
            for (t, q), off in sorted(s.offsets.items()):
                if topic is None or t == topic:
                    rows.append(OffsetRow(group, t, q, off, s.client_id,
                                          None if s.client_id is None else s.client_id in live))
        return rows

    def lag(self, group: str, topic: str | None = None) -> list[LagRow]:
        """Lag per queue of the group's topics (``mqctl progress``), the group's retry topic
        included unless ``topic`` names another one."""
        from store.client.members import live_members
        store = self._group(group, topic)
        sets = group_offsets(store, group, strict=True)
        owners = holders(store, group)
        topics_by_client: dict[str | None, set[str]] = {}
        for s in sets:
            topics_by_client[s.client_id] = {t for t, _ in s.offsets}
        # Topics that live clustering members subscribe to count even before a first commit.
        for m in live_members(store.layout, group):
            if m.shares_queues:
                subs = m.record.get("topics")
                if isinstance(subs, list):
                    topics_by_client[None].update(t for t in subs if isinstance(t, str))
        retry = names.retry_topic(group)
        if store.has_topic(retry):
            topics_by_client[None].add(retry)
        all_topics = store.topics()
        live = self._live_clients(group) if len(sets) > 1 else set()
        rows = []
        for s in sets:
            tnames = sorted(topics_by_client.get(s.client_id, set()), key=lambda t: (t == retry, t))
            for t in tnames:
                if (topic is not None and t != topic) or t not in all_topics:
                    continue
                for q in range(all_topics[t].queues):
                    broker = store.logged_max_offset(t, q)   # (a queue cut short: as the log has it)
                    lo = store.min_offset(t, q)
                    committed = s.offsets.get((t, q))
                    consumer = committed if committed is not None and committed >= 0 else None
                    if consumer is None:
                        lag = max(0, broker - lo)
                    else:
                        lag = max(0, broker - max(consumer, lo))
                        if consumer > broker:
                            store.warn(f"{t}/{q}: committed offset {consumer} of group {group} is past the "
                                       f"end of the queue ({broker}); the topic was re-created?")
                    rows.append(LagRow(group, t, q, broker, lo, consumer, lag,
                                       self._last_timestamp(t, q, consumer),
                                       owners.get((t, q)) if s.client_id is None else s.client_id,
                                       s.client_id, None if s.client_id is None else s.client_id in live))
        # a failed message waiting out its retry delay is in the schedule topic, not yet in
        # the group's retry queue: without this a group with retries pending shows no lag
        waiting = scheduled_for(store, {r.topic for r in rows})
        return [replace(r, scheduled=waiting.get((r.topic, r.queue_id), 0)) for r in rows]

    def _last_timestamp(self, topic: str, qid: int, consumer_offset: int | None) -> int | None:
        """The store time of the last message consumed (None when unknown: removed, damaged)."""
        if consumer_offset is None or consumer_offset <= 0:
            return None
        return self.store.store_time(topic, qid, consumer_offset - 1)

    # -- offsets reset -----------------------------------------------------------------------
    def reset_offsets(self, group: str, topic: str, to: ResetTarget, execute: bool = False, *,
                      queue: int | None = None, force: bool = False) -> ResetPlan:
        """Plan moving the group's offsets of ``topic``, and apply the plan with ``execute``.

        ``to``: ``"earliest"`` or ``"first"`` (the first stored message), ``"latest"``, ``"last"``
        or ``"end"`` (the end: skip what is stored), a :class:`datetime.datetime` (the first
        message stored at or after it; a naive one is local time, as ``datetime.timestamp()``
        reads it, while ``--to-time`` text without an offset is UTC) or an int queue offset. Targets outside a queue's
        stored range are clamped to it. ``queue``: only that queue. Applying bumps the reset
        epoch, so live members switch to the new offsets at their next commit; it is refused
        (``LockHeldError``) while live members hold queues of the topic, unless ``force``.
        Returns the plan (``plan.rows``).
        """
        check_flags(execute=execute, force=force)
        plan = self.plan_reset(group, topic, to, queue=queue)
        if execute:
            self.apply_reset(plan, force=force)
        return plan

    def plan_reset(self, group: str, topic: str, to: ResetTarget, *, queue: int | None = None) -> ResetPlan:
        """The plan of :meth:`reset_offsets`, changing nothing."""
        names.validate_group(group)
        names.validate_any_topic(topic)
        kind, value = self._target(to)
        store = self.store
        cfg = store.topic(topic)
        if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int) or queue < 0
                                  or queue >= cfg.queues):
            raise UsageError(f"queue {queue} does not exist: topic {topic!r} has queues 0-{cfg.queues - 1}")
        qids = [queue] if queue is not None else list(range(cfg.queues))
        # Which offset sets move: the clustering table, plus every broadcast client that has
        # offsets in the topic; a broadcast-only group does not get clustering offsets made up.
        sets = group_offsets(store, group)
        cluster = sets[0]
        bcast = [s for s in sets[1:] if any(t == topic for t, _ in s.offsets)]
        targets = ([cluster] if (not bcast or any(t == topic for t, _ in cluster.offsets)) else []) + bcast
        plan = ResetPlan(group, topic, to, [], time_ms=value if kind == "time" else None,
                         broadcast=bool(bcast), group_existed=group_exists(store, group))
        plan.targets = targets
        for s in targets:
            for q in qids:
                lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
                cur = s.offsets.get((topic, q))
                row = PlanRow(topic, q, s.client_id, cur if cur is not None and cur >= 0 else None, lo, lo, hi)
                if kind == "earliest":
                    row.new = lo
                elif kind == "latest":
                    row.new = hi
                elif kind == "time":
                    row.new = store.search_offset(topic, q, value)
                    first = store.store_time(topic, q, lo) if lo < hi else None
                    if first is not None and value < first:
                        row.clamped = "earliest"
                        if s is targets[0]:
                            plan.early.append(q)
                else:
                    row.new = min(max(value, lo), hi)
                    if value > hi:
                        row.clamped = "end"
                    elif value < lo:
                        row.clamped = "earliest"
                plan.rows.append(row)
        # Live members holding queues of the topic (published queues, and live orderly locks).
        from store.client.locktable import list_locks
        from store.client.members import live_members
        qset = set(qids)
        pids: dict[str, Any] = {}
        for m in live_members(store.layout, group):
            for e in m.queues:
                if isinstance(e, dict) and e.get("topic") == topic and e.get("queueId") in qset:
                    plan.busy.setdefault(m.clientId, set()).add(e["queueId"])
                    pids[m.clientId] = m.pid
        for lk in list_locks(store.layout, group):
            if lk.alive and lk.topic == topic and lk.queueId in qset:
                cid = lk.clientId or "unknown holder"
                plan.busy.setdefault(cid, set()).add(lk.queueId)
                pids.setdefault(cid, lk.pid)
        plan.owners = "; ".join(
            f"{cid} (pid {pids.get(cid) if pids.get(cid) is not None else '?'}, queues "
            f"{','.join(map(str, sorted(qs)))})" for cid, qs in sorted(plan.busy.items()))
        return plan

    def apply_reset(self, plan: ResetPlan, *, force: bool = False,
                    progress: Callable[[int], None] | None = None) -> None:
        """Apply a plan of :meth:`plan_reset` (see :meth:`reset_offsets`), offset set by offset
        set (the clustering table, then each broadcast client): ``progress(n)`` is called after
        each with the number of queue offsets it moved."""
        from store.log.broadcastoffsets import BroadcastOffsetStore
        check_flags(force=force)
        store = self.store
        if plan.busy and not force:
            raise LockHeldError(
                f"live members of group {plan.group} hold queues of {plan.topic}: {plan.owners}; stop them "
                f"first, or pass {self._arg('force')} to reset under them (they switch to the new offsets at "
                f"their next commit)")
        for s in plan.targets:
            rows = {r.queue_id: r.new for r in plan.rows if r.client_id == s.client_id}
            if s.client_id is None:
                # under the write lock, the log synced: an exactly-once stage's commits are all
                # taken in before the reset, and none is written beside it (stage.py)
                with store.write_lock():
                    store.offsets.reset(plan.group, plan.topic, rows, durable_end=store.sync_written())
            else:
                b = BroadcastOffsetStore(store.layout, s.client_id, plan.group, warn=store.warn)
                b.load()
                for q, new in rows.items():
                    b.update(plan.topic, q, new, increase_only=False)
                b.persist({(plan.topic, q) for q in rows})
            if progress is not None:
                progress(len(rows))
        plan.applied = True

    # -- offsets delete ----------------------------------------------------------------------
    def delete_offsets(self, group: str, client_id: str | None = None, *, dry_run: bool = False) -> OffsetsDeletion:
        """Delete the group's committed offsets, or one dead broadcast client's.

        Without ``client_id``: the clustering offsets and every broadcast client's; refused
        (``ConflictError``) while the group has live members, ``NotFoundError`` when it has no
        offsets. With ``client_id``: that broadcast client's offsets only (``NotFoundError``
        when it has none, ``ConflictError`` while it is a live member). Deleted offsets no
        longer hold retention back; a consumer that comes back starts from its
        ``start_from``. ``dry_run``: check, and report what would go, changing nothing.
        """
        from store.log.broadcastoffsets import BroadcastOffsetStore
        names.validate_group(group)
        check_flags(dry_run=dry_run)
        store = self.store
        live = self._live_clients(group)
        clients = broadcast_clients(store, group)
        offsets = store.offsets
        if client_id is not None:
            names.validate_client_id(client_id)
            if client_id not in clients:
                raise NotFoundError(f"group {group} has no broadcast offsets of client {client_id}")
            if client_id in live:
                raise ConflictError(f"client {client_id} is a live member of group {group}; stop it first")
            targets, cluster = [client_id], False
        else:
            if live:
                raise ConflictError(
                    f"group {group} has {len(live)} live member{'' if len(live) == 1 else 's'} "
                    f"({', '.join(sorted(live))}); stop them first, or give {self._arg('client_id')} of a dead "
                    f"broadcast client")
            if not offsets.read_group(group) and not clients:
                raise NotFoundError(f"group {group} has no committed offsets")
            targets, cluster = clients, True
        if dry_run:
            topics = sorted({t for t, _ in offsets.read_group(group)}) if cluster else []
            return OffsetsDeletion(group, client_id, targets, topics, False)
        if cluster:
            with store.write_lock():   # (as a reset: see reset_offsets)
                topics = offsets.delete_group(group, durable_end=store.sync_written())
        else:
            topics = []
        for cid in targets:
            BroadcastOffsetStore(store.layout, cid, group, warn=store.warn).delete()
        return OffsetsDeletion(group, client_id, targets, topics, True)

    @staticmethod
    def _target(to: ResetTarget) -> tuple[str, int]:
        if isinstance(to, str):
            word = to.strip().lower()
            if word in ("earliest", "first"):
                return "earliest", 0
            if word in ("latest", "last", "end"):
                return "latest", 0
        elif isinstance(to, _dt.datetime):
            return "time", _ms(to)
        elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
            return "offset", to
        raise UsageError(f"reset target must be 'earliest' (or 'first'), 'latest' (or 'last', 'end'), a datetime "
                         f"or a queue offset >= 0, not {to!r}")
