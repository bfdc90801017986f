"""Kafka's names on the ``mqctl`` source: ``subscribe``, ``startingTimestamp``,
``maxOffsetsPerTrigger``, ``minPartitions`` in streams, ``failOnDataLoss`` (Kafka's default:
fail when retention removed data a read was due to read) and ``shape=kafka`` (Kafka's
columns on read and write), against both readers. Streams use ``availableNow`` triggers, and
retention runs as ``mqctl store clean`` on files aged by ``os.utime``: nothing waits on a clock
except for the next millisecond between two sends."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402
from store.log.settings import StoreSettings  # noqa: E402
from tests.procs import mqctl, mqctl_env  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture
def store_settings() -> StoreSettings:
    """Small commit-log segments, so that retention has whole segments to delete."""
    return StoreSettings(max_message_size=1024, commitlog_segment_size=8192, cq_segment_entries=20)


def read(spark: Any, store: Store, via: str, **options: str) -> Any:
    r = spark.read.format("mqctl").option("store", str(store.root)).option("reader", via)
    return r.options(**options).load()


def stream(spark: Any, store: Store, via: str, **options: str) -> Any:
    r = spark.readStream.format("mqctl").option("store", str(store.root)).option("reader", via)
    return r.options(**options).load()


def run_stream(df: Any, checkpoint: Path, out: Path) -> Any:
    """Run ``df`` into Parquet files under ``out`` until it has read what is there now."""
    q = df.writeStream.format("parquet").option("path", str(out)) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    q.awaitTermination()
    return q


def bodies(rows: list[Any], column: str = "body") -> list[bytes]:
    return sorted(bytes(r[column]) for r in rows)


def next_millisecond(after_ms: int) -> None:
    """Wait until the clock is past ``after_ms``, so the next send has a later store time."""
    while time.time_ns() // 1_000_000 <= after_ms:
        time.sleep(0.001)


def test_batch_reads_take_subscribe_and_starting_timestamp(spark: Any, store: Store, via: str) -> None:
    store.create_topic("k", 2)
    first = store.put([Draft("k", f"old-{i}".encode()) for i in range(4)])
    next_millisecond(max(r.store_timestamp for r in first))
    second = store.put([Draft("k", f"new-{i}".encode()) for i in range(3)])
    since = min(r.store_timestamp for r in second)
    got = read(spark, store, via, subscribe="k", startingTimestamp=str(since), failOnDataLoss="true").collect()
    assert bodies(got) == [f"new-{i}".encode() for i in range(3)]
    # Kafka's precedence: the timestamp wins over startingOffsets
    got = read(spark, store, via, subscribe="k", startingOffsets="earliest", startingTimestamp=str(since))
    assert got.count() == 3
    assert read(spark, store, via, topic="k", endingTimestamp=str(since)).count() == 4
    with pytest.raises(Exception, match="topic and subscribe are the same option: give one"):
        read(spark, store, via, topic="k", subscribe="k").count()
    with pytest.raises(Exception, match=r"give store instead of kafka\.\* options"):
        read(spark, store, via, subscribe="k", **{"kafka.bootstrap.servers": "h:9092"}).count()


def test_a_stream_takes_max_offsets_per_trigger_and_min_partitions(
        spark: Any, store: Store, via: str, tmp_path: Path) -> None:
    store.create_topic("s", 2)
    store.put([Draft("s", f"m-{i}".encode()) for i in range(10)])
    name = tmp_path / "out"
    q = run_stream(stream(spark, store, via, subscribe="s", startingOffsets="earliest",
                          maxOffsetsPerTrigger="4", minPartitions="3"), tmp_path / "ck", name)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 4 and sum(sizes) == 10, sizes
    assert bodies(spark.read.parquet(str(name)).collect()) == sorted(f"m-{i}".encode() for i in range(10))
    with pytest.raises(Exception, match="maxMessagesPerTrigger and maxOffsetsPerTrigger are the same"):
        run_stream(stream(spark, store, via, subscribe="s", maxMessagesPerTrigger="1",
                          maxOffsetsPerTrigger="4"), tmp_path / "ck2", tmp_path / "out2")


def fill(store: Store, topic: str, start: int, n: int) -> None:
    for i in range(start, start + n, 10):
        store.put([Draft(topic, f"{topic}-{j:05d}-".encode() + b"x" * 200, queue_id=0)
                   for j in range(i, min(i + 10, start + n))])


def clean_old_segments(store: Store) -> None:
    """``mqctl store clean`` with every file made four days old: all but the last segment go."""
    t = time.time() - 4 * 86400
    for dirpath, _dirs, names in os.walk(store.root):
        for n in names:
            os.utime(os.path.join(dirpath, n), (t, t))
    res = mqctl(store.root, "store", "clean", "--older-than", "1h")
    assert res.returncode == 0, res


def test_data_removed_before_a_read_reached_it_fails_unless_fail_on_data_loss_is_false(
        spark: Any, store: Store, via: str, tmp_path: Path) -> None:
    store.create_topic("r", 1)
    fill(store, "r", 0, 5)
    name = tmp_path / "out"
    run_stream(stream(spark, store, via, topic="r", startingOffsets="earliest"), tmp_path / "ck", name)
    fill(store, "r", 5, 200)
    clean_old_segments(store)
    earliest = store.min_offset("r", 0)
    assert earliest > 5, "the test needs the unread messages 5.. gone"
    with pytest.raises(Exception, match=rf"messages r/0@5-{earliest - 1} were removed by retention before "
                                        r"this read reached them \(give failOnDataLoss=false"):
        run_stream(stream(spark, store, via, topic="r", startingOffsets="earliest"), tmp_path / "ck", name)
    run_stream(stream(spark, store, via, topic="r", failOnDataLoss="false"), tmp_path / "ck", name)
    assert spark.read.parquet(str(name)).count() == 5 + 205 - earliest
    # a batch read asked for offsets that are gone: the same rule
    gone = '{"r": {"0": 3}}'
    with pytest.raises(Exception, match=r"messages r/0@3-\d+ were removed by retention"):
        read(spark, store, via, topic="r", startingOffsets=gone).count()
    assert read(spark, store, via, topic="r", startingOffsets=gone, failOnDataLoss="false").count() == 205 - earliest


def test_kafka_shape_reads_kafka_columns_and_writes_them_back(spark: Any, store: Store, via: str) -> None:
    store.create_topic("src", 2)
    sent = store.put([Draft("src", b"v1", {"KEYS": "user-1", "TAGS": "A", "region": "eu"}, queue_id=1),
                      Draft("src", b"v2", {}, queue_id=0)])
    df = read(spark, store, via, topic="src", shape="kafka")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = {bytes(r["value"]): r for r in df.collect()}
    one, two = rows[b"v1"], rows[b"v2"]
    assert (one["key"], one["topic"], one["partition"], one["offset"], one["timestampType"]) == \
        (b"user-1", "src", 1, sent[0].queue_offset, 0)
    assert [(h["key"], bytes(h["value"])) for h in one["headers"]] == [("region", b"eu")]
    assert two["key"] is None and two["headers"] == []
    born = next(m for m in store.iter_queue("src", 1, 0) if m.body == b"v1").born_timestamp
    assert round(one["timestamp"].timestamp() * 1000) == born
    # a Kafka job's write: the same DataFrame, and one made from scratch
    store.create_topic("dst", 2)
    df.write.format("mqctl").mode("append").option("store", str(store.root)).option("topic", "dst") \
        .option("shape", "kafka").save()
    spark.createDataFrame([("k9", "v9")], "key string, value string").write.format("mqctl") \
        .mode("append").option("store", str(store.root)).option("topic", "dst").option("shape", "kafka").save()
    copied = {m.body: m for q in range(2) for m in store.iter_queue("dst", q, 0)}
    assert set(copied) == {b"v1", b"v2", b"v9"}
    assert copied[b"v1"].keys == ["user-1"] and copied[b"v1"].queue_id == 1
    assert copied[b"v1"].user_properties == {"region": "eu"} and copied[b"v9"].keys == ["k9"]
    with pytest.raises(Exception, match="shape must be mqctl or kafka"):
        read(spark, store, via, topic="src", shape="avro").count()



def test_a_topic_deleted_and_made_again_under_a_stream_fails_it_unless_fail_on_data_loss_is_false(
        spark: Any, store: Store, via: str, tmp_path: Path) -> None:
    """The checkpoint's offsets are the old topic's: the new one's first messages were skipped
    until its queue passed them (silently, whatever failOnDataLoss said)."""
    store.create_topic("rec", 1)
    store.put([Draft("rec", f"old{i}".encode()) for i in range(5)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_stream(stream(spark, store, via, topic="rec", startingOffsets="earliest"), ck, out)
    store.delete_topic("rec")
    store.create_topic("rec", 1)
    store.put([Draft("rec", f"new{i}".encode()) for i in range(3)])
    gone = r"topic 'rec' was deleted and made again after this stream read rec/0 up to offset 5"
    with pytest.raises(Exception, match=gone):          # the new queue ends before the old offset
        run_stream(stream(spark, store, via, topic="rec"), ck, out)
    store.put([Draft("rec", f"new{i}".encode()) for i in range(3, 9)])
    with pytest.raises(Exception, match=gone):          # past it: only the topic's birth tells
        run_stream(stream(spark, store, via, topic="rec"), ck, out)
    run_stream(stream(spark, store, via, topic="rec", failOnDataLoss="false"), ck, out)
    assert bodies(spark.read.parquet(str(out)).collect()) == \
        sorted([f"old{i}".encode() for i in range(5)] + [f"new{i}".encode() for i in range(9)])
    store.put([Draft("rec", b"new9")])                  # and on from there, as any stream
    run_stream(stream(spark, store, via, topic="rec"), ck, out)
    assert spark.read.parquet(str(out)).count() == 15


# A stream with failOnDataLoss=false over a gap retention made, and over a topic made again,
# for each reader, in a process of its own: what Spark's processes print reaches its stderr.
WARNINGS_SCRIPT = """
import os, subprocess, sys, time
import store.spark.datasource as S
from store.log.messagestore import Store
from store.log.record import Draft
root, work = sys.argv[1:3]
spark = S.local_session("local[1]", log_level="OFF")
store = Store.open(root)

