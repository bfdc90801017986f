"""``store check``: a read-only consistency check of every file (bbolt's ``tx_check``).

Never mutates anything (``mqctl engine check`` opens the engine without recovery, so a check
of a read-only copy and of the engine itself are the same). One sequential pass over the log
in big windows (``recordscan.py``): each record is compared at once with its consume-queue
entry, read by a cursor per queue that streams the queue's files alongside, and its keys
with the key index file that covers it; memory is bounded by a window, one buffer per queue
and two index files, not by the size of the engine. Verifies every commit-log record (magic, lengths, record CRC, body
CRC, its own offset; every segment but the last ends with its trailer), every consume-queue
entry (points at a valid record of the same topic, queue and offset, with that record's tag
code; no torn partial entry), every key-index file (header, sizes, every entry reachable from
its slot, and every record's keys findable: a damaged index makes ``msg query`` miss messages
silently), that the JSON metadata files parse, and that the topic files and the offset table
(crc, journal) can be trusted. Returns the problems found, each with the
file and byte offset; damage a ``store recover`` already reported (``knowndamage.py``) is
returned apart, as known.

Writers may go on while it runs (no lock is held for the pass): a writer appends records to
the log, then their consume-queue and index entries, then moves the checkpoint, so the
derived files are judged against the log as it is *after* they were read. Once the pass is
done, every queue's end is fixed (``QueueCursors.open_all``) and the log written meanwhile is
scanned too: each entry read then points below what the scans covered. A record cut by the
log's end, or a file one read caught half written, is looked at again with writers held off
(``_confirm``: the write lock, held only for that look) before it is reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from store.errors import StoreError
from store.layout import backup_of
from store.log import atomicbatch, broadcastoffsets, knowndamage, logstart, offsettable, positions, recordscan
from store.log import checkpoint as ckpt
from store.log import settings as settings_file
from store.log.checkderived import Confirm, IndexCheck, QueueCursors
from store.log.topics import legacy_file_problem

if TYPE_CHECKING:
    from store.log.engine import Engine

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    """What is wrong, where. ``reported_at``: when ``store recover`` reported this damage (ms
    since the epoch; ``knowndamage.py``), None for damage not reported yet."""

    file: str
    offset: int
    reason: str
    reported_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "offset": self.offset, "reason": self.reason,
                               "known": self.reported_at is not None}
        if self.reported_at is not None:
            out["reportedAt"] = self.reported_at
        return out


@dataclass
class CheckReport:
    """``problems``: what is wrong and was not reported before (the store is sound when it is
    empty); ``known``: damage a ``store recover`` already reported (a loss accepted, never
    served); ``notes``: derived views out of date, bytes past a sealed segment's trailer (warnings,
    not damage, no message's: ``store recover`` or the next writer rewrites or cuts them)."""

    records: int = 0
    cq_entries: int = 0
    bytes_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    known: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)


