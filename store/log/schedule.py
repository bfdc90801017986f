"""Delayed delivery: RocketMQ's delay levels, and the scheduler that delivers due messages.

A delayed message is stored in ``SCHEDULE_TOPIC_XXXX`` instead of its topic, with the real
topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` and the delivery time in ``TIMER_DELIVER_MS``;
its consume-queue tag code holds the delivery time (RocketMQ's trick), so the scheduler can
tell what is due from the consume queue alone. Level ``k`` (1-18) lives in queue ``k - 1``:
every message of a level has the same delay, so each such queue is in delivery order and the
scheduler stops at the first message that is not due. Free durations (``--delay 90s``) share
queue 18, which is not in delivery order: the scheduler looks at every pending entry there and
remembers which ones it delivered past its offset.

There is no broker thread: any consumer process (and ``mqctl schedule``) runs
:func:`deliver_due` now and then under a non-blocking service lock, so one process does a pass
at a time and a killed one is replaced at once.

Progress (``config/delayOffset.json``, written atomically with ``.bak``; ``positions.py``)::

    {"offsetTable": {"<queueId>": <next offset>}, "delivered": {"18": [<offset>, ...]}, ...}

Delivery is exactly-once, unlike RocketMQ's ScheduleMessageService (whose crash between a
delivery and the saved offset delivers again): a pass writes the copies it delivers and its
progress past them in one atomic batch (``positions.DelayProgress``), so an exactly-once
stage's retries come back once. Crash point: ``schedule-after-deliver`` (the batch written,
``delayOffset.json`` not).
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

from store import names
from store.errors import UsageError
from store.failpoints import failpoint
from store.fsutil import ensure_dir
from store.log.format import DELAY_LEVELS, FREE_QUEUE
from store.log.record import (
    PROP_DELAY,
    PROP_DELIVER_MS,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    Draft,
    Message,
    tags_code,
)

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterator

    from store.log.messagestore import Store

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def level_delays_ms(spec: str = DELAY_LEVELS) -> list[int]:
    """Milliseconds of each level, level 1 first."""
    return [int(tok[:-1]) * _UNITS[tok[-1]] for tok in spec.split()]


LEVEL_MS = level_delays_ms()


def parse_delay(text: str) -> tuple[int, int]:
    """``--delay``: ``(level, delay_ms)``; level 0 = a free duration.

    A bare integer is a RocketMQ delay level (1-18; the broker clamps a higher one to 18, we
    refuse it as we refuse 0, so a typo is not silently a two-hour delay);
    anything else is a duration in the one duration grammar (:func:`store.timeparse.
    parse_duration`: ``500ms``, ``1.5s``, ``90s``, ``1h30m``). A bare decimal is refused
    rather than guessed at: ``2`` is a level, ``2.5`` is not, and ``2.5s`` says what it means.
    """
    from store.timeparse import MAX_TIME_MS, parse_duration
    s = text.strip()
    if s.isascii() and s.isdigit():
        level = int(s)
        if not 1 <= level <= len(LEVEL_MS):
            raise UsageError(f"--delay level must be 1-{len(LEVEL_MS)} (or a duration like 90s), not {s}")
        return level, LEVEL_MS[level - 1]
    if s.replace(".", "", 1).isascii() and s.replace(".", "", 1).isdigit():
        raise UsageError(f"--delay {text!r}: a bare number is a delay level 1-{len(LEVEL_MS)}; "
                         f"give a unit for a duration, e.g. {s}s")
    try:
        ms = parse_duration(s)
    except UsageError:
        raise UsageError(f"--delay {text!r}: give a level 1-{len(LEVEL_MS)} or a duration like "
                         "500ms, 1.5s, 90s, 5m, 1h30m, 2d") from None
    if ms > MAX_TIME_MS - int(time.time() * 1000):
        raise UsageError(f"--delay {text!r}: due after the year 9999")
    return 0, ms


def delay_draft(draft: Draft, delay: tuple[int, int], store: Store, now_ms: int | None = None) -> Draft:
    """Turn ``draft`` into its parked form in the schedule topic."""
    level, ms = delay
    if ms <= 0:
        return draft
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    deliver = now_ms + ms
    if not draft.born_timestamp:  # the delay counts from birth, as the receiver sees it
        draft = replace(draft, born_timestamp=now_ms)
    with store.write_lock():
        cfg = store.ensure_topic_locked(draft.topic)
    qid = store.select_queue(cfg, draft)
    props = dict(draft.properties)
    props[PROP_REAL_TOPIC] = draft.topic
    props[PROP_REAL_QID] = str(qid)
    props[PROP_DELIVER_MS] = str(deliver)
    if level:
        props[PROP_DELAY] = str(level)
    return replace(draft, topic=names.SCHEDULE_TOPIC, properties=props,
                   queue_id=level - 1 if level else FREE_QUEUE, sharding_key=None, tags_code=deliver)


def restore_draft(m: Message) -> Draft:
    """The message a parked one becomes when it is due."""
    props = {k: v for k, v in m.properties.items()
             if k not in (PROP_REAL_TOPIC, PROP_REAL_QID, PROP_DELIVER_MS, PROP_DELAY)}
    return Draft(topic=m.properties[PROP_REAL_TOPIC], body=m.body, properties=props,
                 queue_id=int(m.properties.get(PROP_REAL_QID, "-1")), flag=m.flag,
                 born_timestamp=m.born_timestamp, reconsume_times=m.reconsume_times,
                 tags_code=tags_code(props.get(PROP_TAGS)))


def deliver_due(store: Store, now_ms: int | None = None, max_messages: int = 10_000) -> int:
    """One scheduler pass, if no other process is running one. Returns messages delivered."""
    if not store.has_topic(names.SCHEDULE_TOPIC):
        return 0
    from store.flock import close_kept, keep, try_flock
    lock_path = store.layout.service_lock("schedule")
    ensure_dir(lock_path.parent)
    fd = keep(os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))   # (not a forked child's)
    try:
        if not try_flock(fd, lock_path):
            return 0
        return _pass(store, int(time.time() * 1000) if now_ms is None else now_ms, max_messages)
    finally:
        close_kept(fd)


def _pass(store: Store, now: int, budget: int) -> int:
    # (the progress file's module only where delayed messages exist: not in every consumer's start)
    from store.log.positions import DelayProgress, load_delay_progress, save_delay_progress
    state = load_delay_progress(store.layout, store.warn)
    delivered = 0
    changed = False
    for qid in range(store.topic(names.SCHEDULE_TOPIC).queues):
        key = str(qid)
        start = state["offsetTable"].get(key, 0)
        end = store.max_offset(names.SCHEDULE_TOPIC, qid)
        if start >= end:
            continue
        done = set(state["delivered"].get(key, []))
        q = store.queue(names.SCHEDULE_TOPIC, qid)
        off, new_start = start, start
        batch: list[int] = []
        while off < end and len(batch) < budget - delivered:
            entries = q.read_entries(off, min(256, end - off))
            if not entries:
                why = q.invalid_at(off)
                if why is None:
                    break
                # an entry with no record (damage): passed over, as consumers do, never
                # waited on (it would hold every later delayed message back for ever)
                store.warn(f"delay scheduler: skipping {names.SCHEDULE_TOPIC}/{qid}@{off}: {why}")
                done.add(off)
                if off == new_start:
                    new_start += 1
                    state["offsetTable"][key] = new_start
                    changed = True
                off += 1
                continue
            for i, (_phys, _size, due) in enumerate(entries):
                o = off + i
                if o in done:
                    if o == new_start:
                        new_start += 1
                    continue
                if _due(store, qid, o, due, now) <= now:
                    batch.append(o)
                elif qid != FREE_QUEUE:
                    break
            else:
                off += len(entries)
                continue
            break
        if not batch:
            continue
        drafts = []
        ready: list[int] = []
        for o in batch:
            res = store.pull(names.SCHEDULE_TOPIC, qid, o, 1)
            mine = [m for m in res.messages if m.queue_offset == o]
            if not mine:
                why = "; ".join(w for off, w in res.damaged if off == o) or "no record"
                store.warn(f"delay scheduler: skipping {names.SCHEDULE_TOPIC}/{qid}@{o}: {why}")
            elif _record_due(mine[0], now) > now:
                # the entry's code said due and its record says not (a damaged consume queue):
                # the record decides; a level's later messages wait behind it, in order
                if qid != FREE_QUEUE:
                    break
                continue
            ready.append(o)
            drafts += [restore_draft(m) for m in mine]
        batch = ready
        if not batch:
            continue
        delivered += len(batch)
        done.update(batch)
        while new_start in done:
            new_start += 1
        state["offsetTable"][key] = new_start
        state["delivered"][key] = sorted(o for o in done if o >= new_start)
        # the copies and the progress past them in one atomic write (positions.DelayProgress)
        sealed = store.put(drafts, commit=DelayProgress(qid, new_start, batch))
        state["progressRecords"] = sealed[-1].queue_offset + 1
        changed = True
    if changed:
        failpoint("schedule-after-deliver")
        store.sync_written()   # the delivered copies first, then the file past them
        save_delay_progress(store.layout, state)
    return delivered


def _due(store: Store, qid: int, offset: int, code: int, now: int) -> int:
    """When entry ``offset`` of level queue ``qid`` is due: its consume-queue tag code, unless
    that is a time no message of the level can have (past now + the level's delay: a damaged
    entry; derived data is not trusted over the log), then its record's. (The free queue's
    codes may lie years ahead; a wrong one there is caught only once it says due.)"""
    if qid == FREE_QUEUE or code <= now + LEVEL_MS[qid]:
        return code
    m = _parked(store, qid, offset)
    # (no record to deliver: the pass passes it over, saying why, never waits on it)
    return now if m is None else _record_due(m, code)


def _parked(store: Store, qid: int, offset: int) -> Message | None:
    """The record of entry ``offset`` of schedule queue ``qid``; None when it cannot be read."""
    res = store.pull(names.SCHEDULE_TOPIC, qid, offset, 1)
    return next((m for m in res.messages if m.queue_offset == offset), None)


def _record_due(m: Message, default: int) -> int:
    """The delivery time a parked message's record carries (``TIMER_DELIVER_MS``)."""
    try:
        return int(m.properties[PROP_DELIVER_MS])
    except (KeyError, ValueError):
        return default


