"""Is a consume queue cut short? Looked at once per store handle and queue, when the handle
first needs the queue's end.

A queue's files are derived from the commit log (``consumequeue.py``). One cut by hand —
truncated, deleted, zeroed — in a store that was shut down cleanly leaves nothing for the
recovery at open to see: the checkpoint says every record was dispatched. A reader would
stop at the cut without a word, and a writer would give its next message a queue offset
that a record in the log already has.

So before a handle first reads a queue's end (:func:`reader_end`) or appends to it
(:func:`check_locked`, under the write lock; again when the segment it keeps open is found
shorter than it left it: ``ConsumeQueue.write_end``), it looks. The queue's files may show damage by
themselves (:func:`consumequeue.end_damage`). Its last entry must point at its own record (the
record names the queue and the entry's offset: one read of the log); entries past the last one
that does, sure to point at no record of theirs (:func:`foreign_below`: copies of its own
entries, bytes appended by hand), are damage too — the queue is rebuilt from the record of
its last sound entry on, and they are cut, so no writer numbers past them. Then the commit log after the record of the
queue's last entry that points home, up to the checkpoint's written end, is searched for a
record of the queue that the queue does not list: always its first ``NEAR_RECORDS`` records
(headers only: the queues of a store written lately), past them only on a sign —
damage, the queue's files changed since the last batch (their ``ctime`` against the
checkpoint's), or after the record of their last entry was stored (``mtime`` against its
store timestamp) — with the checks of ``store check`` (``entrysearch.first_unlisted``).

Damage found is repaired at once under the write lock — the queue rebuilt from the log from
that record on (``queuerebuild.py``), never by skipping a message — and said in one warning
line. A process that cannot write (a read-only store) says what is wrong and that ``mqctl
store recover`` repairs it, once, and reads what the queue has. ``store check`` reports the
same damage (exit 1) and ``store recover`` repairs it too.

Not seen: a queue whose last record lies far back in the log, cut within ``WRITE_SLACK_MS``
of its last write and then, before any reader came, another batch written (no sign is left;
``store check`` still finds it). Handles opened to change nothing (``store check``, ``top``:
``Store.open(recover=False)``) do not look.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from store.errors import StoreIOError
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.consumequeue import changed_since, end_damage, last_write_ms
from store.log.entrysearch import LogTail, first_unlisted, points_home, read_tail
from store.log.preflight import checkpoint_locked
from store.log.record import RecordError
from store.log.settings import queue_disagrees

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.commitlog import CommitLog
    from store.log.consumequeue import ConsumeQueue
    from store.log.engine import Engine

# Up to how many records of the log after the record of a queue's last entry are always
# searched for a record of the queue (headers only, big records' bodies skipped): a queue
# written lately, as the queues of a store just shut down are. Past that, only on a sign.
NEAR_RECORDS = 2048
# How much later than the store timestamp of its last entry's record a queue's last segment
# may have been written by the batch that wrote both (framing a large batch takes a while).
WRITE_SLACK_MS = 2000
# How many entries back from the end a record pointing home is looked for before the search
# starts at the topic's first record instead.
_HOME_LOOKBACK = 64


@dataclass(frozen=True, eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Finding:
    """A queue found cut short: ``why`` (one phrase), and where a rebuild starts: the log
    offset ``start`` (a record boundary) of the first record it must dispatch again."""

    why: str
    start: int
    stops_at: int | None = None   # the queue's end, when records of it lie past that


def queue_end(engine: Engine, topic: str, queue_id: int) -> int:
    """The max offset of a queue, looked at first if this handle has not yet (the front door's
    ``Store.max_offset``)."""
    q = engine.queues.queue(topic, queue_id)
    return q.max_offset() if q.end_checked else reader_end(engine, topic, queue_id, q)


def reader_end(engine: Engine, topic: str, queue_id: int, q: ConsumeQueue) -> int:
    """``q.max_offset()`` after this handle's one look at the queue's end (a reader's, lock
    free): damage found is repaired under the write lock, or, when this process cannot write,
    warned about once."""
    q.end_checked = True
    if not engine.check_ends:
        return q.max_offset()
    queue_disagrees(engine.layout, engine.settings, q.dir, q.segments())
    try:
        found = inspect(engine, topic, queue_id, q)
    except OSError:
        found = None   # (the files changed under the look: the readers' own checks stand)
    if found is not None:
        try:
            with engine.write_lock:
                checkpoint_locked(engine)
                _repair_locked(engine, topic, queue_id, q)
        except StoreIOError as exc:
            q.unrepaired_from = found.start
            then = "" if found.stops_at is None else f"; its messages from offset {found.stops_at} on are not read"
            engine.warn(f"consume queue {topic}/{queue_id} ({q.dir}) {found.why}; this process cannot repair "
                        f"it ({exc}){then}: run `mqctl store recover` (it rebuilds the queue from the commit log)")
    return q.max_offset()


def logged_end(engine: Engine, topic: str, queue_id: int) -> int:
    """:func:`queue_end`, or for a queue this process found cut short and could not repair (a
    read-only store: it reads what the queue has), the end the repair would give it: one past
    the last queue offset the commit log holds for it. What ``mqctl progress`` counts a
    group's lag to: the messages it has yet to get, which a consumer (it repairs the queue
    first) or ``store recover`` then serves. Reads the log from where a repair would start."""
    end = queue_end(engine, topic, queue_id)
    q = engine.queues.queue(topic, queue_id)
    cp = ckpt.read(engine.layout.checkpoint) if q.unrepaired_from is not None else None
    if cp is None or q.unrepaired_from is None:
        return end
    from store.log.queuerebuild import end_in_log  # (a damaged queue on a read-only store only)
    return max(end, end_in_log(engine.commitlog, engine.topics(), topic, queue_id, q.unrepaired_from,
                               cp.written_end))


def check_locked(engine: Engine, topic: str, queue_id: int, q: ConsumeQueue) -> None:
    """The same look by a writer about to append to ``q`` (write lock held, the checkpoint
    checked): a queue cut short is rebuilt before the batch takes its offsets."""
    q.end_checked = True
    if engine.check_ends:
        queue_disagrees(engine.layout, engine.settings, q.dir, q.segments())
        _repair_locked(engine, topic, queue_id, q)


def _repair_locked(engine: Engine, topic: str, queue_id: int, q: ConsumeQueue) -> None:
    found = inspect(engine, topic, queue_id, q)   # (again: another process may have repaired it)
    if found is None:
        return
    cp = ckpt.read(engine.layout.checkpoint)
    if cp is None:
        return
    from store.log.queuerebuild import rebuild_queue  # (a damaged queue only: a send's check loads none of it)
    written, cut = rebuild_queue(engine.commitlog, engine.topics(), q, topic, queue_id, found.start,
                                 cp.written_end)
    done = [f"{written} entr{'y' if written == 1 else 'ies'} rebuilt"] + ([f"{cut} cut"] if cut else [])
    engine.warn(f"consume queue {topic}/{queue_id} ({q.dir}) {found.why}: repaired from the commit log "
                f"({', '.join(done)}; it now ends at offset {q.max_offset()})")


def inspect(engine: Engine, topic: str, queue_id: int, q: ConsumeQueue) -> Finding | None:
    """What is wrong with the end of ``q``, or None (see the module docstring)."""
    try:
        st = os.stat(engine.layout.checkpoint)
    except FileNotFoundError:
        return None   # nothing written yet, or recovery at open rebuilds every queue
    ck_ns = st.st_ctime_ns
    # The looks at a handle's queues (a member's, one after another as it joins) read the
    # checkpoint once while it stays as it was. One rewritten unseen in between (the same
    # times: within a clock tick) is read as it was a moment before: every queue is still
    # read after the checkpoint it is checked against.
    key = (st.st_ino, st.st_size, st.st_mtime_ns, ck_ns)
    known = engine.ends_checkpoint
    if known is not None and known[0] == key:
        cp = known[1]
    else:
        cp = ckpt.read(engine.layout.checkpoint)
        engine.ends_checkpoint = (key, cp)
    cfg = engine.find_topic(topic)
    if cp is None or cfg is None or queue_id >= cfg.queues:
        return None
    log = engine.commitlog
    # Entries of every record below the written end were written before the checkpoint that
    # says so: the queue is read after it.
    end = cp.written_end
    damage = end_damage(q)
    m = q.max_offset()
    first = damage[0] if damage is not None else m
    start, listed = max(cfg.created_offset, log.min_offset()), q.min_offset()
    sound, home_end = foreign_below(log, q, topic, queue_id, first)
    if home_end is not None:
        start = home_end
    if sound < first:
        # The queue ends with entries that point at no record of theirs (copies of its own
        # entries, bytes put there by hand): it ends where its last sound entry does, and the
        # log is searched from that entry's record on (the rebuild cuts the rest).
        return Finding(f"ends at offset {m}, but its entries from offset {sound} on point at no record "
                       f"of theirs in the commit log", start)
    for k in ([] if home_end is not None else range(first - 1, max(listed, first - _HOME_LOOKBACK) - 1, -1)):
        e = q.entry(k)
        if points_home(log, topic, queue_id, k, e):
            assert e is not None
            start = e[0] + e[1]
            break
    tail = _tail(engine, start, end)
    hit = tail.first_unlisted(log, topic, queue_id, m, start)
    if hit is None and not tail.whole and (
            damage is not None or changed_since(q, ck_ns) or _written_after_last(engine, q, m)):
        hit = first_unlisted(log, engine.topics(), topic, queue_id, m, start, end)
    if hit is not None:
        why = (f"ends at offset {m}, but the commit log holds {topic}/{queue_id}@{hit[1]} "
               f"(at commit-log offset {hit[0]})")
        return Finding(why if damage is None else f"{damage[1]}; it {why}", start, m)
    return None if damage is None else Finding(damage[1], start)


def foreign_below(log: CommitLog, q: ConsumeQueue, topic: str, queue_id: int, first: int) -> tuple[int, int | None]:
    """``(k, end)``: the entries ``[k, first)`` of ``q`` are sure to point at no record of
    theirs, and ``end`` is where the record of entry ``k - 1`` ends when that entry points home
    (None when no entry is left below, or it is in doubt). ``k == first`` in a sound queue: its
    last entry points home, one read of the log.

    Sure: an entry of invalid form, one whose record would reach past the log's end, or one at
    an intact record of another queue or queue offset. In doubt, and so a sound end: an entry
    at bytes that are not an intact record inside the log (a damaged record, or one removed
    by retention: readers skip it, and a repair would lose its queue offset)."""
    low = q.min_offset()
    k = first
    while k > low:
        e = q.entry(k - 1)
        if e is not None:
            try:
                msg = log.read(e[0], e[1])
            except (RecordError, OSError):
                if e[0] + e[1] <= log.end():
                    return k, None
            else:
                if msg.topic == topic and msg.queue_id == queue_id and msg.queue_offset == k - 1:
                    return k, e[0] + e[1]
        k -= 1
    return k, None


def _tail(engine: Engine, start: int, end: int) -> LogTail:
    """The headers of the log's records in ``[start, end)``, read once for every queue this
    handle looks at against the same ``end``: a range that begins earlier is read only up to
    where the one already read begins."""
    have = engine.log_tail
    if have is None or have.end != end:
        have = read_tail(engine.commitlog, start, end, NEAR_RECORDS)
    elif start < have.start:
        more = read_tail(engine.commitlog, start, have.start, NEAR_RECORDS)
        have = (LogTail(start, end, more.heads + have.heads, have.whole) if more.whole
                else read_tail(engine.commitlog, start, end, NEAR_RECORDS))
    engine.log_tail = have
    return have


def _written_after_last(engine: Engine, q: ConsumeQueue, m: int) -> bool:
    """Whether the queue's last segment was written well after the record of its last entry
    was stored (by hand, by a repair, by a failed batch's undo: then the log is asked)."""
    if m <= q.min_offset():
        return False
    e = q.entry(m - 1)
    written = last_write_ms(q)
    if e is None or written is None:
        return False
    raw = engine.commitlog.read_bytes(e[0] + F.OFF_STORE_TIMESTAMP, 8)
    return len(raw) == 8 and written > int.from_bytes(raw, "big", signed=True) + WRITE_SLACK_MS
