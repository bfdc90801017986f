"""``mqctl store check|recover|stats|clean`` (retention rules in ``store/log/retention.py``; what
each reports: ``mqctl/storeview.py``)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Callable, Iterator

import typer

from mqctl.options import JsonOpt, state

if TYPE_CHECKING:
    from mqctl.output import Output
    from store import Admin

store_app = typer.Typer(help="Verify, repair, measure and clean the store.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")


@contextmanager
def _log_progress(out: Output, admin: Admin, label: str) -> Iterator[Callable[[int], None]]:
    """A bar over the commit log's bytes (a terminal only); yields the callback the library
    reports bytes to."""
    with out.progress(admin.log_bytes(), label, bytes_=True) as bar:
        yield bar.advance


@store_app.command("check", help="""Verify every record's CRC and every index entry.

Read-only. Each problem is printed on stdout as FILE:OFFSET: REASON (with --json one object
each, then a summary object) and the command exits 1; `mqctl store recover` repairs what can
be repaired. A damaged record cannot be: recover steps over it (its message is lost, never
served) and records the damage as reported (config/knownDamage.json). Check then lists it
as known ("(known: reported by store recover …)", --json "known": true) and exits 0, while
any damage not reported yet still exits 1. A progress bar shows on a terminal.

Examples:
  mqctl store check
  mqctl store check --json | jq -c 'select(.file)'""")
def check(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output, plural
    from mqctl.storeview import show_check
    from store.errors import DamageFoundError
    admin = state(ctx).admin(recover=False)   # never repairs: a dirty store is reported as found
    out = Output(json=json)
    with _log_progress(out, admin, "checking") as advance:
        rep = admin.check(progress=advance)
    show_check(out, rep, admin.stale_staging(), state(ctx).utc)
    problems = rep.problems or []
    if problems:
        raise DamageFoundError(f"store check found {plural(len(problems), 'problem')}; run `mqctl store recover` "
                               f"to repair what can be (a damaged record is never served)",
                               [p.to_json() for p in problems])


@store_app.command("recover", help="""Rebuild consume queues and the key index from the log.

Reads the whole commit log: cuts a torn tail (a write a crash interrupted), rebuilds every
consume queue and the key index, and drops entries that point at nothing. A damaged record
in the middle is left in place, never served, and named in a warning; recover records it as
reported, so `mqctl store check` lists it as a known loss (exit 0) from then on. Producers
wait while it runs. A progress bar shows on a terminal.

Examples:
  mqctl store recover
  mqctl store recover --json""")
def recover(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from mqctl.storeview import show_recover
    # opened as found (the full recovery below decides), a lost store.json rebuilt
    admin = state(ctx).admin(recover=False, rebuild_settings=True)
    out = Output(json=json)
    with _log_progress(out, admin, "recovering") as advance:
        rep = admin.recover(progress=advance)
    show_recover(out, rep)


@store_app.command("stats", help="""Show how much space each part of the store takes.

Sizes on disk, in binary units (--json: bytes). The last rows say what `mqctl store clean`
would free with the default retention, and what lagging readers hold back beyond that
(what `store clean --force` would free on top).

Examples:
  mqctl store stats
  mqctl store stats --json | jq -r 'select(.part == "commitlog").bytes'""")
def stats(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from mqctl.storeview import show_stats
    admin = state(ctx).admin()
    show_stats(Output(json=json), admin.store, admin.stats())


CLEAN_HELP = """Delete old segments that every reader has passed.

A segment goes when it is not the last one, its file was last modified more than --older-than
ago (default 72h, RocketMQ's fileReservedTime), and no consumer group, broadcast client, the
delay scheduler or an unresolved transaction (pending, or parked by `tx check`) still needs a
message in it. --force deletes what is older than the retention even when lagging readers need
it (they are listed). Consume-queue and index files that only point into deleted segments go
too. Oldest first, under the store's write lock; a crash at any step leaves a store that opens,
and the next clean finishes.

Examples:
  mqctl store clean --dry-run
  mqctl store clean --older-than 24h
  mqctl store clean --older-than 7d --force --json"""


@store_app.command("clean", help=CLEAN_HELP)
def clean(
    ctx: typer.Context,
    older_than: Annotated[str, typer.Option(
        "--older-than", metavar="DURATION",
        help="Keep segments modified more recently than this (500ms, 30s, 5m, 2h, 3d; bare number: seconds).")] = "72h",
    force: Annotated[bool, typer.Option("--force", help="Delete old segments even if lagging readers still need them.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Show what would be deleted; change nothing.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from mqctl.storeview import CleanListing
    from store import parse_duration
    retention = parse_duration(older_than)
    admin = state(ctx).admin()
    out = Output(json=json)
    listing = CleanListing(out, dry_run)
    if dry_run:
        plan = admin.plan_clean(retention, force=force)
        for a in plan.files:
            listing.planned(a)
        staging = admin.stale_staging()
    else:
        total = len(admin.plan_clean(retention, force=force).files)
        with out.progress(total or None, "cleaning") as bar:
            plan = admin.clean(retention, force=force, progress=bar.advance, on_delete=listing.deleted)
        staging = admin.sweep_staging()   # what killed or failed Spark jobs left behind
    listing.finish(plan, staging, older_than)
