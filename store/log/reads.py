"""Reads of single messages and short runs: a queue's messages from an offset, a message by
its commit-log offset, by id, by key, and a queue's offset for a time.

Every record read here passes :func:`store.log.record.decode`'s checks (its CRC, and its own
commit-log offset, queue and topic against the consume-queue entry that led to it). A record
that fails is never returned: it is listed as damaged (``pull``) or, for a person asking for
that message (``strict``), raised as :class:`CorruptionError`. Bulk reads of many records as
columns are ``columns.py``'s.
"""
from __future__ import annotations

from store.errors import CorruptionError, MessageNotFoundError, io_error
from store.log import format as F
from store.log import indexfence
from store.log.entrysearch import find_record, records_with_uniq_key
from store.log.queueends import reader_end
from store.log.record import PROP_TAGS, Message, RecordError, decode, decode_offset_msg_id, is_msg_id
from store.log.results import PullResult
from store.log.spans import fetch_span

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from store.log.commitlog import CommitLog
    from store.log.engine import Engine


def get(engine: Engine, commitlog_offset: int, size: int | None = None) -> Message:
    try:
        return engine.commitlog.read(commitlog_offset, size)
    except RecordError as exc:
        raise MessageNotFoundError(
            f"no valid message at commit-log offset {commitlog_offset}: {exc.reason}") from exc
    except OSError as exc:
        raise io_error(exc, f"read commit log at {commitlog_offset}") from exc


def pull(engine: Engine, topic: str, queue_id: int, offset: int, max_count: int = 32,
         tag_codes: frozenset[int] | None = None, tags: frozenset[str] | None = None,
         max_bytes: int = 4 * 1024 * 1024) -> PullResult:
    """Up to ``max_count`` messages of one queue from ``offset``.

    Tag filtering is done exactly on the record (hash collisions removed), as RocketMQ's
    client does after its broker's look at the consume queue's tag code. That code is derived
    data and never enough to pass a message over: an entry whose code is not the filter's
    still has its record's TAGS read (:func:`_may_be_tagged`), so one flipped bit in a consume queue
    cannot make a filtered group skip a message for good; only a record that cannot be read
    is passed over on the code's word. A record that fails its CRC is never returned: it is
    listed in ``damaged`` and skipped."""
    q = engine.queues.queue(topic, queue_id)
    # (this handle's first look at a queue sees to its end: its file cut short?)
    max_off = q.max_offset() if q.end_checked else reader_end(engine, topic, queue_id, q)
    if offset >= max_off:
        return PullResult([], offset, max_off)
    entries = q.read_entries(offset, min(max_count, max_off - offset))
    if not entries:
        why = q.invalid_at(offset)
        if why is None:
            return PullResult([], offset, max_off)
        # A bad entry is derived data: its record is looked for in the log (entrysearch.py)
        found = find_record(engine.commitlog, q, topic, queue_id, offset)
        if found is None:
            return PullResult([], offset + 1, max_off, [(offset, why)])
        keep = tags is None or found.tags in tags
        return PullResult([found] if keep else [], offset + 1, max_off)
    msgs: list[Message] = []
    damaged: list[tuple[int, str]] = []
    log = engine.commitlog
    entries, lo, data = fetch_span(log, entries, max_bytes)
    span = memoryview(data)   # decode() reads a view in place
    span_len = len(span)
    nxt = offset
    total_bytes = 0
    qoff = offset - 1
    for phys, size, tcode in entries:
        qoff += 1
        nxt = qoff + 1
        other = tag_codes is not None and tcode not in tag_codes
        if other and (tags is None or not _may_be_tagged(log, span, lo, phys, size, tags)):
            continue
        try:
            start = phys - lo
            if 0 <= start and start + size <= span_len:
                m = decode(span, start, start + size)
                if m.commitlog_offset != phys:
                    raise RecordError("record offset does not match its consume-queue entry")
            else:
                m = log.read(phys, size)
            if m.queue_offset != qoff or m.queue_id != queue_id or m.topic != topic:
                raise RecordError("record does not match its consume-queue entry")
        except RecordError as exc:
            if other:   # (not the filter's by its code, and no record says otherwise)
                continue
            found = find_record(log, q, topic, queue_id, qoff)
            if found is None:
                damaged.append((qoff, f"commit-log offset {phys}: {exc.reason}"))
                continue
            m = found
        if tags is not None and m.tags not in tags:
            continue
        msgs.append(m)
        total_bytes += size
        if total_bytes >= max_bytes:
            break
    return PullResult(msgs, nxt, max_off, damaged)


