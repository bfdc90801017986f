"""How ``mqctl store check|recover|stats|clean`` report: problems and their summary, what
recovery rebuilt, sizes in binary units, and what a clean deleted (or would), with the
readers that held segments back."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence

from mqctl.output import Output, human_size, plural

if TYPE_CHECKING:
    from store import CheckReport, CleanPlan, FileAction, RecoveryReport, StagingDir, Store

CLEAN_COLUMNS = [("kind", "KIND"), ("path", "FILE"), ("size", "SIZE"), ("age", "AGE"), ("action", "ACTION")]


def show_check(out: Output, rep: CheckReport, stale: Sequence[StagingDir], utc: bool = False) -> None:
    """Each problem as FILE:OFFSET: REASON (or a JSON object), the damage ``store recover``
    already reported marked as known, then the summary."""
    from store import format_local
    problems, known = rep.problems or [], rep.known or []
    for d in stale:   # not damage: left by a killed Spark job; `store clean` removes it
        out.warn(f"stale Spark staging {d.describe()} (mqctl store clean removes it)")
    for n in rep.notes or []:   # not damage either: a derived view, rewritten by `store recover`
        out.warn(f"{n.file}: {n.reason}")
    if out.json:
        for p in [*problems, *known]:
            out.emit_json(p.to_json())
        out.emit_json({"status": "DAMAGED" if problems else "OK", "records": rep.records,
                       "cqEntries": rep.cq_entries, "problems": len(problems), "knownProblems": len(known),
                       "staleStaging": len(stale)})
        return
    for p in problems:
        sys.stdout.write(f"{p.file}:{p.offset}: {p.reason}\n")
    for p in known:
        sys.stdout.write(f"{p.file}:{p.offset}: {p.reason} (known: reported by store recover "
                         f"{format_local(p.reported_at or 0, utc)})\n")
    entries = plural(rep.cq_entries, "consume-queue entry", "consume-queue entries")
    out.info(f"checked {plural(rep.records, 'record')} and {entries}: "
             f"{plural(len(problems), 'problem') if problems else 'OK'}")
    if known:
        first = format_local(min(p.reported_at or 0 for p in known), utc)
        out.info(f"{plural(len(known), 'known problem')}: damage `mqctl store recover` already reported "
                 f"(since {first}); its messages are lost and never served, nothing new to repair")


def show_recover(out: Output, rep: RecoveryReport) -> None:
    if out.json:
        out.emit_json(rep.to_json())
        return
    # (a torn write, an unfinished batch, or what a cut file left of a record: not always torn)
    cut = f", {human_size(rep.truncated_bytes)} cut from the end of the log" if rep.truncated_bytes else ""
    out.info(f"recovered {plural(rep.records, 'record')} up to offset {rep.end}: "
             f"{plural(rep.cq_entries_written, 'consume-queue entry', 'consume-queue entries')} "
             f"rebuilt, {rep.cq_entries_dropped} dropped{cut}")
    for f, o, r in rep.damage:
        out.warn(f"could not recover {f} at offset {o}: {r} (left in place, never served)")


def show_stats(out: Output, store: Store, rows: list[dict[str, Any]]) -> None:
    """Sizes per part of the store (JSON: bytes), with details of the log and the queues."""
    if out.json:
        out.table(rows, [])
        return
    log = store.commitlog
    details = {"commitlog": f"offsets {log.min_offset()}-{log.end()}, {human_size(log.segment_size)} segments",
               "consumequeue": plural(len(store.topics()), "topic")}
    shown = [r | {"size": human_size(r["bytes"]), "detail": details.get(r["part"], r["detail"])} for r in rows]
    out.table(shown, [("part", "PART"), ("files", "FILES"), ("size", "SIZE"), ("detail", "DETAIL")])


class CleanListing:
    """What ``store clean`` deletes, file by file: NDJSON as it happens, or a table at the end."""

    def __init__(self, out: Output, dry_run: bool) -> None:
        self.out, self.dry_run = out, dry_run
        self.rows: list[dict[str, Any]] = []
        self.action = "would-delete" if dry_run else "deleted"

    def row(self, r: dict[str, Any]) -> None:
        if self.out.json:
            self.out.emit_json(r)
        else:
            self.rows.append(r)

    def planned(self, a: FileAction) -> None:
        self.row(a.to_json() | {"action": self.action})

    def deleted(self, a: FileAction) -> None:
        self.row(a.to_json() | {"action": "deleted"})

    def finish(self, plan: CleanPlan, staging: Sequence[StagingDir], older_than: str) -> None:
        """The Spark staging directories swept, then the summary and the readers' warnings."""
        from store import format_age
        out, dry_run = self.out, self.dry_run
        verb = "would delete" if dry_run else "deleted"
        for d in staging:
            self.row(d.to_json() | {"action": self.action, "mtime": plan.now_ms - d.to_json()["idleMs"]})
        if out.json:
            out.emit_json(plan.to_json() | {"status": "DRY_RUN" if dry_run else "OK"})
        else:
            for r in self.rows:
                r["size"] = human_size(r["bytes"])
                r["age"] = format_age(max(0, plan.now_ms - r["mtime"]))
            if self.rows:
                out.table(self.rows, CLEAN_COLUMNS)
            if not plan.files and not staging:
                out.info(f"nothing to delete: no segment older than {older_than} that every reader has passed "
                         f"(the newest segment always stays)")
            else:
                out.info(f"{verb} {plural(len(plan.commitlog), 'commit-log segment')}, "
                         f"{plural(len(plan.consumequeue), 'consume-queue file')} and "
                         f"{plural(len(plan.index), 'index file')} ({human_size(plan.bytes)}); the log "
                         f"{'would start' if dry_run else 'starts'} at offset {plan.new_min_offset}")
        for n in plan.held:
            out.warn(f"kept segments older than {older_than}: {n.describe()} still needs them "
                     f"({n.remedy}; or pass --force)")
        for n in plan.overridden:
            out.warn(f"{verb} unread messages of {n.describe()}")
