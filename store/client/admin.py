"""Inspection and administration: :class:`Admin`, and the group look-ups behind it.

What ``mqctl topic list``, ``progress``, ``offsets show|reset|delete``, ``locks``, ``unlock``,
``consumers``, ``rebalance`` and ``dlq list|resend`` print is computed here (dead letters in
``store/client/dlq.py``); the command line only parses its arguments and formats the rows.

What a group is: a name that has committed offsets (``config/consumerOffset.json`` or a
broadcast client's ``offsets/<clientId>/<group>/offsets.json``), live or past members
(``consumers/<group>/``), queue locks, or a retry or dead-letter topic. Anything else is an
unknown group (``GroupNotFoundError``): a typo must not look like a group that simply has
nothing to show.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, Union

from store import names
from store.client.paths import PathLike, resolve_store_path
from store.client.rows import Row
from store.client.rules import ArgNames, usage
from store.errors import ConflictError, GroupNotFoundError, LockHeldError, NotFoundError, UsageError

if TYPE_CHECKING:
    from store.client.dlq import DeadLetter, Progress, ResendResult, ResentLetter
    from store.client.qlocks import LockInfo
    from store.log.broker import Store

ResetTarget = Union[str, int, _dt.datetime]


# -- groups -----------------------------------------------------------------------------------

def broadcast_clients(store: "Store", group: str) -> list[str]:
    """Client ids that keep broadcast offsets for ``group`` (``offsets/<cid>/<group>/``)."""
    root = store.layout.root / "offsets"
    try:
        cids = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(c for c in cids if names.CLIENT_ID_RE.match(c) and c not in (".", "..")
                  and (root / c / group / "offsets.json").exists())


def known_groups(store: "Store") -> list[str]:
    """Every group the store knows of, sorted (offsets, members, locks, retry/DLQ topics)."""
    from store.log.offsets import ClusterOffsetStore
    groups = set(ClusterOffsetStore(store.layout).groups())
    for d in (store.layout.members_root, store.layout.queue_locks_root, store.layout.root / "offsets"):
        try:
            entries = os.listdir(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if d != store.layout.root / "offsets":
            groups.update(n for n in entries if names.NAME_RE.match(n))
        else:
            for cid in entries:
                try:
                    groups.update(n for n in os.listdir(d / cid) if names.NAME_RE.match(n))
                except (FileNotFoundError, NotADirectoryError):
                    pass
    for t in store.topics():
        for prefix in (names.RETRY_PREFIX, names.DLQ_PREFIX):
            if t.startswith(prefix):
                groups.add(t[len(prefix):])
    return sorted(groups)


def group_exists(store: "Store", group: str) -> bool:
    """Whether the store knows ``group`` (see the module docstring)."""
    from store.log.offsets import ClusterOffsetStore
    if ClusterOffsetStore(store.layout).topics_of(group):
        return True
    if (store.layout.members_dir(group).is_dir() or store.layout.queue_locks_dir(group).is_dir()
            or broadcast_clients(store, group)):
        return True
    return store.has_topic(names.retry_topic(group)) or store.has_topic(names.dlq_topic(group))


def require_group(store: "Store", group: str) -> None:
    """``GroupNotFoundError`` (exit 3) unless the store knows ``group``."""
    names.validate_group(group)
    if not group_exists(store, group):
        raise GroupNotFoundError(
            f"consumer group {group!r} does not exist in this store (no offsets, members or "
            f"dead letters); known groups: {', '.join(known_groups(store)) or 'none'}")


@dataclass(frozen=True)
class OffsetSet:
    """One set of committed offsets of a group: the clustering table (``client_id`` None) or
    one broadcast client's file."""

    client_id: str | None
    offsets: dict[tuple[str, int], int]


