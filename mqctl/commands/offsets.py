"""``mqctl offsets show|reset|delete``: where a group stands, and moving it (``mqctl progress``,
its lag, is ``mqctl/commands/progress.py``; tables and notes: ``mqctl/offsetsview.py``).

What a group is, and the reset's rules (plan first, the reset epoch, refused under live
members unless ``--force``) are the library's: ``store/client/admin.py``.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, TopicFilterOpt, TopicRequiredOpt, YesOpt, state

offsets_app = typer.Typer(help="Show, reset and delete a group's committed offsets.", no_args_is_help=True)
PROGRESS_MIN_ROWS = 64     # a reset moving this many queue offsets shows a progress bar


def register(app: typer.Typer) -> None:
    app.add_typer(offsets_app, name="offsets")


@offsets_app.command("show", help="""The group's committed offsets, one row per queue.

An offset is the next one the group consumes. Broadcast groups keep offsets per client:
those rows carry the clientId.

Examples:
  mqctl offsets show -g billing
  mqctl offsets show -g billing --topic orders --json | jq -c .offset""")
def show(ctx: typer.Context, group: GroupOpt, topic: TopicFilterOpt = None, json: JsonOpt = False) -> None:
    from mqctl.offsetsview import show_offsets
    from mqctl.output import Output
    show_offsets(Output(json=json), [r.to_json() for r in state(ctx).admin().offsets(group, topic)], group, topic)


@offsets_app.command("delete", help="""Delete a group's offsets, or one dead broadcast client's.

Without --client-id: the group's clustering offsets and every broadcast client's (refused
while the group has live members). With --client-id: that broadcast client's offsets only
(refused while it is live). Deleted offsets no longer hold retention back; a consumer that
comes back starts from --from. Asks on a terminal; elsewhere --yes is required (as for
topic delete).

Examples:
  mqctl offsets delete -g audit --client-id host1@DEFAULT --yes
  mqctl offsets delete -g old-billing --yes""")
def delete(
    ctx: typer.Context,
    group: GroupOpt,
    client_id: Annotated[Optional[str], typer.Option(
        "--client-id", metavar="CLIENT-ID", help="Only this broadcast client's offsets.")] = None,
    yes: YesOpt = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    admin = state(ctx).admin()
    if not yes:
        admin.delete_offsets(group, client_id, dry_run=True)   # refused before asking, if it would be
        what = f"broadcast client {client_id}" if client_id else f"group {group}"
        from mqctl.confirm import confirm
        confirm(f"Delete the offsets of {what}?", f"deleting the offsets of {what}",
                f"the offsets of {what} are kept")
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
             "without offset = UTC, not local time; -2h = ago, now).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", metavar="N", min=0,
                                                     help="Target: queue offset N.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", metavar="N", min=0, help="Only this queue.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: print it only).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan only (the default).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Reset even while live members hold the topic's queues.")] = False,
    json: JsonOpt = False,
) -> None:
    from datetime import datetime, timedelta, timezone

    from mqctl.offsetsview import reset_notes, show_reset
    from mqctl.output import Output
    from store import format_local, parse_time, time_note, validate_any_topic, validate_group
    from store.errors import UsageError
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
    if to_time is not None and ts is not None:   # (say what a zone-less or future time was read as)
        note = time_note(to_time, ts)
        if note:
            out.warn(f"--to-time {to_time.strip()}: {note}")
    reset_notes(out, plan, to_offset, format_local(ts, state(ctx).utc) if ts is not None else None)
    if execute and (len(plan.rows) < PROGRESS_MIN_ROWS or len(plan.targets) < 2):
        admin.apply_reset(plan, force=force)
    elif execute:   # offset set by offset set, under a bar
        with out.progress(len(plan.rows), "resetting offsets") as bar:
            admin.apply_reset(plan, force=force, progress=bar.advance)
    show_reset(out, plan, execute)
