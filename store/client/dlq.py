"""Dead letters: a group's dead-letter queue, resending it, and the record of what was resent.

A message that failed ``max_reconsume`` times is stored in ``%DLQ%<group>`` queue 0 with
``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID`` and its unique key (RocketMQ's dead letters).
:func:`dead_letters` lists them; :func:`resend_dead_letters` gives them another chance the way
the broker's send-back does: a copy goes to the group's retry topic ``%RETRY%<group>`` queue 0
(only that group subscribes to it), ``RETRY_TOPIC`` keeps the original topic (handlers see the
original topic), ``reconsumeTimes`` starts again at 0 and the unique key is kept. Concurrent
consumers of the group pick the copies up; orderly consumers do not read retry topics.
(:class:`store.Admin` offers both, with the group checked: ``dead_letters``,
``resend_dead_letters``.)

What was resent is recorded in ``config/dlqResend.json`` (written with
``fsutil.atomic_write_json``, ``.bak`` kept)::

    {"offsetTable": {"<group>": <DLQ offset below which everything was resent>},
     "resent":      {"<group>": [<DLQ offsets at or above it resent one by one>]}}

the shape of the scheduler's ``delayOffset.json``: a resend of everything moves the offset to
the DLQ's end; a resend by message id adds the offsets to ``resent`` (and folds them into the
offset when they become contiguous). A second resend therefore skips what was resent
(``force`` resends anyway). Each chunk is written under the store's write lock: read the
record, append the copies, save the record, so two concurrent resends never both resend a
message. A crash between the append and the save resends that chunk again next time
(at-least-once, as everywhere in the store).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from store import names
from store.client.message import Message
from store.client.rows import Row
from store.errors import MessageNotFoundError
from store.fsutil import atomic_write_json, read_json_with_bak
from store.log import record as rec
from store.log.reads import id_as_stored

if TYPE_CHECKING:
    from store.log.messagestore import Store

CHUNK = 256     # DLQ entries read, resent and recorded at a time (under the write lock)

Progress = Callable[[int, int], None]


# -- the resend record ---------------------------------------------------------------------------

def record_path(store: Store) -> Path:
    """Where the resend record lives: ``config/dlqResend.json``."""
    return store.layout.dlq_resend_json


def _validate(obj: Any) -> None:
    if not isinstance(obj, dict):
        raise ValueError("top level is not an object")
    for g, off in (obj.get("offsetTable") or {}).items():
        if not isinstance(off, int) or off < 0:
            raise ValueError(f"offsetTable[{g!r}] is not an offset")
    for g, offs in (obj.get("resent") or {}).items():
        if not isinstance(offs, list) or not all(isinstance(o, int) for o in offs):
            raise ValueError(f"resent[{g!r}] is not a list of offsets")


def load_record(store: Store) -> dict[str, Any]:
    """The record (empty tables when there is none yet)."""
    obj = read_json_with_bak(record_path(store), default=None, validate=_validate, warn=store.warn) or {}
    return {"offsetTable": dict(obj.get("offsetTable") or {}), "resent": dict(obj.get("resent") or {})}


def resent_offsets(record: dict[str, Any], group: str) -> tuple[int, set[int]]:
    """(the DLQ offset below which everything was resent, the offsets at or above it resent)."""
    return record["offsetTable"].get(group, 0), set(record["resent"].get(group, []))


def mark_resent(record: dict[str, Any], group: str, offsets: list[int], end: int | None) -> None:
    """Add ``offsets`` (and, with ``end``, everything below it) to ``group``'s resent set,
    folding contiguous offsets into the base offset."""
    base, done = resent_offsets(record, group)
    done.update(offsets)
    if end is not None:
        base = max(base, end)
    while base in done:
        base += 1
    record["offsetTable"][group] = base
    rest = sorted(o for o in done if o >= base)
    if rest:
        record["resent"][group] = rest
    else:
        record["resent"].pop(group, None)


def save_record(store: Store, record: dict[str, Any]) -> None:
    """Write the record (caller holds the store's write lock: read, append, save)."""
    atomic_write_json(record_path(store), record)


def is_resent(record: dict[str, Any], group: str, offset: int) -> bool:
    """Whether the dead letter at DLQ ``offset`` of ``group`` was resent."""
    base, done = resent_offsets(record, group)
    return offset < base or offset in done


# -- rows ----------------------------------------------------------------------------------------

def origin_topic(m: rec.Message) -> str | None:
    """The topic a dead letter (or a retry copy) was first sent to."""
    return m.properties.get(rec.PROP_DLQ_ORIGIN_TOPIC) or m.properties.get(rec.PROP_RETRY_TOPIC)


@dataclass(frozen=True)
class DeadLetter(Row):
    """A dead letter of ``group``: ``message`` as stored in ``%DLQ%<group>`` (its
    ``queue_offset`` is the DLQ offset, ``reconsume_times`` the deliveries it failed),
    ``origin_topic`` / ``origin_msg_id`` where it came from, ``resent`` whether it was
    already given another chance."""

    group: str
    message: Message
    origin_topic: str | None
    origin_msg_id: str | None
    resent: bool
    record: rec.Message = field(repr=False, compare=False)

    @property
    def dlq_offset(self) -> int:
        return self.message.queue_offset

    @property
    def msg_id(self) -> str:
        return self.message.msg_id

    def to_json(self) -> dict[str, Any]:
        """The ``dlq list --json`` row: the ``consume --json`` envelope plus ``group``,
        ``dlqOriginTopic``, ``dlqOriginMsgId``, ``resent`` and ``storeTime`` (ISO-8601 UTC)."""
        from store.client.envelope import envelope
        from store.timeparse import format_time
        row = envelope(self.record)
        row.update({"group": self.group, "dlqOriginTopic": self.origin_topic,
                    "dlqOriginMsgId": self.origin_msg_id, "resent": self.resent,
                    "storeTime": format_time(self.record.store_timestamp)})
        return row


@dataclass(frozen=True)
class ResentLetter(Row):
    """One dead letter a resend copied (or, on a dry run, would copy) to ``topic``, the
    group's retry topic, queue 0. ``queue_offset`` / ``offset_msg_id`` locate the copy (None
    on a dry run)."""

    group: str
    msg_id: str
    dlq_offset: int
    origin_topic: str | None
    topic: str
    queue_id: int
    queue_offset: int | None
    offset_msg_id: str | None
    resent: bool

    def to_json(self) -> dict[str, Any]:
        """The ``dlq resend --json`` row."""
        return {"group": self.group, "msgId": self.msg_id, "dlqOffset": self.dlq_offset,
                "originTopic": self.origin_topic, "topic": self.topic, "queueId": self.queue_id,
                "queueOffset": self.queue_offset, "offsetMsgId": self.offset_msg_id, "resent": self.resent}


@dataclass
class ResendResult:
    """What :func:`resend_dead_letters` did (or, with ``dry_run``, would do).

    ``rows``: the letters resent, unless they went to an ``on_row`` callback instead.
    ``resent``: how many (would be) resent; ``skipped``: how many were skipped as resent
    before. ``topic``: the group's DLQ topic, None when nothing of the group was ever
    dead-lettered; ``empty``: its DLQ holds nothing. ``only_orderly_members``: letters were
    resent but every live member of the group is orderly, and orderly consumers do not read
    the retry topic: a concurrent consumer of the group must run to process them."""

    group: str
    topic: str | None
    retry_topic: str
    dry_run: bool
    rows: list[ResentLetter] = field(default_factory=list)
    resent: int = 0
    skipped: int = 0
    empty: bool = True
    only_orderly_members: bool = False


# -- listing and resending ------------------------------------------------------------------------

def dlq_topic_of(store: Store, group: str) -> str | None:
    """``group``'s dead-letter topic, None when nothing of the group was dead-lettered."""
    topic = names.dlq_topic(group)
    return topic if store.has_topic(topic) else None


def dead_letters(store: Store, group: str) -> Iterator[DeadLetter]:
    """``group``'s dead letters, oldest first, read lazily (a large DLQ is never held in
    memory). Nothing when the group has none."""
    topic = dlq_topic_of(store, group)
    record = load_record(store)

    def rows() -> Iterator[DeadLetter]:
        for m in (store.iter_queue(topic, 0, 0) if topic else ()):
            yield DeadLetter(group, Message.from_record(m), origin_topic(m),
                             m.properties.get(rec.PROP_DLQ_ORIGIN_MESSAGE_ID),
                             is_resent(record, group, m.queue_offset), m)
    return rows()


def resend_draft(m: rec.Message, group: str) -> rec.Draft:
    """The retry-topic copy of dead letter ``m``: reconsumeTimes 0, the original topic in
    ``RETRY_TOPIC``, the unique key and origin message id kept, the DLQ properties dropped."""
    props = {k: v for k, v in m.properties.items()
             if k not in (rec.PROP_DLQ_ORIGIN_TOPIC, rec.PROP_DLQ_ORIGIN_MESSAGE_ID)}
    origin = m.properties.get(rec.PROP_RETRY_TOPIC) or m.properties.get(rec.PROP_DLQ_ORIGIN_TOPIC)
    if origin:
        props[rec.PROP_RETRY_TOPIC] = origin
    props.setdefault(rec.PROP_ORIGIN_MESSAGE_ID, m.properties.get(rec.PROP_DLQ_ORIGIN_MESSAGE_ID) or m.msg_id)
    return rec.Draft(topic=names.retry_topic(group), body=m.body, properties=props, queue_id=0, flag=m.flag,
                     born_timestamp=m.born_timestamp, reconsume_times=0)


def matches_id(m: rec.Message, msg_id: str) -> bool:
    """Whether ``msg_id`` names ``m``: its unique key, or its offset id (either in any case)."""
    wanted = id_as_stored(msg_id.strip())
    return m.uniq_key == wanted or m.msg_id == wanted


def resend_dead_letters(store: Store, group: str, msg_id: str | None = None, *, force: bool = False,
                        dry_run: bool = False, progress: Progress | None = None,
                        on_row: Callable[[ResentLetter], None] | None = None) -> ResendResult:
    """Copy ``group``'s dead letters to its retry topic (see the module docstring).

    Every dead letter not resent before, or with ``msg_id`` only the one(s) it names (unique
    key or offset id; ``MessageNotFoundError`` when none does). ``force``: resend what was
    resent before too. ``dry_run``: change nothing, report what would be resent.
    ``progress(done, total)``: DLQ entries scanned so far and in all, called once before
    the first chunk and after each. ``on_row``: called with each letter as its chunk is
    resent (the result's ``rows`` then stay empty).
    """
    topic = dlq_topic_of(store, group)
    out = ResendResult(group, topic, names.retry_topic(group), dry_run)
    if topic is None:
        if msg_id is not None:
            raise MessageNotFoundError(f"no message with id {msg_id!r}: group {group} has no dead letters")
        return out
    end = store.max_offset(topic, 0)
    record = load_record(store)
    start = 0 if (force or msg_id is not None) else min(resent_offsets(record, group)[0], end)
    off = first = max(start, store.min_offset(topic, 0))
    matched = 0
    if progress is not None:
        progress(0, end - first)
    while off < end:
        nxt = min(end, off + CHUNK)
        chunk = list(store.iter_queue(topic, 0, off, nxt))
        if msg_id is not None:
            chunk = [m for m in chunk if matches_id(m, msg_id)]
            matched += len(chunk)
        with store.write_lock():
            record = load_record(store)
            todo = [m for m in chunk if force or not is_resent(record, group, m.queue_offset)]
            out.skipped += len(chunk) - len(todo)
            results = store.put([resend_draft(m, group) for m in todo]) if todo and not dry_run else []
            if not dry_run and (todo or msg_id is None):
                mark_resent(record, group, [m.queue_offset for m in todo], nxt if msg_id is None else None)
                save_record(store, record)
        for i, m in enumerate(todo):
            row = ResentLetter(group, m.uniq_key or m.msg_id, m.queue_offset, origin_topic(m), out.retry_topic, 0,
                               results[i].queue_offset if results else None,
                               results[i].msg_id if results else None, not dry_run)
            if on_row is not None:
                on_row(row)
            else:
                out.rows.append(row)
        out.resent += len(todo)
        if progress is not None:
            progress(nxt - first, end - first)
        off = nxt
    if msg_id is not None and matched == 0:
        raise MessageNotFoundError(f"no message with id {msg_id!r} in the dead letters of group {group}")
    out.empty = end == store.min_offset(topic, 0)
    if out.resent and not dry_run:
        from store.client.members import live_members
        members = live_members(store.layout, group)
        out.only_orderly_members = bool(members) and all(m.record.get("orderly") for m in members)
    return out
