"""What ``mqctl top`` shows: its four views as tables of text, from a snapshot and its history.

The same rows serve the live screen (``mqctl/toplive.py``, one view at a time, in rich) and
the plain snapshot of ``--once`` or a pipe (every view, one after another). Columns:

* topics: TOPIC, QUEUES, MESSAGES (stored now), SIZE (their bytes), IN/S (stored per second
  over the last 5 s), LAST-60S (a sparkline of messages in per second over the last minute);
* groups: GROUP, TOPIC, LAG (messages still to consume), OUT/S (consumed per second),
  TREND (lag change per second over 15 s), DRAIN (time to drain, or falling behind),
  MEMBERS; with ``--group`` also one row per queue (QUEUE, MAX, COMMITTED, OWNER);
  then each live member and the queues it holds;
* locks: GROUP, TOPIC, QUEUE, HOLDER, PID, LEASE-LEFT, STATE (held, expired, stale);
* problems: KIND, WHAT, COUNT, DETAIL.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VIEWS = ("topics", "groups", "locks", "problems")
# What the problems view says of a store that needs recovery.
RECOVERY_REPAIR = "the next writer repairs it, or run: mqctl store recover"


@dataclass
class Section:
    """One table: its title, ``(key, HEADER)`` columns, rows, and the rows to highlight
    (their index: expired or stale locks, groups falling behind, problems)."""

    title: str
    columns: list[tuple[str, str]]
    rows: list[dict[str, Any]] = field(default_factory=list)
    alert: set[int] = field(default_factory=set)


def _rate(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _trend(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) < 0.05:
        return "= 0"
    return f"{'↑' if v > 0 else '↓'} {abs(v):.1f}/s"


def _match(flt: str, *values: str | None) -> bool:
    return not flt or any(v is not None and flt.lower() in v.lower() for v in values)


def topics_view(snap: Any, hist: Any, flt: str = "", system: bool = False) -> Section:
    from mqctl.output import human_size
    sec = Section("topics", [("topic", "TOPIC"), ("queues", "QUEUES"), ("messages", "MESSAGES"), ("size", "SIZE"),
                             ("rate", "IN/S"), ("spark", "LAST-60S")])
    for t in snap.topics:
        if (t.system and not system) or not _match(flt, t.topic):
            continue
        size = human_size(t.bytes) + ("" if t.bytes_exact else "+")
        sec.rows.append({"topic": t.topic, "queues": t.queues, "messages": t.messages, "size": size,
                         "rate": _rate(hist.topic_rate(t.topic)), "spark": hist.sparkline(t.topic)})
    return sec


def groups_view(snap: Any, hist: Any, flt: str = "", focus: str | None = None) -> list[Section]:
    sec = Section("groups", [("group", "GROUP"), ("topic", "TOPIC"), ("lag", "LAG"), ("rate", "OUT/S"),
                             ("trend", "TREND"), ("drain", "DRAIN"), ("members", "MEMBERS")])
    members = Section("members", [("group", "GROUP"), ("clientId", "CLIENT-ID"), ("pid", "PID"),
                                  ("mode", "MODE"), ("queues", "QUEUES"), ("state", "STATE")])
    queues = Section("queues", [("group", "GROUP"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("max", "MAX"),
                                ("committed", "COMMITTED"), ("lag", "LAG"), ("owner", "OWNER")])
    for g in snap.groups:
        by_topic = g.lag_by_topic()
        if not _match(flt, g.group, *by_topic):
            continue
        drain = hist.drain(g.group)
        first = {"group": g.group, "rate": _rate(hist.group_rate(g.group)), "trend": _trend(hist.lag_trend(g.group)),
                 "drain": drain.text(), "members": sum(m.state == "live" for m in g.members)}
        if drain.state in ("falling behind", "stalled"):
            sec.alert.add(len(sec.rows))
        if not by_topic:
            sec.rows.append({**first, "topic": "-", "lag": 0})
        for i, (topic, lag) in enumerate(by_topic.items()):
            sec.rows.append({**first, "topic": topic, "lag": lag} if i == 0 else
                            {"group": "", "topic": topic, "lag": lag, "rate": "", "trend": "", "drain": "",
                             "members": ""})
        for m in g.members:
            held: dict[str, list[str]] = {}
            for t, q in m.queues:
                held.setdefault(t, []).append(str(q))
            # (the consumers table's MODE and ORDERLY in one column: an orderly member is told apart)
            mode = f"{m.mode} orderly" if m.orderly and m.mode else m.mode
            members.rows.append({"group": g.group, "clientId": m.client_id, "pid": m.pid, "mode": mode,
                                 "queues": " ".join(f"{t}:{','.join(qs)}" for t, qs in held.items()) or "-",
                                 "state": m.state})
        if focus is not None and g.group == focus:
            for q in g.queues:
                queues.rows.append({"group": g.group, "topic": q.topic, "queueId": q.queue_id, "max": q.max_offset,
                                    "committed": q.consumer_offset, "lag": q.lag, "owner": q.owner})
    return [sec, queues, members] if focus is not None else [sec, members]


def locks_view(snap: Any, flt: str = "") -> Section:
    from store import format_duration
    sec = Section("locks", [("group", "GROUP"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("holder", "HOLDER"),
                            ("pid", "PID"), ("lease", "LEASE-LEFT"), ("state", "STATE")])
    for lk in snap.locks:
        if not _match(flt, lk.group, lk.topic, lk.client_id):
            continue
        if lk.lease_left_ms is None:
            lease = "-"
        elif lk.lease_left_ms >= 0:
            lease = format_duration(lk.lease_left_ms / 1000)
        else:
            lease = f"-{format_duration(-lk.lease_left_ms / 1000)}"
        if lk.state != "held":
            sec.alert.add(len(sec.rows))
        sec.rows.append({"group": lk.group, "topic": lk.topic, "queueId": lk.queue_id, "holder": lk.client_id,
                         "pid": lk.pid, "lease": lease, "state": lk.state})
    return sec


def problems_view(snap: Any, hist: Any, flt: str = "") -> Section:
    """Every problem, a row each (``summary`` counts these rows: the header and the view agree).
    ``hist`` None: no history (dead letters new since start counted as none)."""
    from store import format_duration
    p = snap.problems
    sec = Section("problems", [("kind", "KIND"), ("what", "WHAT"), ("count", "COUNT"), ("detail", "DETAIL")])

    def add(kind: str, what: str, count: int | str, detail: str, alert: bool = True) -> None:
        if _match(flt, kind, what):
            if alert:
                sec.alert.add(len(sec.rows))
            sec.rows.append({"kind": kind, "what": what, "count": count, "detail": detail})

    for g, n in sorted(p.dead_letters.items()):
        if n:
            new = hist.dead_letters_new(g) if hist is not None else 0
            add("dead letters", g, n, f"+{new} since start; mqctl dlq list -g {g}", alert=new > 0)
    for g, n in sorted(p.retries.items()):
        add("retries", g, n, "in flight in %RETRY%" + g, alert=False)
    for g, n in sorted(p.in_place.items()):   # (orderly: no retry topic holds them)
        add("retries", g, n, "retried in place by orderly members", alert=False)
    for t in p.overdue:   # (a younger one is not a problem yet: the check service has not asked)
        add("transaction", t.tx_id, t.check_times, f"{t.topic}, {format_duration(t.age_ms / 1000)} old"
            f" (over the {p.check_timeout_ms // 1000}s check timeout)")
    if p.delayed_due:
        add("delayed", "SCHEDULE_TOPIC_XXXX", p.delayed_due, f"due now, of {p.delayed} delayed")
    for lk in snap.locks:   # (a holder gone or stuck: its queue waits for the lease, or `mqctl unlock`)
        if lk.state != "held":
            holder = f"{lk.client_id} (pid {lk.pid})" if lk.client_id else "unreadable record"
            add("lock", f"{lk.group} {lk.topic}/{lk.queue_id}", "-",
                f"{lk.state}: {holder}; mqctl unlock -g {lk.group}")
    if p.recovery:   # (one row: what the first finding is, and what to do)
        more = f" (and {len(p.recovery) - 1} more: top --json lists them)" if len(p.recovery) > 1 else ""
        add("recovery", "store", len(p.recovery), f"{p.recovery[0]}{more}; {RECOVERY_REPAIR}")
    for w in p.warnings:
        add("warning", "store", "-", w)
    return sec


def sections(snap: Any, hist: Any, view: str, flt: str = "", focus: str | None = None) -> list[Section]:
    """The tables of one view."""
    if view == "topics":
        return [topics_view(snap, hist, flt)]
    if view == "groups":
        return groups_view(snap, hist, flt, focus)
    if view == "locks":
        return [locks_view(snap, flt)]
    return [problems_view(snap, hist, flt)]


def summary(snap: Any) -> str:
    """One line: how much there is, and how many problems."""
    issues = len(problems_view(snap, None).rows)
    live = sum(m.state == "live" for g in snap.groups for m in g.members)   # (as consumers and progress)
    counts = ((sum(1 for t in snap.topics if not t.system), "topic"), (len(snap.groups), "group"),
              (live, "member"), (len(snap.locks), "lock"), (issues, "problem"))
    return ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)
