"""What :class:`store.Monitor` sees in one look at a store (``mqctl top``): frozen records.

A :class:`Snapshot` is one pass over the store at ``taken_at`` (ms since the epoch): its
topics with their queues' offsets and stored bytes, every group's lag per queue and live
members, the orderly queue locks, and the problems worth a person's attention. Rates and
trends need two looks or more: :class:`store.History` (``store/client/trends.py``) computes
them from successive snapshots. ``to_json()`` gives the contract's camelCase fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TopicStat:
    """A topic: ``max_offsets`` per queue (the next offset written: the messages ever stored
    in it), ``messages`` still stored, their ``bytes`` (``bytes_exact`` False while the first
    looks are still adding up a long backlog)."""

    topic: str
    queues: int
    order: bool
    system: bool
    min_offsets: tuple[int, ...]
    max_offsets: tuple[int, ...]
    bytes: int
    bytes_exact: bool = True

    @property
    def messages(self) -> int:
        return sum(hi - lo for lo, hi in zip(self.min_offsets, self.max_offsets))

    @property
    def stored_total(self) -> int:
        """Messages ever stored (the sum of max offsets): what a rate of messages in counts."""
        return sum(self.max_offsets)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "queues": self.queues, "order": self.order, "system": self.system,
                "messages": self.messages, "bytes": self.bytes, "bytesExact": self.bytes_exact,
                "maxOffsets": list(self.max_offsets)}


@dataclass(frozen=True)
class QueueLag:
    """One queue of a group: ``consumer_offset`` None when nothing was committed (then every
    stored message counts as lag, as ``mqctl progress``); ``owner`` the live member that
    holds it, or the broadcast client whose offsets these are (``client_id``)."""

    topic: str
    queue_id: int
    max_offset: int
    consumer_offset: int | None
    lag: int
    owner: str | None
    client_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "queueId": self.queue_id, "brokerOffset": self.max_offset,
                "consumerOffset": self.consumer_offset, "lag": self.lag, "owner": self.owner,
                "clientId": self.client_id}


@dataclass(frozen=True)
class MemberStat:
    """A live member of a group and the queues it holds now (its queue locks; ``state``
    ``expired``: not heard from for the member expiry, as ``mqctl consumers`` says)."""

    client_id: str
    pid: int | None
    host: str | None
    mode: str | None
    orderly: bool | None
    queues: tuple[tuple[str, int], ...]
    heartbeat_at: int | None
    state: str = "live"
    retrying_in_place: int = 0   # (orderly) failed messages waiting for their retry in place

    def to_json(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "pid": self.pid, "host": self.host, "mode": self.mode,
                "orderly": self.orderly, "heartbeatAt": self.heartbeat_at,
                "queues": [{"topic": t, "queueId": q} for t, q in self.queues], "state": self.state,
                "retryingInPlace": self.retrying_in_place}


@dataclass(frozen=True)
class GroupStat:
    """A consumer group: its lag per queue (clustering offsets, then broadcast clients') and
    its live members."""

    group: str
    queues: tuple[QueueLag, ...]
    members: tuple[MemberStat, ...]

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def consumed_total(self) -> int:
        """The sum of committed offsets: what a rate of messages consumed counts."""
        return sum(q.consumer_offset for q in self.queues if q.consumer_offset is not None)

    def lag_by_topic(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.topic] = out.get(q.topic, 0) + q.lag
        return out

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "lag": self.lag, "lagByTopic": self.lag_by_topic(),
                "members": [m.to_json() for m in self.members], "queues": [q.to_json() for q in self.queues]}


@dataclass(frozen=True)
class LockStat:
    """An orderly queue lock. ``state``: ``held`` (a live holder renewing), ``expired`` (a live
    holder past its lease: stuck) or ``stale`` (no process holds it: a crash left it);
    ``lease_left_ms`` is negative once the lease ran out, None when the record is unreadable."""

    group: str
    topic: str
    queue_id: int
    client_id: str | None
    pid: int | None
    host: str | None
    renewed_at: int | None
    expires_at: int | None
    alive: bool
    state: str
    lease_left_ms: int | None

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "queueId": self.queue_id, "clientId": self.client_id,
                "pid": self.pid, "host": self.host, "renewedAt": self.renewed_at, "expiresAt": self.expires_at,
                "alive": self.alive, "state": self.state, "leaseLeftMs": self.lease_left_ms}


@dataclass(frozen=True)
class PendingTx:
    """An unresolved transaction: its age from the half message's born time."""

    tx_id: str
    topic: str
    age_ms: int
    check_times: int

    def to_json(self) -> dict[str, Any]:
        return {"txId": self.tx_id, "topic": self.topic, "ageMs": self.age_ms, "checkTimes": self.check_times}


@dataclass(frozen=True)
class Problems:
    """What needs a look: ``dead_letters`` per group (messages in ``%DLQ%<group>``),
    ``retries`` per group (lag of ``%RETRY%<group>``: messages waiting to be consumed again),
    ``in_place`` per group (failed messages its orderly members retry in place, not through
    the retry topic: as their member records say),
    ``transactions`` unresolved (``overdue``: older than the check timeout), delayed messages
    ``delayed`` not yet delivered and ``delayed_due`` whose time has come, ``warnings``
    (files read from their ``.bak``), and ``recovery``: what the next opener that can write
    would repair (``mqctl store recover`` repairs it too), one phrase each
    (``store/client/recoverylook.py``)."""

    dead_letters: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    transactions: tuple[PendingTx, ...] = ()
    check_timeout_ms: int = 6_000
    delayed: int = 0
    delayed_due: int = 0
    warnings: tuple[str, ...] = ()
    in_place: dict[str, int] = field(default_factory=dict)
    recovery: tuple[str, ...] = ()

    @property
    def overdue(self) -> tuple[PendingTx, ...]:
        return tuple(t for t in self.transactions if t.age_ms > self.check_timeout_ms)

    def to_json(self) -> dict[str, Any]:
        return {"deadLetters": self.dead_letters, "retries": self.retries, "retriesInPlace": self.in_place,
                "transactions": [t.to_json() for t in self.transactions],
                "overdueTransactions": len(self.overdue), "checkTimeoutMs": self.check_timeout_ms,
                "delayed": self.delayed, "delayedDue": self.delayed_due, "warnings": list(self.warnings),
                "recovery": list(self.recovery)}


@dataclass(frozen=True)
class Snapshot:
    """One look at the store (see the module docstring). ``cost_ms``: the CPU time it took."""

    taken_at: int
    topics: tuple[TopicStat, ...]
    groups: tuple[GroupStat, ...]
    locks: tuple[LockStat, ...]
    problems: Problems
    cost_ms: float = 0.0

    def topic(self, name: str) -> TopicStat | None:
        return next((t for t in self.topics if t.topic == name), None)

    def group(self, name: str) -> GroupStat | None:
        return next((g for g in self.groups if g.group == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.taken_at, "topics": [t.to_json() for t in self.topics],
                "groups": [g.to_json() for g in self.groups], "locks": [lk.to_json() for lk in self.locks],
                "problems": self.problems.to_json(), "costMs": round(self.cost_ms, 3)}
