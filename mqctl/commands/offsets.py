"""``mqctl offsets show|reset|delete`` and ``mqctl progress``: where a group stands, and moving it.

What a group is, and the reset's rules (plan first, the reset epoch, refused under live
members unless ``--force``) are the library's: ``store/client/admin.py``.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, TopicFilterOpt, TopicRequiredOpt, state

offsets_app = typer.Typer(help="Show, reset and delete a group's committed offsets.", no_args_is_help=True)
PROGRESS_MIN_ROWS = 64     # a reset moving this many queue offsets shows a progress bar


def register(app: typer.Typer) -> None:
    app.add_typer(offsets_app, name="offsets")
    app.command("progress", help=PROGRESS_HELP)(progress)


def _in(topic: str | None) -> str:
    return f" in topic {topic}" if topic else ""


def _client_state(row: dict[str, Any], alive: bool | None) -> dict[str, Any]:
    """A broadcast client's row says whether the client is live: a dead client's offsets hold
    retention back until ``offsets delete --client-id`` removes them."""
    if row.get("clientId"):
        row.update(clientAlive=alive, clientState="live" if alive else "dead")
    return row


@offsets_app.command("show", help="""The group's committed offsets, one row per queue.

An offset is the next one the group consumes. Broadcast groups keep offsets per client:
those rows carry the clientId.

Examples:
  mqctl offsets show -g billing
  mqctl offsets show -g billing --topic orders --json | jq -c .offset""")
def show(ctx: typer.Context, group: GroupOpt, topic: TopicFilterOpt = None, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    rows = [_client_state({"group": r.group, "topic": r.topic, "queueId": r.queue_id, "offset": r.offset,
                           "clientId": r.client_id}, r.client_alive) for r in state(ctx).admin().offsets(group, topic)]
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("offset", "OFFSET")]
    if any(r["clientId"] for r in rows):
        cols += [("clientId", "CLIENT-ID"), ("clientState", "CLIENT")]
    out = Output(json=json)
    if rows:
        out.table(rows, cols)
    elif not json:
        out.info(f"no committed offsets for group {group}{_in(topic)}")


PROGRESS_HELP = """Lag per queue of a consumer group.

mqadmin consumerProgress, Kafka's --describe. brokerOffset is the queue's max offset,
consumerOffset the group's committed offset, lag the messages still to consume (a queue with
no committed offset counts every stored message), lastTimestamp the store time of the last
consumed message. Rows of the group's %RETRY% topic are included unless --topic names
another topic. OWNER is the live member holding the queue. Times are local (--utc: UTC).

Examples:
  mqctl progress -g billing
  mqctl progress -g billing --json | jq -s 'map(.lag) | add'"""


def progress(ctx: typer.Context, group: GroupOpt, topic: TopicFilterOpt = None, json: JsonOpt = False) -> None:
    from mqctl.output import Output, plural
    from store.timeparse import format_local, format_time
    st = state(ctx)
    admin = st.admin()
    rows = [_client_state({
        "group": r.group, "topic": r.topic, "queueId": r.queue_id, "brokerOffset": r.broker_offset,
        "minOffset": r.min_offset, "consumerOffset": r.consumer_offset, "lag": r.lag,
        "lastTimestamp": r.last_timestamp, "owner": r.owner, "clientId": r.client_id,
        "lastTime": format_time(r.last_timestamp) if r.last_timestamp is not None else None}, r.client_alive)
        for r in admin.lag(group, topic)]
    for row in rows if not json else ():
        last = row["lastTimestamp"]
        row["lastConsumed"] = format_local(last, st.utc) if last is not None else None
    out = Output(json=json)
    if not rows:
        if not json:
            out.info(f"no committed offsets or subscriptions for group {group}{_in(topic)}")
        return
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("brokerOffset", "BROKER-OFFSET"),
            ("consumerOffset", "CONSUMER-OFFSET"), ("lag", "LAG"), ("lastConsumed", "LAST-CONSUMED"),
            ("owner", "OWNER")]
    if any(r.get("clientId") for r in rows):
        cols.append(("clientState", "CLIENT"))
    out.table(rows, cols)
    if not json:
        members = len(admin.consumers(group))
        out.info(f"group {group}: {plural(members, 'live member')}, total lag {sum(r['lag'] for r in rows)}")


@offsets_app.command("delete", help="""Delete a group's offsets, or one dead broadcast client's.

Without --client-id: the group's clustering offsets and every broadcast client's (refused
while the group has live members). With --client-id: that broadcast client's offsets only
(refused while it is live). Deleted offsets no longer hold retention back; a consumer that
comes back starts from --from. Asks for confirmation on a terminal unless --yes.

Examples:
  mqctl offsets delete -g audit --client-id host1@DEFAULT --yes
  mqctl offsets delete -g old-billing --yes""")
def delete(
    ctx: typer.Context,
    group: GroupOpt,
    client_id: Annotated[Optional[str], typer.Option(
        "--client-id", metavar="CLIENT-ID", help="Only this broadcast client's offsets.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json: JsonOpt = False,
) -> None:
    import sys

    from mqctl.output import Output, plural
    admin = state(ctx).admin()
    if not yes and sys.stdin.isatty():
        admin.delete_offsets(group, client_id, dry_run=True)   # refused before asking, if it would be
        what = f"broadcast client {client_id}" if client_id else f"group {group}"
        typer.confirm(f"delete the offsets of {what}?", abort=True)
    res = admin.delete_offsets(group, client_id)
    out = Output(json=json)
    if json:
        out.emit_json(res.to_json())
    else:
        out.info(f"deleted the offsets of {f'broadcast client {client_id}' if client_id else f'group {group}'}"
                 + (f" (and of {plural(len(res.clients), 'broadcast client')})" if client_id is None and res.clients
                    else ""))


@offsets_app.command("reset", help="""Move a group's offsets in a topic (a plan unless --execute).

