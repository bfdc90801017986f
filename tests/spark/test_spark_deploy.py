"""The ``mqctl`` Spark source on a cluster whose Pythons are not the driver's.

Each test runs a driver process on ``local-cluster[N,1,1024]`` (real executor JVMs, as on a
standalone cluster) whose Python workers *and* driver-side planners run a separate
interpreter (``PYSPARK_PYTHON``): a venv holding only pyspark, py4j, pyarrow and numpy
(linked from this venv, so nothing is downloaded). The driver itself runs this venv's Python,
from a directory that does not hold the ``store`` package. The driver script does a batch
read, a batch write, a ``readStream`` and a ``writeStream``, and prints what it saw.

* ``test_cluster_without_mqctl_ships_the_code``: the workers lack mqctl and its
  dependencies; ``register(spark, ship_code=True)`` must make all four paths work.
* ``test_cluster_with_an_installed_wheel``: a wheel built by ``pip wheel .`` is installed in
  the workers' Python; ``register(spark)`` alone must work.
* ``test_spark_connect_with_mqctl_on_the_server``: a Spark Connect client drives a local
  Connect server whose Python has mqctl. The client needs ``pyspark[connect]``'s dependencies,
  which this venv lacks: a venv holding them is built once from the package index (about
  90 s) and kept beside pytest's temporary directories.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

REPO = Path(__file__).resolve().parents[2]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pyspark").is_dir()))
RUNTIME = ("pyspark", "py4j", "pyarrow", "numpy", "numpy.libs")     # what a worker needs besides mqctl
DRIVER_TIMEOUT = 300

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def bare_python(where: Path, extra: tuple[str, ...] = ()) -> Path:
    """A venv whose site-packages holds only the Spark runtime (and ``extra`` entries)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = next(where.glob("lib/python*/site-packages"))
    for name in (*RUNTIME, *extra):
        if (SITE / name).exists():
            (site / name).symlink_to(SITE / name)
    py = where / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import pyspark, pyarrow, numpy"], capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    return py


DRIVER = r'''
import json, sys, time
from store.log.messagestore import Store
from store.log.record import Draft
import store.spark.datasource as S

root, master, ship = sys.argv[1], sys.argv[2], sys.argv[3] == "ship"
with Store.open(root, create=True) as st:
    st.create_topic("src", 2)
    st.put([Draft("src", f"m{i}".encode(), {"TAGS": "t"}) for i in range(50)])
from pyspark.sql import SparkSession
S.prepare_environment(local=True)            # keeps the PYSPARK_PYTHON the test set
b = SparkSession.builder
for k, v in S.session_conf(master, "ERROR").items():
    b = b.config(k, v)
spark = b.getOrCreate()
S.register(spark, ship_code=ship)
out = {}
src = spark.read.format("mqctl").option("store", root).option("topic", "src").load()
out["read"] = src.count()
src.select("body", "tags").write.format("mqctl").mode("append").option("store", root) \
    .option("topic", "copy").save()
rows = []
q = (spark.readStream.format("mqctl").option("store", root).option("topic", "src")
     .option("startingOffsets", "earliest").load()
     .writeStream.foreachBatch(lambda df, _id: rows.extend(df.select("body").collect()))
     .option("checkpointLocation", root + "-ck1").trigger(availableNow=True).start())
q.awaitTermination(120)
out["readStream"] = len(rows)
q = (spark.readStream.format("mqctl").option("store", root).option("topic", "src")
     .option("startingOffsets", "earliest").load().select("body")
     .writeStream.format("mqctl").option("store", root).option("topic", "streamed")
     .option("checkpointLocation", root + "-ck2").trigger(availableNow=True).start())
q.awaitTermination(120)
if q.exception() is not None:
    raise q.exception()
spark.stop()
with Store.open(root) as st:
    for t in ("copy", "streamed"):
        out[t] = sum(st.max_offset(t, q) for q in range(st.topic(t).queues))
print("RESULT " + json.dumps(out))
'''


def run_driver(tmp_path: Path, worker_python: Path, master: str, ship: bool) -> dict:
    work = tmp_path / "driver"
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=str(worker_python), PYSPARK_DRIVER_PYTHON=sys.executable,
               MQCTL_SPARK_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "driver.py", str(tmp_path / "store"), master,
                        "ship" if ship else "installed"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=DRIVER_TIMEOUT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, (r.stdout[-3000:], r.stderr[-3000:])
    return json.loads(lines[-1][len("RESULT "):])


EXPECTED = {"read": 50, "copy": 50, "readStream": 50, "streamed": 50}


def test_cluster_without_mqctl_ships_the_code(tmp_path: Path) -> None:
    py = bare_python(tmp_path / "workers")
    lacking = subprocess.run([str(py), "-c", "import store"], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path / "workers", env={"PATH": os.environ.get("PATH", "")})
    assert "No module named 'store'" in lacking.stderr
    assert run_driver(tmp_path, py, "local-cluster[2,1,1024]", ship=True) == EXPECTED
    archives = list((tmp_path / "cache").glob("mqctl-store-*.zip"))
    assert len(archives) == 1                                   # cached by content, one file