_TAGS = PROP_TAGS.encode() + F.NAME_VALUE_SEP_B


def _may_be_tagged(log: CommitLog, span: memoryview, lo: int, phys: int, size: int, tags: frozenset[str]) -> bool:
    """Whether the record at ``phys`` may carry one of ``tags``: its TAGS property read through
    the lengths in its header, without decoding (or checking) it; from ``span`` (the log from
    ``lo``) where it holds the record, else with two small reads (its header, then what follows
    its body), never the body. A record whose lengths do not hold together may: the caller
    decodes it (and checks its CRC) before it trusts it either way."""
    hs = F.RECORD_HEADER_SIZE
    if size < F.RECORD_FIXED_SIZE:
        return True
    start = phys - lo
    inside = 0 <= start and start + size <= len(span)
    head = span[start:start + hs] if inside else log.read_bytes(phys, hs)
    if len(head) < hs:
        return True
    after_body = hs + int.from_bytes(head[hs - 4:hs], "big")   # the body's length: the header's last field
    if after_body >= size:
        return True
    end = size - after_body
    rest = bytes(span[start + after_body:start + size]) if inside else log.read_bytes(phys + after_body, end)
    if len(rest) < end:
        return True   # (cut short: decoded and judged by the caller)
    props_at = 1 + rest[0] + 2   # past the topic's length byte, topic, props' length
    if props_at > len(rest):
        return True
    value = F.property_value(rest[props_at:], _TAGS)
    if value is None:
        return False   # untagged: only "*" (no filter) takes it
    return value.decode("utf-8", "replace") in tags


def find(engine: Engine, msg_id: str, strict: bool = False) -> Message:
    """A message by offset id or by unique key (offset id first, as mqadmin).

    ``MessageNotFoundError`` when no stored message has it (or ``msg_id`` is not 32 hex
    digits). A damaged record is never served; with ``strict`` (a person asking for this
    message: ``mqctl msg show``) it is not passed off as missing either, but raised as
    ``CorruptionError``."""
    typed = msg_id.strip()
    if not is_msg_id(typed):
        # exit 3 like any id the store does not have, saying what an id looks like
        raise MessageNotFoundError(f"no message with id {typed!r} (a message id is 32 hex digits: "
                                   "an offset id or a unique key)")
    msg_id = id_as_stored(typed)
    damage: list[tuple[int, str]] = []
    off = decode_offset_msg_id(msg_id)
    if off is not None:
        m = _read_live(engine, off, damage)
        if m is not None and m.msg_id == msg_id.upper():
            return m
    _look_at_index(engine)
    if indexfence.rebuilding(engine.index):   # a rebuild was cut short: its files may lack the key
        for phys in records_with_uniq_key(engine.commitlog, msg_id):
            m = _read_live(engine, phys, damage)
            if m is not None and m.uniq_key == msg_id:
                return m
    else:
        found = _indexed(engine, F.uniq_key_of(msg_id), 64, lambda m: m.uniq_key == msg_id, 1, damage)
        if found:
            return found[0]
    if damage and strict:
        raise _damage_error(engine, *damage[0])
    raise MessageNotFoundError(f"no message with id {typed!r}")


def damaged_record_key(engine: Engine, phys: int, size: int) -> str | None:
    """The unique key of the damaged record at ``phys`` (``size`` bytes, as the consume-queue
    entry that led to it says), when the key index confirms it; else None.

    The key is read from the record's own bytes past its failed checks, a hint only (a flipped
    bit may have changed it), and stands only when one of the index's entries for it leads to
    ``phys``: those were written from the record while it was sound. Nothing else of the
    record is used: whoever asks reads what it needs from the sound records of that key."""
    if indexfence.rebuilding(engine.index):   # (a rebuild cut short: its files may lack the key)
        return None
    try:
        raw = engine.commitlog.read_bytes(phys, size)
        key = decode(raw, 0, len(raw), verify=False).uniq_key
    except (RecordError, IndexError, OSError):   # (lengths that run past the record: no key)
        return None
    if not key or not is_msg_id(key):
        return None
    _look_at_index(engine)
    return key if phys in lookup(engine, F.uniq_key_of(key), _CONFIRM_LIMIT) else None


_CONFIRM_LIMIT = 4096   # index entries of one key looked through (a transaction's copies and ops)


def id_as_stored(text: str) -> str:
    """A message or transaction id as typed, in the case ids are written in: hex digits in upper
    case (a sender's own id, ``msg_id=``, is stored upper case too, so none is in lower case)."""
    return text.upper() if is_msg_id(text) else text


