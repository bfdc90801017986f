"""The ``mqctl`` Spark data source and the ``query``/``export`` commands.

Tests that need a SparkSession are marked ``spark`` and share one session-scoped session
(starting a JVM costs seconds); each uses its own store under ``tmp_path``. Streaming tests
use ``trigger(availableNow=True)`` so nothing depends on wall-clock triggers. The commit
protocol of the streaming sink (crash between publish and ledger, crash mid-publish) is
tested without Spark by calling the commit path directly, which is what Spark's sink runner
does. ``query`` and ``export`` run as real ``mqctl`` processes.

Also here: one test per silent mistake (unknown option, missing store, missing topic in a
stream, write without a mode, relative times), the staging sweep (a task outliving its job's
abort, dead/idle owners, a real driver killed mid-write), and a stall probe (a shell producer
timing one-message sends while Spark writes). Cluster deployments: ``test_spark_deploy.py``.
"""
from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import store.log.format as F  # noqa: E402
import store.spark.datasource as S  # noqa: E402
from store.client.producer import Producer  # noqa: E402
from store.errors import BadInputError, OperationError, UsageError  # noqa: E402
from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft, java_hash  # noqa: E402
from store.spark.errors import store_error  # noqa: E402
from store.spark.options import ReadOptions, parse_offsets, parse_tags  # noqa: E402
from store.spark.schema import COLUMNS, SCHEMA, SCHEMA_DDL  # noqa: E402
from store.spark.sink import SINKS_DIR, SinkLedger, commit_stream_batch  # noqa: E402
from store.spark.staging import STAGING_DIR  # noqa: E402
from store.spark.streamplan import fair_share  # noqa: E402
from store.spark.write import StagedPart, WriteOptions, write_staged  # noqa: E402

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]
CLI_TIMEOUT = 240


# -- fixtures and helpers ---------------------------------------------------------------------

def put(store: Store, topic: str, bodies: list[bytes], **props: str) -> list[Any]:
    return store.put([Draft(topic, b, dict(props)) for b in bodies])


def reader(spark: Any, store: Store, via: str = "jvm", **options: str) -> Any:
    r = spark.read.format("mqctl").option("store", str(store.root)).option("reader", via)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def stored(store: Store, topic: str) -> list[Any]:
    """Every message of ``topic``, queue by queue."""
    return [m for q in range(store.topic(topic).queues) for m in store.iter_queue(topic, q, 0)]


def ms(value: datetime) -> int:
    return int(round(value.timestamp() * 1000))


def run_cli(store: Store, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "MQCTL_STORE": str(store.root), "NO_COLOR": "1", **(env or {})}
    return subprocess.run([*MQCTL, *args], capture_output=True, text=True, env=full_env,
                          timeout=CLI_TIMEOUT)


# -- batch read -------------------------------------------------------------------------------

@pytest.mark.spark
def test_read_partitions_columns_and_values(spark: Any, store: Store, via: str) -> None:
    store.create_topic("orders", 4)
    store.create_topic("eu%x|y", 2)
    sent = store.put([Draft("orders", f"o{i}".encode(), {"TAGS": f"t{i % 2}", "KEYS": "k1 k2",
                                                          "color": "red"}) for i in range(20)])
    put(store, "eu%x|y", [b"\xff\xfe", b"x", b"y"])
    df = reader(spark, store, via)
    scan = df._jdf.queryExecution().executedPlan().toString()
    assert ("BatchScan mqctl[" in scan) == (via == "jvm"), scan   # the reader asked for serves
    assert df.schema == SCHEMA == spark.createDataFrame([], SCHEMA_DDL).schema
    assert df.rdd.getNumPartitions() == 6                 # one per (topic, queue)
    assert df.count() == 23
    one = df.where("topic = 'orders' AND msgId = '%s'" % sent[5].uniq_key).collect()
    assert len(one) == 1
    row = one[0]
    assert (row.queueId, row.queueOffset) == (sent[5].queue_id, sent[5].queue_offset)
    assert row.keys == ["k1", "k2"] and row.tags == "t1" and row.properties == {"color": "red"}
    assert bytes(row.body) == b"o5"
    assert ms(row.storeTimestamp) == sent[5].store_timestamp
    assert ms(row.bornTimestamp) == store.find(sent[5].uniq_key).born_timestamp
    bodies = {bytes(r.body) for r in reader(spark, store, via, topic="eu%x|y").collect()}
    assert bodies == {b"\xff\xfe", b"x", b"y"}


@pytest.mark.spark
def test_read_a_log_with_zeros_written_ahead_by_a_sync_writer(spark: Any, store: Store, via: str) -> None:
    """Single sync sends leave zeros after the last record (``commitlog.written_length``):
    both readers read every record and nothing of the zeros. (Before, no zeros were written.)"""
    with Producer(store.root, flush="sync") as p:
        sent = [p.send("z", b"z%02d" % i) for i in range(30)]
    seg = sorted((store.root / "commitlog").iterdir())[-1]
    assert seg.stat().st_size > store.commitlog.end()
    rows = reader(spark, store, via, topic="z").collect()
    assert sorted(bytes(r.body) for r in rows) == [b"z%02d" % i for i in range(30)]
    assert {r.msgId for r in rows} == {r.msg_id for r in sent}


def test_vector_columns_of_a_run_without_keys_match_the_messages(store: Store) -> None:
    """A run where no message has keys or properties (the common case, which skips the key
    split) and whose topic column is laid out as a constant, against the per-message path."""
    from store.spark.read import ColumnPlan
    store.create_topic("eu%x|y", 2)
    store.put([Draft("eu%x|y", f"m{i}".encode(), {"TAGS": "t"} if i % 2 else {}, queue_id=1)
               for i in range(50)])
    plan = ColumnPlan(SCHEMA)
    cols = store.pull_vector("eu%x|y", 1, 0, 100, 1 << 20)
    assert cols is not None and len(cols) == 50
    batch = plan.bulk_batch(cols, "eu%x|y", 1)
    batch.validate(full=True)
    want = plan.batch(list(store.iter_queue("eu%x|y", 1, 0)))
    assert batch.to_pylist() == want.to_pylist()
    assert batch.column("keys").to_pylist() == [[]] * 50
    assert batch.column("topic").to_pylist() == ["eu%x|y"] * 50


def test_min_partitions_cuts_queues_in_proportion() -> None:
    from store.spark.options import split_slices
    from store.spark.read import QueueSlice
    qs = [QueueSlice("a", 0, 10, 110, "s"), QueueSlice("a", 1, 0, 300, "s"), QueueSlice("b", 0, 5, 5, "s")]
    assert split_slices(qs, 2) == qs                      # already enough
    cut = split_slices(qs, 8)
    assert len(cut) >= 8
    for q in qs:                                          # each range covered once, in order
        mine = [(p.start, p.end) for p in cut if (p.topic, p.queue_id) == (q.topic, q.queue_id)]
        assert mine[0][0] == q.start and mine[-1][1] == q.end
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert [(p.start, p.end) for p in cut if p.queue_id == 1 and p.topic == "a"] == \
        [(0, 50), (50, 100), (100, 150), (150, 200), (200, 250), (250, 300)]
    assert split_slices([QueueSlice("a", 0, 0, 3, "s")], 10) == \
        [QueueSlice("a", 0, i, i + 1, "s") for i in range(3)]   # never an empty piece