def check_store(engine: Engine, progress: Callable[[int], None] | None = None) -> CheckReport:
    rep = CheckReport()
    problems = rep.problems
    known = knowndamage.load(engine.layout)
    if known.problem is not None:
        problems.append(Problem(str(engine.layout.known_damage_json), 0, known.problem))

    def classify(p: Problem, at: int | None) -> None:
        k = known.find(at)
        if k is None:
            problems.append(p)
        else:
            rep.known.append(replace(p, reported_at=k.reported_at))
    confirm = _confirmer(engine)
    cp0 = ckpt.read(engine.layout.checkpoint)
    if cp0 is None and engine.layout.checkpoint.exists():   # (read while a writer rewrote it?)
        cp0 = confirm(lambda: ckpt.read(engine.layout.checkpoint))
    _check_durable_end(engine, problems, cp0)
    _check_gone(engine, problems, cp0, confirm)
    _check_start(engine, problems)
    # Records past the checkpoint belong to a batch a killed writer left: the next writable
    # open dispatches them, they are not lost (their entries may or may not exist yet).
    pending_from = cp0.written_end if cp0 is not None else None
    log = engine.commitlog
    topics = engine.topics()

    def report(file: str, offset: int, reason: str, at: int | None = None) -> None:
        classify(Problem(file, offset, reason), at)

    queues = QueueCursors(engine.layout, engine.settings.cq_segment_entries, log.min_offset, report, confirm,
                          lambda at: known.find(at) is not None)
    keys = IndexCheck(engine.index, log.end, report, confirm)
    reached = log.min_offset()
    cut = False
    batch = atomicbatch.OpenBatch()   # (an unfinished one at a torn tail: recovery cuts it whole)

    def take(w: recordscan.Window) -> None:
        nonlocal reached, cut
        rep.bytes_checked += w.bytes
        for d, at in zip(w.damage, w.damage_at):
            classify(Problem(*d), at)
        if w.past_trailer is not None:   # (no record's, read by no reader: a warning, not damage)
            path, at, n = w.past_trailer
            rep.notes.append(Problem(path, at, f"{n} bytes past the segment's end-of-segment trailer (byte {at} on), "
                                               f"no record's: mqctl store recover cuts them"))
        keys.add_window(w, pending_from)
        queues.claim_window(w, topics, pending_from)
        rep.records += len(w)
        batch.add(w.sysflag, w.phys)
        reached, cut = w.end, w.cut
    def scan_from(start: int, progress: Callable[[int], None] | None) -> None:
        """Scan to the log's end, stepping over a record that runs past it while valid ones
        follow: damage (reported once) the way recovery and the readers step over it."""
        nonlocal cut
        while True:
            for w in recordscan.scan(log, start, progress, live=True):
                take(w)
            if not cut:
                return
            torn = confirm(lambda: recordscan.tail_damage(log, reached))
            nxt = None if torn is None else confirm(lambda: recordscan.resume_after(log, reached))
            if torn is None or nxt is None:
                return   # (a writer adding it now, or a torn tail: looked at again at the end)
            classify(Problem(*torn), reached)
            start, cut = nxt, False
    scan_from(reached, progress)
    queues.open_all(topics, engine.topics)
    # What was written during the pass: every entry read (each queue's end is fixed now)
    # points at a record below the log's end from here on. Its records are all past the
    # checkpoint read first (pending), so none of them is owed an entry yet.
    scan_from(reached, None)
    if cut:   # the last record runs past the log's end: a writer adding it now, or torn?
        torn = confirm(lambda: recordscan.tail_damage(log, reached))
        if torn is not None:
            classify(_torn_tail(engine, cp0, batch, torn), reached)
    elif batch.at >= 0:
        # The log ends on a record boundary inside a batch: a writer adding its next record
        # now (it holds the write lock until the batch is whole), or one killed between its
        # writes, whose batch recovery cuts whole.
        open_tail = confirm(lambda: _open_tail(engine, cp0, batch, reached))
        if open_tail is not None:
            classify(open_tail, reached)
    rep.cq_entries = queues.finish()
    keys.finish()
    _check_json(engine, problems)
    problems += [Problem(f, 0, why) for f, why in engine.topic_table.problems()]
    view = engine.topic_table.view.problem()
    if view is not None:
        rep.notes.append(Problem(str(engine.layout.topics_json), 0, f"the topics' RocketMQ view {view} "
                                                                    f"(mqctl store recover rewrites it)"))
    problems += [Problem(*p) for p in offsettable.verify(engine.layout)]
    if engine.layout.checkpoint.exists() and confirm(lambda: ckpt.read(engine.layout.checkpoint)) is None:
        problems.append(Problem(str(engine.layout.checkpoint), 0, "checkpoint unreadable (bad CRC or size)"))
    return rep


def _confirmer(engine: Engine) -> Confirm:
    """``Confirm`` (``checkderived.py``): a look run with the store's writers held off, so
    that it sees no batch half written. Under the write lock only for that look; where the
    lock cannot be taken (a read-only copy of a store: no writer either) without it."""
    def confirm(look: Callable[[], T]) -> T:
        try:
            engine.write_lock.__enter__()
        except (StoreError, OSError):
            return look()
        try:
            return look()
        finally:
            engine.write_lock.__exit__(None, None, None)
    return confirm


def _check_durable_end(engine: Engine, problems: list[Problem], cp: ckpt.Checkpoint | None) -> None:
    """A log that ends below the checkpoint's synced end lost records that were durable
    (acknowledged to ``--flush sync`` producers): damage, never a torn tail."""
    lost = ckpt.lost_durable_bytes(cp, engine.commitlog)
    if lost is not None:
        problems.append(Problem(*lost))


def _check_gone(engine: Engine, problems: list[Problem], cp: ckpt.Checkpoint | None, confirm: Confirm) -> None:
    """The loss recovery will warn about (``recovery.gone_past_end``): records the consume
    queues or the checkpoint reach but the commit log no longer has. Said as one line, with
    writers held off (a batch half written has its records before its entries)."""
    from store.log.recovery import gone_past_end
    log = engine.commitlog
    gone = confirm(lambda: None if ckpt.lost_durable_bytes(cp, log) else gone_past_end(engine, cp))
    if gone is not None:
        end = log.end()
        problems.append(Problem(str(log.segment_path(log.segment_of(end))), end - log.segment_of(end), gone))