def test_cluster_with_an_installed_wheel(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # `pip wheel .` as the README says (its isolated build fetches setuptools, or reuses
    # pip's cache); --no-deps: the runtime dependencies are linked in below instead
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                            str(REPO)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("mqctl-*.whl")
    # the wheel's pure-Python dependencies, as `pip install mqctl[spark]` would bring them
    py = bare_python(tmp_path / "workers", extra=("portalocker", "sortedcontainers"))
    site = next((tmp_path / "workers").glob("lib/python*/site-packages"))
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr[-2000:]
    assert run_driver(tmp_path, py, "local-cluster[1,1,1024]", ship=False) == EXPECTED
    assert not (tmp_path / "cache").exists()                   # nothing shipped


CONNECT_DRIVER = r'''
import json, sys
from pyspark.sql import SparkSession
from store.log.messagestore import Store
from store.log.record import Draft
import store.spark.datasource as S

root = sys.argv[1]
with Store.open(root, create=True) as st:
    st.create_topic("src", 2)
    st.put([Draft("src", f"m{i}".encode(), {}) for i in range(50)])
spark = SparkSession.builder.remote("local[2]").getOrCreate()     # starts a local Connect server
assert type(spark).__module__.startswith("pyspark.sql.connect")
out = {}
try:
    S.register(spark, ship_code=True)
except Exception as exc:
    out["ship_code"] = type(exc).__name__
S.register(spark)
src = spark.read.format("mqctl").option("store", root).option("topic", "src").load()
out["read"] = src.count()
src.select("body").write.format("mqctl").mode("append").option("store", root).option("topic", "copy").save()
rows = []
q = (spark.readStream.format("mqctl").option("store", root).option("topic", "src")
     .option("startingOffsets", "earliest").load().select("body")
     .writeStream.format("mqctl").option("store", root).option("topic", "streamed")
     .option("checkpointLocation", root + "-ck").trigger(availableNow=True).start())
q.awaitTermination(120)
out["readStream"] = out["read"] if q.exception() is None else -1
spark.stop()
with Store.open(root) as st:
    for t in ("copy", "streamed"):
        out[t] = sum(st.max_offset(t, q) for q in range(st.topic(t).queues))
print("RESULT " + json.dumps(out))
'''


CONNECT_EXTRA = "connect"    # pyspark's extra naming the Connect client's dependencies


def has_connect_client(python: str) -> bool:
    # what pyspark.sql.connect.utils.check_dependencies requires of a client
    probe = subprocess.run([python, "-c", "import pandas, pyarrow, grpc, grpc_status, google.rpc, "
                            "zstandard, pyspark.sql.connect.session"],
                           capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


def connect_client_venv(cache: Path) -> Path:
    """A client Python for Spark Connect, built once and kept under ``cache``: this venv's
    Spark runtime and mqctl's dependencies linked in (with their dist-info, so pip counts
    them as installed), plus ``pyspark[connect]``'s own (pandas, grpcio, protobuf, zstandard)
    from the package index. Keyed by this interpreter, site-packages and pyspark version, so a
    rebuilt main venv gets a new one; built under a temporary name and renamed when complete."""
    import hashlib
    import shutil
    from importlib.metadata import version
    pyspark_version = version("pyspark")
    key = hashlib.sha256(f"{sys.executable}|{SITE}|{pyspark_version}".encode()).hexdigest()[:12]
    where = cache / f"mqctl-connect-client-{key}"
    py = where / "bin" / "python"
    if py.exists() and has_connect_client(str(py)):
        return py
    building = cache / f"{where.name}.{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(building)], check=True, timeout=120)
    site = next(building.glob("lib/python*/site-packages"))
    for entry in SITE.iterdir():
        name = entry.name.split("-")[0].lower() if entry.name.endswith(".dist-info") else entry.name
        if name in (*RUNTIME, "portalocker", "sortedcontainers"):
            (site / entry.name).symlink_to(entry)
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(building / "bin" / "python"),
                           "install", "-q", "--disable-pip-version-check",
                           f"pyspark[{CONNECT_EXTRA}]=={pyspark_version}"],
                          capture_output=True, text=True, timeout=600)
    if inst.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        pytest.skip(f"could not install the Spark Connect client's dependencies: {inst.stderr[-800:]}")
    shutil.rmtree(where, ignore_errors=True)
    building.rename(where)     # a venv's interpreter finds its site-packages relative to itself
    assert has_connect_client(str(py))
    return py


def connect_client_python(cache: Path) -> str:
    """A Python with the Spark Connect client's dependencies: ``MQCTL_TEST_CONNECT_PYTHON``,
    else this one if it has them, else :func:`connect_client_venv`."""
    given = os.environ.get("MQCTL_TEST_CONNECT_PYTHON")
    if given:
        return given
    if has_connect_client(sys.executable):
        return sys.executable
    return str(connect_client_venv(cache))


def test_spark_connect_with_mqctl_on_the_server(tmp_path: Path,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """Spark Connect: the server (here a local one, whose Python is this venv's, where mqctl
    is installed) plans and runs the source; the client only registers it. ``ship_code``
    is refused with a pointer to the server-side install."""
    # kept beside pytest's numbered temporary directories (pytest-N), which come and go
    base = tmp_path_factory.getbasetemp()
    client = connect_client_python(base.parent if base.name.startswith("pytest-") else base)
    work = tmp_path / "driver"
    work.mkdir()
    (work / "driver.py").write_text(CONNECT_DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    r = subprocess.run([client, "driver.py", str(tmp_path / "store")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, (r.stdout[-3000:], r.stderr[-3000:])
    assert json.loads(lines[-1][len("RESULT "):]) == {**EXPECTED, "ship_code": "UsageError"}


def test_ship_code_is_refused_under_spark_connect() -> None:
    from store.errors import UsageError
    from store.spark.ship import ship_code_to
    fake = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    with pytest.raises(UsageError, match="Install mqctl on the Spark Connect server"):
        ship_code_to(fake)