def next_due(store: Store) -> int | None:
    """The earliest delivery time still pending (for sleeping until then), or None.

    Asked after a pass, so an entry whose code says due by now is one the pass left: its
    budget spent, another process's pass under way, or its record saying later (a code
    flipped down). Its record decides (records are read until one says due): by the code,
    a waiting caller would wake for a pass that delivers nothing, at every wake-up until then."""
    if not store.has_topic(names.SCHEDULE_TOPIC):
        return None
    from store.log.positions import load_delay_progress
    state = load_delay_progress(store.layout, store.warn)
    now = int(time.time() * 1000)
    best = None
    for qid in range(store.topic(names.SCHEDULE_TOPIC).queues):
        start = state["offsetTable"].get(str(qid), 0)
        end = store.max_offset(names.SCHEDULE_TOPIC, qid)
        done = set(state["delivered"].get(str(qid), []))
        q = store.queue(names.SCHEDULE_TOPIC, qid)
        off = start
        while off < end:
            entries = q.read_entries(off, min(256, end - off))
            if not entries:
                break
            for i, (_p, _s, due) in enumerate(entries):
                if off + i not in done:
                    due = _due(store, qid, off + i, due, now)
                    if due <= now and (best is None or best > now):   # (a backlog: one record read)
                        m = _parked(store, qid, off + i)
                        due = due if m is None else _record_due(m, due)
                    best = due if best is None else min(best, due)
                    if qid != FREE_QUEUE:
                        break
            else:
                off += len(entries)
                continue
            break
    return best


