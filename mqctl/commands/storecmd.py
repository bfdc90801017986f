"""``mqctl store check|recover|stats|clean`` (retention rules in ``store/log/retention.py``)."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.options import JsonOpt, state

if TYPE_CHECKING:
    from store.log.broker import Store
    from store.log.retention import FileAction

store_app = typer.Typer(help="Verify, repair, measure and clean the store.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")


@store_app.command("check", help="Verify every record CRC and index entry (read-only; exit 1 on damage).")
def check(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.errors import DamageFoundError
    from store.log.check import check_store
    store = state(ctx).store()
    out = Output(json=json)
    total = sum(os.stat(store.commitlog.segment_path(b)).st_size for b in store.commitlog.segments())
    with out.progress(total, "checking") as bar:
        rep = check_store(store, progress=bar.advance)
    problems = rep.problems or []
    from store.spark.staging import stale_staging
    stale = stale_staging(store.root)
    for d in stale:   # not damage: left by a killed Spark job; `store clean` removes it
        out.warn(f"stale Spark staging {d.describe()} (mqctl store clean removes it)")
    if json:
        for p in problems:
            out.emit_json(p.to_json())
        out.emit_json({"status": "DAMAGED" if problems else "OK", "records": rep.records,
                       "cqEntries": rep.cq_entries, "problems": len(problems), "staleStaging": len(stale)})
    else:
        for p in problems:
            sys.stdout.write(f"{p.file}:{p.offset}: {p.reason}\n")
        out.info(f"checked {rep.records} records and {rep.cq_entries} consume-queue entries: "
                 f"{'%d problems' % len(problems) if problems else 'OK'}")
    if problems:
        raise DamageFoundError(f"store check found {len(problems)} problem{'s' if len(problems) != 1 else ''}",
                               [p.to_json() for p in problems])


@store_app.command("recover", help="Rebuild consume queues and the key index from the commit log; cut a torn tail.")
def recover(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.log.recovery import recover as run
    store = state(ctx).store()
    out = Output(json=json)
    total = sum(os.stat(store.commitlog.segment_path(b)).st_size for b in store.commitlog.segments())
    with store.write_lock(), out.progress(total, "recovering") as bar:
        rep = run(store, full=True, progress=bar.advance)
    if json:
        out.emit_json(rep.to_json())
    else:
        out.info(f"recovered {rep.records} records up to offset {rep.end}: {rep.cq_entries_written} consume-queue "
                 f"entries rebuilt, {rep.cq_entries_dropped} dropped, {rep.truncated_bytes} torn bytes cut")
        for f, o, r in rep.damage:
            out.warn(f"could not recover {f} at offset {o}: {r} (left in place, never served)")


@store_app.command("stats", help="Sizes of the store's parts, and what `store clean` would free.")
def stats(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.log.stats import store_stats
    store = state(ctx).store()
    rows = store_stats(store)
    rows += _clean_stats(store)
    Output(json=json).table(rows, [("part", "PART"), ("files", "FILES"), ("bytes", "BYTES"), ("detail", "DETAIL")])


def _clean_stats(store: Store) -> list[dict[str, Any]]:
    """Rows for what ``store clean`` (default retention) would free, and what lagging readers
    hold back beyond that (what ``clean --force`` would free on top)."""
    from store.log.retention import DEFAULT_RETENTION_MS, plan_clean
    plan = plan_clean(store, DEFAULT_RETENTION_MS)
    age = f"{DEFAULT_RETENTION_MS // 3_600_000}h"
    rows: list[dict[str, Any]] = [{"part": "reclaimable", "files": len(plan.files), "bytes": plan.bytes,
             "detail": f"store clean would free this (segments older than {age} that every reader has passed)"}]
    if plan.held_files:
        culprits = ", ".join(n.describe() for n in plan.held[:3]) + (" …" if len(plan.held) > 3 else "")
        rows.append({"part": "held-back", "files": plan.held_files, "bytes": plan.held_bytes,
                     "detail": f"older than {age} but still needed by {culprits} (store clean --force frees it)"})
    return rows


CLEAN_HELP = """Delete commit-log segments older than the retention that every reader has passed.

A segment goes when it is not the last one, its file was last modified more than --older-than
ago (default 72h, RocketMQ's fileReservedTime), and no consumer group, broadcast client, the
delay scheduler or an unresolved transaction still needs a message in it. --force deletes what
is older than the retention even when lagging readers need it (they are listed). Consume-queue
and index files that only point into deleted segments go too. Oldest first, under the store's
write lock; a crash at any step leaves a store that opens, and the next clean finishes.

Examples:
  mqctl store clean --dry-run
  mqctl store clean --older-than 24h
  mqctl store clean --older-than 7d --force --json"""


@store_app.command("clean", help=CLEAN_HELP)
def clean(
    ctx: typer.Context,
    older_than: Annotated[str, typer.Option(
        "--older-than", metavar="DURATION",
        help="Retention: keep segments modified more recently than this (500ms, 30s, 5m, 2h, 3d; bare number = seconds).")] = "72h",
    force: Annotated[bool, typer.Option("--force", help="Delete old segments even if lagging readers still need them.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Show what would be deleted; change nothing.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.log.retention import clean as run_clean
    from store.log.retention import plan_clean
    from store.timeparse import format_age, parse_duration
    retention = parse_duration(older_than)
    store = state(ctx).store()
    out = Output(json=json)
    rows: list[dict[str, Any]] = []

    def deleted(action: FileAction) -> None:
        row = action.to_json() | {"action": "deleted"}
        if json:
            out.emit_json(row)
        else:
            rows.append(row)

    from store.spark.staging import stale_staging, sweep_staging
    if dry_run:
        plan = plan_clean(store, retention, force)
        for action in plan.files:
            row = action.to_json() | {"action": "would-delete"}
            if json:
                out.emit_json(row)
            else:
                rows.append(row)
        staging = stale_staging(store.root)
    else:
        total = len(plan_clean(store, retention, force).files)
        with out.progress(total or None, "cleaning") as bar:
            plan = run_clean(store, retention, force, progress=bar.advance, on_delete=deleted)
        staging = sweep_staging(store.root)   # what killed or failed Spark jobs left behind
    for d in staging:
        row = d.to_json() | {"action": "would-delete" if dry_run else "deleted",
                             "mtime": plan.now_ms - d.to_json()["idleMs"]}
        if json:
            out.emit_json(row)
        else:
            rows.append(row)
    summary = plan.to_json() | {"status": "DRY_RUN" if dry_run else "OK"}
    if json:
        out.emit_json(summary)
    else:
        for r in rows:
            r["size"] = r["bytes"]
            r["age"] = format_age(max(0, plan.now_ms - r["mtime"]))
        if rows:
            out.table(rows, [("kind", "KIND"), ("path", "FILE"), ("size", "BYTES"), ("age", "AGE"), ("action", "ACTION")])
        verb = "would delete" if dry_run else "deleted"
        out.info(f"{verb} {len(plan.commitlog)} commit-log segment{'s' if len(plan.commitlog) != 1 else ''}, "
                 f"{len(plan.consumequeue)} consume-queue and {len(plan.index)} index file"
                 f"{'s' if len(plan.index) != 1 else ''} ({plan.bytes} bytes); the log "
                 f"{'would start' if dry_run else 'starts'} at offset {plan.new_min_offset}")
    for n in plan.held:
        out.warn(f"kept segments older than {older_than}: {n.describe()} still needs them "
                 f"(consume or reset it, or pass --force)")
    for n in plan.overridden:
        out.warn(f"{'would delete' if dry_run else 'deleted'} unread messages of {n.describe()}")
