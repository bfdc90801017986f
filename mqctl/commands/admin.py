"""``mqctl locks|consumers|rebalance|unlock|completion``: who holds what, and the shell glue.

All of these read the coordination files the consumers keep (``consumers/<group>/`` for
membership, ``locks/<group>/`` for orderly queue locks; formats in ``store/client/members.py`` and
``store/client/qlocks.py``). Only ``unlock`` changes anything, and by default only locks whose holder
is gone (stale) or stuck past the store lease (expired).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, OptionalGroupOpt, TopicArg, TopicFilterOpt, state

if TYPE_CHECKING:
    from store.client.admin import LockRow


def register(app: typer.Typer) -> None:
    app.command("locks", help=LOCKS_HELP)(locks)
    app.command("consumers", help=CONSUMERS_HELP)(consumers)
    app.command("rebalance", help=REBALANCE_HELP)(rebalance)
    app.command("unlock", help=UNLOCK_HELP)(unlock)
    app.command("completion", help=COMPLETION_HELP)(completion)


def _ago(now: int, ms: int | None) -> str | None:
    from store.timeparse import format_age
    if ms is None:
        return None
    return f"in {format_age(ms - now)}" if ms > now else f"{format_age(now - ms)} ago"


def _lock_row(lock: "LockRow", now: int, utc: bool | None) -> dict[str, Any]:
    """A lock's JSON row; with ``utc`` not None (human output) also its local acquiredTime."""
    from store.timeparse import format_local
    row = lock.info.to_dict()
    row.update(state=lock.state, acquired=_ago(now, lock.acquired_at), renewed=_ago(now, lock.renewed_at),
               expires=_ago(now, lock.expires_at))
    if utc is not None and lock.acquired_at is not None:
        row["acquiredTime"] = format_local(lock.acquired_at, utc)
    return row