def group_offsets(store: "Store", group: str) -> list[OffsetSet]:
    """The group's clustering offsets (always first, possibly empty), then one set per
    broadcast client."""
    from store.errors import StoreError
    from store.log.offsets import BroadcastOffsetStore, ClusterOffsetStore
    sets = [OffsetSet(None, ClusterOffsetStore(store.layout, warn=store.warn).read_group(group))]
    for cid in broadcast_clients(store, group):
        try:
            b = BroadcastOffsetStore(store.layout, cid, group, warn=store.warn)
            sets.append(OffsetSet(cid, b.load()))
        except StoreError as exc:  # one bad client file must not hide the rest
            store.warn(f"broadcast offsets of {cid}: {exc}")
    return sets


def holders(store: "Store", group: str) -> dict[tuple[str, int], str]:
    """(topic, queueId) -> client id of the live member that says it holds the queue."""
    from store.client.members import live_members
    out: dict[tuple[str, int], str] = {}
    for m in live_members(store.layout, group):
        for q in m.queues:
            if isinstance(q, dict) and isinstance(q.get("topic"), str) and isinstance(q.get("queueId"), int):
                out.setdefault((q["topic"], q["queueId"]), m.clientId)
    return out


# -- rows -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicInfo(Row):
    """A topic: its queue count, whether it is ordered, and how many messages it stores."""

    topic: str
    queues: int
    order: bool
    messages: int = 0


@dataclass(frozen=True)
class QueueStatus(Row):
    """One queue of a topic (``mqctl topic status``): its stored offsets ``min_offset`` to
    ``max_offset`` (the next one written), ``messages`` between them, and the store time of
    its last message (None when it has none)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    messages: int
    last_store_timestamp: int | None

    def to_json(self) -> dict[str, Any]:
        """The ``topic status --json`` line (``lastStoreTime``: ISO-8601 UTC)."""
        from store.timeparse import format_time
        last = self.last_store_timestamp
        return {"topic": self.topic, "queueId": self.queue_id, "minOffset": self.min_offset,
                "maxOffset": self.max_offset, "lastStoreTimestamp": last,
                "lastStoreTime": format_time(last) if last else None, "messages": self.messages}


@dataclass(frozen=True)
class OffsetRow(Row):
    """A committed offset: the next offset ``group`` consumes in ``topic``/``queue_id``.
    ``client_id`` is set for a broadcast client's offsets, and ``client_alive`` then says
    whether that client is a live member (a dead one's offsets hold retention back until
    :meth:`Admin.delete_offsets` removes them)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    client_id: str | None = None
    client_alive: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``offsets show --json`` line."""
        return client_state({"group": self.group, "topic": self.topic, "queueId": self.queue_id,
                             "offset": self.offset, "clientId": self.client_id}, self.client_alive)


@dataclass(frozen=True)
class LagRow(Row):
    """How far behind a group is in one queue (``mqctl progress``).

    ``broker_offset`` is the queue's max offset, ``consumer_offset`` the committed offset
    (None when there is none), ``lag`` the messages still to consume (never negative; with no
    committed offset every stored message counts), ``last_timestamp`` the store time of the
    last consumed message (None when unknown or removed), ``owner`` the live member holding
    the queue (or the broadcast client); ``client_alive`` as in :class:`OffsetRow`."""

    group: str
    topic: str
    queue_id: int
    broker_offset: int
    min_offset: int
    consumer_offset: int | None
    lag: int
    last_timestamp: int | None
    owner: str | None
    client_id: str | None = None
    client_alive: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``progress --json`` line (``lastTime``: ``lastTimestamp`` in ISO-8601 UTC)."""
        from store.timeparse import format_time
        return client_state({
            "group": self.group, "topic": self.topic, "queueId": self.queue_id, "brokerOffset": self.broker_offset,
            "minOffset": self.min_offset, "consumerOffset": self.consumer_offset, "lag": self.lag,
            "lastTimestamp": self.last_timestamp, "owner": self.owner, "clientId": self.client_id,
            "lastTime": format_time(self.last_timestamp) if self.last_timestamp is not None else None},
            self.client_alive)


def client_state(row: dict[str, Any], alive: bool | None) -> dict[str, Any]:
    """A broadcast client's JSON row says whether the client is live: a dead client's offsets
    hold retention back until :meth:`Admin.delete_offsets` removes them."""
    if row.get("clientId"):
        row.update(clientAlive=alive, clientState="live" if alive else "dead")
    return row


