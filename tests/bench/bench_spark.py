"""Benchmark (not a test): Spark reading N messages from an mqctl store vs Parquet and JSON lines.

Builds a store with N messages of SIZE bytes spread over QUEUES queues, a JSON-lines copy of
the same messages in the ``consume --json`` shape (one file per queue, so every source gets the
same number of Spark partitions) and a Parquet copy (written by Spark from the store). Then, in
one ``local_session()``, times per source

* ``count``: ``df.count()``;
* ``bodies``: ``sum(length(body))``, which makes every body reach Spark;

for mqctl with its full schema and with each ``--schema`` (default ``body BINARY``: Python
sources get no column pruning, a narrower user schema is how to read less). Every pair is
warmed up once, then the runs go round all pairs in turn, so load from elsewhere on the
machine hits every source alike. Each figure is a median: wall seconds, and CPU seconds of the
Spark JVM and its Python processes (from /proc; steadier than wall time on a shared machine).
Ratios: mqctl/Parquet and JSON/mqctl (targets: at most 2x Parquet's time, at least 2x faster
than JSON). ``--conf`` changes the session (``--conf
spark.python.unix.domain.socket.enabled=false`` is Spark's default transport); ``--dir`` keeps
the data for the next run. Usage::

    .venv/bin/python tests/bench/bench_spark.py                 # 1,000,000 x 100 bytes
    .venv/bin/python tests/bench/bench_spark.py --messages 5000000 --dir /tmp/bench5m
    .venv/bin/python tests/bench/bench_spark.py --messages 200000 --runs 5 --split 8
    # what PySpark itself costs a Python source of the reader's shape (the Python reader's floor)
    .venv/bin/python tests/bench/bench_spark.py --dir /tmp/bench5m --messages 5000000 --floor \
        --only "mqctl python" --only "python floor" --agg count --agg tag --runs 5
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

from store.log.messagestore import Store
from store.log.record import Draft

TOPIC = "bench"
PUT_BATCH = 8192
JSON_SCHEMA = (
    "topic STRING, queueId INT, queueOffset BIGINT, msgId STRING, keys ARRAY<STRING>, "
    "tags STRING, properties MAP<STRING,STRING>, body STRING, bornTimestamp BIGINT, "
    "storeTimestamp BIGINT"
)


def tag_of(i: int) -> str:
    return f"t{i // 7 % 8}"


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
            drafts = [Draft(TOPIC, body_of(i, size), {"TAGS": tag_of(i)}, queue_id=i % queues)
                      for i in range(lo, min(n, lo + PUT_BATCH))]
            t = time.perf_counter()
            results = store.put(drafts)
            put_time += time.perf_counter() - t
            for d, r in zip(drafts, results):
                files[r.queue_id].write(json.dumps({
                    "topic": r.topic, "queueId": r.queue_id, "queueOffset": r.queue_offset,
                    "msgId": r.uniq_key, "keys": [], "tags": d.properties["TAGS"],
                    "properties": {},
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
from store.spark.sink import commit_stream_batch
from store.spark.write import StagedPart, WriteOptions
from store.log.messagestore import Store
root, n, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opts = WriteOptions(root, "sink", False)
parts = [StagedPart(p, c) for p, c in json.loads(open(root + "-parts.json").read())]
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
stored = commit_stream_batch(opts, "q", 1 if phase == "normal" else 2, parts)
print(json.dumps({"phase": phase, "seconds": time.perf_counter() - t, "stored": stored,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def sink_bench(n: int, size: int, work: Path) -> None:
    """The streaming sink's commit of one n-message micro-batch, as Spark's sink runner calls
    it: a normal commit, then a commit killed half way and its replay. Each runs in a fresh
    process, so its peak RSS is the commit's own."""
    import subprocess

    import pyarrow as pa

    from store.spark.staging import STAGING_DIR
    from store.spark.write import WriteOptions, write_staged
    root = work / "sink-store"
    Store.open(root, create=True).close()
    opts = WriteOptions(str(root), "sink", False)
    parts = []
    per = 4
    for p in range(per):
        def batches(p: int = p) -> Any:
            for lo in range(p * n // per, (p + 1) * n // per, 10_000):
                hi = min((p + 1) * n // per, lo + 10_000)
                yield pa.record_batch({"body": [body_of(i, size) for i in range(lo, hi)]})
        part = write_staged(batches(), opts, f"{STAGING_DIR}/bench")
        parts.append((part.path, part.rows))
    (work / "sink-store-parts.json").write_text(json.dumps(parts))
    script = work / "sink_phase.py"
    script.write_text(SINK_PHASE)
    for phase in ("normal", "crash", "replay"):
        r = subprocess.run([sys.executable, str(script), str(root), str(n), phase],
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
    ap.add_argument("--dir", help="work directory, kept (default: a temporary one, removed after); "
                    "data already built there for the same --messages/--size/--queues is reused")
    ap.add_argument("--schema", action="append", default=[],
                    help="also read mqctl with this user schema (repeatable; default: 'body BINARY'). "
                    "Python data sources get no column pruning: a narrower schema is how to ask for less")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a read option for every mqctl read (repeatable)")
    ap.add_argument("--split", type=int, action="append", default=[], metavar="N",
                    help="also read each mqctl variant with minPartitions=N (repeatable)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark conf for the session (repeatable); the default session is what "
                    "the targets are judged on")
    ap.add_argument("--only", action="append", default=[], metavar="SOURCE",
                    help="time only these sources (repeatable; parquet is always timed: the ratios need it)")
    ap.add_argument("--agg", action="append", default=[], metavar="QUERY",
                    help="time only these queries (repeatable: count, bodies, tag, groupby)")
    ap.add_argument("--floor", action="store_true",
                    help="also time PySpark's own cost for a Python source: one that serves the same "
                    "rows in the same ten-column shape from the Parquet copy (pyarrow decodes it), "
                    "so the mqctl Python reader's target can be judged against what any Python "
                    "source pays")
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
        stamp = work / "built.json"
        shape = {"messages": args.messages, "size": args.size, "queues": args.queues}
        if stamp.exists() and json.loads(stamp.read_text()) == shape:
            print(f"reusing the data in {work}", flush=True)
        else:
            for old in (root, jsonl, work / "parquet", stamp):
                shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
            t = time.perf_counter()
            put_rate = build(root, jsonl, args.messages, args.size, args.queues)
            print(f"built {args.messages:,} messages of {args.size} bytes in {time.perf_counter() - t:.1f}s "
                  f"(Store.put {put_rate:,.0f} msg/s); store {du(root) / 2**20:.0f} MiB, "
                  f"JSON lines {du(jsonl) / 2**20:.0f} MiB", flush=True)

        from pyspark.sql import functions as fn

        from store.spark.datasource import local_session
        t = time.perf_counter()
        spark = local_session(args.master, extra=dict(kv.split("=", 1) for kv in args.conf))
        print(f"Spark session {args.master} in {time.perf_counter() - t:.1f}s"
              f"{' with ' + ', '.join(args.conf) if args.conf else ''}", flush=True)
        read_opts = dict(kv.split("=", 1) for kv in args.option)

        def mq(schema: str | None, split: int | None = None, via: str = "jvm") -> Callable[[], Any]:
            def load() -> Any:
                r = spark.read.format("mqctl").option("reader", via)
                if schema:
                    r = r.schema(schema)
                if split:
                    r = r.option("minPartitions", split)
                return r.options(**read_opts).option("store", str(root)).option("topic", TOPIC).load()
            return load

        parquet = work / "parquet"
        if not stamp.exists():
            t = time.perf_counter()
            # the same messages as Parquet (one file per queue, like the other two sources)
            mq(None)().repartition(args.queues, "queueId").write.mode("overwrite").parquet(str(parquet))
            print(f"Parquet copy written in {time.perf_counter() - t:.1f}s, {du(parquet) / 2**20:.0f} MiB",
                  flush=True)
            stamp.write_text(json.dumps(shape))

        sources: dict[str, Callable[[], Any]] = {"mqctl jvm": mq(None), "mqctl python": mq(None, via="python")}
        for schema in args.schema or []:
            sources[f"mqctl python {schema}"] = mq(schema, via="python")
        for n in args.split:
            sources[f"mqctl jvm /{n}"] = mq(None, n)
        sources["parquet"] = lambda: spark.read.parquet(str(parquet))
        sources["json"] = lambda: spark.read.schema(JSON_SCHEMA).json(str(jsonl))
        if args.floor:
            sources["python floor"] = floor_source(spark, parquet)
        if args.only:
            sources = {k: v for k, v in sources.items() if k in args.only or k == "parquet"}
        aggs: dict[str, Callable[[Any], Any]] = {
            "count": lambda df: df.count(),
            "bodies": lambda df: df.agg(fn.sum(fn.length("body"))).first()[0],
            "tag": lambda df: df.where("tags = 't3'").count(),
            "groupby": lambda df: tuple(sorted(map(tuple, df.groupBy("queueId").count().collect()))),
        }
        if args.agg:
            aggs = {k: v for k, v in aggs.items() if k in args.agg}
        times = interleaved(sources, aggs, args.runs)
        spark.stop()

        width = max(len(s) for s in sources)
        print(f"\n{'source':{width}} {'read':7} {'wall s':>7} {'runs s':>17} {'msg/s':>11} "
              f"{'/parquet':>9} {'json/this':>10} {'CPU s':>7} {'/parquet':>9} {'json/this':>10}")

        json_src = "json" if "json" in sources else "parquet"   # without JSON: json/this is vs Parquet

        def med(src: str, what: str, i: int) -> float:
            return statistics.median(x[i] for x in times[(src, what)])
        for what in aggs:
            for src in sources:
                wall, cpu = med(src, what, 0), med(src, what, 1)
                runs = " ".join(f"{x[0]:.2f}" for x in times[(src, what)])
                print(f"{src:{width}} {what:7} {wall:7.2f} {runs:>17} {args.messages / wall:11,.0f} "
                      f"{wall / med('parquet', what, 0):8.2f}x {med(json_src, what, 0) / wall:9.2f}x "
                      f"{cpu:7.2f} {cpu / med('parquet', what, 1):8.2f}x {med(json_src, what, 1) / cpu:9.2f}x")
        print(f"(medians of {args.runs} interleaved runs after one warm-up each; CPU: the Spark JVM "
              f"and its Python processes; targets for mqctl bodies: /parquet <= 2x, json/this >= 2x; "
              f"{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f})")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


FLOOR_SOURCE = r'''
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from store.spark.schema import SCHEMA


class FloorReader(DataSourceReader):
    def __init__(self, path, schema):
        self.path, self.schema = path, schema

    def partitions(self):
        import glob
        return [InputPartition(f) for f in sorted(glob.glob(self.path + "/*.parquet"))]

    def read(self, partition):
        want = to_arrow_schema(self.schema, timezone="UTC")
        for batch in pq.ParquetFile(partition.value).iter_batches(10_000, use_threads=False):
            yield batch.select(want.names).cast(want)


class MqctlFloor(DataSource):
    @classmethod
    def name(cls):
        return "mqctl_floor"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return FloorReader(self.options["path"], schema)
'''


def floor_source(spark: Any, parquet: Path) -> Callable[[], Any]:
    """PySpark's cost of a Python source in the mqctl reader's shape: it yields the Parquet
    copy's rows as Arrow batches of 10,000 rows with all ten columns (no pruning for Python
    sources), decoded by pyarrow on one thread. Whatever the mqctl Python reader costs beyond
    this is its own."""
    module = parquet.parent / "mqctl_floor.py"
    module.write_text(FLOOR_SOURCE)
    sys.path.insert(0, str(parquet.parent))
    sc = spark.sparkContext   # the planner and the workers import the module from there
    sc.environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(parquet.parent),
                                                                 sc.environment.get("PYTHONPATH")]))
    sc.addPyFile(str(module))
    import mqctl_floor  # type: ignore[import-not-found]
    spark.dataSource.register(mqctl_floor.MqctlFloor)
    return lambda: spark.read.format("mqctl_floor").load(str(parquet))


