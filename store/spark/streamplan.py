"""The offsets of a streaming read, for both readers (nothing here imports PySpark: the JVM
reader asks :mod:`store.spark.plan` for them).

An offset is ``{"<topic>/<queue>": next offset, "<topic>": birth}`` with sorted keys (Spark
compares offsets as JSON text, so both readers write the same text and a checkpoint of one
resumes with the other). A topic's birth is when it was created (``createdAt``, ms): a topic
deleted and made again under a stream has another, so its queues are not the ones the
checkpoint's offsets count (a topic name holds no ``/``; checkpoints written before births
were kept have none; a birth of 0, a rebuilt config's, is unknown, and a rewritten one is
no new topic by itself: :func:`_made_again`). A queue missing from a start offset (a topic
or queue created later) is read from its earliest offset; messages retention removed before
the stream read them, and queues that are not what the stream read (a topic made again, or
a queue that ends before the offset read up to), fail the query unless ``failOnDataLoss`` is
false (:func:`store.spark.options.data_lost`, :func:`~store.spark.options.queues_went_back`):
then the one warning of a micro-batch comes when it is planned (:func:`batch_ranges`), a
made-again topic's queues are read from their first offsets, and a queue that lost its last
messages on from its new end.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable, Mapping

from store.spark.options import (
    QueueRange,
    ReadOptions,
    data_lost,
    queue_key,
    queues_went_back,
    select_topics,
    split_key,
    split_slices,
)

if TYPE_CHECKING:
    from store.log.messagestore import Store

Offsets = dict[str, int]


def offset_text(offsets: Mapping[str, int]) -> str:
    """An offset as Spark keeps it in the checkpoint (the Python source's ``json.dumps``)."""
    return json.dumps(dict(sorted(offsets.items())))


def positions(offsets: Mapping[str, int]) -> Offsets:
    """The queues' next offsets of an offset (``<topic>/<queue>`` keys)."""
    return {k: v for k, v in offsets.items() if "/" in k}


def births(offsets: Mapping[str, int]) -> Offsets:
    """The topics' births of an offset (``<topic>`` keys)."""
    return {k: v for k, v in offsets.items() if "/" not in k}


def _offsets(store: Store, opts: ReadOptions, at: Callable[[str, int], int]) -> Offsets:
    configs = store.topics()
    out = {}
    for t, n in select_topics(store, opts.topics, must_exist=False):
        if t in configs:   # (else made since the line above: its birth is left unknown)
            out[t] = configs[t].created_at
        out.update((queue_key(t, q), at(t, q)) for q in range(n))
    return dict(sorted(out.items()))


def latest(store: Store, opts: ReadOptions) -> Offsets:
    return _offsets(store, opts, store.max_offset)


def initial(store: Store, opts: ReadOptions) -> Offsets:
    return _offsets(store, opts, lambda t, q: opts.starting.resolve(store, t, q, "earliest"))


def _made_again(store: Store, topic: str, was: Mapping[str, int], now: Mapping[str, int],
                read_to: Mapping[int, int]) -> bool:
    """Whether ``topic`` was deleted and made again since a stream read its queues up to
    ``read_to`` (queue id -> offset), its birth ``was`` then and ``now``. A birth of 0 or none
    is unknown (a config rebuilt without one), and a birth rewritten (``store recover`` or a
    send after a config was rebuilt writes the time then) is no new topic: so a later birth
    tells only with a queue that now ends before what was read, or whose last message read
    (else its first) was stored after that birth (a new topic's messages all were; the old
    topic's, read before the birth changed, were not)."""
    old, new = was.get(topic, 0), now.get(topic, 0)
    if not old or not new or new <= old:
        return False
    for q, at in read_to.items():
        end = store.max_offset(topic, q)
        if end < at:
            return True
        probe = max(at - 1, store.min_offset(topic, q))
        if at > 0 and probe < end:
            stored = store.store_time(topic, q, probe)
            if stored is not None and stored >= new:
                return True
    return False


def _verdicts(store: Store, was: Mapping[str, int], was_born: Mapping[str, int],
              born: Mapping[str, int]) -> set[str]:
    """The topics of ``was`` (queue offsets) made again (:func:`_made_again`)."""
    read: dict[str, dict[int, int]] = {}
    for k, at in was.items():
        topic, qid = split_key(k)
        read.setdefault(topic, {})[qid] = at
    return {t for t, read_to in read.items() if _made_again(store, t, was_born, born, read_to)}


def fair_share(pending: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split ``limit`` messages across queues in proportion to what each has pending."""
    total = sum(pending.values())
    if total <= limit:
        return dict(pending)
    share = {k: limit * n // total for k, n in pending.items()}
    left = limit - sum(share.values())
    for k in sorted(pending, key=lambda k: (-(pending[k] - share[k]), k)):
        if left <= 0:
            break
        if share[k] < pending[k]:
            share[k] += 1
            left -= 1
    return share


def next_end(store: Store, opts: ReadOptions, start: Mapping[str, int],
             target: Mapping[str, int] | None, max_rows: int | None) -> Offsets:
    """The end of the next micro-batch from ``start``: what is there now (at most ``target``,
    an ``availableNow`` trigger's), at most ``max_rows`` messages shared across queues. A
    queue that is not what ``start`` read, or whose messages from ``start`` retention
    removed, fails here (``failOnDataLoss``) or is read on from its first offset."""
    now = latest(store, opts)
    ends, born = positions(now), births(now)
    was, was_born = positions(start), births(start)
    cap = positions(target) if target is not None else None
    again = _verdicts(store, was, was_born, born)
    first: dict[str, int] = {}
    went_back: dict[str, dict[int, int]] = {}
    for k, end_now in ends.items():
        if cap is not None and k not in cap:
            continue
        topic, qid = split_key(k)
        earliest = store.min_offset(topic, qid)
        at = was.get(k)
        if at is not None and (at > end_now or topic in again):
            went_back.setdefault(topic, {})[qid] = at
            # a made-again topic is read from its first offsets; a queue that lost its tail on from its end
            at = None if topic in again else end_now
        if at is not None and at < earliest and opts.fail_on_data_loss:
            data_lost(topic, qid, at, earliest, True)
        first[k] = earliest if at is None else max(at, earliest)
    if opts.fail_on_data_loss:
        for topic, read_to in went_back.items():
            queues_went_back(topic, read_to, {q: ends[queue_key(topic, q)] for q in read_to},
                             topic in again, True)
    stop = {k: min(ends[k], cap[k]) if cap is not None else ends[k] for k in first}
    pending = {k: stop[k] - first[k] for k in first if stop[k] > first[k]}
    if max_rows is not None:
        pending = fair_share(pending, max(1, max_rows))
    read_topics = {split_key(k)[0] for k in first}
    # (a birth unknown now, 0, keeps the one read: a rebuilt config's 0 would hide the next change)
    end = {**was_born, **{t: b for t, b in born.items() if t in read_topics and (b or t not in was_born)},
           **was}
    for k, at in first.items():
        end[k] = at + pending.get(k, 0)
    return dict(sorted(end.items()))


def batch_ranges(store: Store, opts: ReadOptions, start: Mapping[str, int],
                 end: Mapping[str, int]) -> list[QueueRange]:
    """The queue ranges of the micro-batch ``(start, end]``, cut by ``minPartitions``. What
    :func:`next_end` passed over is said here, once a micro-batch: a queue not what
    ``start`` read (its end offset is below the start's, or its topic's birth changed)
    starts at its first offset, and one whose messages from the start retention removed
    starts at what is left."""
    was, was_born, born = positions(start), births(start), births(end)
    once = (offset_text(start), offset_text(end))   # a micro-batch Spark plans twice warns once
    again = _verdicts(store, was, was_born, born)
    out = []
    went_back: dict[str, dict[int, int]] = {}
    for key, stop in sorted(positions(end).items()):
        topic, qid = split_key(key)
        begin = was.get(key)
        if begin is not None and (stop < begin or topic in again):
            went_back.setdefault(topic, {})[qid] = begin
            begin = None if topic in again else stop   # (a lost tail: on from the queue's end)
        earliest = store.min_offset(topic, qid) if begin is None or begin < stop else 0
        if begin is None:
            begin = min(earliest, stop)
        elif begin < stop and begin < earliest:
            data_lost(topic, qid, begin, min(earliest, stop), opts.fail_on_data_loss, once)
            begin = min(earliest, stop)
        if stop > begin:
            out.append(QueueRange(topic, qid, begin, stop))
    for topic, read_to in went_back.items():
        queues_went_back(topic, read_to, {q: store.max_offset(topic, q) for q in read_to},
                         topic in again, opts.fail_on_data_loss, once)
    return split_slices(out, opts.min_partitions)
