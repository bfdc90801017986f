"""Benchmark (not a test): Spark reading N messages from an mqctl store vs from JSON lines.

Builds a store with N messages of SIZE bytes spread over QUEUES queues, and a JSON-lines copy
of the same messages in the ``consume --json`` shape (one file per queue, so both sides get the
same number of Spark partitions). Then, in one Spark session, times per source

* ``count``: ``df.count()``;
* ``bodies``: ``sum(length(body))``, which makes every body reach Spark.

Each measurement is the median of ``--runs`` runs, after one untimed warm-up read per source
(the first read of a Python data source starts Spark's Python daemons). A Parquet copy of
the same messages (written by Spark from the store) is timed too. Prints a table with the
mqctl/Parquet and JSON/mqctl ratios (targets: at most 2x Parquet's time, at least 2x faster
than JSON). Usage::

    .venv/bin/python tests/bench/bench_spark.py                 # 1,000,000 x 100 bytes
    .venv/bin/python tests/bench/bench_spark.py --messages 200000 --runs 5
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from store.log.broker import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402

TOPIC = "bench"
PUT_BATCH = 8192
JSON_SCHEMA = (
    "topic STRING, queueId INT, queueOffset BIGINT, msgId STRING, keys ARRAY<STRING>, "
    "tags STRING, properties MAP<STRING,STRING>, body STRING, bornTimestamp BIGINT, "
    "storeTimestamp BIGINT"
)


def body_of(i: int, size: int) -> bytes:
    stem = f"message-{i:09d}-".encode()
    return (stem * (size // len(stem) + 1))[:size]


def build(root: Path, jsonl: Path, n: int, size: int, queues: int) -> float:
    """Fill the store and write the JSON-lines twin; returns the store's put rate (msg/s)."""
    store = Store.open(root, create=True)
    store.create_topic(TOPIC, queues)
    jsonl.mkdir(parents=True)
    files = [open(jsonl / f"queue-{q}.json", "w") for q in range(queues)]
    put_time = 0.0
    try:
        for lo in range(0, n, PUT_BATCH):
            drafts = [Draft(TOPIC, body_of(i, size), {"TAGS": "bench"}, queue_id=i % queues)
                      for i in range(lo, min(n, lo + PUT_BATCH))]
            t = time.perf_counter()
            results = store.put(drafts)
            put_time += time.perf_counter() - t
            for d, r in zip(drafts, results):
                files[r.queue_id].write(json.dumps({
                    "topic": r.topic, "queueId": r.queue_id, "queueOffset": r.queue_offset,
                    "msgId": r.uniq_key, "keys": [], "tags": "bench", "properties": {},
                    "body": d.body.decode(), "bornTimestamp": r.store_timestamp,
                    "storeTimestamp": r.store_timestamp}, separators=(",", ":")) + "\n")
    finally:
        for f in files:
            f.close()
        store.close()
    return n / put_time


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


