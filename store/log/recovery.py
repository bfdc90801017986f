"""Recovery: make the derived files (consume queues, key index) agree with the commit log.

Runs under the write lock, from :func:`checkpoint_locked` when the checkpoint says a
writer died mid-batch or the machine restarted, and from ``mqctl store recover`` (``full``).

1. Choose where to start: the checkpoint's written end (a writer died), its synced end (the
   machine restarted: the page cache may have lost anything later), or the first segment
   (``full``, or no readable checkpoint).
2. Scan records from there, checking every CRC. Each valid record gets its consume-queue entry
   (idempotently: an entry already right is left alone) and its index keys.
3. An invalid record with no valid record after it is a torn tail: the log is cut back to the
   last valid record, and to the start of an atomic batch left without its end record
   (``atomicbatch.py``; when the scan began at a segment base because the log ends below the
   checkpoint, the records before it are looked at first: the batch may have begun there).
   The records of such a batch are dispatched only once its end is seen: one that is cut
   never had consume-queue entries. A torn tail is only ever past what the checkpoint says
   was acknowledged (``checkpoint.acked_end``): below it, an invalid record is damage (reported,
   left in place, never served) and a batch whose end is missing there keeps its intact
   records. An invalid record *followed* by valid ones is corruption: reported, never
   served, and the scan resumes at the next valid record.
4. Consume-queue entries pointing past the recovered end, and a torn entry, are dropped; index
   entries past it are fenced off via the header. The checkpoint moves to the recovered end.

A log ending below the checkpoint's synced end lost durable records: reported, not taken for a
torn tail. Crash point ``recover-after-index-drop``: the key index fenced off, nothing re-added.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from store.errors import CorruptionError
from store.failpoints import failpoint
from store.fsutil import not_rewritable
from store.log import atomicbatch, broadcastoffsets, indexfence, knowndamage, logstart, recordscan
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.consumequeue import queue_dirs
from store.log.positions import clamp_to_queue_ends, restore_unreadable
from store.log.queuerebuild import QueueRebuild, fill_holes, past_end, trim_queue, unrewritable_queue_file
from store.log.topics import TopicConfig
from store.names import is_system_topic

if TYPE_CHECKING:
    from store.log.engine import Engine


@dataclass
class RecoveryReport:
    start: int = 0
    end: int = 0
    records: int = 0
    cq_entries_written: int = 0
    truncated_bytes: int = 0
    cq_entries_dropped: int = 0
    damage: list[tuple[str, int, str]] = field(default_factory=list)
    reason: str = ""
    # an unfinished atomic batch cut: (where it began, its intact records, its last one torn)
    batch_cut: tuple[int, int, bool] | None = None
    # sealed segments' bytes past their trailer the scan met: (file, where the trailer ends, bytes)
    past_trailers: list[tuple[str, int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "start": self.start, "end": self.end, "records": self.records,
                "cqEntriesWritten": self.cq_entries_written, "truncatedBytes": self.truncated_bytes,
                "cqEntriesDropped": self.cq_entries_dropped,
                "damage": [{"file": f, "offset": o, "reason": r} for f, o, r in self.damage]}


@dataclass
class _Plan:
    start: int          # where the scan (re-dispatch) begins
    reason: str
    rebooted: bool      # the machine restarted: unsynced data may be gone from any file
    cut_from: int       # after a restart, the first invalid record at or past this ends the log
    checkpoint: ckpt.Checkpoint | None = None   # as recovery found it
    between_batches: bool = True   # ``start`` is known to lie between atomic batches
    acked: int = 0      # below it the log was acknowledged whole (``checkpoint.acked_end``)
    log_end: int = 0    # the commit log's end as the plan found it (no writer moves it meanwhile)


def _plan(engine: Engine, full: bool) -> _Plan:
    end = engine.commitlog.end()
    plan = _plan_start(engine, full, end)
    plan.log_end, plan.acked = end, ckpt.acked_end(plan.checkpoint, plan.rebooted, end)
    return plan


def _plan_start(engine: Engine, full: bool, end: int) -> _Plan:
    cp = ckpt.read(engine.layout.checkpoint)
    lo = engine.commitlog.min_offset()
    if full:
        rebooted = cp is not None and cp.boot_id != engine.writer.boot_id
        return _Plan(lo, "full rebuild requested", rebooted, cp.synced_end if cp and rebooted else end, cp)
    if cp is None:
        # No readable checkpoint (torn, or a store of an unknown version): every derived file
        # is checked as after a restart, but an invalid record is damage to report and step
        # over, never a reason to cut the log (nothing says where its durable end is).
        return _Plan(lo, "no readable checkpoint", True, end, cp)
    if cp.boot_id != engine.writer.boot_id:
        # Consume queues and the index are durable only below ``derived end``; the log only
        # below ``synced end``. Everything after may have been lost in any order.
        start, reason = cp.derived_end, "the machine restarted since the last write"
        plan = _Plan(start, reason, True, cp.synced_end, cp)
    else:
        plan = _Plan(cp.written_end, "a writer stopped in the middle of a batch", False, end, cp)
    if plan.start > end:
        # The log is shorter than the checkpoint says (a torn or truncated tail). ``end`` may
        # then fall inside a record: scanning from it would keep the torn bytes and append
        # after them. The base of the segment holding ``end`` is a record boundary.
        # A batch may have begun in an earlier segment, though: ``recover`` looks back.
        plan.start = engine.commitlog.segment_of(end)
        plan.reason += "; the commit log is shorter than the checkpoint"
        plan.between_batches = False
    plan.start = max(lo, plan.start)
    return plan


def _check_index(engine: Engine, plan: _Plan, full: bool, rep: RecoveryReport) -> None:
    """Drop key-index files that cannot be trusted, and every later one, and move the scan
    back to the first dropped file's offset so the records it covered are indexed again.
    After a restart, every file written since the last derived flush is read whole (entries
    or slots lost in the cut); otherwise the header and sizes are checked."""
    idx = engine.index
    idx.remove_leftovers()
    if full:
        return
    files = idx.files()
    derived = plan.checkpoint.derived_end if plan.checkpoint is not None else 0
    for i, base in enumerate(files):
        thorough = False
        if plan.rebooted:
            try:
                thorough = i == len(files) - 1 or idx.header(base)[3] >= derived
            except (OSError, ValueError):
                thorough = True
        why = idx.problem(base, thorough=thorough)
        if why is None:
            continue
        idx.drop_from(base)
        rep.damage.append((str(idx.path(base)), 0, f"key index {why}: rebuilt from the commit log"))
        lo = engine.commitlog.min_offset()
        if max(base, lo) < plan.start:
            plan.start = max(base, lo)
            plan.reason += "; a key-index file had to be rebuilt"
        return


def recover(engine: Engine, full: bool = False, progress: Callable[[int], None] | None = None,
            accept_loss: bool = False) -> RecoveryReport:
    """Repair the store (write lock held). Returns what was done.

    A commit log found shorter than its durable end (``checkpoint.lost_durable_bytes``) is
    damage, not a torn tail: only ``accept_loss`` (``mqctl store recover``) goes on past it,
    cutting the store back to what the log has; any other caller gets ``CorruptionError``
    (exit 5) and the store is left as found, for ``store check`` to report."""
    if full or indexfence.rebuilding(engine.index):
        _refuse_what_cannot_finish(engine)   # (before anything is changed)
    plan = _plan(engine, full)
    rep = RecoveryReport(reason=plan.reason)
    engine.log_tail = engine.ends_checkpoint = None   # (the log may be cut below: read its end anew)
    lost = ckpt.lost_durable_bytes(plan.checkpoint, engine.commitlog)
    if lost is not None and not accept_loss:
        raise CorruptionError(lost[0], lost[1], f"{lost[2]} (run mqctl store check; mqctl store recover "
                                                f"accepts the loss and cuts the store back to the log)")
    engine.heal_topics_locked()   # records are dispatched only to topics that exist
    if lost is not None:
        # Not a torn tail: said loudly, and kept in the report (the checkpoint moves down to
        # the log's end below, so the store is usable again; readers past it are clamped
        # to their queues' new ends, each with a warning).
        rep.damage.append(lost)
        engine.warn(f"{lost[0]} at offset {lost[1]}: {lost[2]}")
    rebuild_index = full or indexfence.rebuilding(engine.index)
    if rebuild_index and not full:
        plan.start = engine.commitlog.min_offset()
        plan.reason += "; a key-index rebuild was interrupted: it is done again"
    _check_index(engine, plan, rebuild_index, rep)
    rep.start = plan.start
    rep.reason = plan.reason
    if rebuild_index:
        # Rebuilt below from every record (damage in it is not trusted), behind a fence that
        # stays up until the new files are durable: a kill in between leaves a store whose
        # readers search the log and whose next open rebuilds again.
        indexfence.begin_rebuild(engine.index)
        failpoint("recover-after-index-drop")
    else:
        engine.index.repair()   # slots a killed writer left pointing past the index's count
    topics = engine.topics()
    open_at = -1 if plan.between_batches else _open_before(engine, plan)
    valid_end, last_ts, kept_from = _redispatch(engine, plan, topics, rep, progress, open_at)
    rep.truncated_bytes = engine.commitlog.truncate_to(valid_end)
    if lost is None:
        # Records the log no longer has though the consume queues or the checkpoint were
        # written after them (an async store's power cut before its flush may lose them; so
        # does a cut file), counted from the log's end as repaired (an unfinished batch's
        # records before the cut go with it): the queues are cut back now, and that is said,
        # once, by the process that repairs (under the write lock: the next opener finds the
        # store clean).
        gone = gone_past_end(engine, plan.checkpoint, rep.batch_cut, plan.log_end)
        if gone is not None:
            engine.warn(gone)
    rep.cq_entries_dropped = _trim_queues(engine, valid_end, kept_from)
    if full or rep.damage:
        regions = _damaged_regions(engine, rep, valid_end)
        _fill_queue_holes(engine, rep, regions)
        if full:   # ``mqctl store recover``: what it reports is the loss the user accepted
            knowndamage.record(engine.layout, [r for r in regions if r[0] < valid_end], int(time.time() * 1000))
    engine.index.fence(valid_end)
    _clamp_topics(engine, valid_end)
    if plan.rebooted or rep.cq_entries_dropped or rep.truncated_bytes:
        _clamp_consumers(engine)
    if full:   # readers' files that no reader can read: put back from a .bak or the log, skipping nothing
        _cut_past_trailers(engine, rep)
        logstart.accept(engine.layout, engine.commitlog.min_offset(), engine.warn)
        restore_unreadable(engine.layout, engine.warn)
        broadcastoffsets.reset_lost(engine.layout, engine.queues.min_offset, {
            n: t.queues for n, t in engine.topics().items() if not is_system_topic(n)}, engine.warn)
    rep.end = valid_end
    cp = plan.checkpoint or ckpt.Checkpoint()
    last_ts = max(cp.last_store_ts, last_ts)
    ckpt.write(engine.layout.checkpoint, ckpt.Checkpoint(
        valid_end, last_ts, min(cp.synced_end, valid_end), engine.writer.boot_id,
        min(cp.derived_end, valid_end), cp.derived_at))
    if plan.rebooted or rebuild_index:
        # What survived the restart, and what recovery rebuilt, is made durable now, so the
        # next restart starts here (and nothing below ``valid_end`` is re-dispatched again).
        engine.durability.flush_durable(valid_end)
        ckpt.write(engine.layout.checkpoint, ckpt.Checkpoint(
            valid_end, last_ts, valid_end, engine.writer.boot_id, valid_end, int(time.time())))
    if rebuild_index:
        indexfence.end_rebuild(engine.index)
    return rep


def _cut_past_trailers(engine: Engine, rep: RecoveryReport) -> None:
    """The bytes sealed segments hold past their trailer (no record's), cut by their owner."""
    log = engine.commitlog
    for path, at, _n in rep.past_trailers:
        cut = log.cut_past_trailer(int(os.path.basename(path)), at)   # (a segment is named by its base)
        if cut:
            engine.warn(f"{path}: cut {cut} bytes past its end-of-segment trailer (byte {at} on; no record's)")


def _refuse_what_cannot_finish(engine: Engine) -> None:
    """Refuse, before anything is dropped, a repair that could not finish: a consume-queue
    file or the checkpoint it must rewrite is a directory, or not writable. A repair that
    dropped the key index and then stopped there would leave every command failing where only
    one topic did."""
    blocked = unrewritable_queue_file(engine.layout)
    if blocked is None:
        why = not_rewritable(engine.layout.checkpoint)
        blocked = None if why is None else (engine.layout.checkpoint, why)
    if blocked is not None:
        path, why = blocked
        raise CorruptionError(str(path), 0, f"{why}: recovery rewrites it from the commit log and cannot here, "
                                            f"so it changed nothing (move it aside or make it writable, then run "
                                            f"mqctl store recover again)")


def gone_past_end(engine: Engine, cp: ckpt.Checkpoint | None,
                  batch: tuple[int, int, bool] | None = None, was: int = 0) -> str | None:
    """What is gone when the commit log ends below where the consume queues' entries, or the
    checkpoint's written end, reach (one line), or None when nothing reaches past it. For
    recovery's warning and ``store check``'s report of the same loss (write lock held).
    ``batch``: the unfinished atomic batch recovery just cut (``RecoveryReport.batch_cut``),
    which the log ended with at ``was``: the line says that cut is why."""
    end = engine.commitlog.end()
    n = reach = 0
    for topic, qid in queue_dirs(engine.layout):
        got = past_end(engine.queues.queue(topic, qid), end)
        n, reach = n + got[0], max(reach, got[1])
    if batch is not None and (n or (cp is not None and cp.written_end > end)):
        return atomicbatch.cut_warning(*batch, was, end, n)
    if n:
        return (f"the commit log ends at offset {end}, but the consume queues reach {reach}: {n} "
                f"message{'s' if n != 1 else ''} past its end {'are' if n != 1 else 'is'} gone (a power cut "
                f"before their flush, or a cut file)")
    if cp is not None and cp.written_end > end:
        return (f"the commit log ends at offset {end}, but the checkpoint says records were written up to "
                f"{cp.written_end}: the records past its end are gone (a power cut before their flush, or a "
                f"cut file)")
    return None


def _clamp_topics(engine: Engine, valid_end: int) -> None:
    """A topic created after records that a crash then took away recorded a creation offset
    past the log's end; the next records of that topic land below it, and recovery would skip
    them as older than their topic. Such offsets come back to the end."""
    for t in engine.topics().values():
        if t.created_offset > valid_end:
            engine.topic_table.save(replace(t, created_offset=valid_end))


def _clamp_consumers(engine: Engine) -> None:
    """Reader positions past a queue's end (the queue lost unsynced messages that readers had
    already read) come back to the end, so the messages that take those offsets next are
    delivered. Warned about, never silent (``positions.py``)."""
    topics = engine.topics()

    def queue_end(topic: str, queue_id: int) -> int:
        cfg = topics.get(topic)
        if cfg is None or queue_id >= cfg.queues:
            return -1
        return engine.queues.max_offset(topic, queue_id)

    clamp_to_queue_ends(engine.offsets, engine.layout, queue_end, engine.warn)


def _open_before(engine: Engine, plan: _Plan) -> int:
    """Where the atomic batch that the scan's start is inside of begins, or -1 (a look back at
    the records before it, :func:`atomicbatch.open_before`), for a start not known to lie
    between batches; the checkpoint's derived end and the log's first segment are."""
    lo = engine.commitlog.min_offset()
    if plan.start <= lo:
        return -1
    derived = plan.checkpoint.derived_end if plan.checkpoint is not None else 0
    known = max(lo, derived if derived <= plan.start else 0)
    return atomicbatch.open_before(engine.commitlog, plan.start, known)


def _redispatch(engine: Engine, plan: _Plan, topics: dict[str, TopicConfig], rep: RecoveryReport,
                progress: Callable[[int], None] | None, open_at: int = -1) -> tuple[int, int, int]:
    """One pass over the log from ``plan.start`` (``recordscan.py``): every valid record gets
    its consume-queue entry and its index keys, a queue's run and a window's keys at a time.
    Damage followed by a valid record is reported and stepped over; damage with none after
    it is a torn tail (not reported: the caller cuts the log back to the returned end) unless
    it lies below ``plan.acked`` (acknowledged bytes: damage, reported and left in place);
    after a restart, damage at or past ``plan.cut_from`` ends the log. ``open_at``: where a
    batch that ``plan.start`` is inside of began (in an earlier segment), -1: none. The records
    of a batch still open are dispatched only once its end is seen (or it is found
    acknowledged): a batch that is cut never had entries. Returns (the end of the last valid
    record, or the start of an unfinished batch, or of damaged acknowledged bytes left in
    place; the last engine timestamp; where those damaged bytes begin, else that end)."""
    valid_end, last_ts = plan.start, 0
    queues: dict[tuple[str, int], QueueRebuild] = {}
    unconfirmed: list[tuple[tuple[str, int, str], int]] = []
    held: list[recordscan.Window] = []   # the records of the batch open at the scan's end so far

    def dispatch(w: recordscan.Window) -> None:
        rep.records += len(w)
        for topic, qid, run in recordscan.queue_runs(w, topics):
            qr = queues.get((topic, qid))
            if qr is None:
                qr = queues[(topic, qid)] = QueueRebuild(engine.queues.queue(topic, qid))
            rep.cq_entries_written += qr.put_many(w.queue_offset[run], w.phys[run], w.size[run], w.tag_code[run])
        if len(w.key_hash):
            engine.index.add_hashes(w.key_hash.tolist(), w.key_phys.tolist(), last_ts)

    for w in recordscan.scan(engine.commitlog, plan.start, progress):
        if w.past_trailer is not None:
            rep.past_trailers.append(w.past_trailer)
        cut = None
        for d, at in zip(w.damage, w.damage_at):
            if plan.rebooted and at >= plan.cut_from:
                cut = at   # lost in the power cut: nothing after it was ever durable
                break
            unconfirmed.append((d, at))
        if cut is not None and len(w):
            keep = w.phys < cut
            if not keep.all():
                w = _part(w, 0, int(keep.sum()))
        if len(w):
            last = int(w.phys[-1])   # damage a valid record follows: damage, not a torn tail
            rep.damage += [d for d, at in unconfirmed if at < last]
            unconfirmed = [(d, at) for d, at in unconfirmed if at > last]
            valid_end = int(w.phys[-1] + w.size[-1])
            last_ts = max(last_ts, int(w.store_ts.max()))
            was, open_at = open_at, atomicbatch.open_batch(w.sysflag, w.phys, open_at)
            if open_at < 0:
                ready, held = held + [w], []
            elif open_at == was and open_at < int(w.phys[0]):   # the same batch, still open
                ready = []
                held.append(_part(w, 0, len(w), copy=True))
            else:   # a batch opened in this window (the one held before, if any, was closed in it)
                k = int((w.phys < open_at).sum())
                ready, held = held + [_part(w, 0, k)], [_part(w, k, len(w), copy=True)]
            for r in ready:
                dispatch(r)
        if cut is not None:
            break
    # What has no valid record after it: acknowledged bytes (below ``plan.acked``) damaged or
    # cut lose those records only (left in place when the log reaches past); past it, torn.
    torn, kept_from = valid_end >= plan.acked, valid_end
    if not torn and unconfirmed and plan.log_end >= plan.acked:
        rep.damage += [d for d, at in unconfirmed if at < plan.acked]
        valid_end = plan.acked   # (a log cut below it: the bytes of the cut record go, said as lost)
    # A batch whose end record never made it (its writer killed inside the write, or a power
    # cut kept a prefix) is cut whole: no part of a producer's batch is kept, and a stage's
    # outputs never appear without their offsets. Never below the acknowledged point (batches
    # end there): an acknowledged batch whose end record is damaged looks open still.
    cut_at = max(open_at, plan.acked) if open_at >= 0 and torn else 1 << 62
    if cut_at < 1 << 62:
        whole = sum(int((r.phys >= cut_at).sum()) for r in held) + atomicbatch.records_between(
            engine.commitlog, cut_at, plan.start)   # (those before the scan's start too)
        rep.batch_cut = (cut_at, whole, valid_end < plan.log_end)
        valid_end = cut_at
        rep.reason += "; an unfinished atomic batch at the end of the log was cut"
    for r in held:   # (the open batch's records: those below the cut)
        if len(r) and int(r.phys[0]) < cut_at:
            dispatch(r if int(r.phys[-1]) < cut_at else _part(r, 0, int((r.phys < cut_at).sum())))
    for qr in queues.values():
        qr.flush()
    return valid_end, last_ts, min(kept_from, valid_end)


def _part(w: recordscan.Window, a: int, b: int, copy: bool = False) -> recordscan.Window:
    """Records ``[a, b)`` of ``w`` and their keys (``copy``: to be kept past the window, whose
    arrays may be views of its buffers)."""
    lo = int(w.phys[a]) if a < len(w) else 1 << 62
    hi = int(w.phys[b]) if b < len(w) else 1 << 62
    k = (w.key_phys >= lo) & (w.key_phys < hi) if len(w.key_phys) else slice(0, 0)
    def c(x: Any) -> Any:
        return x.copy() if copy else x
    return recordscan.Window(c(w.phys[a:b]), c(w.size[a:b]), c(w.queue_id[a:b]), c(w.queue_offset[a:b]),
                             c(w.sysflag[a:b]), c(w.store_ts[a:b]), c(w.tag_code[a:b]), c(w.topic_id[a:b]),
                             w.topics, c(w.key_hash[k]), c(w.key_phys[k]))


def _trim_queues(engine: Engine, valid_end: int, kept_from: int) -> int:
    return sum(trim_queue(engine.commitlog, engine.queues.queue(topic, qid), topic, qid, valid_end, kept_from)
               for topic, qid in queue_dirs(engine.layout))


def _damaged_regions(engine: Engine, rep: RecoveryReport, valid_end: int) -> list[tuple[int, int, str]]:
    """``(start, end, why)`` commit-log ranges of the damaged records the scan stepped over
    (one with no valid record after it: up to the log's recovered end ``valid_end``)."""
    regions = []
    log = engine.commitlog
    for file, off, reason in rep.damage:
        name = os.path.basename(file)
        if not F.is_segment_name(name) or os.path.dirname(file) != str(log.dir):
            continue
        start = int(name) + off
        nxt = log.find_record_after(start)
        regions.append((start, nxt if nxt is not None else max(start + 1, valid_end), reason))
    return sorted(regions)


def _fill_queue_holes(engine: Engine, rep: RecoveryReport, regions: list[tuple[int, int, str]]) -> None:
    """Give every consume-queue slot that no valid record claims (a zero-filled hole left by
    writing a later entry past the end: its record is damaged, or gone) an entry pointing at
    the damaged range before the next valid entry's record (``queuerebuild.fill_holes``).
    Readers then skip that offset as damaged instead of stopping at the hole for ever (a zero
    entry reads as the queue's end). Each filled slot is reported in ``rep.damage``."""
    import bisect
    starts = [r[0] for r in regions]

    def filler(phys: int) -> tuple[int, int]:
        i = bisect.bisect_left(starts, phys) - 1
        return (regions[i][0], regions[i][1] - regions[i][0]) if i >= 0 else (0, 1)

    for topic, qid in queue_dirs(engine.layout):
        q = engine.queues.queue(topic, qid)
        for k, path, at in fill_holes(q, filler):
            rep.damage.append((str(path), at, f"entry {k} has no valid record (damaged or removed); readers skip it"))