def tree_cpu() -> float:
    """CPU seconds used so far by this process's descendants (the Spark JVM, its Python
    daemons and workers, and the children they reaped), from /proc. Unlike wall time it
    hardly depends on what else the machine runs."""
    tick = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = sum(int(f) for f in fields[11:15])   # utime stime cutime cstime
    total, todo = 0, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0)
        todo.extend(kids.get(pid, []))
    return total / tick


def interleaved(sources: dict[str, Callable[[], Any]], aggs: dict[str, Callable[[Any], Any]],
                runs: int) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(wall, CPU) seconds per (source, aggregate), each run of every pair taken in turn (so
    a burst of load on the shared machine hits all sources alike); every pair is warmed up
    once first and all sources must agree on each result."""
    results: dict[str, set[Any]] = {what: set() for what in aggs}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {(s, w): [] for s in sources for w in aggs}
    for rnd in range(runs + 1):
        for what, agg in aggs.items():
            for src, load in sources.items():
                c, t = tree_cpu(), time.perf_counter()
                results[what].add(agg(load()))
                if rnd:
                    times[(src, what)].append((time.perf_counter() - t, tree_cpu() - c))
    for what, seen in results.items():
        assert len(seen) == 1, (what, seen)
    return times


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


if __name__ == "__main__":
    main()
