"""``mqctl offsets show|reset`` and ``mqctl progress``: where a group stands, and moving it.

What a group is: a name that has committed offsets (``config/consumerOffset.json`` or a
broadcast client's ``offsets/<clientId>/<group>/offsets.json``), live or past members
(``consumers/<group>/``), or a retry or dead-letter topic. Anything else is an unknown group
(exit 3): a typo must not look like a group that simply has nothing to show.

``offsets reset`` is plan-first (Kafka's ``--reset-offsets``): without ``--execute`` it prints
``topic queueId currentOffset -> newOffset`` and changes nothing. With ``--execute`` it applies
the plan with :meth:`ClusterOffsetStore.reset`, which bumps the reset epoch of (topic, group):
a live consumer that later tries to commit offsets it computed before the reset is refused,
reloads the new offsets and continues from them. A reset is refused (exit 4) while live members
of the group hold queues of the topic, unless ``--force``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..options import JsonOpt, state

if TYPE_CHECKING:
    from store.broker import Store

offsets_app = typer.Typer(help="Show and reset a consumer group's committed offsets.",
                          no_args_is_help=True)


# -- completion helpers (run at tab time: must be quick and never raise) ---------------------

def _completion_store(ctx: typer.Context) -> "Store | None":
    try:
        from store.broker import Store
        from ..options import resolve_store_path
        root = ctx.find_root().params.get("store")
        return Store.open(resolve_store_path(root), recover=False, warn=lambda _m: None)
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return None


def complete_group(ctx: typer.Context, incomplete: str) -> list[str]:
    """Group names known to the store (for shell completion)."""
    store = _completion_store(ctx)
    if store is None:
        return []
    try:
        return [g for g in known_groups(store) if g.startswith(incomplete)]
    except Exception:  # noqa: BLE001
        return []
    finally:
        store.close()


def complete_topic(ctx: typer.Context, incomplete: str) -> list[str]:
    """Topic names of the store (for shell completion)."""
    store = _completion_store(ctx)
    if store is None:
        return []
    try:
        return sorted(t for t in store.topics() if t.startswith(incomplete))
    except Exception:  # noqa: BLE001
        return []
    finally:
        store.close()


GroupOpt = Annotated[str, typer.Option("--group", "-g", help="Consumer group name.",
                                       autocompletion=complete_group)]
TopicOpt = Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic.",
                                                 autocompletion=complete_topic)]


def register(app: typer.Typer) -> None:
    app.add_typer(offsets_app, name="offsets")
    app.command("progress", help=PROGRESS_HELP)(progress)


# -- groups ------------------------------------------------------------------------------------

def broadcast_clients(store: "Store", group: str) -> list[str]:
    """Client ids that keep broadcast offsets for ``group`` (``offsets/<cid>/<group>/``)."""
    from store.names import CLIENT_ID_RE
    root = store.layout.root / "offsets"
    try:
        cids = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(c for c in cids if CLIENT_ID_RE.match(c) and c not in (".", "..")
                  and (root / c / group / "offsets.json").exists())


def known_groups(store: "Store") -> list[str]:
    """Every group the store knows of, sorted (offsets, members, retry/DLQ topics)."""
    from store.names import DLQ_PREFIX, NAME_RE, RETRY_PREFIX
    from store.offsets import ClusterOffsetStore
    groups = set(ClusterOffsetStore(store.layout).groups())
    for d in (store.layout.members_root, store.layout.queue_locks_root, store.layout.root / "offsets"):
        try:
            names = os.listdir(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if d != store.layout.root / "offsets":
            groups.update(n for n in names if NAME_RE.match(n))
        else:
            for cid in names:
                try:
                    groups.update(n for n in os.listdir(d / cid) if NAME_RE.match(n))
                except (FileNotFoundError, NotADirectoryError):
                    pass
    for t in store.topics():
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if t.startswith(prefix):
                groups.add(t[len(prefix):])
    return sorted(groups)


def group_exists(store: "Store", group: str) -> bool:
    from store.names import dlq_topic, retry_topic
    from store.offsets import ClusterOffsetStore
    if ClusterOffsetStore(store.layout).topics_of(group):
        return True
    if (store.layout.members_dir(group).is_dir() or store.layout.queue_locks_dir(group).is_dir()
            or broadcast_clients(store, group)):
        return True
    return store.has_topic(retry_topic(group)) or store.has_topic(dlq_topic(group))


def require_group(store: "Store", group: str) -> None:
    """GroupNotFoundError (exit 3) unless the store knows ``group``."""
    from store.errors import GroupNotFoundError
    from store.names import validate_group
    validate_group(group)
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
    from store.offsets import BroadcastOffsetStore, ClusterOffsetStore
    sets = [OffsetSet(None, ClusterOffsetStore(store.layout, warn=store.warn).read_group(group))]
    for cid in broadcast_clients(store, group):
        try:
            b = BroadcastOffsetStore(store.layout, cid, group, warn=store.warn)
            sets.append(OffsetSet(cid, b.load()))
        except Exception as exc:  # noqa: BLE001 - one bad client file must not hide the rest
            from store.errors import StoreError
            if not isinstance(exc, StoreError):
                raise
            store.warn(f"broadcast offsets of {cid}: {exc}")
    return sets


def holders(store: "Store", group: str) -> dict[tuple[str, int], str]:
    """(topic, queueId) -> client id of the live member that says it holds the queue."""
    from store.members import live_members
    out: dict[tuple[str, int], str] = {}
    for m in live_members(store.layout, group):
        for q in m.queues:
            if isinstance(q, dict) and isinstance(q.get("topic"), str) and isinstance(q.get("queueId"), int):
                out.setdefault((q["topic"], q["queueId"]), m.clientId)
    return out


def _group_store(ctx: typer.Context, group: str, topic: str | None) -> "Store":
    """The store, after checking that the group exists (3) and the topic, if given (2, 3)."""
    from store.names import validate_any_topic
    store = state(ctx).store()
    require_group(store, group)
    if topic is not None:
        validate_any_topic(topic)
        store.topic(topic)
    return store


# -- offsets show ------------------------------------------------------------------------------

@offsets_app.command("show", help="""The group's committed offsets per queue (the next offset to consume).