@dataclass(frozen=True)
class LockRow(Row):
    """An orderly queue lock, its holder probed. ``state``: ``held`` (a live holder renewing
    its lease), ``expired`` (a live holder that stopped renewing: anyone may break it) or
    ``stale`` (no process holds it: a crash left the file). Times are ms since the epoch."""

    group: str
    topic: str
    queue_id: int
    client_id: str | None
    pid: int | None
    host: str | None
    acquired_at: int | None
    renewed_at: int | None
    expires_at: int | None
    alive: bool
    state: str
    info: "LockInfo" = field(repr=False, compare=False)


@dataclass(frozen=True)
class MemberRow(Row):
    """A live member of a group (``mqctl consumers``): its process, how it consumes, and the
    queues it holds (``[{"topic": ..., "queueId": ...}]``)."""

    group: str
    client_id: str
    pid: int | None
    host: str | None
    mode: str | None
    orderly: bool | None
    strategy: str | None
    topics: list[str] | None
    queues: list[dict[str, Any]]
    started_at: int | None
    heartbeat_at: int | None


@dataclass
class PlanRow(Row):
    """One queue of an offset reset: ``current`` -> ``new`` (clamped to the stored range:
    ``clamped`` says ``"earliest"`` or ``"end"`` when it was)."""

    topic: str
    queue_id: int
    client_id: str | None
    current: int | None
    new: int
    min_offset: int
    max_offset: int
    clamped: str | None = None

    @property
    def current_offset(self) -> int | None:
        return self.current

    @property
    def new_offset(self) -> int:
        return self.new

    def to_json(self, group: str, applied: bool) -> dict[str, Any]:
        return {"group": group, "topic": self.topic, "queueId": self.queue_id, "clientId": self.client_id,
                "currentOffset": self.current, "newOffset": self.new, "minOffset": self.min_offset,
                "maxOffset": self.max_offset, "clamped": self.clamped, "applied": applied}


@dataclass
class ResetPlan:
    """What :meth:`Admin.reset_offsets` would do (or did, ``applied``).

    ``rows``: one per queue and offset set. ``early``: queues where a time target is before
    the first stored message. ``busy``: live members (client id -> queue ids) holding queues
    of the topic, ``owners`` the same as text. ``broadcast``: broadcast clients are moved too.
    ``group_existed``: the group had offsets, members or dead letters before."""

    group: str
    topic: str
    target: ResetTarget
    rows: list[PlanRow]
    time_ms: int | None = None
    early: list[int] = field(default_factory=list)
    busy: dict[str, set[int]] = field(default_factory=dict)
    owners: str = ""
    broadcast: bool = False
    group_existed: bool = True
    applied: bool = False
    # the offset sets (clustering, broadcast clients) the plan moves, for applying it
    targets: list[Any] = field(default_factory=list, repr=False, compare=False)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def moved(self) -> int:
        return sum(1 for r in self.rows if r.current != r.new)


@dataclass(frozen=True)
class OffsetsDeletion(Row):
    """What :meth:`Admin.delete_offsets` deleted (or, ``deleted`` False, would delete):
    ``topics`` of the group's clustering offsets, and the broadcast ``clients`` whose offsets
    went. ``client_id``: the one client asked for, None for the whole group."""

    group: str
    client_id: str | None
    clients: list[str]
    topics: list[str]
    deleted: bool

    def to_json(self) -> dict[str, Any]:
        """The ``offsets delete --json`` line."""
        return {"group": self.group, "clientId": self.client_id, "clients": self.clients, "topics": self.topics,
                "deleted": self.deleted}


@dataclass(frozen=True)
class AllocationRow(Row):
    """One consumer of a rebalance preview: the ``queues`` ``strategy`` gives it, and the
    queues it ``holds`` now (None when it is not a live member)."""

    group: str
    topic: str
    strategy: str
    client_id: str
    queues: list[int]
    holds: list[int] | None

    def to_json(self) -> dict[str, Any]:
        """The ``rebalance --json`` row."""
        return {"group": self.group, "topic": self.topic, "strategy": self.strategy, "clientId": self.client_id,
                "queues": self.queues, "holds": self.holds}


