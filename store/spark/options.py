"""Options of the ``mqctl`` Spark source's reads, and the plan of a batch read: which queue
ranges it covers. Nothing here imports PySpark: the JVM reader runs :mod:`store.spark.plan` in
a plain Python process to plan a read, so that option parsing, topic selection, offset and
time resolution have one definition for both readers."""
from __future__ import annotations

import difflib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence, TypeVar

from store.errors import DataError, TopicNotFoundError, UsageError
from store.errors import warn as say_warning
from store.names import is_system_topic, parse_tag_expression, validate_any_topic
from store.timeparse import parse_time

if TYPE_CHECKING:
    from store.log.messagestore import Store

R = TypeVar("R", bound="QueueRange")


# -- option parsing ---------------------------------------------------------------------------

@dataclass(frozen=True)
class OffsetSpec:
    """One side of a range: ``earliest``, ``latest``, a time (``ts`` ms) or per-queue JSON."""

    kind: str                                         # earliest | latest | time | json
    ts: int = 0
    per_queue: tuple[tuple[str, int, int], ...] = ()  # (topic, queue, offset or -1/-2)

    def resolve(self, store: Store, topic: str, queue_id: int, default: str) -> int:
        lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        kind = self.kind
        if kind == "json":
            named = {(t, q): o for t, q, o in self.per_queue}.get((topic, queue_id))
            if named is None:
                kind = default
            elif named == -2:
                kind = "earliest"
            elif named == -1:
                kind = "latest"
            else:
                return min(max(named, lo), hi)
        if kind == "earliest":
            return lo
        if kind == "latest":
            return hi
        return store.search_offset(topic, queue_id, self.ts)


def check_named_queues(spec: OffsetSpec, selected: Mapping[str, int], option: str) -> None:
    """Offset JSON may only name queues that the read covers."""
    for topic, qid, _ in spec.per_queue:
        if topic not in selected:
            raise UsageError(f"{option} names topic {topic!r}, which this read does not cover "
                             f"(option topic)")
        if qid >= selected[topic]:
            raise UsageError(f"{option} names queue {topic}/{qid}, but {topic!r} has queues "
                             f"0-{selected[topic] - 1}")


def parse_offsets(text: str | None, default: str, option: str) -> OffsetSpec:
    """``earliest`` | ``latest`` | JSON ``{"T": {"0": 5}}`` | a time."""
    if text is None or not text.strip():
        return OffsetSpec(default)
    s = text.strip()
    if s.lower() in ("earliest", "latest"):
        return OffsetSpec(s.lower())
    if s.startswith("{"):
        return OffsetSpec("json", per_queue=_parse_offset_json(s, option))
    return OffsetSpec("time", ts=parse_time_ms(s, option))


def _parse_offset_json(text: str, option: str) -> tuple[tuple[str, int, int], ...]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise UsageError(f'{option}: expected {{"TOPIC": {{"QUEUE": OFFSET}}}}')
    out = []
    for topic, queues in obj.items():
        validate_any_topic(topic)
        if not isinstance(queues, dict):
            raise UsageError(f"{option}: the value for topic {topic!r} must be an object")
        for qid, off in queues.items():
            if not str(qid).isdigit() or not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise UsageError(f"{option}: {topic}/{qid}: queue ids are digits and offsets "
                                 f"integers >= 0 (-2 earliest, -1 latest)")
            out.append((topic, int(qid), off))
    return tuple(sorted(out))


TIME_FORMS = ("1732183200123 (ms), 1732183200 (s), now, -90s / -15m / -2h30m / -1d (ago), "
              "2026-11-21T10:00:00Z (ISO-8601; no offset means UTC)")


def parse_time_ms(text: str, option: str = "time", now_ms: int | None = None) -> int:
    """The time grammar of ``consume --from`` (:func:`store.timeparse.parse_time`), with the
    error naming the option and this option's other forms."""
    try:
        return parse_time(text, now_ms=now_ms)
    except UsageError:
        raise UsageError(f"{option}: {text!r} is not earliest, latest, offset JSON or a time "
                         f"({TIME_FORMS})") from None


def parse_tags(text: str | None) -> tuple[str, ...] | None:
    """``'A || B'`` → ``('A', 'B')`` (sorted: a plan must not depend on set order); ``*`` or
    nothing → None. The grammar is :func:`store.names.parse_tag_expression`'s."""
    tags = parse_tag_expression(text)
    return None if tags is None else tuple(sorted(tags))