LOCK_COLUMNS = [("group", "GROUP"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("clientId", "CLIENT-ID"),
                ("pid", "PID"), ("host", "HOST"), ("acquiredTime", "ACQUIRED"), ("renewed", "RENEWED"),
                ("expires", "EXPIRES"), ("state", "STATE")]

LOCKS_HELP = """Orderly consumers' queue locks, with their holders probed.

STATE is held (a live holder renewing its lease), expired (a live holder that stopped renewing
for the 60 s store lease; a contender may break it) or stale (no process holds it: a crashed
holder left the file). ACQUIRED is a local time (--utc: UTC). JSON times are ms since the
epoch; alive is the OS lock, probed.

Examples:
  mqctl locks
  mqctl locks -g ledger --json | jq -c 'select(.alive | not)'"""


def locks(ctx: typer.Context, group: OptionalGroupOpt = None, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    st = state(ctx)
    now = int(time.time() * 1000)
    rows = [_lock_row(lk, now, None if json else st.utc) for lk in Admin.of(st.store()).locks(group)]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    elif not json:
        out.info(f"no queue locks{f' for group {group}' if group else ''}")


CONSUMERS_HELP = """Live members of a group and the queues each holds.

mqadmin consumerConnection. A member is live while its process holds its membership lock;
members that died are not shown. STARTED is a local time (--utc: UTC).

Examples:
  mqctl consumers -g billing
  mqctl consumers -g billing --json | jq -r .clientId"""


def _queues_text(queues: list[dict[str, Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for q in queues:
        if isinstance(q, dict) and isinstance(q.get("topic"), str) and isinstance(q.get("queueId"), int):
            by_topic.setdefault(q["topic"], []).append(q["queueId"])
    return " ".join(f"{t}:{','.join(map(str, sorted(ids)))}" for t, ids in sorted(by_topic.items())) or "-"


def consumers(ctx: typer.Context, group: GroupOpt, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    from store.timeparse import format_local, format_time
    st = state(ctx)
    now = int(time.time() * 1000)
    rows: list[dict[str, Any]] = [{
        "group": m.group, "clientId": m.client_id, "pid": m.pid, "host": m.host, "mode": m.mode,
        "orderly": m.orderly, "strategy": m.strategy, "topics": m.topics, "queues": m.queues,
        "startedAt": m.started_at, "heartbeatAt": m.heartbeat_at, "queuesText": _queues_text(m.queues),
        "started": format_time(m.started_at) if m.started_at is not None else None,
    } for m in Admin.of(st.store()).consumers(group)]
    out = Output(json=json)
    for r in rows if not json else ():
        r["startedLocal"] = format_local(r["startedAt"], st.utc) if r["startedAt"] is not None else None
        r["heartbeat"] = _ago(now, r["heartbeatAt"])
    if rows:
        out.table(rows, [("clientId", "CLIENT-ID"), ("pid", "PID"), ("host", "HOST"), ("mode", "MODE"),
                         ("orderly", "ORDERLY"), ("queuesText", "QUEUES"), ("startedLocal", "STARTED"),
                         ("heartbeat", "HEARTBEAT")])
    elif not json:
        out.info(f"no live members in group {group}")


REBALANCE_HELP = """Preview how a strategy shares a topic's queues.

Uses the live rebalance's own code. Members are the group's live members consuming TOPIC, or
the list given with --consumers. Without --strategy the strategy the live members use is
taken (else averagely).

Examples:
  mqctl rebalance orders -g billing
  mqctl rebalance orders -g billing --consumers a,b,c --strategy circle
  mqctl rebalance orders -g billing --consumers a,b --strategy config \\
      --queues 0,3"""


def _int_list(text: str, flag: str) -> list[int]:
    from store.errors import UsageError
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        vals = []
    if not vals or vals[0] < 0:
        raise UsageError(f"{flag} {text!r}: expected queue ids like 0,3")
    return vals


def rebalance(
    ctx: typer.Context,
    topic: TopicArg,
    group: GroupOpt,
    consumer_ids: Annotated[Optional[str], typer.Option(
        "--consumers", metavar="C1,C2", help="Client ids to allocate to (default: the live members).")] = None,
    strategy: Annotated[Optional[Literal["averagely", "circle", "hash", "config"]], typer.Option(
        "--strategy", help="Allocation strategy (default: what the members use, else averagely).")] = None,
    queues: Annotated[Optional[str], typer.Option(
        "--queues", metavar="Q1,Q2", help="Queue ids for --strategy config, e.g. 0,3.")] = None,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    from store.client.admin import require_group
    from store.client.allocate import allocate_all, queues_of
    from store.client.members import live_members
    from store.errors import GroupNotFoundError, UsageError
    from store.names import validate_any_topic, validate_client_id, validate_group
    if queues is not None and strategy != "config":
        raise UsageError("--queues needs --strategy config")
    if strategy == "config" and not queues:
        raise UsageError("--strategy config needs --queues, e.g. --queues 0,3")
    validate_any_topic(topic)
    validate_group(group)
    store = state(ctx).store()
    cfg = store.topic(topic)
    members = [m for m in live_members(store.layout, group) if topic in (m.record.get("topics") or [topic])]
    if consumer_ids is not None:
        cids = [validate_client_id(c.strip()) for c in consumer_ids.split(",") if c.strip()]
        if not cids:
            raise UsageError("--consumers: give at least one client id, e.g. --consumers a,b")
    else:
        require_group(store, group)
        cids = [m.clientId for m in members]
        if not cids:
            raise GroupNotFoundError(f"group {group} has no live members consuming {topic}; "
                                     f"pass --consumers C1,C2 to preview an allocation")
    if strategy is None:
        used = {s for m in members if isinstance(s := m.record.get("strategy"), str)}
        strategy = used.pop() if len(used) == 1 else "averagely"  # type: ignore[assignment]
        if strategy == "config" and not queues:
            raise UsageError("the live members use --strategy config: give --queues, e.g. --queues 0,3")
    config = None
    if queues:
        ids = _int_list(queues, "--queues")
        if ids[-1] >= cfg.queues:
            raise UsageError(f"--queues: queue {ids[-1]} does not exist: topic {topic} has queues 0-{cfg.queues - 1}")
        config = queues_of(topic, ids)
    assert strategy is not None
    assignment = allocate_all(strategy, queues_of(topic, range(cfg.queues)), cids, config)
    held = {m.clientId: sorted(q["queueId"] for q in m.queues
                               if isinstance(q, dict) and q.get("topic") == topic and isinstance(q.get("queueId"), int))
            for m in members}
    rows = [{"group": group, "topic": topic, "strategy": strategy, "clientId": cid,
             "queues": [mq.queue_id for mq in mqs], "holds": held.get(cid)}
            for cid, mqs in assignment.items()]
    out = Output(json=json)
    out.table(rows, [("clientId", "CLIENT-ID"), ("queues", "QUEUES"), ("holds", "HOLDS-NOW")])
    if not json and strategy != "config":
        out.info(f"{strategy}: {plural(cfg.queues, 'queue')} of {topic} shared by {plural(len(cids), 'member')}")


UNLOCK_HELP = """Release queue locks of dead or stuck holders.

Stale locks (holder gone) and expired ones (holder stuck past the lease) go; --force breaks
live ones too. Prints what it released. A live holder whose lock is broken with --force
notices before its next batch and stops consuming that queue.

Examples:
  mqctl unlock -g ledger                    # clean up after a crash
  mqctl unlock -g ledger --topic orders -q 3 --force"""


def unlock(
    ctx: typer.Context,
    group: GroupOpt,
    topic: TopicFilterOpt = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", metavar="N", min=0,
                                                 help="Only this queue (with --topic).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Also break locks of live holders.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Show what would be released; change nothing.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    from store.client.admin import lock_row, lock_state, require_group
    from store.client.qlocks import list_locks
    from store.client.qlocks import unlock as run_unlock
    from store.errors import UsageError
    from store.names import validate_any_topic, validate_group
    if queue is not None and topic is None:
        raise UsageError("--queue needs --topic: queue ids are per topic")
    validate_group(group)
    st = state(ctx)
    store = st.store()
    if topic is not None:
        validate_any_topic(topic)
        cfg = store.topics().get(topic)
        if cfg is not None and queue is not None and queue >= cfg.queues:
            raise UsageError(f"queue {queue} does not exist: topic {topic} has queues 0-{cfg.queues - 1}")
    require_group(store, group)
    now = int(time.time() * 1000)
    present = [i for i in list_locks(store.layout, group)
               if (topic is None or i.topic == topic) and (queue is None or i.queueId == queue)]
    if dry_run:
        released = [i for i in present if force or lock_state(i, now) != "held"]
    else:
        released = run_unlock(store.layout, group, topic, queue, force)
    rows = [_lock_row(lock_row(i, now), now, None if json else st.utc) | {"released": not dry_run} for i in released]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    kept = len(present) - len(released)
    msg = f"{'would release' if dry_run else 'released'} {plural(len(released), 'lock')}"
    if kept > 0 and not force:
        msg += f"; {kept} held by live consumers kept (--force breaks them)"
    out.info(msg)


COMPLETION_HELP = """Print the shell completion script for bash, zsh or fish.

Install it once, then open a new shell:
  bash: mqctl completion bash >> ~/.bashrc
  zsh:  mqctl completion zsh >> ~/.zshrc         # after compinit
  fish: mqctl completion fish > ~/.config/fish/completions/mqctl.fish

Or load it into the current shell only: source <(mqctl completion bash). The same scripts
ship in completions/ (regenerate with: python -m mqctl.completions). Topic and group names
are completed from the store (--store or $MQCTL_STORE)."""


def completion(
    shell: Annotated[Literal["bash", "zsh", "fish"], typer.Argument(metavar="SHELL", help="bash, zsh or fish.")],
) -> None:
    import sys

    from mqctl.completions import script
    sys.stdout.write(script(shell))
    sys.stdout.flush()