Give exactly one target. Without --execute nothing changes: the plan (current -> new offset per
queue) is printed. Targets outside a queue's stored range are clamped to it and reported. While
live members of the group hold queues of the topic the reset is refused (exit 4) unless
--force; with --force they switch to the new offsets at their next commit.

Examples:
  mqctl offsets reset -g billing --topic orders --to-earliest
  mqctl offsets reset -g billing --topic orders --to-time -2h --execute
  mqctl offsets reset -g billing --topic orders -q 3 --to-offset 100""")
def reset(
    ctx: typer.Context,
    group: GroupOpt,
    topic: TopicRequiredOpt,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Target: the first stored message.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Target: the end (skip everything stored).")] = False,
    to_time: Annotated[Optional[str], typer.Option(
        "--to-time", metavar="TIME",
        help="Target: the first message stored at or after TIME (ms or s since epoch, ISO-8601 "
             "without offset = UTC, -2h = ago, now).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", metavar="N", min=0,
                                                     help="Target: queue offset N.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", metavar="N", min=0, help="Only this queue.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: print it only).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan only (the default).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Reset even while live members hold the topic's queues.")] = False,
    json: JsonOpt = False,
) -> None:
    from datetime import datetime, timedelta, timezone

    from mqctl.output import Output, plural
    from store.errors import UsageError
    from store.names import validate_any_topic, validate_group
    from store.timeparse import format_local, parse_time
    given = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                   ("--to-time", to_time is not None), ("--to-offset", to_offset is not None)) if on]
    if len(given) != 1:
        raise UsageError("give exactly one target: --to-earliest, --to-latest, --to-time TIME or --to-offset N"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if execute and dry_run:
        raise UsageError("--execute and --dry-run contradict each other: give one")
    if force and not execute:
        raise UsageError("--force applies to --execute only (a plan changes nothing)")
    validate_group(group)
    validate_any_topic(topic)
    ts = parse_time(to_time) if to_time is not None else None
    target: Any = ("earliest" if to_earliest else "latest" if to_latest else to_offset if ts is None
                   else datetime.fromtimestamp(ts // 1000, tz=timezone.utc) + timedelta(milliseconds=ts % 1000))
    admin = state(ctx).admin()
    plan = admin.plan_reset(group, topic, target, queue=queue)
    out = Output(json=json)
    if not plan.group_existed:
        out.warn(f"group {group} has no offsets yet: the reset creates them")

    def note(queues: list[int], what: str, to: str = "the earliest offset") -> None:
        if queues:
            out.info(f"mqctl: note: {what} {topic} {'queue' if len(queues) == 1 else 'queues'} "
                     f"{','.join(map(str, queues))}: clamped to {to}")
    if ts is not None:
        note(plan.early, f"{format_local(ts, state(ctx).utc)} is before the earliest stored message of")
    if to_offset is not None:
        note(sorted({r.queue_id for r in plan.rows if r.clamped == "end"}), f"offset {to_offset} is past the end of",
             "the end")
        note(sorted({r.queue_id for r in plan.rows if r.clamped == "earliest"}),
             f"offset {to_offset} is no longer stored in")
    if execute and (len(plan.rows) < PROGRESS_MIN_ROWS or len(plan.targets) < 2):
        admin.apply_reset(plan, force=force)
    elif execute:   # offset set by offset set, under a bar
        with out.progress(len(plan.rows), "resetting offsets") as bar:
            admin.apply_reset(plan, force=force, progress=bar.advance)
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("currentOffset", "CURRENT-OFFSET"),
            ("newOffset", "NEW-OFFSET"), ("clamped", "CLAMPED")]
    if plan.broadcast:
        cols.insert(2, ("clientId", "CLIENT-ID"))
    out.table([r.to_json(group, execute) for r in plan.rows], cols)
    if not execute:
        if plan.busy:
            out.warn(f"live members of group {group} hold queues of {topic} ({plan.owners}): --execute "
                     f"will also need --force")
        out.info("dry run: nothing changed; add --execute to apply this plan")
        return
    clients = len({r.client_id for r in plan.rows if r.client_id})
    out.info(f"reset {plural(len({r.queue_id for r in plan.rows}), 'queue')} of {topic} for group {group}"
             + (f" and {plural(clients, 'broadcast client')} ({plan.moved} of {len(plan)} offsets moved)"
                if clients else f" ({plan.moved} moved)"))
    if plan.busy:
        out.warn(f"reset under live members ({plan.owners}): they take the new offsets at their next "
                 f"commit; an idle member keeps its position until new messages arrive")
        if plan.broadcast:
            out.warn("running broadcast clients do not learn of a reset and will write their own "
                     "offsets back: restart them")

