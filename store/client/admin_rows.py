"""The rows :class:`store.Admin` returns: topics, queue status, offsets, lag, locks, members,
offset-reset plans, rebalance previews. Frozen dataclasses (``row.lag``; ``row["lag"]`` and
``row.to_dict()`` work too), with the ``--json`` line of the command that prints them.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Union

from store.client.rows import Row

if TYPE_CHECKING:
    from store.client.locktable import LockInfo

ResetTarget = Union[str, int, _dt.datetime]


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
    the queue (or the broadcast client); ``client_alive`` as in :class:`OffsetRow`;
    ``scheduled`` the messages waiting out a delay in the schedule topic before they come to
    this queue (for the group's retry topic: its failed messages waiting for their retry),
    which ``lag`` does not count yet."""

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
    scheduled: int = 0

    def to_json(self) -> dict[str, Any]:
        """The ``progress --json`` line (``lastTime``: ``lastTimestamp`` in ISO-8601 UTC)."""
        from store.timeparse import format_time
        return client_state({
            "group": self.group, "topic": self.topic, "queueId": self.queue_id, "brokerOffset": self.broker_offset,
            "minOffset": self.min_offset, "consumerOffset": self.consumer_offset, "lag": self.lag,
            "lastTimestamp": self.last_timestamp, "scheduled": self.scheduled, "owner": self.owner,
            "clientId": self.client_id,
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
    info: LockInfo = field(repr=False, compare=False)


@dataclass(frozen=True)
class MemberRow(Row):
    """A live member of a group (``mqctl consumers``): its process, how it consumes, and the
    queues it holds now (``[{"topic": ..., "queueId": ...}]``). ``state``: ``live``, or
    ``expired`` when it was not heard from for the member expiry (stopped or hung; the group
    shares its queues without it). ``tags``: its tag expression (``*``, ``A || B``; None from
    a member that does not publish it); ``subscription_consistent``: False when it subscribes
    otherwise (topic, tags, mode, orderly) than another live member of the group, which
    RocketMQ forbids, or, both clustering, uses another allocation ``strategy`` (None from an
    older record: averagely) (``store/client/subscriptions.py``)."""

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
    state: str = "live"
    tags: str | None = None
    subscription_consistent: bool = True
    subscription_harm: str | None = None   # (not consistent: what the group's mix does, in words)

    @property
    def subscription(self) -> str:
        """What it subscribes, in words (``topic T (tags *, clustering, concurrently)``)."""
        return self.describe()

    def describe(self, strategy: bool = False) -> str:
        """:attr:`subscription`; with ``strategy``, a clustering member's strategy too."""
        from store.client.subscriptions import Subscription
        return Subscription.of({"topics": self.topics, "tags": self.tags, "mode": self.mode,
                                "orderly": self.orderly, "strategy": self.strategy}).describe(strategy)


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
    allocation's order, for ``consumers`` sharing the ``queues`` queues of ``topic``, then one
    for each of the ``broadcast`` members of the topic (live ones, unless the consumers were
    given): each reads every queue for itself and has no share (no queues, holds none).
    ``strategy``: ``"mixed"`` when the live members disagree on it (each row's its own)."""

    group: str
    topic: str
    strategy: str
    queues: int
    consumers: list[str]
    rows: list[AllocationRow]
    broadcast: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[AllocationRow]:
        return iter(self.rows)

    @property
    def unowned(self) -> list[int]:
        """The queue ids no consumer's share has (left by live members that disagree on the
        strategy, ``"mixed"``, or by config members given too few: their messages wait)."""
        shared = {q for r in self.rows for q in r.queues}
        return [q for q in range(self.queues) if q not in shared] if self.consumers else []

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


def lock_state(info: LockInfo, now: int) -> str:
    """``held``, ``expired`` or ``stale`` (see :class:`LockRow`)."""
    if not info.alive:
        return "stale"
    return "expired" if info.expired(now) else "held"


def lock_row(info: LockInfo, now: int) -> LockRow:
    """A :class:`LockRow` of a probed lock, its state as of ``now`` (ms since the epoch)."""
    return LockRow(info.group, info.topic, info.queueId, info.clientId, info.pid, info.host, info.acquiredAt,
                   info.renewedAt, info.expiresAt, info.alive, lock_state(info, now), info)