def run(via, topic, ck, **options):
    r = spark.readStream.format("mqctl").option("store", root).option("reader", via)
    q = r.options(topic=topic, startingOffsets="earliest", **options).load().writeStream \\
        .format("noop").option("checkpointLocation", f"{work}/{ck}").trigger(availableNow=True).start()
    q.awaitTermination()
    return sum(p["numInputRows"] for p in q.recentProgress)

def fill(topic, start, n):
    for i in range(start, start + n, 10):
        store.put([Draft(topic, b"x" * 200, queue_id=0) for j in range(i, min(i + 10, start + n))])

for via in ("jvm", "python"):
    gap, again = f"gap-{via}", f"again-{via}"
    store.create_topic(gap, 1)
    fill(gap, 0, 5)
    assert run(via, gap, gap) == 5
    fill(gap, 5, 200)
    t = time.time() - 4 * 86400
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (t, t))
    subprocess.run([sys.executable, "-m", "mqctl", "--store", root, "store", "clean", "--older-than", "1h"], check=True,
                   stdout=subprocess.DEVNULL)
    left = 205 - store.min_offset(gap, 0)
    read = run(via, gap, gap, failOnDataLoss="false")
    store.create_topic(again, 1)
    store.put([Draft(again, b"old") for _ in range(5)])
    assert run(via, again, again) == 5
    store.delete_topic(again)
    store.create_topic(again, 1)
    store.put([Draft(again, b"new") for _ in range(3)])
    print(via, 0 < left < 200, read == left, run(via, again, again, failOnDataLoss="false"), flush=True)