Broadcast groups keep offsets per client: those rows carry the clientId.

Examples:
  mqctl offsets show -g billing
  mqctl offsets show -g billing -t orders --json | jq -c '{queueId, offset}'""")
def show(ctx: typer.Context, group: GroupOpt, topic: TopicOpt = None, json: JsonOpt = False) -> None:
    from ..output import Output
    store = _group_store(ctx, group, topic)
    rows = []
    for s in group_offsets(store, group):
        for (t, q), off in sorted(s.offsets.items()):
            if topic is None or t == topic:
                rows.append({"group": group, "topic": t, "queueId": q, "offset": off, "clientId": s.client_id})
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("offset", "OFFSET")]
    if any(r["clientId"] for r in rows):
        cols.append(("clientId", "CLIENT-ID"))
    out = Output(json=json)
    if rows:
        out.table(rows, cols)
    else:
        out.info(f"group {group} has no committed offsets{f' in {topic}' if topic else ''}")


# -- progress ----------------------------------------------------------------------------------

PROGRESS_HELP = """Lag per queue of a consumer group (mqadmin consumerProgress, Kafka --describe).

brokerOffset is the queue's max offset, consumerOffset the group's committed offset, lag the
messages still to consume (never negative; a queue with no committed offset counts every
stored message), lastTimestamp the store time of the last consumed message (null when unknown
or already removed by retention). Rows of the group's %RETRY% topic are included (unless
--topic names another topic). OWNER is the live member holding the queue.

Examples:
  mqctl progress -g billing
  mqctl progress -g billing --json | jq -s 'map(.lag) | add'"""


def _last_timestamp(store: "Store", topic: str, qid: int, consumer_offset: int | None) -> int | None:
    if consumer_offset is None or consumer_offset <= 0:
        return None
    e = store.queue(topic, qid).entry(consumer_offset - 1)
    if e is None or e[0] < store.commitlog.min_offset():
        return None
    ts = store.store_timestamp_at(e[0])
    return ts if ts >= 0 else None


def progress_rows(store: "Store", group: str, topic: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``mqctl progress`` (also used by the tests)."""
    from store.members import live_members
    from store.names import retry_topic
    from ..timeparse import format_time
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
    retry = retry_topic(group)
    if store.has_topic(retry):
        topics_by_client[None].add(retry)
    all_topics = store.topics()
    rows = []
    for s in sets:
        names = sorted(topics_by_client.get(s.client_id, set()), key=lambda t: (t == retry, t))
        for t in names:
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
                last = _last_timestamp(store, t, q, consumer)
                rows.append({
                    "group": group, "topic": t, "queueId": q, "brokerOffset": broker,
                    "minOffset": lo, "consumerOffset": consumer, "lag": lag, "lastTimestamp": last,
                    "lastTime": format_time(last) if last is not None else None,
                    "owner": owners.get((t, q)) if s.client_id is None else s.client_id,
                    "clientId": s.client_id,
                })
    return rows