@pytest.mark.spark
def test_read_offsets_tags_time_and_user_schema(spark: Any, store: Store, via: str) -> None:
    store.create_topic("a", 2)
    store.put([Draft("a", f"m{i}".encode(), {"TAGS": "A" if i % 3 else "B"}, queue_id=i % 2)
               for i in range(12)])
    time.sleep(0.02)
    t = int(time.time() * 1000)
    time.sleep(0.02)
    store.put([Draft("a", b"late", queue_id=1)])
    assert reader(spark, store, via, topic="a", tags="B").count() == 4
    assert reader(spark, store, via, topic="a", tags="A || B").count() == 12     # "late" has no tag
    rng = reader(spark, store, via, topic="a", startingOffsets=json.dumps({"a": {"0": 2, "1": -1}}),
                 endingOffsets=json.dumps({"a": {"0": 5}}))
    assert sorted((r.queueId, r.queueOffset) for r in rng.collect()) == [(0, 2), (0, 3), (0, 4)]
    assert [bytes(r.body) for r in reader(spark, store, via, topic="a", startingOffsets=str(t)).collect()] == [b"late"]
    assert reader(spark, store, via, topic="a", endingOffsets=str(t)).count() == 12
    split = reader(spark, store, via, topic="a", minPartitions="5", tags="A")
    assert split.rdd.getNumPartitions() >= 5
    assert sorted(bytes(r.body) for r in split.collect()) == \
        sorted(bytes(r.body) for r in reader(spark, store, via, topic="a", tags="A").collect())
    with pytest.raises(Exception, match="minPartitions must be a positive integer"):
        reader(spark, store, via, topic="a", minPartitions="0").count()
    sub = (spark.read.format("mqctl").option("reader", via).schema("body STRING, queueOffset BIGINT")
           .option("store", str(store.root)).option("topic", "a").load())
    assert sorted(r.body for r in sub.collect())[:2] == ["late", "m0"]
    with pytest.raises(Exception, match="does not exist"):
        reader(spark, store, via, topic="nosuch").count()
    with pytest.raises(Exception, match="has queues 0-1"):
        reader(spark, store, via, topic="a", startingOffsets='{"a": {"5": 0}}').count()


@pytest.mark.spark
def test_predicates_and_colliding_tag_codes(spark: Any, store: Store, via: str) -> None:
    """Tag, queue and store-time predicates (pushed down by the JVM reader: tags through the
    consume queue's code, re-checked on the record as "Aa" and "BB" share a Java hash)."""
    assert java_hash("Aa") == java_hash("BB")
    store.create_topic("c", 2)
    store.put([Draft("c", f"m{i}".encode(), {"TAGS": ("Aa", "BB", "Cc")[i % 3]}, queue_id=i % 2)
               for i in range(12)])
    time.sleep(0.02)
    cut = datetime.fromtimestamp(time.time(), timezone.utc)
    time.sleep(0.02)
    store.put([Draft("c", b"late", {"TAGS": "Aa"}, queue_id=0)])
    df = reader(spark, store, via, topic="c")
    assert sorted(bytes(r.body) for r in df.where("tags = 'Aa'").collect()) == [b"late", b"m0", b"m3", b"m6", b"m9"]
    assert df.where("tags IN ('BB', 'Cc')").count() == 8
    assert df.where("tags = 'Aa' AND queueId = 1").select("queueOffset").count() == 2
    assert [bytes(r.body) for r in df.where(df.storeTimestamp >= cut).collect()] == [b"late"]
    assert df.where(df.storeTimestamp < cut).count() == 12
    assert dict(df.groupBy("queueId").count().collect()) == {0: 7, 1: 6}
    assert reader(spark, store, via, topic="c", tags="Aa || Cc").where("tags = 'Cc'").count() == 4


@pytest.mark.spark
def test_a_flipped_tag_code_hides_no_record_from_a_tag_predicate(spark: Any, store: Store, via: str) -> None:
    """A consume-queue entry's tag code is derived data: with one bit of an "A" entry's code
    flipped, ``tags = 'A'`` still finds it (the record's TAGS decides), and a "B" entry given
    A's code adds nothing."""
    store.create_topic("f", 1)
    store.put([Draft("f", f"{t}{i}".encode(), {"TAGS": t}, queue_id=0) for t in "AB" for i in range(10)])
    path = store.layout.queue_dir("f", 0) / F.segment_name(0)
    with open(path, "r+b") as fh:
        for entry, change in ((3, lambda c: c ^ (1 << 7)), (13, lambda c: java_hash("A"))):
            fh.seek(entry * F.CQ_ENTRY_SIZE)
            phys, size, code = F.CQ_ENTRY.unpack(fh.read(F.CQ_ENTRY_SIZE))
            fh.seek(entry * F.CQ_ENTRY_SIZE)
            fh.write(F.CQ_ENTRY.pack(phys, size, change(code)))
    df = reader(spark, store, via, topic="f")
    assert sorted(bytes(r.body) for r in df.where("tags = 'A'").collect()) == sorted(f"A{i}".encode() for i in range(10))
    assert df.where("tags IN ('A', 'B')").count() == 20


