"""The JVM reader of the ``mqctl`` source: its Java sources (``store/spark/java``) compiled once
with the JDK's ``javac`` against the installed PySpark's jars, into a jar cached by the hash of
the sources and the Spark version, and put on a session.

The cache is ``$XDG_CACHE_HOME/mqctl`` (else ``~/.cache/mqctl``). Concurrent first uses are safe:
each compiles in a temporary directory and renames its jar into place (the same bytes).
Without a ``javac`` (or when it fails) there is no jar, and the Python reader serves.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from store.errors import notice

SOURCES = Path(__file__).with_name("java")
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mqctl"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "javac", os.X_OK):
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _spark_jars() -> tuple[str, Path]:
    import pyspark
    return pyspark.__version__, Path(pyspark.__file__).parent / "jars"


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def jar_path() -> Path:
    """Where the jar of these sources for this Spark is (or will be) cached."""
    version, _ = _spark_jars()
    digest = hashlib.sha256(version.encode())
    for src in [*_sources(), SOURCES / SERVICE]:
        digest.update(str(src.relative_to(SOURCES)).encode() + b"\0" + src.read_bytes())
    return cache_dir() / f"mqctl-spark-{digest.hexdigest()[:16]}.jar"


def build_jar() -> Path | None:
    """The cached jar, compiled first if needed; None (with a one-line notice on stderr) when
    there is no JDK or it fails: the Python reader then serves."""
    jar = jar_path()
    if jar.exists():
        return jar
    javac = _javac()
    if javac is None:
        notice("no JDK (javac) found: Spark reads use the Python reader")
        return None
    _, jars = _spark_jars()
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", f"{jars}/*",
                               *map(str, _sources())], capture_output=True, text=True)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["?"])[0]
            notice(f"the JVM reader did not compile ({first}): Spark reads use the Python reader")
            return None
        staged = Path(tmp) / jar.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.write(SOURCES / SERVICE, SERVICE)
            for cls in sorted(classes.rglob("*.class")):
                zf.write(cls, str(cls.relative_to(classes)))
        os.replace(staged, jar)
    return jar


def add_to_session(spark: object, jar: Path) -> bool:
    """Put ``jar`` on a running session: the driver's class loader (Spark looks data sources up
    there) and the executors (``addJar``). False when the session's loader cannot take it."""
    sc: Any = getattr(spark, "sparkContext", None)
    jvm = getattr(sc, "_jvm", None)
    if sc is None or jvm is None:   # Spark Connect: no JVM in this process
        return False
    url = jvm.java.io.File(str(jar)).toURI().toURL()
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if not _has(jvm, loader, str(jar)):
        try:
            loader.addURL(url)
        except Exception:  # noqa: BLE001 - a loader without addURL: not ours to change
            return False
    sc._jsc.addJar(str(jar))
    return True


def _has(jvm: object, loader: object, jar: str) -> bool:
    try:
        return any(jar in str(u) for u in loader.getURLs())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not a URL class loader
        return False