def progress(ctx: typer.Context, group: GroupOpt, topic: TopicOpt = None, json: JsonOpt = False) -> None:
    from store.members import live_members
    from ..output import Output
    store = _group_store(ctx, group, topic)
    rows = progress_rows(store, group, topic)
    out = Output(json=json)
    if rows:
        out.table(rows, [("topic", "TOPIC"), ("queueId", "QUEUE"), ("brokerOffset", "BROKER-OFFSET"),
                         ("consumerOffset", "CONSUMER-OFFSET"), ("lag", "LAG"), ("lastTime", "LAST-CONSUMED"),
                         ("owner", "OWNER")])
    if not json:
        members = live_members(store.layout, group)
        out.info(f"group {group}: {len(members)} live member{'s' if len(members) != 1 else ''}, "
                 f"total lag {sum(r['lag'] for r in rows)}")


# -- offsets reset -----------------------------------------------------------------------------

@dataclass
class PlanRow:
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


def _first_store_time(store: "Store", topic: str, qid: int, lo: int) -> int | None:
    e = store.queue(topic, qid).entry(lo)
    if e is None:
        return None
    ts = store.store_timestamp_at(e[0])
    return ts if ts >= 0 else None


@offsets_app.command("reset", help="""Move the group's offsets of a topic: plan first, --execute to apply.

Give exactly one target. Without --execute nothing changes: the plan (current -> new offset per
queue) is printed. Targets outside a queue's stored range are clamped to it and reported. While
live members of the group hold queues of the topic the reset is refused (exit 4) unless
--force; with --force they switch to the new offsets at their next commit.

Examples:
  mqctl offsets reset -g billing -t orders --to-earliest               # show the plan
  mqctl offsets reset -g billing -t orders --to-time -2h --execute     # replay the last 2 hours
  mqctl offsets reset -g billing -t orders --to-offset 100 -q 3 --execute""")
