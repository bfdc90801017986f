"""``mqctl locks|consumers|rebalance|unlock``: who holds what (rows shown by ``mqctl/adminview.py``).

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
    from mqctl.output import Output


def register(app: typer.Typer) -> None:
    app.command("locks", help=LOCKS_HELP)(locks)
    app.command("consumers", help=CONSUMERS_HELP)(consumers)
    app.command("rebalance", help=REBALANCE_HELP)(rebalance)
    app.command("unlock", help=UNLOCK_HELP)(unlock)


LOCKS_HELP = """Orderly consumers' queue locks, with their holders probed.

STATE is held (a live holder renewing its lease), expired (a live holder that stopped renewing
for the 60 s store lease; a contender may break it) or stale (no process holds it: a crashed
holder left the file). ACQUIRED is a local time (--utc: UTC). JSON times are ms since the
epoch; alive is the OS lock, probed.

Examples:
  mqctl locks
  mqctl locks -g ledger --json | jq -c 'select(.alive | not)'"""


def locks(ctx: typer.Context, group: OptionalGroupOpt = None, json: JsonOpt = False) -> None:
    from mqctl.adminview import LOCK_COLUMNS, lock_row
    from mqctl.output import Output
    st = state(ctx)
    held = st.admin().locks(group)
    now = int(time.time() * 1000)   # (after the locks were read: a renewal read is not ahead of it)
    rows = [lock_row(lk, now, None if json else st.utc) for lk in held]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    elif not json:
        out.info(f"no queue locks{f' for group {group}' if group else ''}")


CONSUMERS_HELP = """Live members of a group and the queues each holds.

mqadmin consumerConnection. A member is live while its process holds its membership lock;
members that died are not shown. QUEUES are those whose queue locks it holds now. STATE is
live, or expired for a member not heard from for 120 s (stopped or hung: the others share
the queues without it, as mqctl rebalance does). STARTED is a local time (--utc: UTC).

Examples:
  mqctl consumers -g billing
  mqctl consumers -g billing --json | jq -r .clientId"""


def consumers(ctx: typer.Context, group: GroupOpt, json: JsonOpt = False) -> None:
    from mqctl.adminview import show_members
    from mqctl.output import Output
    st = state(ctx)
    show_members(Output(json=json), st.admin().consumers(group), group, int(time.time() * 1000), st.utc)


REBALANCE_HELP = """Preview how a strategy shares a topic's queues.

Uses the live rebalance's own code. Members are the group's live members consuming TOPIC in
clustering mode (every one of them consumes the group's %RETRY%GROUP), or the list given with
--consumers; a live broadcast member of TOPIC reads every queue for itself and is listed with
no queues. Without --strategy the strategy the live members use is taken; when they disagree,
each one's share by its own strategy is shown, as they take them, with a warning naming the
queues that are no one's share.

Examples:
  mqctl rebalance orders -g billing
  mqctl rebalance orders -g billing --consumers a,b,c --strategy circle
  mqctl rebalance orders -g billing --consumers a,b --strategy config \\
      --queues 0,3"""


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
    from mqctl.options import parse_queue_ids
    from mqctl.output import Output, plural
    # queue ids are read for --strategy config only; with another, the library refuses any
    ids = parse_queue_ids(queues) if queues and strategy == "config" else None if queues is None else []
    preview = state(ctx).admin().rebalance_preview(
        topic, group, None if consumer_ids is None else consumer_ids.split(","), strategy, ids)
    out = Output(json=json)
    if not preview.rows:
        # a known group with no live member consuming the topic: an empty allocation (exit 0,
        # as `consumers` lists none); an unknown group is exit 3
        out.info(f"no live member of group {group} consumes {topic}: nothing to allocate "
                 f"(--consumers C1,C2 previews an allocation)")
        return
    out.table([r.to_json() for r in preview], [("clientId", "CLIENT-ID"), ("queues", "QUEUES"),
                                               ("holds", "HOLDS-NOW")])
    if preview.strategy == "mixed":
        _warn_mixed(out, preview, group, topic)
    # a broadcast member of the topic has a row with no queues: it has no share
    bc = preview.broadcast
    if len(bc) == 1:
        readers = f"broadcast member {bc[0]} reads every queue for itself, with no share"
    else:
        readers = f"broadcast members {', '.join(bc)} read every queue for themselves, with no share"
    if not preview.consumers:
        out.info(f"no live member of group {group} consumes {topic} in clustering mode: nothing to "
                 f"allocate; {readers}")
    elif not json:
        shared = (f"{preview.strategy}: {plural(preview.queues, 'queue')} of {topic} shared by "
                  f"{plural(len(preview.consumers), 'member')}") if preview.strategy != "config" else ""
        if shared or bc:
            out.info("; ".join(s for s in (shared, readers if bc else "") if s))


def _warn_mixed(out: Output, preview: Any, group: str, topic: str) -> None:
    """The live members disagree on the strategy: each row is its own strategy's share."""
    by: dict[str, list[str]] = {}
    for r in preview.rows[:len(preview.consumers)]:
        by.setdefault(r.strategy, []).append(r.client_id)
    each = ", ".join(f"{s} ({', '.join(ids)})" for s, ids in by.items())
    unowned = preview.unowned
    left = (f"queue{'s' if len(unowned) != 1 else ''} {','.join(map(str, unowned))} of {topic} "
            f"{'are' if len(unowned) != 1 else 'is'} no member's share and wait{'s' if len(unowned) == 1 else ''}"
            if unowned else "no queue is left out now, but the split changes with the members")
    out.warn(f"the live members of group {group} disagree on the strategy: {each}; each takes the share "
             f"its own strategy gives it (shown): {left}; start them all with one --strategy")


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
    from mqctl.adminview import LOCK_COLUMNS, lock_row
    from mqctl.output import Output, plural
    st = state(ctx)
    res = st.admin().unlock(group, topic, queue, force=force, dry_run=dry_run)
    now = int(time.time() * 1000)
    rows = [lock_row(lk, now, None if json else st.utc) | {"released": not dry_run} for lk in res.released]
    out = Output(json=json)
    if rows:
        out.table(rows, LOCK_COLUMNS)
    msg = f"{'would release' if dry_run else 'released'} {plural(len(rows), 'lock')}"
    if res.kept > 0 and not force:
        msg += f"; {res.kept} held by live consumers kept (--force breaks them)"
    out.info(msg)
