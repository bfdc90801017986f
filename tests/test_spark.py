"""The ``mqctl`` Spark data source and the ``query``/``export`` commands.

Tests that need a SparkSession are marked ``spark`` and share one session-scoped session
(starting a JVM costs seconds); each uses its own store under ``tmp_path``. Streaming tests
use ``trigger(availableNow=True)`` so nothing depends on wall-clock triggers. The commit
protocol of the streaming sink (crash between publish and ledger, crash mid-publish) is
tested without Spark by calling the commit path directly, which is what Spark's sink runner
does. ``query`` and ``export`` run as real ``mqctl`` processes.
"""
from __future__ import annotations

import json
import os
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

import store.format as F  # noqa: E402
import store.spark as S  # noqa: E402
from store.broker import Store  # noqa: E402
from store.errors import BadInputError, UsageError  # noqa: E402
from store.record import Draft, java_hash  # noqa: E402

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]
CLI_TIMEOUT = 240


# -- fixtures and helpers ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = S.local_session(log_level="OFF")
    yield session
    session.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store", create=True)
    yield s
    s.close()


def put(store: Store, topic: str, bodies: list[bytes], **props: str) -> list[Any]:
    return store.put([Draft(topic, b, dict(props)) for b in bodies])


def reader(spark: Any, store: Store, **options: str) -> Any:
    r = spark.read.format("mqctl").option("store", str(store.root))
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
def test_read_partitions_columns_and_values(spark: Any, store: Store) -> None:
    store.create_topic("orders", 4)
    store.create_topic("eu%x|y", 2)
    sent = store.put([Draft("orders", f"o{i}".encode(), {"TAGS": f"t{i % 2}", "KEYS": "k1 k2",
                                                          "color": "red"}) for i in range(20)])
    put(store, "eu%x|y", [b"\xff\xfe", b"x", b"y"])
    df = reader(spark, store)
    assert df.schema == S.SCHEMA == spark.createDataFrame([], S.SCHEMA_DDL).schema
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
    bodies = {bytes(r.body) for r in reader(spark, store, topic="eu%x|y").collect()}
    assert bodies == {b"\xff\xfe", b"x", b"y"}


@pytest.mark.spark
def test_read_offsets_tags_time_and_user_schema(spark: Any, store: Store) -> None:
    store.create_topic("a", 2)
    store.put([Draft("a", f"m{i}".encode(), {"TAGS": "A" if i % 3 else "B"}, queue_id=i % 2)
               for i in range(12)])
    time.sleep(0.02)
    t = int(time.time() * 1000)
    time.sleep(0.02)
    store.put([Draft("a", b"late", queue_id=1)])
    assert reader(spark, store, topic="a", tags="B").count() == 4
    assert reader(spark, store, topic="a", tags="A || B").count() == 12     # "late" has no tag
    rng = reader(spark, store, topic="a", startingOffsets=json.dumps({"a": {"0": 2, "1": -1}}),
                 endingOffsets=json.dumps({"a": {"0": 5}}))
    assert sorted((r.queueId, r.queueOffset) for r in rng.collect()) == [(0, 2), (0, 3), (0, 4)]
    assert [bytes(r.body) for r in reader(spark, store, topic="a", startingOffsets=str(t)).collect()] == [b"late"]
    assert reader(spark, store, topic="a", endingOffsets=str(t)).count() == 12
    sub = (spark.read.format("mqctl").schema("body STRING, queueOffset BIGINT")
           .option("store", str(store.root)).option("topic", "a").load())
    assert sorted(r.body for r in sub.collect())[:2] == ["late", "m0"]
    with pytest.raises(Exception, match="does not exist"):
        reader(spark, store, topic="nosuch").count()
    with pytest.raises(Exception, match="has queues 0-1"):
        reader(spark, store, topic="a", startingOffsets='{"a": {"5": 0}}').count()