# ``reader`` (jvm | python) is read by the JVM source, which hands ``python`` reads to this one.
# Kafka's names where they mean the same: ``subscribe`` (topic), ``maxOffsetsPerTrigger``,
# ``startingTimestamp``/``endingTimestamp`` (ms, or the CLI's time grammar), ``failOnDataLoss``.
READ_OPTIONS = ("store", "path", "topic", "subscribe", "startingoffsets", "startingtimestamp",
                "endingoffsets", "endingtimestamp", "tags", "create", "minpartitions",
                "failondataloss", "shape", "reader", "stores")
STREAM_READ_OPTIONS = ("store", "path", "topic", "subscribe", "startingoffsets", "startingtimestamp",
                       "tags", "maxmessagespertrigger", "maxoffsetspertrigger", "minpartitions",
                       "failondataloss", "waitfortopic", "shape", "create", "reader")
ALL_READ_OPTIONS = tuple(dict.fromkeys((*READ_OPTIONS, *STREAM_READ_OPTIONS)))
SHAPES = ("mqctl", "kafka")


@dataclass(frozen=True)
class ReadOptions:
    store: str
    topics: str
    starting: OffsetSpec
    ending: OffsetSpec
    tags: tuple[str, ...] | None
    max_per_trigger: int | None
    create: bool = False
    wait_for_topic: bool = False
    min_partitions: int = 1
    fail_on_data_loss: bool = True
    shape: str = "mqctl"

    @classmethod
    def parse(cls, options: Mapping[str, str], stream: bool) -> ReadOptions:
        if stream and options.get("stores"):
            raise UsageError("stores (one store per host) applies to batch reads only")
        known = ("endingoffsets", "endingtimestamp", "maxmessagespertrigger", "maxoffsetspertrigger")
        check_options({k: v for k, v in options.items() if k not in known},   # each refused below
                      STREAM_READ_OPTIONS if stream else READ_OPTIONS,
                      "readStream" if stream else "read")
        if not stream and options.get("waitfortopic"):
            raise UsageError("waitForTopic applies to readStream only (a batch read of a "
                             "missing topic fails)")
        for ending in ("endingoffsets", "endingtimestamp"):
            if stream and options.get(ending):
                raise UsageError(f"{_SPELLING[ending]} applies to batch reads only (a stream never ends)")
        limit_key = one_of(options, "maxmessagespertrigger", "maxoffsetspertrigger")
        limit = options.get(limit_key) if limit_key else None
        if limit is not None and (not limit.strip().isdigit() or int(limit) < 1):
            raise UsageError(f"{_SPELLING[str(limit_key)]} must be a positive integer, not {limit!r}")
        if not stream and limit is not None:
            raise UsageError(f"{_SPELLING[str(limit_key)]} applies to readStream only")
        parts = (options.get("minpartitions") or "1").strip()
        if not parts.isdigit() or int(parts) < 1:
            raise UsageError(f"minPartitions must be a positive integer, not {parts!r}")
        topic_key = one_of(options, "topic", "subscribe")
        return cls(store=store_option(options),
                   topics=((options.get(topic_key) if topic_key else None) or "*").strip(),
                   starting=_side(options, "starting", "latest" if stream else "earliest"),
                   ending=_side(options, "ending", "latest"),
                   tags=parse_tags(options.get("tags")),
                   max_per_trigger=int(limit) if limit is not None else None,
                   create=parse_bool(options, "create", False),
                   wait_for_topic=parse_bool(options, "waitfortopic", False),
                   min_partitions=int(parts),
                   fail_on_data_loss=parse_bool(options, "failondataloss", True),
                   shape=parse_shape(options))

    def open_store(self) -> Store:
        """The store read: it must exist unless the ``create`` option says otherwise."""
        return open_store(self.store, self.create)


def _side(options: Mapping[str, str], side: str, default: str) -> OffsetSpec:
    """``startingOffsets``, or Kafka's ``startingTimestamp`` which (as in Kafka) wins over it."""
    stamp = options.get(f"{side}timestamp")
    if stamp is not None and stamp.strip():
        return OffsetSpec("time", ts=parse_time_ms(stamp.strip(), _SPELLING[f"{side}timestamp"]))
    return parse_offsets(options.get(f"{side}offsets"), default, _SPELLING[f"{side}offsets"])


def one_of(options: Mapping[str, str], name: str, kafka_name: str) -> str | None:
    """Which of an option and its Kafka synonym is given (None: neither); both is an error."""
    given = [k for k in (name, kafka_name) if options.get(k) is not None]
    if len(given) > 1:
        raise UsageError(f"{_SPELLING.get(name, name)} and {_SPELLING.get(kafka_name, kafka_name)} "
                         f"are the same option: give one")
    return given[0] if given else None


