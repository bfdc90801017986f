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

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, TopicFilterOpt, complete_topic, state

if TYPE_CHECKING:
    from store.client.admin import Admin
    from store.log.broker import Store

offsets_app = typer.Typer(help="Show and reset a consumer group's committed offsets.",
                          no_args_is_help=True)


TopicOpt = TopicFilterOpt


def register(app: typer.Typer) -> None:
    app.add_typer(offsets_app, name="offsets")
    app.command("progress", help=PROGRESS_HELP)(progress)


# -- groups ----------------------------------------------------------------------------------

def known_groups(store: "Store") -> list[str]:
    from store.client.admin import known_groups as groups
    return groups(store)


def _admin(ctx: typer.Context) -> "Admin":
    from store.client.admin import Admin
    return Admin.of(state(ctx).store())


# -- offsets show ------------------------------------------------------------------------------

@offsets_app.command("show", help="""The group's committed offsets per queue (the next offset to consume).

Broadcast groups keep offsets per client: those rows carry the clientId.

Examples:
  mqctl offsets show -g billing
  mqctl offsets show -g billing -t orders --json | jq -c '{queueId, offset}'""")
def show(ctx: typer.Context, group: GroupOpt, topic: TopicOpt = None, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    rows = [{"group": r.group, "topic": r.topic, "queueId": r.queue_id, "offset": r.offset, "clientId": r.client_id}
            for r in _admin(ctx).offsets(group, topic)]
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("offset", "OFFSET")]
    if any(r["clientId"] for r in rows):
        _mark_clients(state(ctx).store(), group, rows)
        cols += [("clientId", "CLIENT-ID"), ("clientState", "CLIENT")]
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