"""


def test_fail_on_data_loss_false_warns_once_a_gap_and_once_a_topic_made_again(
        store: Store, tmp_path: Path) -> None:
    """The JVM reader said each message of a gap retention made in a line of its own (363
    lines for one gap), after the planner's line; the Python reader said a gap twice."""
    res = subprocess.run([sys.executable, "-c", WARNINGS_SCRIPT, str(store.root), str(tmp_path)],
                         capture_output=True, text=True, timeout=600, env=mqctl_env(store.root))
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("mqctl: warning:")]
    for via in ("jvm", "python"):
        gap = [w for w in warnings if f"gap-{via}/" in w]
        assert len(gap) == 1 and re.fullmatch(
            rf"mqctl: warning: messages gap-{via}/0@5-\d+ were removed by retention before this read "
            r"reached them: skipped \(failOnDataLoss=false\)", gap[0]), gap[:3]
    assert res.stdout.split() == ["jvm", "True", "True", "3", "python", "True", "True", "3"], res.stdout
    for via in ("jvm", "python"):
        again = [w for w in warnings if f"again-{via}" in w]
        assert again == [f"mqctl: warning: topic 'again-{via}' was deleted and made again after this stream "
                         f"read again-{via}/0 up to offset 5: messages of the old topic past those offsets may "
                         f"never have been read, and the new topic's offsets start again at 0: reading the new "
                         f"topic from its first offsets (failOnDataLoss=false)"], again
    assert len(warnings) == 4, warnings


