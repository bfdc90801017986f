"""The offsets of a streaming read, for both readers (nothing here imports PySpark: the JVM
reader asks :mod:`store.spark.plan` for them).

An offset is ``{"<topic>/<queue>": next offset}`` with sorted keys (Spark compares offsets as
JSON text, so both readers write the same text and a checkpoint of one resumes with the
other). A queue missing from a start offset (a topic or queue created later) is read from its
earliest offset; messages retention removed before the stream read them fail the query unless
``failOnDataLoss`` is false (:func:`store.spark.options.data_lost`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Mapping

from store.spark.options import (
    QueueRange,
    ReadOptions,
    data_lost,
    queue_key,
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


def latest(store: "Store", opts: ReadOptions) -> Offsets:
    return dict(sorted((queue_key(t, q), store.max_offset(t, q))
                       for t, n in select_topics(store, opts.topics, must_exist=False)
                       for q in range(n)))


def initial(store: "Store", opts: ReadOptions) -> Offsets:
    return dict(sorted((queue_key(t, q), opts.starting.resolve(store, t, q, "earliest"))
                       for t, n in select_topics(store, opts.topics, must_exist=False)
                       for q in range(n)))


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


def next_end(store: "Store", opts: ReadOptions, start: Mapping[str, int],
             target: Mapping[str, int] | None, max_rows: int | None) -> Offsets:
    """The end of the next micro-batch from ``start``: what is there now (at most ``target``,
    an ``availableNow`` trigger's), at most ``max_rows`` messages shared across queues."""
    now = latest(store, opts)
    if target is not None:
        now = {k: min(v, target[k]) for k, v in now.items() if k in target}
    first = {}
    for k in now:
        earliest = store.min_offset(*split_key(k))
        if k in start and start[k] < earliest:
            data_lost(*split_key(k), start[k], earliest, opts.fail_on_data_loss)
        first[k] = max(start.get(k, earliest), earliest)
    pending = {k: now[k] - first[k] for k in now if now[k] > first[k]}
    if max_rows is not None:
        pending = fair_share(pending, max(1, max_rows))
    end = dict(start)
    for k, n in pending.items():
        if n > 0:
            end[k] = first[k] + n
    return dict(sorted(end.items()))


def batch_ranges(opts: ReadOptions, start: Mapping[str, int], end: Mapping[str, int]) -> list[QueueRange]:
    """The queue ranges of the micro-batch ``(start, end]``, cut by ``minPartitions``."""
    out = []
    for key, stop in sorted(end.items()):
        begin = start.get(key, 0)
        if stop > begin:
            topic, qid = split_key(key)
            out.append(QueueRange(topic, qid, begin, stop))
    return split_slices(out, opts.min_partitions)
