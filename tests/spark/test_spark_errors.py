"""Errors of the ``mqctl`` source as a data engineer reads them, from both readers: in Python
the store's error (its class, its message first and whole) through ``mqctl_errors``, and no
Python traceback inside Spark's own exception; from ``mqctl query``/``export`` (real
processes) one ``mqctl: error:`` line and the contract's exit code; and the notice of an
executor without ``isal``."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import store.log.format as F  # noqa: E402
from store.errors import DataError, TopicNotFoundError, UsageError  # noqa: E402
from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402
from store.spark.errors import mqctl_errors  # noqa: E402
from tests.procs import MQCTL, mqctl, mqctl_env, one_error, wait_for  # noqa: E402

pytestmark = pytest.mark.spark
CLI_TIMEOUT = 240


def read(spark: Any, store: Store, via: str, **options: str) -> Any:
    r = spark.read.format("mqctl").option("store", str(store.root)).option("reader", via)
    return r.options(**options).load()


def damage(store: Store) -> None:
    """Topic ``a`` with a record whose body no longer matches its CRC."""
    store.create_topic("a", 1)
    store.put([Draft("a", b"fine")])
    (bad,) = store.put([Draft("a", b"CORRUPT-ME")])
    with open(store.layout.commitlog_dir / F.segment_name(0), "r+b") as fh:
        fh.seek(bad.commitlog_offset + F.RECORD_HEADER_SIZE)
        fh.write(b"X")


def test_python_users_get_the_store_error_first_and_whole(spark: Any, store: Store, via: str) -> None:
    store.create_topic("t", 1)
    with pytest.raises(TopicNotFoundError) as missing:
        with mqctl_errors():
            read(spark, store, via, topic="nosuch").count()
    assert str(missing.value) == "topic 'nosuch' does not exist"
    with pytest.raises(UsageError) as bad:
        with mqctl_errors():
            read(spark, store, via, topic="t", startingOffsets="soon").count()
    assert str(bad.value).startswith("startingOffsets: 'soon' is not earliest, latest")
    damage(store)
    with pytest.raises(DataError, match=r"^damaged message a/0@1 in store .*record CRC mismatch"):
        with mqctl_errors():
            read(spark, store, via, topic="a").select("body").collect()
    # without it: Spark's exception, with the store's line and no Python traceback
    with pytest.raises(Exception) as raw:
        read(spark, store, via, topic="a").select("body").collect()
    assert "store.errors.DataError: damaged message a/0@1" in str(raw.value)
    assert "Traceback" not in str(raw.value)


def test_a_stream_error_is_the_store_error(spark: Any, store: Store, via: str, tmp_path: Path) -> None:
    with pytest.raises(TopicNotFoundError, match="^topic 'nosuch' does not exist"):
        with mqctl_errors():
            spark.readStream.format("mqctl").option("store", str(store.root)).option("reader", via) \
                .option("topic", "nosuch").load().writeStream.format("parquet") \
                .option("path", str(tmp_path / "o")).option("checkpointLocation", str(tmp_path / "c")) \
                .trigger(availableNow=True).start().awaitTermination()


def test_cli_query_and_export_of_a_damaged_store_fail_in_one_line(store: Store, tmp_path: Path) -> None:
    damage(store)
    res = mqctl(store.root, "query", "SELECT sum(length(body)) FROM a", timeout=CLI_TIMEOUT)
    one_error(res, 5, "damaged message a/0@1 in store", allow_warnings=True)
    res = mqctl(store.root, "export", "a", "--out", str(tmp_path / "out"), timeout=CLI_TIMEOUT)
    one_error(res, 5, "damaged message a/0@1 in store", allow_warnings=True)
    res = mqctl(store.root, "query", "SELECT * FROM nosuch", timeout=CLI_TIMEOUT)
    one_error(res, 3, allow_warnings=True)



def test_cli_export_to_a_directory_it_cannot_make_fails_before_spark_starts(store: Store, tmp_path: Path) -> None:
    """An --out below a file (or where nothing may be made) failed only inside Spark's job, in
    one long line after its start; now in one line before it, with nothing left behind."""
    store.create_topic("a", 1)
    store.put([Draft("a", b"x")])
    (tmp_path / "file").write_bytes(b"")
    res = mqctl(store.root, "export", "a", "--out", str(tmp_path / "file" / "sub" / "out"), timeout=CLI_TIMEOUT)
    one_error(res, 1, f"cannot create {tmp_path / 'file' / 'sub' / 'out'}: Not a directory")
    assert "Spark" not in res.stderr
    res = mqctl(store.root, "export", "a", "--out", str(tmp_path / "new" / "deeper"), timeout=CLI_TIMEOUT)
    assert res.returncode == 0, res.stderr   # (the made-and-removed probe leaves a normal export alone)
    assert any((tmp_path / "new" / "deeper").glob("part-*"))


WITHOUT_ISAL = r'''
import sys
import store.spark.datasource as S
spark = S.local_session("local[1]", log_level="OFF")
df = spark.read.format("mqctl").option("store", sys.argv[1]).option("topic", "a").option("reader", "python").load()
print(sorted(bytes(r.body) for r in df.collect()))
spark.stop()
'''


def test_an_executor_without_isal_says_so(store: Store, tmp_path: Path) -> None:
    """A worker whose Python has no ``isal`` (here: one that fails to import) says, once, that
    it checks CRCs with zlib's slower function; the rows are the same."""
    store.create_topic("a", 1)
    store.put([Draft("a", b"one"), Draft("a", b"two")])
    hidden = tmp_path / "hide" / "isal"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('isal is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden.parent), *sys.path[1:]])}
    env.pop("MQCTL_PURE_ZLIB", None)
    res = subprocess.run([sys.executable, "-c", WITHOUT_ISAL, str(store.root)], capture_output=True,
                         text=True, env=env, timeout=CLI_TIMEOUT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[b'one', b'two']"
    notices = [ln for ln in res.stderr.splitlines() if "isal" in ln]
    assert len(notices) == 1 and notices[0].startswith("mqctl: notice: no isal on "), res.stderr


def spark_logs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("mqctl-spark-*.log"))


@pytest.mark.parametrize("json", [True, False], ids=["json", "table"])
def test_cli_query_into_a_pipe_closed_early_exits_141_in_silence(store: Store, tmp_path: Path,
                                                                 json: bool) -> None:
    """``mqctl query … | head -1``: exit 141 and nothing on stderr (as ``top | head``), and
    the run's Spark log is gone."""
    store.create_topic("a", 1)
    env = {**mqctl_env(store.root), "TMPDIR": str(tmp_path)}
    with open(tmp_path / "err", "wb") as err:
        p = subprocess.Popen([*MQCTL, "query", "SELECT id FROM range(200000)", *(["--json"] if json else [])],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env)
        assert p.stdout is not None
        first = p.stdout.readline()
        p.stdout.close()                              # the reader leaves after one line
        code = p.wait(CLI_TIMEOUT)
    assert first == (b'{"id":0}\n' if json else b"ID\n")
    assert (code, (tmp_path / "err").read_text()) == (141, "")
    assert spark_logs(tmp_path) == []


def test_cli_query_interrupted_says_one_line(store: Store, tmp_path: Path) -> None:
    """Ctrl-C while Spark runs a job: exit 130 and the one line ``mqctl: error: interrupted``,
    none of py4j's tracebacks of the call it cut short; no Spark log left behind."""
    store.create_topic("a", 1)
    env = {**mqctl_env(store.root), "TMPDIR": str(tmp_path), "MQCTL_PROGRESS": "1"}   # the bar says "stage"
    p = subprocess.Popen([*MQCTL, "query", "SELECT count(*) FROM range(100000000000)"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    got: list[bytes] = []
    assert p.stderr is not None
    reader = threading.Thread(target=lambda: got.extend(iter(lambda: p.stderr.read1(4096), b"")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: b"spark stage" in b"".join(got), timeout=CLI_TIMEOUT, what="a running Spark stage")
        p.send_signal(signal.SIGINT)
        code = p.wait(CLI_TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader.join(30)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(got).decode(errors="replace"))
    bar = re.compile(r"━|^(starting Spark|spark stage|spark) ")   # the progress bar's frames
    lines = [ln for ln in re.split(r"[\r\n]", text) if ln.strip() and not bar.search(ln)]
    assert (code, lines) == (130, ["mqctl: error: interrupted"]), text
    assert spark_logs(tmp_path) == []
