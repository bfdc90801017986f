"""``mqctl store check|recover|stats`` (and ``clean``, in ``retention``)."""
from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from ..options import JsonOpt, state

store_app = typer.Typer(help="Verify, repair, measure and clean the store.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")


@store_app.command("check", help="Verify every record CRC and index entry (read-only; exit 1 on damage).")
def check(ctx: typer.Context, json: JsonOpt = False) -> None:
    from store.check import check_store
    from store.errors import DamageFoundError
    from ..output import Output
    store = state(ctx).store()
    out = Output(json=json)
    total = sum(os.stat(store.commitlog.segment_path(b)).st_size for b in store.commitlog.segments())
    with out.progress(total, "checking") as bar:
        rep = check_store(store, progress=bar.advance)
    problems = rep.problems or []
    if json:
        for p in problems:
            out.emit_json(p.to_json())
        out.emit_json({"status": "DAMAGED" if problems else "OK", "records": rep.records,
                       "cqEntries": rep.cq_entries, "problems": len(problems)})
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
    from store.recovery import recover as run
    from ..output import Output
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
    from ..output import Output
    from ..storestats import store_stats
    store = state(ctx).store()
    rows = store_stats(store)
    Output(json=json).table(rows, [("part", "PART"), ("files", "FILES"), ("bytes", "BYTES"), ("detail", "DETAIL")])
