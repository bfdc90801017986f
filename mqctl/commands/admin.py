"""``mqctl locks|consumers|rebalance|unlock|completion``: who holds what, and the shell glue.

All of these read the coordination files the consumers keep (``consumers/<group>/`` for
membership, ``locks/<group>/`` for orderly queue locks; formats in ``store/client/members.py`` and
``store/client/qlocks.py``). Only ``unlock`` changes anything, and by default only locks whose holder
is gone (stale) or stuck past the store lease (expired).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, complete_group, complete_topic, state

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
    return None if ms is None else f"{format_age(max(0, now - ms))} ago"


def _until(now: int, ms: int | None) -> str | None:
    from store.timeparse import format_age
    if ms is None:
        return None
    return f"in {format_age(ms - now)}" if ms >= now else f"{format_age(now - ms)} ago"


def _lock_row(lock: "LockRow", now: int) -> dict[str, Any]:
    row = lock.info.to_dict()
    row["state"] = lock.state
    row["acquired"] = _ago(now, lock.acquired_at)
    row["renewed"] = _ago(now, lock.renewed_at)
    row["expires"] = _until(now, lock.expires_at)
    return row


LOCK_COLUMNS = [("group", "GROUP"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("clientId", "CLIENT-ID"),
                ("pid", "PID"), ("host", "HOST"), ("acquired", "ACQUIRED"), ("renewed", "RENEWED"),
                ("expires", "EXPIRES"), ("state", "STATE")]

LOCKS_HELP = """Orderly consumers' queue locks, with their holders probed.

STATE is held (a live holder renewing its lease), expired (a live holder that stopped renewing
for the 60 s store lease; a contender may break it) or stale (no process holds it: a crashed
holder left the file). JSON times are ms since the epoch; alive is the OS lock, probed.

Examples:
  mqctl locks
  mqctl locks -g ledger --json | jq -c 'select(.alive | not)'"""


def locks(
    ctx: typer.Context,
    group: Annotated[Optional[str], typer.Option("--group", "-g", help="Only this group.",
                                                 autocompletion=complete_group)] = None,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    locks = Admin.of(state(ctx).store()).locks(group)
    now = int(time.time() * 1000)
    rows = [_lock_row(lk, now) for lk in locks]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    if not rows and not json:
        out.info(f"no queue locks{f' in group {group}' if group else ''}")


CONSUMERS_HELP = """Live members of a group and the queues each holds (mqadmin consumerConnection).

A member is live while its process holds its membership lock; members that died are not shown.

Examples:
  mqctl consumers -g billing
  mqctl consumers -g billing --json | jq -r '.clientId'"""


def _queues_text(queues: list[dict[str, Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for q in queues:
        if isinstance(q, dict) and isinstance(q.get("topic"), str) and isinstance(q.get("queueId"), int):
            by_topic.setdefault(q["topic"], []).append(q["queueId"])
    return " ".join(f"{t}:{','.join(map(str, sorted(ids)))}" for t, ids in sorted(by_topic.items())) or "-"


def consumers(ctx: typer.Context, group: GroupOpt, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    from store.timeparse import format_time
    rows = [{
        "group": m.group, "clientId": m.client_id, "pid": m.pid, "host": m.host, "mode": m.mode,
        "orderly": m.orderly, "strategy": m.strategy, "topics": m.topics, "queues": m.queues,
        "startedAt": m.started_at, "heartbeatAt": m.heartbeat_at, "queuesText": _queues_text(m.queues),
        "started": format_time(m.started_at) if m.started_at is not None else None,
    } for m in Admin.of(state(ctx).store()).consumers(group)]
    out = Output(json=json)
    if rows:
        out.table(rows, [("clientId", "CLIENT-ID"), ("pid", "PID"), ("host", "HOST"), ("mode", "MODE"),
                         ("orderly", "ORDERLY"), ("queuesText", "QUEUES"), ("started", "STARTED")])
    if not rows and not json:
        out.info(f"group {group} has no live members")


REBALANCE_HELP = """Preview how a strategy shares a topic's queues among members (the live rebalance's code).

Members are the group's live members consuming TOPIC, or the list given with --consumers.
Without --strategy the strategy the live members use is taken (else averagely).