@pytest.mark.spark
def test_a_damaged_record_whose_tags_claim_a_wanted_tag_against_its_code_fails_no_tag_read(
        spark: Any, store: Store, via: str) -> None:
    """A "B" record whose TAGS byte is damaged to read "A" (its entry's code still B's) is
    opened by a ``tags=A`` read, as its TAGS are looked at unchecked, and fails its CRC: both
    readers pass it over on the code's word, as the consumer's pull does (before, the JVM reader
    failed the whole read). A damaged record whose code is a wanted tag's still fails it."""
    store.create_topic("f", 1)
    sent = store.put([Draft("f", f"{t}{i}".encode(), {"TAGS": t}, queue_id=0) for t in "AB" for i in range(10)])
    seg = store.layout.commitlog_dir / F.segment_name(0)
    with open(seg, "r+b") as fh:
        fh.seek(sent[13].commitlog_offset)
        at = fh.read(sent[14].commitlog_offset - sent[13].commitlog_offset).index(b"TAGS\x01B") + 5
        fh.seek(sent[13].commitlog_offset + at)
        fh.write(b"A")
    df = reader(spark, store, via, topic="f", tags="A")
    assert sorted(bytes(r.body) for r in df.collect()) == sorted(f"A{i}".encode() for i in range(10))
    with open(seg, "r+b") as fh:
        fh.seek(sent[4].commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")
    with pytest.raises(Exception, match=r"damaged message f/0@4 in store .*record CRC mismatch"):
        reader(spark, store, via, topic="f", tags="A").collect()


@pytest.mark.spark
def test_queue_columns_come_from_the_consume_queue(spark: Any, store: Store) -> None:
    """The JVM reader opens no record for count() or queue columns: a damaged record fails only
    the reads that need it (the Python reader opens every record)."""
    store.create_topic("a", 1)
    (bad,) = put(store, "a", [b"CORRUPT-ME"])
    put(store, "a", [b"fine"])
    seg = store.layout.commitlog_dir / F.segment_name(0)
    with open(seg, "r+b") as fh:
        fh.seek(bad.commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")
    df = reader(spark, store, "jvm", topic="a")
    assert df.count() == 2
    assert sorted(r.queueOffset for r in df.select("queueId", "queueOffset").collect()) == [0, 1]
    with pytest.raises(Exception, match=r"store\.errors\.DataError: damaged message a/\d+@0 in store .*: "
                                        r"commit-log offset \d+: record CRC mismatch \(run: mqctl store check\)"):
        df.select("body").collect()


@pytest.mark.spark
def test_reads_that_open_records_walk_the_log_in_order(spark: Any, store: Store) -> None:
    """The JVM reader cuts a read that opens records by the commit log, not by queue: each
    partition reads several queues' records in log order (each message once), so no task
    strides over the whole log; count() and queue columns keep a partition per queue."""
    from pyspark.sql import functions as fn
    store.create_topic("a", 4)
    store.create_topic("other", 1)
    for lo in range(0, 400, 50):
        store.put([Draft("a", f"{i:04d}".encode(), {"TAGS": f"t{i % 3}"}, queue_id=i % 4)
                   for i in range(lo, lo + 50)] + [Draft("other", b"x", {})])
    for where, want in (("true", range(400)), ("tags = 't1'", range(1, 400, 3))):
        df = reader(spark, store, "jvm", topic="a").where(where)
        rows = df.select(fn.spark_partition_id().alias("p"), "queueId", "queueOffset", "body").collect()
        assert sorted(int(r.body) for r in rows) == list(want)                # each message once
        assert all(r.queueOffset == int(r.body) // 4 and r.queueId == int(r.body) % 4 for r in rows)
        parts: dict[int, list[Any]] = {}
        for r in rows:
            parts.setdefault(r.p, []).append(r)
        for held in parts.values():
            assert [int(r.body) for r in held] == sorted(int(r.body) for r in held)   # log order
        assert max(len({r.queueId for r in held}) for held in parts.values()) == 4
    queue_only = reader(spark, store, "jvm", topic="a").select("queueId", fn.spark_partition_id().alias("p"))
    assert all(len(set(qs)) == 1 for qs in _by_partition(queue_only.collect()).values())


def _by_partition(rows: list[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in rows:
        out.setdefault(r.p, []).append(r.queueId)
    return out


@pytest.mark.spark
def test_stores_one_per_host(spark: Any, tmp_path: Path) -> None:
    """``stores`` lists stores by host (here both on this machine): one read returns them all;
    the Python reader, streams and a ``store`` beside it refuse it, in one line."""
    dirs = []
    for name, n in (("x", 3), ("y", 5)):
        with Store.open(tmp_path / name, create=True) as st:
            st.create_topic("t", 2)
            st.put([Draft("t", f"{name}{i}".encode(), {}, queue_id=i % 2) for i in range(n)])
        dirs.append(str(tmp_path / name))
    listed = f"127.0.0.1:{dirs[0]}, localhost:{dirs[1]}"
    df = spark.read.format("mqctl").option("stores", listed).option("topic", "t").load()
    assert sorted(bytes(r.body) for r in df.select("body").collect()) == \
        sorted(b"x%d" % i for i in range(3)) + sorted(b"y%d" % i for i in range(5))
    assert df.where("tags IS NULL AND queueId = 1").count() == 1 + 2
    with pytest.raises(Exception, match="read by the JVM reader only"):
        spark.read.format("mqctl").option("reader", "python").option("stores", listed).load().count()
    with pytest.raises(Exception, match="give either store or stores"):
        spark.read.format("mqctl").option("stores", listed).option("store", dirs[0]).load().count()
    with pytest.raises(Exception, match="is not HOST:/absolute/dir"):
        spark.read.format("mqctl").option("stores", "127.0.0.1:relative").load().count()
    with pytest.raises(UsageError, match="applies to batch reads only"):   # what a stream's start asks
        ReadOptions.parse({"stores": listed}, stream=True)


@pytest.mark.spark
def test_stores_task_off_its_host_fails_naming_both_hosts(spark: Any, tmp_path: Path) -> None:
    """A task of ``stores`` runs where Spark puts it, its host being only a preference: one
    that runs on another host than its store's fails, naming both, rather than reading
    whatever store sits at DIR there (the same DIR on every host: the wrong store's
    messages). In local mode a host other than this machine is such a task."""
    d = tmp_path / "x"
    with Store.open(d, create=True) as st:
        st.create_topic("t", 1)
        st.put([Draft("t", b"m%d" % i, {}) for i in range(3)])
    here = socket.gethostname()
    for listed in (f"no-such-host.invalid:{d}", f"127.0.0.1:{d},no-such-host.invalid:{d}"):
        with pytest.raises(Exception) as failed:
            spark.read.format("mqctl").option("stores", listed).option("topic", "t").load().collect()
        err = store_error(failed.value)
        assert isinstance(err, OperationError)
        assert f"the store no-such-host.invalid:{d} was read on {here}:" in str(err)
        assert "spark.locality.wait" in str(err)
    for listed in (f"127.0.0.1:{d}", f"localhost:{d}", f"{here}:{d}", f"127.0.0.1:{d},localhost:{d}"):
        bodies = spark.read.format("mqctl").option("stores", listed).option("topic", "t").load().select("body")
        assert len(bodies.collect()) == 3 * listed.count(",") + 3


@pytest.mark.spark
def test_queue_and_topic_predicates_open_only_those_queues(spark: Any, store: Store, via: str) -> None:
    """``where queueId = …`` / ``topic IN (…)`` are served by the reader (the Python one
    through PySpark's filter pushdown), which reads only the queues they allow: a damaged
    record in another queue fails the whole read but not the filtered ones."""
    store.create_topic("a", 2)
    store.create_topic("b", 1)
    store.put([Draft("a", b"a0-1", {}, queue_id=0), Draft("b", b"b0-1", {}, queue_id=0)])
    (bad,) = store.put([Draft("a", b"CORRUPT-ME", {}, queue_id=1)])
    seg = store.layout.commitlog_dir / F.segment_name(0)
    with open(seg, "r+b") as fh:
        fh.seek(bad.commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")
    df = reader(spark, store, via)
    assert sorted(bytes(r.body) for r in df.where("queueId = 0").collect()) == [b"a0-1", b"b0-1"]
    assert [bytes(r.body) for r in df.where("topic IN ('b', 'c')").collect()] == [b"b0-1"]
    assert df.where("topic = 'a' AND queueId IN (0, 7)").count() == 1
    with pytest.raises(Exception, match="damaged message a/1@0"):
        df.where("queueId = 1").collect()


@pytest.mark.spark
def test_a_damaged_record_fails_the_read(spark: Any, store: Store, via: str) -> None:
    put(store, "a", [b"fine-1"])
    (bad,) = put(store, "a", [b"CORRUPT-ME"])
    seg = store.layout.commitlog_dir / F.segment_name(0)
    with open(seg, "r+b") as fh:
        fh.seek(bad.commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")
    with pytest.raises(Exception, match="damaged message a/") as info:
        reader(spark, store, via, topic="a").collect()
    from mqctl.sparkutil import to_store_error
    assert to_store_error(info.value).exit_code == 5          # `mqctl query` exits 5, as other reads


# -- batch write ------------------------------------------------------------------------------

@pytest.mark.spark
def test_write_then_read_back_with_the_store(spark: Any, store: Store) -> None:
    store.create_topic("out", 4)
    rows = [("hello", "k1,k2", "T", "user-7", {"p": "1"}), ("world", None, None, None, None)]
    df = spark.createDataFrame(rows, "body string, keys string, tags string, shardingKey string, "
                                     "properties map<string,string>")
    df.write.format("mqctl").mode("append").option("store", str(store.root)).option("topic", "out").save()
    msgs = {m.body: m for m in stored(store, "out")}
    assert set(msgs) == {b"hello", b"world"}
    hello = msgs[b"hello"]
    assert hello.keys == ["k1", "k2"] and hello.tags == "T" and hello.user_properties == {"p": "1"}
    assert hello.queue_id == abs(java_hash("user-7")) % 4
    assert [m.body for m in store.query_key("out", "k2")] == [b"hello"]
    routed = spark.createDataFrame(
        [(bytearray(b"\x00\x01"), "r1", 2, ["a", "b"]), (bytearray(b"z"), "r2", 0, None)],
        "body binary, topic string, queueId int, keys array<string>")
    routed.write.format("mqctl").mode("append").option("store", str(store.root)).save()
    (r1,) = stored(store, "r1")
    assert (r1.body, r1.queue_id, r1.keys) == (b"\x00\x01", 2, ["a", "b"])
    assert [m.body for m in stored(store, "r2")] == [b"z"]
    assert not (store.root / STAGING_DIR).exists()


@pytest.mark.spark
def test_a_read_dataframe_copies_to_another_store(spark: Any, store: Store, tmp_path: Path) -> None:
    store.create_topic("src", 2)
    store.put([Draft("src", f"c{i}".encode(), {"TAGS": "x", "KEYS": "k", "n": str(i)}) for i in range(6)])
    target = tmp_path / "other"
    reader(spark, store, topic="src").write.format("mqctl").mode("append").option("store", str(target)) \
        .option("create", "true").save()
    with Store.open(target) as other:
        copied = stored(other, "src")
    assert sorted(m.body for m in copied) == sorted(f"c{i}".encode() for i in range(6))
    assert all(m.tags == "x" and m.keys == ["k"] and "n" in m.user_properties for m in copied)


@pytest.mark.spark
def test_a_failed_write_job_leaves_nothing_visible(spark: Any, store: Store) -> None:
    store.create_topic("t", 2)
    good = [(f"ok{i}", None) for i in range(2000)]
    bad = good[:1000] + [("bad", {"TAGS": "reserved"})] + good[1000:]
    df = spark.createDataFrame(good + bad, "body string, properties map<string,string>").repartition(2)
    with pytest.raises(Exception, match="reserved for the store"):
        df.write.format("mqctl").mode("append").option("store", str(store.root)).option("topic", "t").save()
    assert sum(store.max_offset("t", q) for q in range(2)) == 0
    staging = store.root / STAGING_DIR
    assert not staging.exists() or not any(staging.rglob("*"))
    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([("x",)], "body string").write.format("mqctl").mode("overwrite") \
            .option("store", str(store.root)).option("topic", "t").save()
    with pytest.raises(Exception, match="cannot be written"):
        spark.createDataFrame([("x", 1)], "body string, other int").write.format("mqctl") \
            .mode("append").option("store", str(store.root)).option("topic", "t").save()


# -- streaming read ---------------------------------------------------------------------------

def _stream_to_parquet(spark: Any, store: Store, out: Path, ckpt: Path, **options: str) -> list[int]:
    r = spark.readStream.format("mqctl").option("store", str(store.root))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "availableNow query did not finish"
    if q.exception() is not None:
        raise q.exception()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


@pytest.mark.spark
def test_stream_resumes_from_checkpoint_with_only_new_messages(
        spark: Any, store: Store, tmp_path: Path, via: str) -> None:
    store.create_topic("a", 4)
    put(store, "a", [f"m{i}".encode() for i in range(25)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    batches = _stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest",
                                 maxMessagesPerTrigger="7", reader=via)
    assert batches == [7, 7, 7, 4]
    put(store, "a", [f"n{i}".encode() for i in range(5)])
    put(store, "later", [f"x{i}".encode() for i in range(3)])     # a topic created after the start
    assert sum(_stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest", reader=via)) == 8
    assert _stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest", reader=via) == []
    ids = pq.read_table(out).column("msgId").to_pylist()
    expected = {m.uniq_key for t in ("a", "later") for m in stored(store, t)}
    assert len(ids) == 33 and set(ids) == expected


@pytest.mark.spark
def test_stream_starts_at_latest_by_default(spark: Any, store: Store, tmp_path: Path, via: str) -> None:
    put(store, "a", [b"old"])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert _stream_to_parquet(spark, store, out, ckpt, topic="a", reader=via) == []
    put(store, "a", [b"new"])
    assert _stream_to_parquet(spark, store, out, ckpt, topic="a", reader=via) == [1]
    assert [bytes(b) for b in pq.read_table(out).column("body").to_pylist()] == [b"new"]


# -- streaming write --------------------------------------------------------------------------

def _copy_stream(spark: Any, store: Store, ckpt: Path) -> None:
    q = (spark.readStream.format("mqctl").option("store", str(store.root)).option("topic", "src")
         .option("startingOffsets", "earliest").load()
         .selectExpr("body", "keys", "concat('q', queueId) AS tags")
         .writeStream.format("mqctl").option("store", str(store.root)).option("topic", "copy")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "availableNow query did not finish"
    assert q.exception() is None


@pytest.mark.spark
def test_stream_write_copies_each_message_once(spark: Any, store: Store, tmp_path: Path) -> None:
    store.create_topic("src", 2)
    put(store, "src", [f"s{i}".encode() for i in range(10)], KEYS="kk")
    ckpt = tmp_path / "ckpt"
    _copy_stream(spark, store, ckpt)
    assert len(stored(store, "copy")) == 10
    put(store, "src", [b"s10", b"s11"])
    _copy_stream(spark, store, ckpt)
    _copy_stream(spark, store, ckpt)
    copied = stored(store, "copy")
    assert sorted(m.body for m in copied) == sorted(f"s{i}".encode() for i in range(12))
    assert all(m.tags in ("q0", "q1") for m in copied)
    ledgers = list((store.root / SINKS_DIR).glob("*.json"))
    assert len(ledgers) == 1 and json.loads(ledgers[0].read_text())["publishing"] is None


# -- the streaming commit protocol, without Spark ---------------------------------------------

def _stage(store: Store, bodies: list[str], name: str) -> StagedPart:
    opts = WriteOptions(str(store.root), "sink", False)
    part = write_staged(iter([pa.record_batch({"body": bodies})]), opts, f"{STAGING_DIR}/{name}")
    assert part.path is not None and part.rows == len(bodies)
    staged = store.root / part.path
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600                 # private to the owner
    assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((store.root / STAGING_DIR).stat().st_mode) == 0o700
    return part


def test_replayed_batch_after_a_crash_before_the_ledger_is_not_duplicated(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = WriteOptions(str(store.root), "sink", False)
    bodies = ["a", "b", "a", "c"]                     # a repeated body is two messages
    real_save = SinkLedger.save

    def crash_after_publish(self: SinkLedger, state: dict, sync: bool = True) -> None:
        if state.get("lastBatchId") == 7:
            raise OSError("crash between publish and ledger")
        real_save(self, state, sync)

    monkeypatch.setattr(SinkLedger, "save", crash_after_publish)
    with pytest.raises(OSError):
        commit_stream_batch(opts, "q1", 7, [_stage(store, bodies[:2], "x"), None, _stage(store, bodies[2:], "x")])
    assert len(stored(store, "sink")) == 4
    monkeypatch.setattr(SinkLedger, "save", real_save)
    # Spark replays batch 7: new tasks, new staging files, the same rows in the same partitions.
    replay = [_stage(store, bodies[:2], "y"), None, _stage(store, bodies[2:], "z")]
    assert commit_stream_batch(opts, "q1", 7, replay) == 0
    assert sorted(m.body for m in stored(store, "sink")) == [b"a", b"a", b"b", b"c"]
    assert commit_stream_batch(opts, "q1", 7, [_stage(store, bodies, "w")]) == 0   # ledger says done
    assert commit_stream_batch(opts, "q1", 8, [_stage(store, ["d"], "v")]) == 1
    assert json.loads((store.root / SINKS_DIR / "q1.json").read_text()) == {"lastBatchId": 8, "publishing": None}


def _crash_on_chunk(monkeypatch: pytest.MonkeyPatch, which: int) -> list[int]:
    real_put = Store.put
    done: list[int] = []

    def crash(self: Store, drafts: list, sync: bool = False) -> list:
        done.append(len(drafts))
        if len(done) == which:
            raise OSError("killed mid-publish")
        return real_put(self, drafts, sync=sync)

    monkeypatch.setattr(Store, "put", crash)
    return done


def test_replay_after_a_crash_mid_publish_stores_the_rest_once(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = WriteOptions(str(store.root), "sink", False)
    bodies = [f"m{i}" for i in range(10)]
    monkeypatch.setattr("store.spark.write.PUBLISH_FIRST", 3)
    monkeypatch.setattr("store.spark.write.PUBLISH_MESSAGES", 3)
    monkeypatch.setattr("store.spark.write.PUBLISH_MIN", 3)
    _crash_on_chunk(monkeypatch, 3)
    with pytest.raises(OSError):
        commit_stream_batch(opts, "q2", 0, [_stage(store, bodies[:4], "x"), _stage(store, bodies[4:], "x")])
    monkeypatch.undo()
    assert len(stored(store, "sink")) == 6
    ledger = json.loads((store.root / SINKS_DIR / "q2.json").read_text())
    assert ledger["publishing"] == 0 and ledger["done"] == 6
    # The replay skips the recorded prefix without a single key-index lookup.
    lookups = []
    real_find_all = Store.find_all
    monkeypatch.setattr(Store, "find_all", lambda self, k, limit=64: lookups.append(k) or real_find_all(self, k, limit))
    assert commit_stream_batch(opts, "q2", 0, [_stage(store, bodies[:4], "y"), _stage(store, bodies[4:], "y")]) == 4
    assert len(lookups) == 1          # the first message after the prefix: not stored
    assert sorted(m.body for m in stored(store, "sink")) == sorted(b.encode() for b in bodies)


def test_replay_after_a_crash_between_a_chunk_and_its_ledger_update(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = WriteOptions(str(store.root), "sink", False)
    bodies = [f"m{i}" for i in range(10)]
    for name in ("PUBLISH_FIRST", "PUBLISH_MESSAGES", "PUBLISH_MIN"):
        monkeypatch.setattr(f"store.spark.write.{name}", 4)
    real_save = SinkLedger.save
    saves = []

    def crash_on_second_progress(self: SinkLedger, state: dict, sync: bool = True) -> None:
        if state.get("done"):
            saves.append(state["done"])
            if len(saves) == 2:
                raise OSError("killed after the chunk, before the ledger")
        real_save(self, state, sync)

    monkeypatch.setattr(SinkLedger, "save", crash_on_second_progress)
    with pytest.raises(OSError):
        commit_stream_batch(opts, "q3", 4, [_stage(store, bodies, "x")])
    monkeypatch.undo()
    assert len(stored(store, "sink")) == 8            # two chunks stored, the ledger says 4
    assert commit_stream_batch(opts, "q3", 4, [_stage(store, bodies, "y")]) == 2
    assert sorted(m.body for m in stored(store, "sink")) == sorted(b.encode() for b in bodies)


def test_a_replay_that_is_not_the_same_batch_falls_back_to_lookups(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = WriteOptions(str(store.root), "sink", False)
    for name in ("PUBLISH_FIRST", "PUBLISH_MESSAGES", "PUBLISH_MIN"):
        monkeypatch.setattr(f"store.spark.write.{name}", 2)
    _crash_on_chunk(monkeypatch, 2)
    with pytest.raises(OSError):
        commit_stream_batch(opts, "q4", 1, [_stage(store, ["a", "b", "c"], "x")])
    monkeypatch.undo()
    warnings: list[str] = []
    n = commit_stream_batch(opts, "q4", 1, [_stage(store, ["b", "a", "c"], "y")], warn=warnings.append)
    assert warnings and "differs" in warnings[0]
    assert n == 3 and len(stored(store, "sink")) == 5     # at-least-once: positions changed


def test_rows_are_validated_before_anything_is_staged(store: Store) -> None:
    store.create_topic("ord", 2, order=True)
    opts = WriteOptions(str(store.root), "ord", False)
    with pytest.raises(BadInputError, match="ordered"):
        write_staged(iter([pa.record_batch({"body": ["x"]})]), opts, f"{STAGING_DIR}/j")
    with pytest.raises(BadInputError, match="ordered"):   # an empty key is no key
        write_staged(iter([pa.record_batch({"body": ["x"], "shardingKey": [""]})]), opts, f"{STAGING_DIR}/j")
    opts = WriteOptions(str(store.root), "sink", False)
    batch = pa.record_batch({"body": ["x"], "queueId": pa.array([9], pa.int32())})
    with pytest.raises(BadInputError, match="queueId 9 does not exist"):
        write_staged(iter([batch]), opts, f"{STAGING_DIR}/j")
    assert not any((store.root / STAGING_DIR).rglob("*.arrow*"))


# -- option parsing and admission control ------------------------------------------------------

def test_offset_options_parse() -> None:
    assert parse_offsets(None, "latest", "o").kind == "latest"
    assert parse_offsets("EARLIEST", "latest", "o").kind == "earliest"
    spec = parse_offsets('{"T": {"1": 5, "0": -2}}', "latest", "o")
    assert spec.per_queue == (("T", 0, -2), ("T", 1, 5))
    assert parse_offsets("1732183200", "latest", "o").ts == 1732183200000
    assert parse_offsets("2026-11-21T10:00:00Z", "latest", "o").ts == \
        int(datetime(2026, 11, 21, 10, tzinfo=timezone.utc).timestamp() * 1000)
    for bad in ("soon", '{"T": {"x": 1}}', '{"T": 3}', "[1]"):
        with pytest.raises(UsageError):
            parse_offsets(bad, "latest", "o")
    assert parse_tags("A || B ||") == ("A", "B") and parse_tags("*") is None


def test_ship_code_archive_is_importable_cached_and_pruned(tmp_path: Path) -> None:
    from store.spark import ship as sparkship
    cache = tmp_path / "cache"
    zipped = sparkship.ship_archive(cache)
    assert sparkship.ship_archive(cache) == zipped                # cached by content
    assert [p.name for p in cache.iterdir()] == [Path(zipped).name]
    probe = ("import sys; sys.path[:0] = [sys.argv[1]]; import store.log.messagestore, store.spark.datasource, portalocker; "
             "print(store.log.messagestore.__file__, portalocker.__file__)")
    r = subprocess.run([sys.executable, "-c", probe.replace(", store.spark.datasource", ""), zipped], capture_output=True,
                       text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert all(p.startswith(zipped) for p in r.stdout.split())
    old = cache / "mqctl-store-0123.zip"
    old.write_bytes(b"x")
    os.utime(old, (time.time() - sparkship.KEEP_S - 10,) * 2)
    sparkship.ship_archive(cache)
    assert not old.exists() and Path(zipped).exists()


def test_fair_share_caps_and_spreads_a_trigger() -> None:
    assert fair_share({"a/0": 3, "a/1": 2}, 10) == {"a/0": 3, "a/1": 2}
    share = fair_share({"a/0": 100, "a/1": 100, "b/0": 1}, 7)
    assert sum(share.values()) == 7 and share["a/0"] >= 3 and share["a/1"] >= 3
    assert sum(fair_share({f"t/{i}": 5 for i in range(10)}, 3).values()) == 3


# -- the CLI ----------------------------------------------------------------------------------
# Two commands run as real processes (each starts its own JVM: seconds); the table output,
# Parquet export and error mapping run in-process on the shared session.

@pytest.mark.spark
def test_cli_query_json_over_topics_with_odd_names(store: Store) -> None:
    store.create_topic("orders", 2)
    store.put([Draft("orders", f"o{i}".encode(), {"TAGS": "A" if i < 3 else "B"}) for i in range(5)])
    put(store, "eu%x|y", [b"\xff\x00"])
    r = run_cli(store, "query", "SELECT o.tags, count(*) AS n, max(e.body) AS b FROM orders o "
                "CROSS JOIN `eu%x|y` e GROUP BY o.tags ORDER BY o.tags", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows == [{"tags": "A", "n": 3, "b": "/wA=", "bEncoding": "base64"},
                    {"tags": "B", "n": 2, "b": "/wA=", "bEncoding": "base64"}]


@pytest.mark.spark
def test_cli_export_json_reads_back_with_send(store: Store, tmp_path: Path) -> None:
    store.create_topic("t", 2)
    put(store, "t", [b"one", b"two", b"\xff"], TAGS="x", KEYS="k1")
    out = tmp_path / "js"
    r = run_cli(store, "export", "t", "--out", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"exported 3 messages of t to {out} (json)\n"
    lines = b"".join(p.read_bytes() for p in sorted(out.glob("part-*.json")))
    objs = [json.loads(x) for x in lines.splitlines()]
    assert sorted((o["body"], o.get("bodyEncoding")) for o in objs) == [("/w==", "base64"), ("one", None), ("two", None)]
    assert all(o["keys"] == ["k1"] and o["tags"] == "x" and isinstance(o["storeTimestamp"], int) for o in objs)
    resend = subprocess.run([*MQCTL, "send", "again", "--input", "json"], input=lines, capture_output=True,
                            env={**os.environ, "MQCTL_STORE": str(store.root)}, timeout=60)
    assert resend.returncode == 0, resend.stderr
    assert sorted(m.body for m in stored(store, "again")) == [b"one", b"two", b"\xff"]
    assert run_cli(store, "export", "t", "--out", str(out)).returncode == 4     # not empty, no --overwrite


@pytest.mark.spark
def test_query_table_output(spark: Any, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    from mqctl.sparkjobs import run_query
    store.create_topic("orders", 2)
    (sent,) = store.put([Draft("orders", b"hello", {"TAGS": "A", "KEYS": "k1 k2"}, queue_id=1)])
    run_query(spark, str(store.root), ["orders"], "SELECT topic, body, keys, properties, storeTimestamp, "
              "tags IS NULL AS untagged FROM orders", json=False, utc=True)
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == ["TOPIC", "BODY", "KEYS", "PROPERTIES", "STORETIMESTAMP", "UNTAGGED"]
    stamp = datetime.fromtimestamp(sent.store_timestamp / 1000, timezone.utc)
    assert line.split() == ["orders", "hello", "k1,k2", "-", stamp.strftime("%Y-%m-%dT%H:%M:%S.")
                            + f"{sent.store_timestamp % 1000:03d}Z", "false"]


@pytest.mark.spark
def test_query_table_escapes_control_characters(spark: Any, store: Store,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A newline, TAB or escape sequence in a value keeps its row one line and reaches the
    terminal escaped, as in every other table; ``--json`` has the value as it is."""
    from mqctl.sparkjobs import run_query
    store.create_topic("nl", 1)
    put(store, "nl", [b"l1\nl2\tT \x1b[31mred"])
    run_query(spark, str(store.root), ["nl"], "SELECT CAST(body AS STRING) AS `b\nx`, body FROM nl",
              json=False, utc=True)
    out = capsys.readouterr().out
    assert out.splitlines() == ["B\\nX                   BODY",
                                "l1\\nl2\\tT \\x1b[31mred  l1\\nl2\\tT \\x1b[31mred"], repr(out)
    run_query(spark, str(store.root), ["nl"], "SELECT CAST(body AS STRING) AS b FROM nl", json=True)
    assert json.loads(capsys.readouterr().out) == {"b": "l1\nl2\tT \x1b[31mred"}


@pytest.mark.spark
def test_an_empty_query_result_says_so_on_stderr(spark: Any, store: Store,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from mqctl.sparkjobs import run_query
    store.create_topic("orders", 2)
    store.put([Draft("orders", b"hello")])
    run_query(spark, str(store.root), ["orders"], "SELECT topic, body FROM orders WHERE 1 = 0",
              json=False, utc=True)
    got = capsys.readouterr()
    assert got.out == "" and got.err == "no rows (columns: topic, body)\n"


@pytest.mark.spark
def test_export_parquet_keeps_the_columns(spark: Any, store: Store, tmp_path: Path) -> None:
    from mqctl.sparkjobs import export_topic, snapshot
    store.create_topic("t", 2)
    put(store, "t", [b"one", b"two"])
    ending, count = snapshot(store, "t")
    put(store, "t", [b"after the snapshot"])
    out = tmp_path / "pq"
    export_topic(spark, str(store.root), "t", ending, out, "parquet")
    table = pq.read_table(out)
    assert count == 2 and table.column_names == list(COLUMNS)
    assert sorted(table.column("body").to_pylist()) == [b"one", b"two"]


@pytest.mark.spark
def test_spark_errors_map_to_exit_codes(spark: Any, store: Store) -> None:
    from mqctl.sparkutil import to_store_error
    put(store, "a", [b"x"])
    codes = {}
    for name, action in {
        "parse": lambda: spark.sql("SELEC 1"),
        "missing view": lambda: spark.sql("SELECT * FROM nosuch_view"),
        "missing topic": lambda: reader(spark, store, topic="nosuch").collect(),
        "bad option": lambda: reader(spark, store, startingOffsets="soon").collect(),
    }.items():
        with pytest.raises(Exception) as info:
            action()
        err = to_store_error(info.value)
        assert "\n" not in str(err)
        codes[name] = err.exit_code
    assert codes == {"parse": 2, "missing view": 3, "missing topic": 3, "bad option": 2}


def test_cli_without_java_or_pyspark_fails_in_one_line(store: Store) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH="/nonexistent", MQCTL_STORE=str(store.root))
    r = subprocess.run([*MQCTL, "query", "SELECT 1"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Java" in r.stderr
    hide = "import sys; sys.modules['pyspark'] = None; from mqctl.app import main; main(['query', 'SELECT 1'])"
    r = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                       env={**os.environ, "MQCTL_STORE": str(store.root)}, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "mqctl[spark]" in r.stderr


# -- no silent mistakes -------------------------------------------------------------------------

@pytest.mark.spark
def test_an_unknown_option_fails_naming_the_valid_ones(spark: Any, store: Store, tmp_path: Path) -> None:
    put(store, "a", [b"x"])
    with pytest.raises(Exception, match=r"unknown option 'startoffsets' for read .*valid: store, topic, "
                                        r"subscribe, startingOffsets, startingTimestamp, endingOffsets"):
        reader(spark, store, topic="a", startOffsets="earliest").collect()
    with pytest.raises(Exception, match=r"unknown option 'flsh' for write .*valid: store, topic, flush, create"):
        spark.createDataFrame([("x",)], "body string").write.format("mqctl").mode("append") \
            .option("store", str(store.root)).option("topic", "a").option("flsh", "sync").save()
    with pytest.raises(Exception, match=r"unknown option 'maxmessagespertriger' for read or readStream .*"
                                        r"maxMessagesPerTrigger, maxOffsetsPerTrigger, waitForTopic"):
        spark.readStream.format("mqctl").option("store", str(store.root)) \
            .option("maxMessagesPerTriger", "5").load().writeStream.format("console").start()


@pytest.mark.spark
def test_a_missing_store_fails_unless_create(spark: Any, tmp_path: Path) -> None:
    from mqctl.sparkutil import to_store_error
    missing = tmp_path / "typo"
    with pytest.raises(Exception, match="no store at .*typo.*create") as info:
        spark.read.format("mqctl").option("store", str(missing)).load().collect()
    assert to_store_error(info.value).exit_code == 3
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="no store at") as info:
        df.write.format("mqctl").mode("append").option("store", str(missing)).option("topic", "t").save()
    assert to_store_error(info.value).exit_code == 3 and not missing.exists()
    with pytest.raises(Exception, match="no store at"):
        spark.readStream.format("mqctl").option("store", str(missing)).load()\
            .writeStream.format("console").start()
    assert not missing.exists()
    df.write.format("mqctl").mode("append").option("store", str(missing)).option("topic", "t") \
        .option("create", "true").save()
    with Store.open(missing) as created:
        assert [m.body for m in stored(created, "t")] == [b"x"]


@pytest.mark.spark
def test_read_stream_of_a_missing_topic_fails_unless_waiting_for_it(
        spark: Any, store: Store, tmp_path: Path) -> None:
    put(store, "orders", [b"o1"])
    with pytest.raises(Exception, match="topic 'ordres' does not exist"):
        _stream_to_parquet(spark, store, tmp_path / "o1", tmp_path / "c1", topic="ordres")
    out, ckpt = tmp_path / "o2", tmp_path / "c2"
    assert _stream_to_parquet(spark, store, out, ckpt, topic="later", waitForTopic="true",
                              startingOffsets="earliest") == []
    put(store, "later", [b"l1", b"l2"])
    assert sum(_stream_to_parquet(spark, store, out, ckpt, topic="later", waitForTopic="true",
                                  startingOffsets="earliest")) == 2


@pytest.mark.spark
def test_a_write_without_a_mode_says_mode_append(spark: Any, store: Store) -> None:
    from mqctl.sparkutil import to_store_error
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception) as info:
        df.write.format("mqctl").option("store", str(store.root)).option("topic", "t").save()
    err = to_store_error(info.value)
    assert err.exit_code == 2 and '.mode("append")' in str(err)
    with pytest.raises(Exception, match=r'append-only: use .mode\("append"\)'):
        df.write.format("mqctl").mode("overwrite").option("store", str(store.root)).option("topic", "t").save()


@pytest.mark.spark
def test_starting_offsets_take_the_cli_time_grammar(spark: Any, store: Store, via: str) -> None:
    put(store, "a", [b"x", b"y"])
    assert reader(spark, store, via, topic="a", startingOffsets="-1h").count() == 2
    assert reader(spark, store, via, topic="a", startingOffsets="now", endingOffsets="latest").count() == 0
    assert reader(spark, store, via, topic="a", endingOffsets="-1d").count() == 0


def test_the_time_grammar_matches_the_cli() -> None:
    from store.spark.options import parse_time_ms
    from store.timeparse import parse_time
    now = 1_780_000_000_000
    for text in ("1732183200123", "1732183200", "now", "NOW", "-90s", "-2h30m", "-1d", "-500ms",
                 "2026-11-21", "2026-11-21T10:00:00Z", "2026-11-21 10:00:00.123+02:00",
                 "2026-11-21t10:00:00z"):
        assert parse_time_ms(text, "o", now_ms=now) == parse_time(text, now_ms=now), text
    for bad in ("soon", "-1y", "-", "12345"):
        with pytest.raises(UsageError):
            parse_time_ms(bad, "o", now_ms=now)
        with pytest.raises(UsageError):
            parse_time(bad, now_ms=now)


# -- staging leftovers --------------------------------------------------------------------------

def test_a_task_that_outlives_its_jobs_abort_leaves_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from store.errors import OperationError
    from store.spark import staging as ST
    opts = WriteOptions(str(store.root), "sink", False)
    job = f"{STAGING_DIR}/job1"
    # a task started after abort() removed the job directory: it stages nothing
    with pytest.raises(OperationError, match="aborted"):
        write_staged(iter([pa.record_batch({"body": ["x"]})]), opts, job, create_dir=False)
    assert not (store.root / STAGING_DIR).exists()
    # a task still staging when abort() runs: its finished file is removed too
    ST.write_owner(store.root / job)

    def batches() -> Iterator[Any]:
        yield pa.record_batch({"body": ["x"]})
        ST.remove_job_dirs(store.root, [job])            # the driver's abort()
        yield pa.record_batch({"body": ["y"]})
    with pytest.raises(OperationError, match="aborted"):
        write_staged(batches(), opts, job, create_dir=False)
    assert not (store.root / STAGING_DIR).exists()


def test_sweep_keeps_live_jobs_and_removes_dead_or_idle_ones(store: Store, tmp_path: Path) -> None:
    from store.spark import staging as ST
    base = store.root / STAGING_DIR
    ST.write_owner(base / "live")                        # this process: alive
    (base / "live" / "part-0.arrow").write_bytes(b"x")
    dead = subprocess.run([sys.executable, "-c", "from store.spark.staging import write_owner; "
                           f"from pathlib import Path; write_owner(Path({str(base / 'dead')!r}))"],
                          capture_output=True, text=True, timeout=60)
    assert dead.returncode == 0, dead.stderr               # its owner has exited
    (base / "orphan").mkdir()                             # no owner: a zombie task's directory
    (base / "orphan" / "part-1.arrow").write_bytes(b"yy")
    report = {d.path.name: d for d in ST.scan_staging(store.root)}
    assert not report["live"].stale and report["dead"].stale and not report["orphan"].stale
    assert "is gone" in report["dead"].describe()
    old = time.time() - ST.DEFAULT_GRACE_S - 60
    for p in (base / "orphan", base / "orphan" / "part-1.arrow"):
        os.utime(p, (old, old))
    assert sorted(d.path.name for d in ST.stale_staging(store.root)) == ["dead", "orphan"]
    assert sorted(d.path.name for d in ST.sweep_staging(store.root)) == ["dead", "orphan"]
    assert sorted(p.name for p in base.iterdir()) == ["live"]
    ST.remove_job_dirs(store.root, [f"{STAGING_DIR}/live"])
    assert not base.exists()


@pytest.mark.spark
@pytest.mark.slow
def test_the_next_write_sweeps_a_killed_drivers_staging(spark: Any, store: Store, tmp_path: Path) -> None:
    """A real driver killed while its tasks stage leaves ``spark-staging/<job>/``; the next
    write's start removes it (its owner, the killed JVM, is gone)."""
    store.create_topic("t", 2)
    work = tmp_path / "driver"            # not tmp_path: its store/ would shadow the package
    work.mkdir()
    script = work / "driver.py"
    script.write_text(KILLED_DRIVER.format(store=str(store.root)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=work, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.err", "w"))
    try:
        deadline = time.time() + 180
        base = store.root / STAGING_DIR
        while time.time() < deadline and not list(base.glob("*/part-*.arrow")):
            assert proc.poll() is None, (tmp_path / "driver.err").read_text()[-2000:]
            time.sleep(0.2)
        assert list(base.glob("*/part-*.arrow")), "nothing was staged"
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(60)
    from store.spark.staging import owner_alive, read_owner
    (job,) = [p for p in base.iterdir()]
    owner = read_owner(job)
    assert owner is not None and owner["pid"] != proc.pid          # the driver's JVM, not its Python
    deadline = time.time() + 60
    while owner_alive(owner) and time.time() < deadline:           # until the killed JVM has exited
        time.sleep(0.1)
    spark.createDataFrame([("after",)], "body string").write.format("mqctl").mode("append") \
        .option("store", str(store.root)).option("topic", "t").save()
    assert not base.exists()
    assert [m.body for m in stored(store, "t")] == [b"after"]


KILLED_DRIVER = '''
import time
import store.spark.datasource as S
from pyspark.sql.functions import udf
spark = S.local_session("local[1]", log_level="OFF")

@udf("string")
def body(i):
    if i == 19999:
        time.sleep(600)       # partition 0 is staged by now; partition 1 hangs: the driver is killed
    return str(i)

df = spark.range(0, 20000, 1, 2).select(body("id").alias("body"))
df.write.format("mqctl").mode("append").option("store", {store!r}).option("topic", "t").save()
'''


# -- bounded lock holds ---------------------------------------------------------------------------

PROBE = r'''
while [ ! -e "$STOP" ]; do
  s=$(date +%s%N); "$MQCTL" send probe x >/dev/null 2>&1; e=$(date +%s%N)
  echo "$s $e" >> "$OUT"
done
'''


@pytest.mark.spark
@pytest.mark.slow
def test_stall_probe_a_send_is_not_held_up_by_a_spark_write(spark: Any, store: Store, tmp_path: Path) -> None:
    """A shell producer sends one message at a time while Spark writes ROWS rows; the write
    publishes in chunks, so the producer's messages land *between* the write's chunks. The
    timings are printed (run with -s), not asserted tightly: the machine may be loaded."""
    rows = 300_000
    store.create_topic("big", 4)
    put(store, "probe", [b"first"])
    out, stop = tmp_path / "probe.txt", tmp_path / "stop"
    env = {**os.environ, "MQCTL_STORE": str(store.root), "OUT": str(out), "STOP": str(stop),
           "MQCTL": MQCTL[0] if len(MQCTL) == 1 else f"{sys.executable} -m mqctl"}
    producer = subprocess.Popen(["bash", "-c", PROBE], env=env)
    try:
        time.sleep(1.0)
        t0 = time.time_ns()
        (spark.range(0, rows, 1, 4).selectExpr("rpad(CAST(id AS STRING), 100, 'x') AS body")
         .write.format("mqctl").mode("append").option("store", str(store.root)).option("topic", "big").save())
        t1 = time.time_ns()
        time.sleep(1.5)
    finally:
        stop.touch()
        producer.wait(60)
    sends = [tuple(map(int, line.split())) for line in out.read_text().splitlines() if line.strip()]
    during = sorted((e - s) / 1e6 for s, e in sends if s < t1 and e > t0)
    outside = sorted((e - s) / 1e6 for s, e in sends if e <= t0 or s >= t1)

    def pct(xs: list[float], p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
    print(f"\nstall probe: {rows} rows written in {(t1 - t0) / 1e9:.1f}s; one-message sends during the "
          f"write: n={len(during)} p50={pct(during, .5):.0f}ms p99={pct(during, .99):.0f}ms "
          f"max={max(during, default=0):.0f}ms; outside it: n={len(outside)} p50={pct(outside, .5):.0f}ms "
          f"max={max(outside, default=0):.0f}ms")
    big = [m.commitlog_offset for m in stored(store, "big")]
    assert len(big) == rows
    probes = [m.commitlog_offset for m in stored(store, "probe")]
    inside = [p for p in probes if min(big) < p < max(big)]
    print(f"stall probe: {len(inside)} of {len(probes)} probe messages landed between the write's chunks")
    assert inside, "no send got the lock while the write published"
    assert max(during, default=0) < 10_000


# -- the CLI's Spark log and progress -------------------------------------------------------------

def test_cli_progress_bar_and_warn_log(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    from types import SimpleNamespace

    from mqctl import sparkutil
    stage = SimpleNamespace(numCompletedTasks=3, numTasks=8, numActiveTasks=2)
    tracker = SimpleNamespace(getActiveStageIds=lambda: [4], getStageInfo=lambda sid: stage)
    sc = SimpleNamespace(statusTracker=lambda: tracker)
    out = io.StringIO()
    p = sparkutil.Progress(interval=0.01, stream=out, force_terminal=True)
    assert p.snapshot() == ("starting Spark", None, None)       # while the JVM starts
    p.attach(sc)
    assert p.snapshot() == ("spark stage 4", 3, 8)
    deadline = time.time() + 10
    while "3/8" not in out.getvalue() and time.time() < deadline:
        time.sleep(0.01)
    p.stop()
    p.stop()                                                    # stopping twice is harmless
    assert "spark stage 4" in out.getvalue() and "3/8" in out.getvalue()   # a rich bar, drawn
    monkeypatch.setenv("MQCTL_PROGRESS", "0")
    assert not sparkutil.progress_wanted()
    monkeypatch.setenv("MQCTL_PROGRESS", "1")
    assert sparkutil.progress_wanted()
    monkeypatch.delenv("MQCTL_PROGRESS")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not sparkutil.progress_wanted()                      # piped: silent
    assert S.session_conf("local[2]", "WARN")["spark.log.level"] == "WARN"
    err = sparkutil.to_store_error(Exception(
        '[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] The data source "mqctl" cannot be written in the '
        'ErrorIfExists mode.'))
    assert err.exit_code == 2 and 'mode("append")' in str(err) and "ErrorIfExists" in str(err)


@pytest.mark.spark
def test_a_query_over_topics_differing_only_in_case_reads_each_by_its_own_name(
        spark: Any, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """Topic names are case-sensitive, Spark's views by default not: ``orders`` once read the 1
    message of ``Orders`` (exit 0). Each name now reaches its own topic, with a warning; the
    session is left as it was."""
    from mqctl.sparkjobs import run_query
    store.create_topic("orders", 2)
    store.create_topic("Orders", 1)
    store.put([Draft("orders", b"a"), Draft("orders", b"b"), Draft("Orders", b"c")])
    for name, want in (("orders", 2), ("Orders", 1)):
        run_query(spark, str(store.root), ["Orders", "orders"], f"SELECT count(*) AS n, max(topic) AS t FROM {name}",
                  json=True)
        out, err = capsys.readouterr()
        assert json.loads(out) == {"n": want, "t": name}, (out, err)
        assert "topics 'Orders' and 'orders' differ only in case" in err
    assert spark.conf.get("spark.sql.caseSensitive") == "false"


@pytest.mark.spark
def test_a_write_refuses_what_producer_send_refuses_with_its_message(spark: Any, store: Store) -> None:
    """A tag holding '|' was stored (no consumer's tag filter can select it), a property
    whose value is null was dropped: Producer.send refuses both. The same rules (one
    definition: store.client.properties.build_properties), the same words, and nothing written."""
    from store.errors import InvalidPropertyError

    def refusal(**kw: Any) -> str:
        with pytest.raises(InvalidPropertyError) as refused:
            Producer(str(store.root)).send("never", b"x", **kw)
        return refused.value.message

    cases = [
        ("body string, tags string", ("x", "A || B"), {"tags": "A || B"}),
        ("body string, properties map<string,string>", ("x", {"a": None}), {"properties": {"a": None}}),
        ("body string, keys array<string>", ("x", ["a b"]), {"keys": ["a b"]}),
        ("body string, shardingKey string", ("x", "s\x01k"), {"sharding_key": "s\x01k"}),
    ]
    for ddl, row, kw in cases:
        df = spark.createDataFrame([row], ddl)
        with pytest.raises(Exception) as failed:
            df.write.format("mqctl").mode("append").option("store", str(store.root)).option("topic", "w").save()
        err = store_error(failed.value)
        said = refusal(**kw).replace("sharding_key", "shardingKey")
        assert isinstance(err, BadInputError), err
        assert re.fullmatch(rf"partition \d+, row 0: {re.escape(said)}", str(err)), (err, said)
    assert not store.has_topic("w") and not store.has_topic("never")


@pytest.mark.spark
def test_a_batch_read_of_an_inverted_or_past_the_end_range_fails_naming_it(
        spark: Any, store: Store, via: str) -> None:
    """Such a queue gave no rows, silently: the other queues' rows looked like the answer."""
    store.create_topic("o", 2)
    store.put([Draft("o", f"m{i}".encode(), queue_id=i % 2) for i in range(8)])   # 4 a queue
    with pytest.raises(Exception, match=r"startingOffsets \(3\) is after endingOffsets \(1\) for queue o/0"):
        reader(spark, store, via, topic="o", startingOffsets='{"o": {"0": 3}}',
               endingOffsets='{"o": {"0": 1}}').count()
    with pytest.raises(Exception, match=r"startingOffsets names o/1@9, past the end of the queue "
                                        r"\(its next offset is 4\)"):
        reader(spark, store, via, topic="o", startingOffsets='{"o": {"1": 9}}').count()
    with pytest.raises(Exception, match=r"startingOffsets \(4\) is after endingOffsets \(0\) for queue o/0"):
        reader(spark, store, via, topic="o", startingOffsets="latest", endingOffsets="earliest").count()
    # the edges read what they say: from the end (nothing), an empty range
    assert reader(spark, store, via, topic="o", startingOffsets='{"o": {"0": 4}}').count() == 4
    assert reader(spark, store, via, topic="o", startingOffsets='{"o": {"0": 2}}',
                  endingOffsets='{"o": {"0": 2, "1": 2}}').count() == 2