def test_a_kafka_shaped_read_written_back_keeps_every_key(spark: Any, store: Store) -> None:
    """The Kafka shape's key is a message's keys joined by spaces: its write refused a message
    of two keys ('a key may not contain spaces'), and a key 'user 42'."""
    store.create_topic("src", 1)
    store.create_topic("dst", 1)
    r = mqctl(Path(store.root), "send", "src", "hello", "--keys", "order-1,cust-7")
    assert r.returncode == 0, r.stderr
    df = read(spark, store, "python", topic="src", shape="kafka")
    assert [bytes(k["key"]) for k in df.select("key").collect()] == [b"order-1 cust-7"]
    df.select("key", "value").write.format("mqctl").mode("append") \
        .option("store", str(store.root)).option("topic", "dst").option("shape", "kafka").save()
    spark.createDataFrame([("user 42", "v")], "key string, value string").write.format("mqctl") \
        .mode("append").option("store", str(store.root)).option("topic", "dst").option("shape", "kafka").save()
    copied = {m.body: m for m in store.iter_queue("dst", 0, 0)}
    assert copied[b"hello"].keys == ["order-1", "cust-7"] and copied[b"v"].keys == ["user", "42"]


def test_a_kafka_shaped_write_drops_headers_whose_value_is_null(spark: Any, store: Store) -> None:
    """Kafka allows a header with a null value (it is no property): the write failed the job
    ('null' property), and refused headers from Spark SQL's named_struct (a key not nullable)."""
    from pyspark.sql.types import StructType

    from store.spark.kafka import KAFKA_SCHEMA
    store.create_topic("dst", 1)
    schema = StructType([KAFKA_SCHEMA["key"], KAFKA_SCHEMA["value"], KAFKA_SCHEMA["headers"]])
    spark.createDataFrame([(b"k", b"v1", [("h", None), ("g", b"x")])], schema).write.format("mqctl") \
        .mode("append").option("store", str(store.root)).option("topic", "dst").option("shape", "kafka").save()
    spark.sql("select 'k' as key, 'v2' as value, array(named_struct('key', 'h', 'value', cast(null as binary)))"
              " as headers").write.format("mqctl").mode("append").option("store", str(store.root)) \
        .option("topic", "dst").option("shape", "kafka").save()
    copied = {m.body: m for m in store.iter_queue("dst", 0, 0)}
    assert copied[b"v1"].user_properties == {"g": "x"} and copied[b"v2"].user_properties == {}