def find_all(engine: Engine, uniq_key: str, limit: int = 64) -> list[Message]:
    """Every stored copy carrying a unique key (retries and DLQ copies keep it)."""
    _look_at_index(engine)
    out = _indexed(engine, F.uniq_key_of(uniq_key), limit, lambda m: m.uniq_key == uniq_key, limit, [])
    return sorted(out, key=lambda m: m.commitlog_offset)


def query_key(engine: Engine, topic: str, key: str, limit: int = 64,
              damaged: list[CorruptionError] | None = None) -> list[Message]:
    """Messages of ``topic`` whose KEYS contain ``key``, newest first, via the index (not
    those of a topic of that name deleted since: ``TopicConfig.holds``).
    Damaged records are skipped; ``damaged`` (``mqctl msg query``, which shows the others and
    then fails) gets a ``CorruptionError`` naming each one the index led to."""
    _look_at_index(engine)
    damage: list[tuple[int, str]] = []
    cfg = engine.find_topic(topic)
    # (a message of the topic deleted before this one was made is not this topic's:
    # its queue offset names another message now, or none)
    out = _indexed(engine, F.key_of(topic, key), limit * 4, lambda m: (
        m.topic == topic and key in m.keys and cfg is not None and cfg.holds(m.commitlog_offset, m.queue_id)),
        limit, damage)
    if damaged is not None:
        damaged += [_damage_error(engine, *d) for d in damage]
    return out


def _indexed(engine: Engine, key: str, limit: int, wanted: Callable[[Message], bool], want: int,
             damage: list[tuple[int, str]]) -> list[Message]:
    """The records the index's hits for ``key`` (at most ``limit``) lead to that are ``wanted``,
    at most ``want``, newest first; ``damage`` gets the damaged records they lead to.

    A record there of another key is a hash collision (skipped), and a hit below the log's
    oldest segment one retention removed. But a hit inside the log's range where no record
    starts (or past the log's end) is damage of the index, not of the log, which a
    sound-looking file hides (a phyOffset's bit flipped): unless the answer is complete
    without it, its file is repaired from the log like a damaged chain (``indexends.heal``;
    ``CorruptionError``, exit 5, where this process cannot) and the lookup made once more,
    whose answer stands (no second repair). The normal case reads nothing more."""
    strays: list[int] | None = []
    while True:
        sources: list[int] = []
        hits = lookup(engine, key, limit, sources)
        out: list[Message] = []
        dmg: list[tuple[int, str]] = []
        stray: tuple[int, int] | None = None
        for phys, base in zip(hits, sources):
            m = _read_live(engine, phys, dmg, strays)
            if m is None:
                if strays and stray is None:
                    stray = (phys, base)
            elif wanted(m):
                out.append(m)
                if len(out) >= want:
                    break
        if stray is None or len(out) >= want:
            damage += dmg
            return out
        _heal_stray(engine, key, limit, *stray)
        strays = None


def _heal_stray(engine: Engine, key: str, limit: int, phys: int, base: int) -> None:
    """Repair index file ``base``, whose entry for ``key`` leads to ``phys``, where no record starts."""
    from store.log.indexends import heal

    def still() -> bool:   # (under the write lock: another process may have repaired it)
        sources: list[int] = []
        hits = engine.index.lookup(key, limit, None, sources)
        strays: list[int] = []
        return (phys, base) in zip(hits, sources) and _read_live(engine, phys, [], strays) is None and bool(strays)
    end = engine.commitlog.end()
    where = f"past the commit log's end ({end})" if phys >= end else "where no record starts"
    heal(engine, base, f"has an entry at commit-log offset {phys}, {where}", still)


def lookup(engine: Engine, key: str, limit: int, sources: list[int] | None = None) -> list[int]:
    """``KeyIndex.lookup``, never "not found" from a damaged file: one whose walk finds it
    damaged is repaired from the log first (``indexends.heal``; ``CorruptionError``, exit 5,
    where this process cannot), and the lookup made again. ``sources``: as ``KeyIndex.lookup``'s."""
    damaged: list[tuple[int, str]] = []
    hits = engine.index.lookup(key, limit, damaged, sources)
    if not damaged:
        return hits
    from store.log.indexends import heal

    def still() -> bool:
        again: list[tuple[int, str]] = []
        engine.index.lookup(key, limit, again)
        return bool(again)
    heal(engine, damaged[0][0], damaged[0][1], still)
    damaged.clear()
    if sources is not None:
        sources.clear()
    hits = engine.index.lookup(key, limit, damaged, sources)
    if damaged:
        raise CorruptionError(str(engine.index.path(damaged[0][0])), 0,
                              f"key index file damaged ({damaged[0][1]}): it cannot answer; run mqctl store recover")
    return hits