def _check_start(engine: Engine, problems: list[Problem]) -> None:
    """Segments at the log's start that retention did not remove (``logstart.py``)."""
    gone = logstart.missing(engine.layout, engine.commitlog.min_offset())   # (measured first: retention records first)
    if gone is not None:
        problems.append(Problem(*gone))


def _torn_tail(engine: Engine, cp: ckpt.Checkpoint | None, batch: atomicbatch.OpenBatch,
               torn: tuple[str, int, str]) -> Problem:
    """The log's torn tail, as ``store recover`` will cut it: with the whole atomic batch the
    torn record ends, when it is unfinished past the acknowledged point (``recovery.py``'s
    rule): its whole records before the cut go too, and the problem is named where they begin."""
    return _unfinished(engine, cp, batch, torn) or Problem(*torn)


def _open_tail(engine: Engine, cp: ckpt.Checkpoint | None, batch: atomicbatch.OpenBatch,
               end: int) -> Problem | None:
    """A log that ends on a record boundary at ``end`` inside an unfinished atomic batch, as
    ``store recover`` (and the next writer) will cut it, or None (a writer wrote on since: run
    with writers held off, so a log end still at ``end`` is no batch half written)."""
    return _unfinished(engine, cp, batch) if engine.commitlog.end() == end else None


def _unfinished(engine: Engine, cp: ckpt.Checkpoint | None, batch: atomicbatch.OpenBatch,
                torn: tuple[str, int, str] | None = None) -> Problem | None:
    """The unfinished batch at the log's end (its last record ``torn``, or whole) as recovery
    cuts it: from its first record, never below the acknowledged point (``recovery.py``'s
    rule); None when nothing of it lies past that point."""
    log = engine.commitlog
    if batch.at < 0:
        return None
    cut_at = max(batch.at, ckpt.acked_end(cp, cp is not None and cp.boot_id != engine.writer.boot_id, log.end()))
    n = batch.records_from(cut_at)
    if not n:
        return None
    base = log.segment_of(cut_at)
    what = (f"its {n} whole record{'s' if n > 1 else ''} and the one cut at {torn[0]}:{torn[1]} ({torn[2]})"
            if torn is not None else f"its {n} record{'s' if n > 1 else ''}, and no end record after them")
    return Problem(str(log.segment_path(base)), cut_at - base,
                   f"unfinished atomic batch at the end of the log: {what}; mqctl store recover cuts the whole "
                   f"batch ({log.end() - cut_at} bytes)")


def _check_json(engine: Engine, problems: list[Problem]) -> None:
    lay = engine.layout
    # (the offset table and the topic files are checked by their owners: offsettable.verify,
    # TopicTable.problems; the other JSON files by theirs, each with what its readers accept)
    files: list[tuple[Path, Callable[[Path], str | None]]] = [
        (lay.delay_offset_json, positions.delay_progress_problem),
        (positions.tx_progress_path(lay), positions.tx_progress_problem)]
    for p in (lay.store_json, backup_of(lay.store_json)):   # (read as settings.py reads them)
        why = settings_file.problem(p)
        if why is not None:
            bak = backup_of(p)
            used = p == lay.store_json and bak.exists() and settings_file.problem(bak) is None
            problems.append(Problem(str(p), 0, f"{why}{f' ({bak.name} is used instead)' if used else ''}; "
                                               f"mqctl store recover writes it again"))
    if engine.topic_table.legacy():   # (else it is the topics' view: TopicsView.problem)
        files.append((lay.topics_json, legacy_file_problem))
    if not lay.store_json.exists():
        problems.append(Problem(str(lay.store_json), 0, "missing (its .bak is read instead; "
                                                        "mqctl store recover puts it back)"))
    files += [(lay.broadcast_offsets(cid, group), broadcastoffsets.file_problem)
              for cid, group in broadcastoffsets.broadcast_offset_files(lay)]
    for p, problem in files:
        why = problem(p)
        if why is not None:
            problems.append(Problem(str(p), 0, f"{why}{_fallback(backup_of(p), problem)}"))


def _fallback(bak: Path, problem: Callable[[Path], str | None]) -> str:
    """What readers of a file they cannot use fall back on: its ``.bak``, if they can use that."""
    if not bak.exists():
        return ""
    why = problem(bak)
    if why is not None:
        return f" (and so is {bak.name}: {why}; nothing to fall back on)"
    return f" ({bak.name} is used instead)"
