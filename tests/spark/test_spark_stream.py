"""Streaming reads on the JVM reader and the Python reader keep the same offsets: a checkpoint
written by one resumes with the other, and the JVM stream reads the same rows (columns from
the records, tag filter) as the Python one."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from store.log.broker import Store  # noqa: E402
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