@dataclass
class RebalancePreview:
    """What :meth:`Admin.rebalance_preview` computed: ``rows``, one per consumer in the
    allocation's order, for ``consumers`` sharing the ``queues`` queues of ``topic``."""

    group: str
    topic: str
    strategy: str
    queues: int
    consumers: list[str]
    rows: list[AllocationRow]

    def __iter__(self) -> Iterator[AllocationRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class UnlockResult:
    """What :meth:`Admin.unlock` released (or, ``dry_run``, would release), each lock as it
    was just before; ``kept``: matching locks left alone (their holders are live)."""

    group: str
    released: list[LockRow]
    kept: int
    dry_run: bool = False

    def __iter__(self) -> Iterator[LockRow]:
        return iter(self.released)

    def __len__(self) -> int:
        return len(self.released)


def lock_state(info: "LockInfo", now: int) -> str:
    """``held``, ``expired`` or ``stale`` (see :class:`LockRow`)."""
    if not info.alive:
        return "stale"
    return "expired" if info.expired(now) else "held"


def lock_row(info: "LockInfo", now: int) -> LockRow:
    """A :class:`LockRow` of a probed lock, its state as of ``now`` (ms since the epoch)."""
    return LockRow(info.group, info.topic, info.queueId, info.clientId, info.pid, info.host, info.acquiredAt,
                   info.renewedAt, info.expiresAt, info.alive, lock_state(info, now), info)


def _ms(t: _dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.astimezone()  # a naive datetime is local time, as datetime.timestamp() reads it
    return (t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)) // _dt.timedelta(milliseconds=1)


# -- the facade -------------------------------------------------------------------------------

class Admin:
    """Inspect and administer a store: topics, a group's lag, offsets, queue locks, members,
    rebalance previews and dead letters.

    ::

        with store.Admin() as admin:
            admin.create_topic("orders", queues=8)
            for row in admin.lag("billing"):
                print(row.topic, row.queue_id, row.broker_offset, row.consumer_offset, row.lag)
            plan = admin.reset_offsets("billing", "orders", "earliest")     # a plan only
            admin.reset_offsets("billing", "orders", "earliest", execute=True)

    ``path=None`` selects ``$MQCTL_STORE``, else ``~/.mqctl/store``. The store must exist
    (``StoreNotFoundError``), except for :meth:`create_topic`, which creates it.
    Rows are frozen dataclasses (``row.lag``; ``row["lag"]`` and ``row.to_dict()`` work too).
    A group nobody knows raises ``GroupNotFoundError``; a missing topic
    ``TopicNotFoundError``.
    """

    def __init__(self, path: PathLike | None = None) -> None:
        from store.errors import StoreNotFoundError
        from store.log.broker import Store
        self._path: Path | None = resolve_store_path(path)
        self.arg_names: ArgNames | None = None
        self._owned = True
        self._missing: StoreNotFoundError | None = None
        self._store: Store | None = None
        self._opener: Callable[[], Store] | None = None
        try:
            self._store = Store.open(self._path)
        except StoreNotFoundError as exc:   # only create_topic() may go on: it creates the store
            self._missing = exc

    @classmethod
    def of(cls, store: Store | Callable[[], Store], *, arg_names: ArgNames | None = None) -> "Admin":
        """An Admin over an open :class:`store.log.broker.Store` handle, or over a function
        that returns one when it is first needed (so that bad arguments are reported before a
        missing store); the handle is not closed by the Admin. ``arg_names``: how its error
        messages name arguments (``store/client/rules.py``; ``mqctl`` passes its flags)."""
        admin = cls.__new__(cls)
        admin.arg_names = arg_names
        admin._owned = False
        admin._missing = None
        if callable(store):
            admin._path, admin._store, admin._opener = None, None, store
        else:
            admin._path, admin._store, admin._opener = store.root, store, None
        return admin

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._path if self._path is not None else self.store.root

    @property
    def store(self) -> "Store":
        """The open store handle (``StoreNotFoundError`` when there is no store at ``path``)."""
        if self._store is None:
            if self._opener is not None:
                self._store, self._opener = self._opener(), None
                return self._store
            if self._missing is not None:
                raise self._missing
            raise UsageError("this Admin is closed")
        return self._store

    # -- topics ------------------------------------------------------------------------------
    def topics(self, *, system: bool = False) -> list[TopicInfo]:
        """The topics, sorted by name, with their stored message counts. ``system``: include
        ``%RETRY%``, ``%DLQ%`` and ``RMQ_SYS_`` topics."""
        store = self.store
        rows = []
        for name, cfg in sorted(store.topics().items()):
            if names.is_system_topic(name) and not system:
                continue
            rows.append(TopicInfo(name, cfg.queues, cfg.order, store.messages(name, cfg.queues)))
        return rows

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of ``topic``: its offsets, message count and last store time
        (``TopicNotFoundError`` when there is no such topic)."""
        names.validate_any_topic(topic)
        store = self.store
        rows = []
        for q in range(store.topic(topic).queues):
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            rows.append(QueueStatus(topic, q, lo, hi, hi - lo, store.last_store_timestamp(topic, q)))
        return rows

    def create_topic(self, name: str, queues: int = 8, order: bool = False) -> TopicInfo:
        """Create a topic (a no-op if it exists with this queue count; ``TopicExistsError``
        if with another). ``order``: senders must give a sharding key or a queue."""
        names.validate_topic(name)
        if isinstance(queues, bool) or not isinstance(queues, int):
            raise UsageError(f"queues must be an int, not {queues!r}")
        if self._store is None and self._missing is not None:
            from store.log.broker import Store
            self._store, self._missing = Store.open(self.path, create=True), None  # as `mqctl topic create`
        cfg, _created = self.store.create_topic(name, queues, bool(order))
        store = self.store
        messages = sum(store.max_offset(name, q) - store.min_offset(name, q) for q in range(cfg.queues))
        return TopicInfo(cfg.name, cfg.queues, cfg.order, messages)

    def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Give a topic ``queues`` queues: more than today adds queues (consumers pick them up
        at once; sharding keys route by the new count from then on), the same is a no-op,
        fewer is refused with ``UsageError`` (exit 2), as Kafka refuses fewer partitions."""
        names.validate_any_topic(name)
        if isinstance(queues, bool) or not isinstance(queues, int):
            raise UsageError(f"queues must be an int, not {queues!r}")
        cfg, _changed = self.store.update_topic(name, queues)
        store = self.store
        messages = sum(store.max_offset(name, q) - store.min_offset(name, q) for q in range(cfg.queues))
        return TopicInfo(cfg.name, cfg.queues, cfg.order, messages)

    # -- groups ------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Every group the store knows of, sorted."""
        return known_groups(self.store)

    def _group(self, group: str, topic: str | None) -> "Store":
        store = self.store
        require_group(store, group)
        if topic is not None:
            names.validate_any_topic(topic)
            store.topic(topic)
        return store

    def offsets(self, group: str, topic: str | None = None) -> list[OffsetRow]:
        """The group's committed offsets per queue (the next offset to consume), clustering
        first, then each broadcast client's."""
        store = self._group(group, topic)
        rows = []
        sets = group_offsets(store, group)
        live = self._live_clients(group) if len(sets) > 1 else set()
        for s in sets:
            for (t, q), off in sorted(s.offsets.items()):
                if topic is None or t == topic:
                    rows.append(OffsetRow(group, t, q, off, s.client_id,
                                          None if s.client_id is None else s.client_id in live))
        return rows

    def _live_clients(self, group: str) -> set[str]:
        from store.client.members import live_members
        return {m.clientId for m in live_members(self.store.layout, group)}

    def lag(self, group: str, topic: str | None = None) -> list[LagRow]:
        """Lag per queue of the group's topics (``mqctl progress``), the group's retry topic
        included unless ``topic`` names another one."""
        from store.client.members import live_members
        store = self._group(group, topic)
        sets = group_offsets(store, group)
        owners = holders(store, group)
        topics_by_client: dict[str | None, set[str]] = {}
        for s in sets:
            topics_by_client[s.client_id] = {t for t, _ in s.offsets}
        # Topics that live clustering members subscribe to count even before a first commit.
        for m in live_members(store.layout, group):
            if m.record.get("mode", "clustering") == "clustering":
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
                    broker = store.max_offset(t, q)
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
        return rows

    def _last_timestamp(self, topic: str, qid: int, consumer_offset: int | None) -> int | None:
        store = self.store
        if consumer_offset is None or consumer_offset <= 0:
            return None
        e = store.queue(topic, qid).entry(consumer_offset - 1)
        if e is None or e[0] < store.commitlog.min_offset():
            return None
        ts = store.store_timestamp_at(e[0])
        return ts if ts >= 0 else None

    # -- offsets reset -----------------------------------------------------------------------
    def reset_offsets(self, group: str, topic: str, to: ResetTarget, execute: bool = False, *,
                      queue: int | None = None, force: bool = False) -> ResetPlan:
        """Plan moving the group's offsets of ``topic``, and apply the plan with ``execute``.

        ``to``: ``"earliest"`` (the first stored message), ``"latest"`` (the end: skip what is
        stored), a :class:`datetime.datetime` (the first message stored at or after it) or an
        int queue offset. Targets outside a queue's stored range are clamped to it. ``queue``:
        only that queue. Applying bumps the reset epoch, so live members switch to the new
        offsets at their next commit; it is refused (``LockHeldError``) while live members hold
        queues of the topic, unless ``force``. Returns the plan (``plan.rows``).
        """
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
                    first = self._first_store_time(topic, q, lo) if lo < hi else None
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
        from store.client.members import live_members
        from store.client.qlocks import list_locks
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
        from store.log.offsets import BroadcastOffsetStore, ClusterOffsetStore
        store = self.store
        if plan.busy and not force:
            raise LockHeldError(
                f"live members of group {plan.group} hold queues of {plan.topic}: {plan.owners}; stop them "
                f"first, or pass {self._arg('force')} to reset under them (they switch to the new offsets at "
                f"their next commit)")
        for s in plan.targets:
            rows = {r.queue_id: r.new for r in plan.rows if r.client_id == s.client_id}
            if s.client_id is None:
                ClusterOffsetStore(store.layout, warn=store.warn).reset(plan.group, plan.topic, rows)
            else:
                b = BroadcastOffsetStore(store.layout, s.client_id, plan.group, warn=store.warn)
                b.load()
                for q, new in rows.items():
                    b.update(plan.topic, q, new, increase_only=False)
                b.persist({(plan.topic, q) for q in rows})
            if progress is not None:
                progress(len(rows))
        plan.applied = True

    def _arg(self, name: str) -> str:
        from store.client.rules import spelling
        return spelling(self.arg_names)[name]

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
        import shutil

        from store.log.offsets import ClusterOffsetStore
        names.validate_group(group)
        store = self.store
        live = self._live_clients(group)
        clients = broadcast_clients(store, group)
        offsets = ClusterOffsetStore(store.layout, warn=store.warn)
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
        topics = offsets.delete_group(group) if cluster else []
        for cid in targets:
            shutil.rmtree(store.layout.broadcast_offsets(cid, group).parent, ignore_errors=True)
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
        raise UsageError(f"reset target must be 'earliest', 'latest', a datetime or a queue offset >= 0, "
                         f"not {to!r}")

    def _first_store_time(self, topic: str, qid: int, lo: int) -> int | None:
        store = self.store
        e = store.queue(topic, qid).entry(lo)
        if e is None:
            return None
        ts = store.store_timestamp_at(e[0])
        return ts if ts >= 0 else None

    # -- locks and members -------------------------------------------------------------------
    def locks(self, group: str | None = None) -> list[LockRow]:
        """Orderly consumers' queue locks (of ``group``, or of every group), holders probed."""
        from store.client.qlocks import list_locks
        from store.flock import now_ms
        store = self.store
        if group is not None:
            require_group(store, group)
        now = now_ms()
        return [lock_row(i, now) for i in list_locks(store.layout, group)]

    def consumers(self, group: str) -> list[MemberRow]:
        """The live members of ``group`` (Python and command line alike) and their queues."""
        from store.client.members import live_members
        store = self.store
        require_group(store, group)
        rows = []
        for m in live_members(store.layout, group):
            rec = m.record
            hb = rec.get("heartbeatAt") if isinstance(rec.get("heartbeatAt"), int) else None
            rows.append(MemberRow(group, m.clientId, m.pid, m.host, rec.get("mode"), rec.get("orderly"),
                                  rec.get("strategy"), rec.get("topics"), m.queues, m.startedAt, hb))
        return rows

    def unlock(self, group: str, topic: str | None = None, queue: int | None = None, *, force: bool = False,
               dry_run: bool = False) -> UnlockResult:
        """Release the group's orderly queue locks whose holder is gone (stale) or stuck past
        the store lease (expired); with ``force`` live holders' locks too (a holder notices
        before its next batch and stops consuming the queue). ``topic`` / ``queue``: only
        those (a queue needs its topic). ``dry_run``: report what would go, change nothing."""
        from store.client.qlocks import list_locks
        from store.client.qlocks import unlock as release
        from store.flock import now_ms
        if queue is not None and topic is None:
            raise usage("{queue} needs {topic}: queue ids are per topic", self.arg_names)
        if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int) or queue < 0):
            raise UsageError(f"queue must be an int >= 0, not {queue!r}")
        names.validate_group(group)
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
        consuming ``topic``; ``GroupNotFoundError`` when there are none). ``strategy``:
        ``averagely``, ``circle``, ``hash`` or ``config`` (default: the one the live members
        use when they agree, else ``averagely``). ``queues``: the queue ids of the ``config``
        strategy (needed by it, refused by the others). Rows come in the allocation's order,
        each with what the consumer holds now.
        """
        from store.client.allocate import allocate_all, queues_of
        from store.client.members import live_members
        a = self.arg_names
        if queues is not None and strategy != "config":
            raise usage("{queues} needs {strategy} config", a)
        if strategy == "config" and not queues:
            raise usage("{strategy} config needs {queues}, e.g. {queues_example}", a)
        if isinstance(consumers, str):
            raise UsageError(f"consumers must be a list of client ids, not {consumers!r}")
        names.validate_any_topic(topic)
        names.validate_group(group)
        store = self.store
        cfg = store.topic(topic)
        members = [m for m in live_members(store.layout, group) if topic in (m.record.get("topics") or [topic])]
        if consumers is not None:
            cids = [names.validate_client_id(c.strip()) for c in consumers if c.strip()]
            if not cids:
                raise usage("{consumers}: give at least one client id, e.g. {consumers_example}", a)
        else:
            require_group(store, group)
            cids = [m.clientId for m in members]
            if not cids:
                raise GroupNotFoundError(f"group {group} has no live members consuming {topic}; "
                                         f"pass {self._arg('consumers_hint')} to preview an allocation")
        if strategy is None:
            used = {s for m in members if isinstance(s := m.record.get("strategy"), str)}
            strategy = used.pop() if len(used) == 1 else "averagely"
            if strategy == "config" and not queues:
                raise usage("the live members use {strategy} config: give {queues}, e.g. {queues_example}", a)
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
        held = {m.clientId: sorted(q["queueId"] for q in m.queues if isinstance(q, dict) and q.get("topic") == topic
                                   and isinstance(q.get("queueId"), int)) for m in members}
        rows = [AllocationRow(group, topic, strategy, cid, [mq.queue_id for mq in mqs], held.get(cid))
                for cid, mqs in assignment.items()]
        return RebalancePreview(group, topic, strategy, cfg.queues, cids, rows)

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
        store = self.store
        require_group(store, group)
        return resend_dead_letters(store, group, msg_id, force=force, dry_run=dry_run, progress=progress,
                                   on_row=on_row)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the store handle (unless it came from :meth:`of`)."""
        if self._store is not None and self._owned:
            self._store.close()
        self._store, self._opener = None, None

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
