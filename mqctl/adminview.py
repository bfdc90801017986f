"""How ``mqctl locks``, ``unlock`` and ``consumers`` show locks and members: relative times
(``3s ago``, ``in 57s``), local clock times, and the queues a member holds as text."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mqctl.output import Output

if TYPE_CHECKING:
    from store import LockRow, MemberRow

LOCK_COLUMNS = [("group", "GROUP"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("clientId", "CLIENT-ID"),
                ("pid", "PID"), ("host", "HOST"), ("acquiredTime", "ACQUIRED"), ("renewed", "RENEWED"),
                ("expires", "EXPIRES"), ("state", "STATE")]
MEMBER_COLUMNS = [("clientId", "CLIENT-ID"), ("pid", "PID"), ("host", "HOST"), ("mode", "MODE"),
                  ("orderly", "ORDERLY"), ("queuesText", "QUEUES"), ("startedLocal", "STARTED"),
                  ("heartbeat", "HEARTBEAT"), ("state", "STATE")]


def ago(now: int, ms: int | None, past: bool = False) -> str | None:
    """``3s ago`` or ``in 57s``; ``past``: a time that has happened (a lock's acquisition, its
    last renewal, a heartbeat) a moment after ``now`` was read: ``0ms ago``, never ``in 51ms``
    (a second or more ahead: a holder's clock ahead of this one, said so)."""
    from store import format_age
    if ms is None:
        return None
    if past and ms > now:   # (under a second: a read's lag, or mtime granularity; else a clock skew)
        return "0ms ago" if ms - now < 1000 else f"in {format_age(ms - now)} (a clock ahead of this one)"
    return f"in {format_age(ms - now)}" if ms > now else f"{format_age(now - ms)} ago"


def lock_row(lock: LockRow, now: int, utc: bool | None) -> dict[str, Any]:
    """A lock's JSON row (machine values only: times in ms); with ``utc`` not None (human
    output) also its local acquiredTime and the ages of its times (``3s ago``, ``in 57s``)."""
    from store import format_local
    row: dict[str, Any] = lock.info.to_dict()
    row["state"] = lock.state
    if utc is not None:
        row.update(acquired=ago(now, lock.acquired_at, past=True), renewed=ago(now, lock.renewed_at, past=True),
                   expires=ago(now, lock.expires_at))
        if lock.acquired_at is not None:
            row["acquiredTime"] = format_local(lock.acquired_at, utc)
    return row


def queues_text(queues: list[dict[str, Any]]) -> str:
    """``orders:0,3 other:1``: a member's queues, by topic."""
    by_topic: dict[str, list[int]] = {}
    for q in queues:
        if isinstance(q, dict) and isinstance(q.get("topic"), str) and isinstance(q.get("queueId"), int):
            by_topic.setdefault(q["topic"], []).append(q["queueId"])
    return " ".join(f"{t}:{','.join(map(str, sorted(ids)))}" for t, ids in sorted(by_topic.items())) or "-"


def show_members(out: Output, members: list[MemberRow], group: str, now: int, utc: bool) -> None:
    """``consumers``: NDJSON rows, or a table with local start times and heartbeat ages."""
    from store import format_local, format_time
    rows: list[dict[str, Any]] = [{
        "group": m.group, "clientId": m.client_id, "pid": m.pid, "host": m.host, "mode": m.mode,
        "orderly": m.orderly, "strategy": m.strategy, "topics": m.topics, "queues": m.queues,
        "startedAt": m.started_at, "heartbeatAt": m.heartbeat_at,
        "started": format_time(m.started_at) if m.started_at is not None else None, "state": m.state,
        "tags": m.tags, "subscriptionConsistent": m.subscription_consistent,
    } for m in members]
    for r in rows if not out.json else ():   # (the text of the table: not in --json's machine values)
        r["queuesText"] = queues_text(r["queues"])
        r["startedLocal"] = format_local(r["startedAt"], utc) if r["startedAt"] is not None else None
        r["heartbeat"] = ago(now, r["heartbeatAt"], past=True)
    if rows:
        out.table(rows, MEMBER_COLUMNS)
    elif not out.json:
        out.info(f"no live members in group {group}")
    mixed = [m for m in members if not m.subscription_consistent]
    if mixed and not out.json:   # (--json: each row's subscriptionConsistent)
        # (their strategies named when those differ: "clustering members" with None = averagely)
        strategies = {m.strategy or "averagely" for m in mixed if m.mode != "broadcasting"}
        each = "; ".join(f"{m.client_id}: {m.describe(len(strategies) > 1)}" for m in mixed)
        out.warn(f"members of group {group} subscribe differently ({each}); {mixed[0].subscription_harm}")