def reset(
    ctx: typer.Context,
    group: GroupOpt,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets move.",
                                       autocompletion=complete_topic)],
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Target: the first stored message.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Target: the end (skip everything stored).")] = False,
    to_time: Annotated[Optional[str], typer.Option(
        "--to-time", metavar="TIME",
        help="Target: the first message stored at or after TIME (ms or s since epoch, ISO-8601 "
             "without offset = UTC, -2h = ago, now).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", metavar="N", min=0,
                                                     help="Target: queue offset N.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", min=0, help="Only this queue.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: print it only).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan only (the default; for scripts that want to say so).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Reset even while live members hold the topic's queues.")] = False,
    json: JsonOpt = False,
) -> None:
    from store.errors import LockHeldError, UsageError
    from store.names import validate_any_topic, validate_group
    from ..output import Output
    from ..timeparse import format_time, parse_time
    given = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                   ("--to-time", to_time is not None), ("--to-offset", to_offset is not None)) if on]
    if len(given) != 1:
        raise UsageError("give exactly one target: --to-earliest, --to-latest, --to-time TIME or --to-offset N"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if execute and dry_run:
        raise UsageError("--execute and --dry-run contradict each other")
    validate_group(group)
    validate_any_topic(topic)
    ts = parse_time(to_time) if to_time is not None else None
    store = state(ctx).store()
    cfg = store.topic(topic)
    if queue is not None and queue >= cfg.queues:
        raise UsageError(f"queue {queue} does not exist: topic {topic!r} has queues 0-{cfg.queues - 1}")
    qids = [queue] if queue is not None else list(range(cfg.queues))
    out = Output(json=json)

    # Which offset sets move: the clustering table, plus every broadcast client that has
    # offsets in the topic; a broadcast-only group does not get clustering offsets made up.
    sets = group_offsets(store, group)
    cluster = sets[0]
    bcast = [s for s in sets[1:] if any(t == topic for t, _ in s.offsets)]
    targets = ([cluster] if (not bcast or any(t == topic for t, _ in cluster.offsets)) else []) + bcast
    if not group_exists(store, group):
        out.warn(f"group {group} has no offsets yet: the reset creates them")

    plan: list[PlanRow] = []
    early: list[int] = []
    for s in targets:
        for q in qids:
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            cur = s.offsets.get((topic, q))
            row = PlanRow(topic, q, s.client_id, cur if cur is not None and cur >= 0 else None, lo, lo, hi)
            if to_earliest:
                row.new = lo
            elif to_latest:
                row.new = hi
            elif ts is not None:
                row.new = store.search_offset(topic, q, ts)
                first = _first_store_time(store, topic, q, lo) if lo < hi else None
                if first is not None and ts < first:
                    row.clamped = "earliest"
                    if s is targets[0]:
                        early.append(q)
            else:
                assert to_offset is not None
                row.new = min(max(to_offset, lo), hi)
                if to_offset > hi:
                    row.clamped = "end"
                elif to_offset < lo:
                    row.clamped = "earliest"
            plan.append(row)

    if early:
        out.info(f"mqctl: note: {format_time(ts)} is before the earliest stored message of "
                 f"{topic} queue{'s' if len(early) > 1 else ''} {','.join(map(str, early))}: "
                 f"clamped to the earliest offset")
    if to_offset is not None:
        past = sorted({r.queue_id for r in plan if r.clamped == "end"})
        before = sorted({r.queue_id for r in plan if r.clamped == "earliest"})
        if past:
            out.info(f"mqctl: note: offset {to_offset} is past the end of {topic} queue"
                     f"{'s' if len(past) > 1 else ''} {','.join(map(str, past))}: clamped to the end")
        if before:
            out.info(f"mqctl: note: offset {to_offset} is no longer stored in {topic} queue"
                     f"{'s' if len(before) > 1 else ''} {','.join(map(str, before))}: clamped to the earliest offset")

    # Live members holding queues of the topic (published queues, and live orderly locks).
    from store.members import live_members
    from store.qlocks import list_locks
    qset = set(qids)
    busy: dict[str, set[int]] = {}
    pids: dict[str, Any] = {}
    for m in live_members(store.layout, group):
        for e in m.queues:
            if isinstance(e, dict) and e.get("topic") == topic and e.get("queueId") in qset:
                busy.setdefault(m.clientId, set()).add(e["queueId"])
                pids[m.clientId] = m.pid
    for lk in list_locks(store.layout, group):
        if lk.alive and lk.topic == topic and lk.queueId in qset:
            cid = lk.clientId or "unknown holder"
            busy.setdefault(cid, set()).add(lk.queueId)
            pids.setdefault(cid, lk.pid)
    owners = "; ".join(f"{cid} (pid {pids.get(cid) if pids.get(cid) is not None else '?'}, queues "
                       f"{','.join(map(str, sorted(qs)))})" for cid, qs in sorted(busy.items()))
    if busy and execute and not force:
        raise LockHeldError(
            f"live members of group {group} hold queues of {topic}: {owners}; stop them first, or "
            f"pass --force to reset under them (they switch to the new offsets at their next commit)")

    if execute:
        from store.offsets import BroadcastOffsetStore, ClusterOffsetStore
        for s in targets:
            rows = {r.queue_id: r.new for r in plan if r.client_id == s.client_id}
            if s.client_id is None:
                ClusterOffsetStore(store.layout, warn=store.warn).reset(group, topic, rows)
            else:
                b = BroadcastOffsetStore(store.layout, s.client_id, group, warn=store.warn)
                b.load()
                for q, new in rows.items():
                    b.update(topic, q, new, increase_only=False)
                b.persist({(topic, q) for q in rows})

    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("currentOffset", "CURRENT-OFFSET"),
            ("newOffset", "NEW-OFFSET"), ("clamped", "CLAMPED")]
    if bcast:
        cols.insert(2, ("clientId", "CLIENT-ID"))
    out.table([r.to_json(group, execute) for r in plan], cols)
    if execute:
        moved = sum(1 for r in plan if r.current != r.new)
        out.info(f"reset {len(plan)} queue{'s' if len(plan) != 1 else ''} of {topic} for group {group} "
                 f"({moved} moved)")
        if busy:
            out.warn(f"reset under live members ({owners}): they take the new offsets at their next "
                     f"commit; an idle member keeps its position until new messages arrive")
            if bcast:
                out.warn("running broadcast clients do not learn of a reset and will write their own "
                         "offsets back: restart them")
    else:
        if busy:
            out.warn(f"live members of group {group} hold queues of {topic} ({owners}): --execute "
                     f"will also need --force")
        out.info("dry run: nothing changed; add --execute to apply this plan")