def progress_rows(store: "Store", group: str, topic: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``mqctl progress``: :meth:`store.Admin.lag`, with the time formatted."""
    from store.client.admin import Admin
    from store.timeparse import format_time
    return [{"group": r.group, "topic": r.topic, "queueId": r.queue_id, "brokerOffset": r.broker_offset,
             "minOffset": r.min_offset, "consumerOffset": r.consumer_offset, "lag": r.lag,
             "lastTimestamp": r.last_timestamp,
             "lastTime": format_time(r.last_timestamp) if r.last_timestamp is not None else None,
             "owner": r.owner, "clientId": r.client_id}
            for r in Admin.of(store).lag(group, topic)]


def _mark_clients(store: "Store", group: str, rows: list[dict[str, Any]]) -> None:
    """Mark the rows of broadcast clients: ``clientAlive`` (a live member of the group) and
    ``clientState`` (live / dead: a dead client's offsets hold retention back until
    ``mqctl offsets delete --group G --client-id C`` removes them)."""
    from store.client.members import live_members
    live = {m.clientId for m in live_members(store.layout, group)}
    for r in rows:
        if r.get("clientId"):
            r["clientAlive"] = r["clientId"] in live
            r["clientState"] = "live" if r["clientAlive"] else "dead"


def progress(ctx: typer.Context, group: GroupOpt, topic: TopicOpt = None, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.client.members import live_members
    store = state(ctx).store()
    rows = progress_rows(store, group, topic)
    out = Output(json=json)
    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("brokerOffset", "BROKER-OFFSET"),
            ("consumerOffset", "CONSUMER-OFFSET"), ("lag", "LAG"), ("lastTime", "LAST-CONSUMED"),
            ("owner", "OWNER")]
    if any(r.get("clientId") for r in rows):
        _mark_clients(store, group, rows)
        cols.append(("clientState", "CLIENT"))
    if rows:
        out.table(rows, cols)
    if not json:
        members = live_members(store.layout, group)
        out.info(f"group {group}: {len(members)} live member{'s' if len(members) != 1 else ''}, "
                 f"total lag {sum(r['lag'] for r in rows)}")


# -- offsets delete ----------------------------------------------------------------------------

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
    client_id: Annotated[Optional[str], typer.Option("--client-id", help="Only this broadcast client's offsets.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json: JsonOpt = False,
) -> None:
    import shutil
    import sys

    from mqctl.output import Output
    from store.client.admin import broadcast_clients
    from store.client.members import live_members
    from store.client.offsets import ClusterOffsetStore
    from store.errors import ConflictError, NotFoundError
    from store.names import validate_client_id, validate_group
    validate_group(group)
    store = state(ctx).store()
    live = {m.clientId for m in live_members(store.layout, group)}
    clients = broadcast_clients(store, group)
    if client_id is not None:
        validate_client_id(client_id)
        if client_id not in clients:
            raise NotFoundError(f"group {group} has no broadcast offsets of client {client_id}")
        if client_id in live:
            raise ConflictError(f"client {client_id} is a live member of group {group}; stop it first")
        targets, cluster = [client_id], False
    else:
        if live:
            raise ConflictError(f"group {group} has {len(live)} live member(s) ({', '.join(sorted(live))}); "
                                f"stop them first, or give --client-id of a dead broadcast client")
        cluster_offsets = ClusterOffsetStore(store.layout, warn=store.warn).read_group(group)
        if not cluster_offsets and not clients:
            raise NotFoundError(f"group {group} has no committed offsets")
        targets, cluster = clients, True
    what = f"broadcast client {client_id}" if client_id else f"group {group}"
    if not yes and sys.stdin.isatty():
        typer.confirm(f"delete the offsets of {what}?", abort=True)
    topics: list[str] = []
    if cluster:
        topics = ClusterOffsetStore(store.layout, warn=store.warn).delete_group(group)
    for cid in targets:
        shutil.rmtree(store.layout.broadcast_offsets(cid, group).parent, ignore_errors=True)
    out = Output(json=json)
    if json:
        import json as jsonlib
        sys.stdout.write(jsonlib.dumps({"group": group, "clientId": client_id, "clients": targets,
                                        "topics": topics, "deleted": True}) + "\n")
        sys.stdout.flush()
    else:
        out.info(f"deleted the offsets of {what}"
                 f"{f' (broadcast clients: {len(targets)})' if cluster and targets else ''}")


# -- offsets reset -----------------------------------------------------------------------------

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
    from datetime import datetime, timedelta, timezone

    from mqctl.output import Output
    from store.errors import UsageError
    from store.names import validate_any_topic, validate_group
    from store.timeparse import format_time, parse_time
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
    admin = _admin(ctx)
    target: Any
    if to_earliest:
        target = "earliest"
    elif to_latest:
        target = "latest"
    elif ts is not None:
        target = datetime.fromtimestamp(ts // 1000, tz=timezone.utc) + timedelta(milliseconds=ts % 1000)
    else:
        target = to_offset
    plan = admin.plan_reset(group, topic, target, queue=queue)
    out = Output(json=json)
    if not plan.group_existed:
        out.warn(f"group {group} has no offsets yet: the reset creates them")
    if plan.early:
        early = plan.early
        assert ts is not None
        out.info(f"mqctl: note: {format_time(ts)} is before the earliest stored message of "
                 f"{topic} queue{'s' if len(early) > 1 else ''} {','.join(map(str, early))}: "
                 f"clamped to the earliest offset")
    if to_offset is not None:
        past = sorted({r.queue_id for r in plan.rows if r.clamped == "end"})
        before = sorted({r.queue_id for r in plan.rows if r.clamped == "earliest"})
        if past:
            out.info(f"mqctl: note: offset {to_offset} is past the end of {topic} queue"
                     f"{'s' if len(past) > 1 else ''} {','.join(map(str, past))}: clamped to the end")
        if before:
            out.info(f"mqctl: note: offset {to_offset} is no longer stored in {topic} queue"
                     f"{'s' if len(before) > 1 else ''} {','.join(map(str, before))}: clamped to the earliest offset")
    busy, owners, bcast = plan.busy, plan.owners, plan.broadcast
    if execute:
        admin.apply_reset(plan, force=force)

    cols = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("currentOffset", "CURRENT-OFFSET"),
            ("newOffset", "NEW-OFFSET"), ("clamped", "CLAMPED")]
    if bcast:
        cols.insert(2, ("clientId", "CLIENT-ID"))
    out.table([r.to_json(group, execute) for r in plan.rows], cols)
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