Examples:
  mqctl rebalance orders -g billing
  mqctl rebalance orders -g billing --consumers a,b,c --strategy circle
  mqctl rebalance orders -g billing --consumers a,b --strategy config --queues 0,3"""


def _int_list(text: str, flag: str) -> list[int]:
    from store.errors import UsageError
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected queue ids like 0,3") from None
    if not vals or any(v < 0 for v in vals):
        raise UsageError(f"{flag} {text!r}: expected queue ids like 0,3")
    return vals


def rebalance(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic whose queues are shared.", autocompletion=complete_topic)],
    group: GroupOpt,
    consumer_ids: Annotated[Optional[str], typer.Option(
        "--consumers", "-c", metavar="C1,C2,…", help="Client ids to allocate to (default: the live members).")] = None,
    strategy: Annotated[Optional[str], typer.Option(
        "--strategy", help="averagely, circle, hash or config (default: what the members use, else averagely).")] = None,
    queues: Annotated[Optional[str], typer.Option("--queues", help="Queue ids for --strategy config, e.g. 0,3.")] = None,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.admin import require_group
    from store.client.allocate import STRATEGIES, allocate_all, queues_of
    from store.client.members import live_members
    from store.errors import GroupNotFoundError, UsageError
    from store.names import validate_any_topic, validate_client_id, validate_group
    validate_any_topic(topic)
    validate_group(group)
    if strategy is not None and strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    store = state(ctx).store()
    cfg = store.topic(topic)
    members = [m for m in live_members(store.layout, group)
               if topic in (m.record.get("topics") or [topic])]
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
        strategy = used.pop() if len(used) == 1 else "averagely"
    config = None
    if strategy == "config":
        if not queues:
            raise UsageError("--strategy config needs --queues, e.g. --queues 0,3")
        ids = _int_list(queues, "--queues")
        if ids[-1] >= cfg.queues:
            raise UsageError(f"--queues: queue {ids[-1]} does not exist: topic {topic!r} has queues 0-{cfg.queues - 1}")
        config = queues_of(topic, ids)
    elif queues:
        raise UsageError("--queues applies to --strategy config only")
    assignment = allocate_all(strategy, queues_of(topic, range(cfg.queues)), cids, config)
    held = {m.clientId: sorted(q["queueId"] for q in m.queues
                               if isinstance(q, dict) and q.get("topic") == topic and isinstance(q.get("queueId"), int))
            for m in members}
    rows = [{"group": group, "topic": topic, "strategy": strategy, "clientId": cid,
             "queues": [mq.queue_id for mq in mqs], "holds": held.get(cid)}
            for cid, mqs in assignment.items()]
    Output(json=json).table(rows, [("clientId", "CLIENT-ID"), ("queues", "QUEUES"), ("holds", "HOLDS-NOW")])


UNLOCK_HELP = """Release queue locks left by dead (stale) or stuck (expired) holders; --force breaks live ones.

Prints what it released. A live holder whose lock is broken with --force notices before its
next batch and stops consuming that queue.

Examples:
  mqctl unlock -g ledger                         # clean up after a crash
  mqctl unlock -g ledger -t orders -q 3 --force  # take a queue from a hung consumer"""


def unlock(
    ctx: typer.Context,
    group: GroupOpt,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only locks of this topic.",
                                                 autocompletion=complete_topic)] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", min=0, help="Only this queue.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Also break locks of live holders.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be released; change nothing.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.admin import lock_row, lock_state, require_group
    from store.client.qlocks import list_locks
    from store.client.qlocks import unlock as run_unlock
    from store.names import validate_any_topic, validate_group
    validate_group(group)
    if topic is not None:
        validate_any_topic(topic)
    store = state(ctx).store()
    require_group(store, group)
    now = int(time.time() * 1000)
    present = [i for i in list_locks(store.layout, group)
               if (topic is None or i.topic == topic) and (queue is None or i.queueId == queue)]
    if dry_run:
        released = [i for i in present if force or lock_state(i, now) != "held"]
    else:
        released = run_unlock(store.layout, group, topic, queue, force)
    rows = [_lock_row(lock_row(i, now), now) | {"released": not dry_run} for i in released]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    kept = len(present) - len(released)
    verb = "would release" if dry_run else "released"
    msg = f"{verb} {len(released)} lock{'s' if len(released) != 1 else ''}"
    if kept > 0 and not force:
        msg += f"; {kept} held by live consumers kept (--force breaks them)"
    out.info(msg)


COMPLETION_HELP = """Print the shell completion script for bash, zsh or fish.

The same files ship in completions/ (regenerate with: python -m mqctl.completions).

Examples:
  source <(mqctl completion bash)
  mqctl completion zsh > "${fpath[1]}/_mqctl"
  mqctl completion fish > ~/.config/fish/completions/mqctl.fish"""


def completion(
    shell: Annotated[str, typer.Argument(
        metavar="SHELL", help="bash, zsh or fish.", autocompletion=lambda: ["bash", "zsh", "fish"])],
) -> None:
    import sys

    from mqctl.completions import SHELLS, script
    from store.errors import UsageError
    if shell not in SHELLS:
        raise UsageError(f"unsupported shell {shell!r}: use one of {', '.join(SHELLS)}")
    sys.stdout.write(script(shell))
    sys.stdout.flush()
