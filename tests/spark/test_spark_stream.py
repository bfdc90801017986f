"""Streaming reads on the JVM reader and the Python reader keep the same offsets: a checkpoint
written by one resumes with the other, and the JVM stream reads the same rows (columns from
the records, tag filter) as the Python one. One planner process serves all the JVM's reads."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402

pytestmark = pytest.mark.spark


def drain(spark: Any, store: Store, via: str, out: Path, ckpt: Path, **options: str) -> list[int]:
    """Run a stream of ``via``'s reader into Parquet until it has read what is there now:
    the sizes of its micro-batches."""
    r = spark.readStream.format("mqctl").option("store", str(store.root)).option("reader", via)
    q = r.options(**options).load().writeStream.format("parquet").option("path", str(out)) \
        .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    q.awaitTermination()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


@pytest.mark.parametrize("first,then", [("python", "jvm"), ("jvm", "python")])
def test_a_checkpoint_of_one_reader_resumes_with_the_other(
        spark: Any, store: Store, tmp_path: Path, first: str, then: str) -> None:
    store.create_topic("t", 3)
    store.put([Draft("t", f"a{i}".encode(), {"TAGS": "x" if i % 2 else "y", "KEYS": f"k{i}"})
               for i in range(12)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    opts = {"topic": "t", "startingOffsets": "earliest", "tags": "x", "maxOffsetsPerTrigger": "4"}
    sizes = drain(spark, store, first, out, ckpt, **opts)
    assert sum(sizes) == 6 and len(sizes) >= 3, sizes     # 12 offsets, 4 a trigger, half tagged x
    store.put([Draft("t", f"b{i}".encode(), {"TAGS": "x"}) for i in range(5)])
    sizes = drain(spark, store, then, out, ckpt, **opts)
    assert sum(sizes) == 5 and max(sizes) <= 4, sizes     # only the new messages
    table = pq.read_table(out)
    bodies = sorted(bytes(b) for b in table.column("body").to_pylist())
    assert bodies == sorted([f"a{i}".encode() for i in range(1, 12, 2)] + [f"b{i}".encode() for i in range(5)])
    keys = {bytes(b): k for b, k in zip(table.column("body").to_pylist(), table.column("keys").to_pylist())}
    assert keys[b"a3"] == ["k3"] and keys[b"b0"] == []
    assert set(table.column("tags").to_pylist()) == {"x"}


def planners(parent: int) -> list[int]:
    """The ``python -m store.spark.plan`` processes ``parent`` started."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == parent and b"store.spark.plan" in cmd:
            found.append(int(pid))
    return found


def test_one_planner_process_serves_every_read_of_the_jvm(spark: Any, store: Store, tmp_path: Path) -> None:
    """Starting Python for each plan cost every query 0.1-0.3 s, twice (load and plan)."""
    store.create_topic("t", 2)
    store.put([Draft("t", f"m{i}".encode(), queue_id=i % 2) for i in range(6)])
    jvm = spark.sparkContext._gateway.proc.pid
    df = spark.read.format("mqctl").option("store", str(store.root)).option("topic", "t").load()
    assert df.count() == 6
    first = planners(jvm)
    assert len(first) == 1, first
    assert df.where("queueId = 1").count() == 3
    drain(spark, store, "jvm", tmp_path / "out", tmp_path / "ckpt", topic="t", startingOffsets="earliest")
    assert planners(jvm) == first