@pytest.mark.spark
def test_a_damaged_record_fails_the_read(spark: Any, store: Store) -> None:
    put(store, "a", [b"fine-1"])
    (bad,) = put(store, "a", [b"CORRUPT-ME"])
    seg = store.layout.commitlog_dir / F.segment_name(0)
    with open(seg, "r+b") as fh:
        fh.seek(bad.commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")
    with pytest.raises(Exception, match="damaged message a/") as info:
        reader(spark, store, topic="a").collect()
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
    assert not (store.root / S.STAGING_DIR).exists()


@pytest.mark.spark
def test_a_read_dataframe_copies_to_another_store(spark: Any, store: Store, tmp_path: Path) -> None:
    store.create_topic("src", 2)
    store.put([Draft("src", f"c{i}".encode(), {"TAGS": "x", "KEYS": "k", "n": str(i)}) for i in range(6)])
    target = tmp_path / "other"
    reader(spark, store, topic="src").write.format("mqctl").mode("append").option("store", str(target)).save()
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
    staging = store.root / S.STAGING_DIR
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
    assert q.exception() is None
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


@pytest.mark.spark
def test_stream_resumes_from_checkpoint_with_only_new_messages(spark: Any, store: Store, tmp_path: Path) -> None:
    store.create_topic("a", 4)
    put(store, "a", [f"m{i}".encode() for i in range(25)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    batches = _stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest",
                                 maxMessagesPerTrigger="7")
    assert batches == [7, 7, 7, 4]
    put(store, "a", [f"n{i}".encode() for i in range(5)])
    put(store, "later", [f"x{i}".encode() for i in range(3)])     # a topic created after the start
    assert sum(_stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest")) == 8
    assert _stream_to_parquet(spark, store, out, ckpt, topic="*", startingOffsets="earliest") == []
    ids = pq.read_table(out).column("msgId").to_pylist()
    expected = {m.uniq_key for t in ("a", "later") for m in stored(store, t)}
    assert len(ids) == 33 and set(ids) == expected


@pytest.mark.spark
def test_stream_starts_at_latest_by_default(spark: Any, store: Store, tmp_path: Path) -> None:
    put(store, "a", [b"old"])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert _stream_to_parquet(spark, store, out, ckpt, topic="a") == []
    put(store, "a", [b"new"])
    assert _stream_to_parquet(spark, store, out, ckpt, topic="a") == [1]
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
    ledgers = list((store.root / S.SINKS_DIR).glob("*.json"))
    assert len(ledgers) == 1 and json.loads(ledgers[0].read_text())["publishing"] is None


# -- the streaming commit protocol, without Spark ---------------------------------------------

def _stage(store: Store, bodies: list[str], name: str) -> S.StagedPart:
    opts = S.WriteOptions(str(store.root), "sink", False)
    part = S.write_staged(iter([pa.record_batch({"body": bodies})]), opts, f"{S.STAGING_DIR}/{name}")
    assert part.path is not None and part.rows == len(bodies)
    staged = store.root / part.path
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600                 # private to the owner
    assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((store.root / S.STAGING_DIR).stat().st_mode) == 0o700
    return part


def test_replayed_batch_after_a_crash_before_the_ledger_is_not_duplicated(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = S.WriteOptions(str(store.root), "sink", False)
    bodies = ["a", "b", "a", "c"]                     # a repeated body is two messages
    real_save = S.SinkLedger.save
    calls = []

    def crash_after_publish(self: S.SinkLedger, state: dict) -> None:
        calls.append(state)
        if state.get("lastBatchId") == 7:
            raise OSError("crash between publish and ledger")
        real_save(self, state)

    monkeypatch.setattr(S.SinkLedger, "save", crash_after_publish)
    with pytest.raises(OSError):
        S.commit_stream_batch(opts, "q1", 7, [_stage(store, bodies, "x")])
    assert len(stored(store, "sink")) == 4
    monkeypatch.setattr(S.SinkLedger, "save", real_save)
    # Spark replays batch 7: new tasks, another staging order, the same messages.
    replay = [_stage(store, ["c", "a"], "y"), _stage(store, ["b", "a"], "z")]
    assert S.commit_stream_batch(opts, "q1", 7, replay) == 0
    assert sorted(m.body for m in stored(store, "sink")) == [b"a", b"a", b"b", b"c"]
    assert S.commit_stream_batch(opts, "q1", 7, [_stage(store, bodies, "w")]) == 0   # ledger says done
    assert S.commit_stream_batch(opts, "q1", 8, [_stage(store, ["d"], "v")]) == 1
    assert json.loads((store.root / S.SINKS_DIR / "q1.json").read_text()) == {"lastBatchId": 8, "publishing": None}


def test_replay_after_a_crash_mid_publish_stores_the_rest_once(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = S.WriteOptions(str(store.root), "sink", False)
    bodies = [f"m{i}" for i in range(10)]
    monkeypatch.setattr("store.sparkwrite.PUBLISH_MESSAGES", 3)
    real_put = Store.put
    done = []

    def crash_on_second_chunk(self: Store, drafts: list, sync: bool = False) -> list:
        done.append(len(drafts))
        if len(done) == 2:
            raise OSError("killed mid-publish")
        return real_put(self, drafts, sync=sync)

    monkeypatch.setattr(Store, "put", crash_on_second_chunk)
    with pytest.raises(OSError):
        S.commit_stream_batch(opts, "q2", 0, [_stage(store, bodies, "x")])
    monkeypatch.setattr(Store, "put", real_put)
    assert len(stored(store, "sink")) == 3
    assert S.commit_stream_batch(opts, "q2", 0, [_stage(store, list(reversed(bodies)), "y")]) == 7
    assert sorted(m.body for m in stored(store, "sink")) == sorted(b.encode() for b in bodies)


def test_rows_are_validated_before_anything_is_staged(store: Store) -> None:
    store.create_topic("ord", 2, order=True)
    opts = S.WriteOptions(str(store.root), "ord", False)
    with pytest.raises(BadInputError, match="ordered"):
        S.write_staged(iter([pa.record_batch({"body": ["x"]})]), opts, f"{S.STAGING_DIR}/j")
    opts = S.WriteOptions(str(store.root), "sink", False)
    batch = pa.record_batch({"body": ["x"], "queueId": pa.array([9], pa.int32())})
    with pytest.raises(BadInputError, match="queueId 9 does not exist"):
        S.write_staged(iter([batch]), opts, f"{S.STAGING_DIR}/j")
    assert not any((store.root / S.STAGING_DIR).rglob("*.arrow*"))


# -- option parsing and admission control ------------------------------------------------------

def test_offset_options_parse() -> None:
    assert S.parse_offsets(None, "latest", "o").kind == "latest"
    assert S.parse_offsets("EARLIEST", "latest", "o").kind == "earliest"
    spec = S.parse_offsets('{"T": {"1": 5, "0": -2}}', "latest", "o")
    assert spec.per_queue == (("T", 0, -2), ("T", 1, 5))
    assert S.parse_offsets("1732183200", "latest", "o").ts == 1732183200000
    assert S.parse_offsets("2026-11-21T10:00:00Z", "latest", "o").ts == \
        int(datetime(2026, 11, 21, 10, tzinfo=timezone.utc).timestamp() * 1000)
    for bad in ("soon", '{"T": {"x": 1}}', '{"T": 3}', "[1]"):
        with pytest.raises(UsageError):
            S.parse_offsets(bad, "latest", "o")
    assert S.parse_tags("A || B ||") == ("A", "B") and S.parse_tags("*") is None


def test_ship_code_zips_an_importable_store_package(tmp_path: Path) -> None:
    zipped = S._zip_store_package()
    try:
        probe = ("import sys; sys.path.insert(0, sys.argv[1]); import store.broker, store.spark; "
                 "print(store.broker.__file__)")
        r = subprocess.run([sys.executable, "-c", probe, zipped], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().startswith(zipped)
    finally:
        os.unlink(zipped)


def test_fair_share_caps_and_spreads_a_trigger() -> None:
    assert S.fair_share({"a/0": 3, "a/1": 2}, 10) == {"a/0": 3, "a/1": 2}
    share = S.fair_share({"a/0": 100, "a/1": 100, "b/0": 1}, 7)
    assert sum(share.values()) == 7 and share["a/0"] >= 3 and share["a/1"] >= 3
    assert sum(S.fair_share({f"t/{i}": 5 for i in range(10)}, 3).values()) == 3


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
    from mqctl.commands.sparkcmd import run_query
    store.create_topic("orders", 2)
    (sent,) = store.put([Draft("orders", b"hello", {"TAGS": "A", "KEYS": "k1 k2"}, queue_id=1)])
    run_query(spark, str(store.root), ["orders"], "SELECT topic, body, keys, properties, storeTimestamp, "
              "tags IS NULL AS untagged FROM orders", json=False)
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == ["TOPIC", "BODY", "KEYS", "PROPERTIES", "STORETIMESTAMP", "UNTAGGED"]
    stamp = datetime.fromtimestamp(sent.store_timestamp / 1000, timezone.utc)
    assert line.split() == ["orders", "hello", "k1,k2", "-", stamp.strftime("%Y-%m-%dT%H:%M:%S.")
                            + f"{sent.store_timestamp % 1000:03d}Z", "false"]


@pytest.mark.spark
def test_export_parquet_keeps_the_columns(spark: Any, store: Store, tmp_path: Path) -> None:
    from mqctl.commands.sparkcmd import export_topic, snapshot
    store.create_topic("t", 2)
    put(store, "t", [b"one", b"two"])
    ending, count = snapshot(store, "t")
    put(store, "t", [b"after the snapshot"])
    out = tmp_path / "pq"
    export_topic(spark, str(store.root), "t", ending, out, "parquet")
    table = pq.read_table(out)
    assert count == 2 and table.column_names == list(S.COLUMNS)
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