def _pending(store: Store, limit: int) -> Iterator[tuple[int, int, int]]:
    """``(queue id, offset, delivery time)`` of each delayed message not delivered yet, from
    the consume queues' tag codes and ``delayOffset.json``; at most ``limit`` entries per
    queue are looked at."""
    from store.log.positions import load_delay_progress
    state = load_delay_progress(store.layout, store.warn)
    for qid in range(store.topic(names.SCHEDULE_TOPIC).queues):
        start = state["offsetTable"].get(str(qid), 0)
        end = min(store.max_offset(names.SCHEDULE_TOPIC, qid), start + limit)
        done = set(state["delivered"].get(str(qid), []))
        q = store.queue(names.SCHEDULE_TOPIC, qid)
        off = start
        while off < end:
            entries = q.read_entries(off, min(4096, end - off))
            if not entries:
                break
            for i, (_p, _s, deliver_at) in enumerate(entries):
                if off + i not in done:
                    yield qid, off + i, deliver_at
            off += len(entries)


def backlog(store: Store, now_ms: int, limit: int = 100_000) -> tuple[int, int]:
    """(pending, due): delayed messages not delivered yet, and those of them whose delivery
    time has come (a scheduler should have moved them). Read from the consume queues alone
    (see :func:`_pending`)."""
    if not store.has_topic(names.SCHEDULE_TOPIC):
        return 0, 0
    pending = due = 0
    for _qid, _off, deliver_at in _pending(store, limit):
        pending += 1
        due += deliver_at <= now_ms
    return pending, due


def scheduled_for(store: Store, topics: set[str], limit: int = 100_000) -> dict[tuple[str, int], int]:
    """Delayed messages not delivered yet, counted by the ``(topic, queue)`` they will be
    delivered to, for the destinations in ``topics``: a consumer's retry waiting out its delay
    level is in no queue of its group yet (``mqctl progress`` shows it beside the lag). The
    destination is a property of the record, so each pending record is read (a pull per run
    of pending offsets); damaged ones are not counted."""
    if not topics or not store.has_topic(names.SCHEDULE_TOPIC):
        return {}
    by_queue: dict[int, list[int]] = {}
    for qid, off, _at in _pending(store, limit):
        by_queue.setdefault(qid, []).append(off)
    counts: dict[tuple[str, int], int] = {}
    for qid, offsets in by_queue.items():
        wanted, i = set(offsets), 0
        while i < len(offsets):
            res = store.pull(names.SCHEDULE_TOPIC, qid, offsets[i], 256)
            for m in res.messages:
                real = m.properties.get(PROP_REAL_TOPIC)
                if m.queue_offset in wanted and real in topics:
                    key = (real, int(m.properties.get(PROP_REAL_QID, "0")))
                    counts[key] = counts.get(key, 0) + 1
            if res.next_offset <= offsets[i]:
                i += 1   # nothing readable there: go on with the next pending offset
                continue
            while i < len(offsets) and offsets[i] < res.next_offset:
                i += 1
    return counts