SINK_PHASE = r'''
import json, resource, sys, time
import pyarrow as pa
sys.path.insert(0, sys.argv[1])
import store.spark.datasource as S
from store.log.broker import Store
root, n, phase = sys.argv[2], int(sys.argv[3]), sys.argv[4]
opts = S.WriteOptions(root, "sink", False)
parts = [S.StagedPart(p, c) for p, c in json.loads(open(root + "-parts.json").read())]
if phase == "crash":                       # die half way through the publish
    real, done = Store.put, [0]
    def put(self, drafts, sync=False):
        done[0] += len(drafts)
        if done[0] > n // 2:
            print(json.dumps({"phase": phase, "killed_after_messages": done[0] - len(drafts)}))
            raise SystemExit(0)
        return real(self, drafts, sync=sync)
    Store.put = put
t = time.perf_counter()
stored = S.commit_stream_batch(opts, "q", 1 if phase == "normal" else 2, parts)
print(json.dumps({"phase": phase, "seconds": time.perf_counter() - t, "stored": stored,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def sink_bench(n: int, size: int, work: Path) -> None:
    """The streaming sink's commit of one n-message micro-batch, as Spark's sink runner calls
    it: a normal commit, then a commit killed half way and its replay. Each runs in a fresh
    process, so its peak RSS is the commit's own."""
    import subprocess

    import pyarrow as pa

    import store.spark.datasource as S
    root = work / "sink-store"
    Store.open(root, create=True).close()
    opts = S.WriteOptions(str(root), "sink", False)
    parts = []
    per = 4
    for p in range(per):
        def batches(p: int = p) -> Any:
            for lo in range(p * n // per, (p + 1) * n // per, 10_000):
                hi = min((p + 1) * n // per, lo + 10_000)
                yield pa.record_batch({"body": [body_of(i, size) for i in range(lo, hi)]})
        part = S.write_staged(batches(), opts, f"{S.STAGING_DIR}/bench")
        parts.append((part.path, part.rows))
    (work / "sink-store-parts.json").write_text(json.dumps(parts))
    script = work / "sink_phase.py"
    script.write_text(SINK_PHASE)
    for phase in ("normal", "crash", "replay"):
        r = subprocess.run([sys.executable, str(script), str(REPO), str(root), str(n), phase],
                           capture_output=True, text=True)
        line = (r.stdout.strip().splitlines() or [r.stderr[-500:]])[-1]
        print(f"sink {n:,} messages: {line}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--schema", help="read mqctl with this user schema (e.g. 'body BINARY'): "
                    "Python data sources get no column pruning, a narrower schema is how to ask for less")
    ap.add_argument("--sink", action="store_true",
                    help="time the streaming sink's commit instead (normal, crash, replay) with its peak RSS")
    args = ap.parse_args()

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-spark-"))
    root, jsonl = work / "store", work / "jsonl"
    if args.sink:
        try:
            sink_bench(args.messages, args.size, work)
        finally:
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        return
    try:
        t = time.perf_counter()
        put_rate = build(root, jsonl, args.messages, args.size, args.queues)
        print(f"built {args.messages:,} messages of {args.size} bytes in {time.perf_counter() - t:.1f}s "
              f"(Store.put {put_rate:,.0f} msg/s); store {du(root) / 2**20:.0f} MiB, "
              f"JSON lines {du(jsonl) / 2**20:.0f} MiB", flush=True)

        from pyspark.sql import functions as fn

        from store.spark.datasource import local_session
        t = time.perf_counter()
        spark = local_session(args.master)
        print(f"Spark session {args.master} in {time.perf_counter() - t:.1f}s", flush=True)

        def mq(schema: str | None = args.schema) -> Any:
            r = spark.read.format("mqctl")
            if schema:
                r = r.schema(schema)
            return r.option("store", str(root)).option("topic", TOPIC).load()

        def js() -> Any:
            return spark.read.schema(JSON_SCHEMA).json(str(jsonl))

        parquet = work / "parquet"
        t = time.perf_counter()
        # the same messages as Parquet (one file per queue, like the other two sources)
        mq(None).repartition(args.queues, "queueId").write.mode("overwrite").parquet(str(parquet))
        print(f"Parquet copy written in {time.perf_counter() - t:.1f}s, {du(parquet) / 2**20:.0f} MiB", flush=True)

        def pq() -> Any:
            return spark.read.parquet(str(parquet))

        rows = []
        for what, agg in (("count", lambda df: df.count()),
                          ("bodies", lambda df: df.agg(fn.sum(fn.length("body"))).first()[0])):
            t_mq, r_mq = timed(lambda agg=agg: agg(mq()), args.runs)
            t_pq, r_pq = timed(lambda agg=agg: agg(pq()), args.runs)
            t_js, r_js = timed(lambda agg=agg: agg(js()), args.runs)
            assert r_mq == r_js == r_pq, (what, r_mq, r_js, r_pq)
            rows.append((what, t_mq, t_pq, t_js))
        spark.stop()

        print(f"\n{'read':8} {'mqctl s':>9} {'parquet s':>10} {'json s':>9} {'mqctl msg/s':>13} "
              f"{'mq/parquet':>11} {'json/mq':>8}")
        for what, t_mq, t_pq, t_js in rows:
            print(f"{what:8} {t_mq:9.2f} {t_pq:10.2f} {t_js:9.2f} {args.messages / t_mq:13,.0f} "
                  f"{t_mq / t_pq:10.2f}x {t_js / t_mq:7.2f}x")
        print(f"(median of {args.runs} runs; targets: mq/parquet <= 2x, json/mq >= 2x; "
              f"{os.cpu_count()} CPUs)")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


if __name__ == "__main__":
    main()
