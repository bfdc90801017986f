"""The ``mqctl`` source on a Spark standalone cluster on 127.0.0.1: a master and two workers
(one core each) started from the installed PySpark's ``spark-class``, a driver process that
reads and writes stores through them, and the same driver script in ``local[2]``: every
answer must be the same.

What runs in each mode: a read of every column of a store given by ``store`` (shared storage:
here the one disk every process sees) with the JVM reader and with the Python reader, a write
through the executors (read back), a tag filter and a group-by, and a read of two stores
given by ``stores`` (one store per host: ``127.0.0.1`` and ``localhost`` name this machine).
The driver also reports the preferred locations of the partitions: none for ``store``, each
store's host for ``stores``.

The cluster needs free ports and a JVM per process: where it cannot start, the tests are
skipped, naming what failed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START_TIMEOUT = 120       # a master or worker JVM on a loaded 2-core machine
DRIVER_TIMEOUT = 600


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


class Daemon:
    """A ``spark-class`` process whose log is a file; ``wait_for`` blocks until a line
    matching a pattern appears (or the process exits, or the start timeout passes)."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name, self.log = name, log
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(log.parent), SPARK_NO_DAEMONIZE="1")
        self.out = open(log, "wb")
        try:
            self.proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env,
                                         stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:   # no spark-class in this PySpark, or it cannot run here
            self.out.close()
            pytest.skip(f"cannot start the standalone {name}: {exc}")

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = self.log.read_text(errors="replace")
            found = re.search(pattern, text)
            if found:
                return found
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = " | ".join(text.strip().splitlines()[-3:])
                self.stop()
                pytest.skip(f"the standalone {self.name} did not start here: {tail or 'no output'}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


@pytest.fixture(scope="module")
def master_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("standalone")
    cls = "org.apache.spark.deploy"
    master = Daemon("master", [f"{cls}.master.Master", "--host", "127.0.0.1", "--port", "0",
                               "--webui-port", "0"], work / "master.log")
    daemons = [master]
    try:
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        for i in range(2):
            worker = Daemon(f"worker {i}", [f"{cls}.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                                            "--webui-port", "0", "--cores", "1", "--memory", "1g",
                                            "--work-dir", str(work / f"worker{i}"), url],
                            work / f"worker{i}.log")
            daemons.append(worker)
            worker.wait_for(r"Successfully registered with master")
        yield url
    finally:
        for d in reversed(daemons):
            d.stop()


DRIVER = r'''
import hashlib, json, sys
from pyspark.sql import SparkSession
import store.spark.datasource as S

master, shared, host_a, host_b, suffix = sys.argv[1:6]
S.prepare_environment(local=True)
b = SparkSession.builder
conf = S.session_conf(master, "ERROR", {"spark.executor.memory": "512m", "spark.executor.cores": "1"})
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
S.register(spark)
sc = spark.sparkContext
out = {}

def digest(df):
    rows = sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=repr) for r in df.collect())
    return [len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()]

def preferred(df):
    rdd = df._jdf.queryExecution().toRdd()
    return sorted(sc._jsc.sc().getPreferredLocs(rdd, i).mkString(",") for i in range(rdd.getNumPartitions()))

def read(via, **opts):
    r = spark.read.format("mqctl").option("reader", via)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()

def step(what):
    print("step", what, file=sys.stderr, flush=True)

for via in ("jvm", "python"):
    step(via)
    df = read(via, store=shared, topic="src")
    out[f"{via} all"] = digest(df)
    out[f"{via} tag"] = df.where("tags = 't1'").count()
    out[f"{via} groupby"] = sorted(map(list, df.groupBy("queueId").count().collect()))
step("write")
out["shared preferred"] = preferred(read("jvm", store=shared, topic="src"))
(read("jvm", store=shared, topic="src").select("body", "keys", "tags", "queueId")
    .write.format("mqctl").mode("append").option("store", shared).option("topic", "copy" + suffix).save())
out["written"] = digest(read("jvm", store=shared, topic="copy" + suffix).select("body", "keys", "tags", "queueId"))
step("per host")
stores = f"127.0.0.1:{host_a},localhost:{host_b}"
per_host = read("jvm", stores=stores, topic="src")
out["per host preferred"] = preferred(per_host)
out["per host"] = digest(per_host)
out["per host body"] = digest(read("jvm", stores=stores, topic="src").where("tags = 't1'").select("body"))
try:
    read("python", stores=stores, topic="src").count()
except Exception as exc:
    out["python per host"] = "JVM reader only" in str(exc)
out["executors"] = sc._jsc.sc().getExecutorMemoryStatus().size() - 1   # less the driver
spark.stop()
print("RESULT " + json.dumps(out))
'''


def fill(root: Path, base: int) -> None:
    with Store.open(root, create=True) as st:
        st.create_topic("src", 4)
        st.put([Draft("src", f"m{base + i}".encode() * (i % 5 + 1),
                      {"TAGS": f"t{i % 3}", "KEYS": f"k{i} o{i % 7}", "colour": "red"}, queue_id=i % 4)
                for i in range(400)])


def run_driver(tmp_path: Path, master: str, suffix: str) -> dict[str, Any]:
    work = tmp_path / f"driver-{suffix}"
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    with open(work / "out", "w") as out, open(work / "err", "w") as err:   # kept for a failure's story
        r = subprocess.run([sys.executable, "driver.py", master, str(tmp_path / "shared"), str(tmp_path / "a"),
                            str(tmp_path / "b"), suffix], cwd=work, env=env, stdout=out, stderr=err,
                           timeout=DRIVER_TIMEOUT)
    stdout, stderr = (work / "out").read_text(), (work / "err").read_text()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, (stdout[-3000:], stderr[-3000:])
    return dict(json.loads(lines[-1][len("RESULT "):]))


@pytest.mark.timeout(2 * DRIVER_TIMEOUT + 2 * START_TIMEOUT)
def test_standalone_cluster_reads_and_writes_as_local_mode(tmp_path: Path, master_url: str) -> None:
    fill(tmp_path / "shared", 0)
    fill(tmp_path / "a", 1000)
    fill(tmp_path / "b", 2000)
    local = run_driver(tmp_path, "local[2]", "local")
    cluster = run_driver(tmp_path, master_url, "cluster")
    assert cluster.pop("executors") == 2 and local.pop("executors") == 0
    assert local["jvm all"] == local["python all"] == [400, local["jvm all"][1]]
    assert local["jvm tag"] == local["python tag"] == 133
    assert local["jvm groupby"] == local["python groupby"] == [[q, 100] for q in range(4)]
    assert local["written"][0] == 400 and local["per host"][0] == 800
    # each store's partition prefers its host; none in local mode (one host: nothing to choose)
    assert cluster.pop("per host preferred") == ["127.0.0.1", "localhost"]
    assert local.pop("per host preferred") == ["", ""]
    assert local["shared preferred"] == [""] * 4            # shared storage: any host
    assert local["python per host"] is True
    assert cluster == local
