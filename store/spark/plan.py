"""The plan of a JVM batch read: ``python -m store.spark.plan`` reads JSON requests on stdin,
one a line, and writes one JSON answer line on stdout for each, until stdin ends. The JVM
keeps one such process for its lifetime, so a query pays no interpreter start.

The JVM reader (``store/spark/java``) reads consume queues and commit-log records itself but
asks this process what to read, so that options, topic selection, offsets, the time grammar
and their errors have one definition (:mod:`store.spark.options`) for both readers.

Request: ``{"options": {lower-case option: value}, "topics": [..] | null, "queueIds": [..] |
null, "fromMs": ms | null, "untilMs": ms | null}``: the predicates Spark pushed down (topic and
queue id sets; store time ``>= fromMs`` and ``< untilMs``, found per queue by binary search:
store timestamps never decrease within a queue).

Answer: ``{"store": abs path, "commitlogDir": .., "segmentSize": commit-log
segment bytes, "cqEntries": entries per consume-queue segment, "offsetIdPrefix": .., "format":
{format.py's constants}, "tags": [..] | null, "ranges": [[topic, queue, start, end, queue
directory], ..], "failOnDataLoss": ..}`` (``minPartitions`` applied), or ``{"error": "DataError", "message": ..}``
naming a :mod:`store.errors` class (the JVM raises the error; the process serves on).
``{"check": true, "options": ..}`` only validates the options (the load of a read);
``{"stores": true, "options": ..}`` answers ``{"stores": [[host, dir], ..]}``, the ``stores``
option's stores (one store per host: each is planned by this module on its own host, when the
task that reads it starts there);
``{"stream": .., "options": ..}`` asks what a streaming read needs (see :func:`stream`).
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from store.errors import StoreError
from store.log import format as F
from store.log.messagestore import Store
from store.log.record import RESERVED_PROPERTIES, offset_msg_id
from store.spark import streamplan
from store.spark.options import (
    ALL_READ_OPTIONS,
    READ_OPTIONS,
    QueueRange,
    ReadOptions,
    check_options,
    open_store,
    parse_shape,
    parse_stores,
    plan_ranges,
    select_topics,
    split_slices,
    store_option,
)
from store.spark.streamplan import offset_text

# What the reader needs of format.py (the field offsets inside a record header are written
# down in the Java reader, beside the layout's name).
FORMAT = {"magicV1": F.MAGIC_V1, "headerSize": F.RECORD_HEADER_SIZE,
          "crcPropertySize": F.CRC_PROPERTY_SIZE, "crcPropertyHead": F.CRC_PROPERTY_HEAD.decode("latin-1"),
          "reserved": sorted(RESERVED_PROPERTIES)}


def check(options: dict[str, str]) -> dict[str, Any]:
    """What the Python source's ``schema()`` refuses when a read is loaded."""
    check_options(options, ALL_READ_OPTIONS, "read or readStream")
    parse_shape(options)
    if options.get("stores"):   # on other hosts' disks: each is opened where it is read
        parse_stores(options)
        return {"ok": True}
    if options.get("create", "").strip().lower() not in ("true", "1", "yes"):
        open_store(store_option(options), False, recover=False).close()
    return {"ok": True}


def plan(request: dict[str, Any]) -> dict[str, Any]:
    options = {str(k).lower(): str(v) for k, v in request["options"].items()}
    if request.get("check"):
        return check(options)
    if request.get("stores"):
        check_options(options, READ_OPTIONS, "read")
        return {"stores": [list(s) for s in parse_stores(options)]}
    if request.get("stream"):
        return stream(request, ReadOptions.parse(options, stream=True))
    opts = ReadOptions.parse(options, stream=False)
    with opts.open_store() as store:
        return read_plan(store, opts, plan_ranges(store, opts), request)


def stream(request: dict[str, Any], opts: ReadOptions) -> dict[str, Any]:
    """A stream's question: ``open`` (the checks of its start, and its read limit),
    ``initial`` or ``latest`` offset, the ``next`` end offset from ``start`` (at most
    ``target`` and ``maxRows``), or the read plan of the micro-batch ``partitions`` from
    ``start`` to ``end``. Offsets travel as the JSON text Spark keeps."""
    what = request["stream"]
    with opts.open_store() as store:
        if what == "open":   # a misspelled topic would otherwise be an empty stream forever
            select_topics(store, opts.topics, must_exist=not opts.wait_for_topic)
            return {"maxRows": opts.max_per_trigger}
        if what == "initial":
            return {"offset": offset_text(streamplan.initial(store, opts))}
        if what == "latest":
            return {"offset": offset_text(streamplan.latest(store, opts))}
        start = json.loads(request["start"])
        if what == "next":
            target = request.get("target")
            end = streamplan.next_end(store, opts, start, json.loads(target) if target else None,
                                      request.get("maxRows"))
            return {"offset": offset_text(end)}
        ranges = streamplan.batch_ranges(store, opts, start, json.loads(request["end"]))
        return read_plan(store, opts, ranges, request, cut=False)


def read_plan(store: Store, opts: ReadOptions, planned: list[QueueRange], request: dict[str, Any],
              cut: bool = True) -> dict[str, Any]:
    """The answer for reading ``planned`` with the predicates Spark pushed down (``cut``:
    then cut by ``minPartitions``)."""
    topics = request.get("topics")
    queue_ids = request.get("queueIds")
    since, until = request.get("fromMs"), request.get("untilMs")
    ranges = []
    for r in planned:
        if (topics is not None and r.topic not in topics) or \
                (queue_ids is not None and r.queue_id not in queue_ids):
            continue
        start, end = r.start, r.end
        if since is not None and start < end:
            start = max(start, store.search_offset(r.topic, r.queue_id, int(since)))
        if until is not None and start < end:
            end = min(end, store.search_offset(r.topic, r.queue_id, int(until)))
        ranges.append(QueueRange(r.topic, r.queue_id, start, max(start, end)))
    settings, layout = store.settings, store.layout
    return {"store": opts.store, "commitlogDir": str(layout.commitlog_dir),
            "segmentSize": settings.commitlog_segment_size, "cqEntries": settings.cq_segment_entries,
            "offsetIdPrefix": offset_msg_id(0)[:16], "format": FORMAT,
            "tags": list(opts.tags) if opts.tags is not None else None,
            "failOnDataLoss": opts.fail_on_data_loss,
            "ranges": [[r.topic, r.queue_id, r.start, r.end, str(layout.queue_dir(r.topic, r.queue_id))]
                       for r in (split_slices(ranges, opts.min_partitions) if cut else ranges)]}


def answer(line: str) -> dict[str, Any]:
    try:
        return plan(json.loads(line))
    except StoreError as exc:
        return {"error": type(exc).__name__, "message": exc.message}
    except Exception as exc:  # noqa: BLE001 - a bug here must not end the planner of the session
        traceback.print_exc()
        return {"error": "OperationError", "message": f"the mqctl read planner failed: {exc!r}"}


def main() -> int:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(answer(line)) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