def _look_at_index(engine: Engine) -> None:
    """Before this handle's first lookup: does the index cover the log (``indexends.py``)?"""
    if not engine.index_checked:
        from store.log.indexends import before_lookup
        before_lookup(engine)


def _read_live(engine: Engine, phys: int, damage: list[tuple[int, str]],
               strays: list[int] | None = None) -> Message | None:
    """The record at ``phys``; None when it is not there (cleaned away, past the end) or
    damaged — damage inside the live log is noted in ``damage``. ``strays`` (an index's hits)
    gets ``phys`` when it is at or past the log's oldest segment and no record starts there."""
    log = engine.commitlog
    try:
        return log.read(phys)
    except (RecordError, OSError) as exc:
        # damage: a record starts here (its magic code says so) inside the live log, and
        # does not check out; anything else (an offset id that points between records,
        # a segment cleaned away) is simply not there
        if phys < log.min_offset():
            return None
        if phys >= log.end():
            if strays is not None:
                strays.append(phys)
            return None
        try:
            head = log.read_bytes(phys, 8)
        except OSError:
            return None
        if len(head) < 8:
            return None   # (a segment missing or cut short: the log's damage, not the index's)
        # Zeros are no record start either: the index's damage (a flipped phyOffset landing in
        # a segment's padding, say), healed from the log; a zeroed log answers the same after.
        if int.from_bytes(head[4:], "big") in (F.MAGIC_V1, F.MAGIC_V2):
            damage.append((phys, str(exc)))
        elif strays is not None:
            strays.append(phys)
        return None


def _damage_error(engine: Engine, phys: int, why: str) -> CorruptionError:
    log = engine.commitlog
    path = log.segment_path(log.segment_of(phys))
    return CorruptionError(str(path), phys - log.segment_of(phys),
                           f"damaged message: {why} (run: mqctl store check)")


def store_time(engine: Engine, topic: str, queue_id: int, offset: int, warn: bool = True) -> int | None:
    """The store time of a queue's message at ``offset``, from its record only once the record
    checks out (as :func:`pull` reads it: its CRC, its place against the entry, the log searched
    when the entry is bad). None when the message is not there (cleaned away, past the end) or
    its record is damaged: a damaged record's time bytes are not served (a flipped bit there
    was a date in 1970 or an overflow); with ``warn``, one warning names the file and offset."""
    q = engine.queues.queue(topic, queue_id)
    log = engine.commitlog
    e = q.entry(offset)
    if e is None and q.invalid_at(offset) is None:
        return None
    if e is not None and e[0] < log.min_offset():
        return None   # (its segment cleaned away: the message is gone, not damaged)
    why = "its consume-queue entry is invalid"
    if e is not None:
        try:
            m = log.read(e[0], e[1])
            if m.queue_offset == offset and m.queue_id == queue_id and m.topic == topic:
                return m.store_timestamp
            why = "record does not match its consume-queue entry"
        except RecordError as exc:
            why = exc.reason
    try:
        found = find_record(log, q, topic, queue_id, offset)
    except CorruptionError as exc:   # (the log holds no such record: the queue names a gone one)
        found, where = None, str(exc)
    else:
        where = (str(_damage_error(engine, e[0], why)) if e is not None
                 else f"{why} and its record is damaged (run: mqctl store check)")
    if found is not None:
        return found.store_timestamp
    if warn:
        engine.warn(f"store time of {topic}/{queue_id}@{offset} unknown: {where}")
    return None


def search_offset(engine: Engine, topic: str, queue_id: int, ts_ms: int) -> int:
    """First offset whose message was stored at or after ``ts_ms`` (RocketMQ's LOWER
    boundary); the max offset when every message is older."""
    q = engine.queues.queue(topic, queue_id)
    lo, hi = engine.queues.min_offset(topic, queue_id), q.max_offset()
    while lo < hi:
        mid = (lo + hi) // 2
        # (a message gone or damaged counts as at or after: the start found may be earlier
        # than the exact one, never later, so no message is skipped)
        ts = store_time(engine, topic, queue_id, mid, warn=False)
        if ts is None or ts >= ts_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def last_store_timestamp(engine: Engine, topic: str, queue_id: int) -> int | None:
    """The store time of a queue's last message (:func:`store_time`)."""
    end = engine.queues.queue(topic, queue_id).max_offset()
    return store_time(engine, topic, queue_id, end - 1) if end > 0 else None