def parse_shape(options: Mapping[str, str]) -> str:
    """``shape``: ``mqctl`` (the store's columns, the default) or ``kafka`` (Kafka's source
    columns: key, value, topic, partition, offset, timestamp, timestampType, headers)."""
    shape = (options.get("shape") or "mqctl").strip().lower()
    if shape not in SHAPES:
        raise UsageError(f"shape must be mqctl or kafka, not {options.get('shape')!r}")
    return shape


def select_topics(store: Store, spec: str, must_exist: bool) -> list[tuple[str, int]]:
    """(topic, queue count) for ``spec``: ``*`` = every user topic, else a comma list."""
    topics = store.topics()
    wanted: set[str] = set()
    for name in (p.strip() for p in spec.split(",")):
        if not name:
            continue
        if name == "*":
            wanted.update(t for t in topics if not is_system_topic(t))
            continue
        validate_any_topic(name)
        if name in topics:
            wanted.add(name)
        elif must_exist:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
    return [(t, topics[t].queues) for t in sorted(wanted)]




@dataclass(frozen=True)
class QueueRange:
    """Messages ``[start, end)`` of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int


def plan_ranges(store: Store, opts: ReadOptions) -> list[QueueRange]:
    """The queue ranges of a batch read, in topic then queue order (before ``minPartitions``)."""
    selected = select_topics(store, opts.topics, must_exist=True)
    check_named_queues(opts.starting, dict(selected), "startingOffsets")
    check_named_queues(opts.ending, dict(selected), "endingOffsets")
    for topic, q, named in opts.starting.per_queue:
        if named >= 0 and named > store.max_offset(topic, q):   # (Kafka's batch read fails too)
            raise UsageError(f"startingOffsets names {topic}/{q}@{named}, past the end of the queue "
                             f"(its next offset is {store.max_offset(topic, q)})")
        if named >= 0 and named < store.min_offset(topic, q):
            data_lost(topic, q, named, store.min_offset(topic, q), opts.fail_on_data_loss)
    out: list[QueueRange] = []
    for topic, queues in selected:
        for q in range(queues):
            start = opts.starting.resolve(store, topic, q, "earliest")
            end = opts.ending.resolve(store, topic, q, "latest")
            if start > end:   # a mistake, not a queue with nothing to read
                raise UsageError(f"startingOffsets ({start}) is after endingOffsets ({end}) for queue "
                                 f"{topic}/{q}: a batch read needs a start at or before its end")
            out.append(QueueRange(topic, q, start, end))
    return out


def data_lost(topic: str, queue_id: int, wanted: int, earliest: int, fail: bool,
              once: object = None) -> None:
    """Messages ``[wanted, earliest)`` a read was due to read are gone (retention removed
    them): Kafka's ``failOnDataLoss`` fails the read (the default), ``false`` skips them with
    a warning on stderr (said once per ``once``, when given: :func:`warn`)."""
    what = (f"messages {topic}/{queue_id}@{wanted}-{earliest - 1} were removed by retention "
            f"before this read reached them")
    if fail:
        raise DataError(f"{what} (give failOnDataLoss=false to skip what is gone)")
    warn(f"{what}: skipped (failOnDataLoss=false)", once)


_SAID: OrderedDict[int, None] = OrderedDict()   # hashes of the latest warnings said once
_SAID_MAX = 256


def warn(what: str, once: object = None) -> None:
    """``mqctl: warning: WHAT`` on stderr; given ``once`` (a stream's micro-batch: its start
    and end offsets), only the first time in this process: Spark may plan a micro-batch more
    than once (and the JVM reader's planner process serves every plan of its session)."""
    if once is not None:
        key = hash((what, once))
        if key in _SAID:
            _SAID.move_to_end(key)
            return
        _SAID[key] = None
        if len(_SAID) > _SAID_MAX:   # (a stream's plans of one batch come together: the latest suffice)
            _SAID.popitem(last=False)
    say_warning(what)


def queues_went_back(topic: str, read_to: Mapping[int, int], ends: Mapping[int, int],
                     recreated: bool, fail: bool, once: object = None) -> None:
    """A stream read queues ``read_to`` (queue id -> the offset it read up to) of ``topic``,
    but they are no longer what it read: the topic was deleted and made again since
    (``recreated``: its birth changed), or a queue now ends (``ends``) before that offset (the
    store lost its last messages: its recovery after a power cut, say). As Kafka's source when
    an offset went backwards, the read fails unless ``failOnDataLoss`` is false; then one
    warning, and a made-again topic's queues are read from their first offsets, queues that
    lost their last messages on from their new ends (the warning said once per ``once``,
    when given: :func:`warn`)."""
    at = ", ".join(f"{topic}/{q} up to offset {o}" for q, o in sorted(read_to.items()))
    if recreated:
        what = (f"topic {topic!r} was deleted and made again after this stream read {at}: "
                f"messages of the old topic past those offsets may never have been read, and "
                f"the new topic's offsets start again at 0")
        redo = "read the new topic from its first offsets"
    else:
        now = ", ".join(f"{topic}/{q} at {ends[q]}" for q in sorted(read_to))
        what = (f"queues end before the offsets this stream read up to ({at}; they end {now}): "
                f"the store lost their last messages")
        redo = "read on from their new ends"
    if fail:
        raise DataError(f"{what} (give failOnDataLoss=false to {redo})")
    warn(f"{what}: {redo.replace('read ', 'reading ', 1)} (failOnDataLoss=false)", once)


def split_slices(slices: Sequence[R], at_least: int) -> list[R]:
    """``slices`` cut into at least ``at_least`` partitions (Kafka's ``minPartitions``): each
    queue's range is cut into pieces in proportion to its share of the messages, so that
    fewer queues than cores still keep every core busy. Queue order is kept."""
    total = sum(s.end - s.start for s in slices)
    if at_least <= len(slices) or total == 0:
        return list(slices)
    out: list[R] = []
    for s in slices:
        size = s.end - s.start
        pieces = max(1, min(size, -(-size * at_least // total)))
        bounds = [s.start + size * i // pieces for i in range(pieces + 1)]
        out.extend(replace(s, start=a, end=b) for a, b in zip(bounds, bounds[1:]))
    return out


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, qid = key.rpartition("/")
    return topic, int(qid)



def store_option(options: Mapping[str, str]) -> str:
    if options.get("stores"):
        raise UsageError("the stores option (one store per host) is read by the JVM reader only "
                         "(batch reads; it needs a JDK)")
    root = options.get("store") or options.get("path")
    if not root:
        raise UsageError('the mqctl data source needs .option("store", DIR) (or load(DIR))')
    return os.path.abspath(Path(root).expanduser())


def parse_stores(options: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``stores`` option, ``HOST:DIR,HOST:DIR``: one store on each host's own disk (a
    host may hold several). DIR is absolute (it is opened on HOST, not here); ``store`` and
    ``path`` are not given beside it."""
    if options.get("store") or options.get("path"):
        raise UsageError("give either store or stores (HOST:DIR,...), not both")
    out = []
    for entry in filter(None, (e.strip() for e in options.get("stores", "").split(","))):
        host, sep, root = entry.partition(":")
        if not sep or not host.strip() or not root.startswith("/"):
            raise UsageError(f"stores: {entry!r} is not HOST:/absolute/dir (entries are comma separated)")
        out.append((host.strip(), os.path.normpath(root)))
    if not out:
        raise UsageError("stores: no HOST:DIR entry given")
    return out


def check_options(options: Mapping[str, str], allowed: Sequence[str], what: str) -> None:
    """Refuse an option this source does not know (a typo would otherwise be ignored),
    naming the valid ones. ``allowed`` holds lower-case keys, as Spark hands them over."""
    unknown = sorted(k for k in options if k.lower() not in allowed)
    if unknown:
        names = ", ".join(_SPELLING.get(k, k) for k in allowed if k not in ("path", "reader"))
        close = difflib.get_close_matches(unknown[0].lower(), [k for k in allowed if k != "path"], 1, 0.6)
        hint = f" (did you mean {_SPELLING.get(close[0], close[0])}?)" if close else ""
        if unknown[0].lower().startswith("kafka."):   # a Kafka job's client settings
            hint = " (a store is a directory, with no brokers: give store instead of kafka.* options)"
        raise UsageError(f"unknown option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)} for {what} with mqctl{hint}; "
                         f"valid: {names}")


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None or not value.strip():
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise UsageError(f"option {_SPELLING.get(key, key)} must be true or false, not {value!r}")


# How the documentation spells each (case-insensitive) option.
_SPELLING = {
    "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "maxmessagespertrigger": "maxMessagesPerTrigger", "waitfortopic": "waitForTopic",
    "minpartitions": "minPartitions", "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp", "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "failondataloss": "failOnDataLoss",
    "sinkid": "sinkId", "checkpointlocation": "checkpointLocation",
}


def open_store(root: str, create: bool, recover: bool = True) -> Store:
    """Open the store a read or write names: a missing store is a
    :class:`~store.errors.StoreNotFoundError` (exit 3 in the CLI) unless ``create``."""
    from store.errors import StoreNotFoundError
    from store.log.messagestore import Store
    try:
        opened: Store = Store.open(root, create=create, recover=recover)
        return opened
    except StoreNotFoundError as exc:
        raise StoreNotFoundError(f"{exc.message.split(' (create one')[0]}: give "
                                 f'.option("create", "true") to create it') from None
