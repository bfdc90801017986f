"""``register(spark, ship_code=True)``: running the ``mqctl`` data source on a cluster whose
Pythons do not have mqctl installed.

Three kinds of Python process import ``store.spark.datasource``: the executors' workers, and two kinds
of driver-side process the JVM starts (the planners of reads and writes, and the runner of
each streaming query). ``SparkContext.addPyFile`` reaches the executors only; PySpark 4.3
starts the driver-side processes with the ``PYTHONPATH`` of the data source's registration
(``SparkContext.environment``, also set by ``spark.executorEnv.PYTHONPATH``), so the archive
goes there too. Both must happen before ``spark.dataSource.register``.

The archive holds the ``store`` package and its pure-Python dependencies (portalocker,
sortedcontainers); pyarrow and numpy must be installed on the workers. It is built once per
content into :func:`cache_dir` (``mqctl-store-<digest>.zip``), reused while unchanged, and
archives unused for :data:`KEEP_S` are removed, as are the temporary zips older versions left.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from store.errors import UsageError

PREFIX = "mqctl-store-"
KEEP_S = 7 * 86400.0            # an archive unused this long is removed
LEGACY_KEEP_S = 3600.0          # temporary zips of earlier versions


def cache_dir() -> Path:
    """``$MQCTL_SPARK_CACHE``, else ``$XDG_CACHE_HOME/mqctl/spark``, else ``~/.cache/mqctl/spark``."""
    given = os.environ.get("MQCTL_SPARK_CACHE")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mqctl" / "spark"


def _dependency_modules() -> list[ModuleType]:
    """The pure-Python dependencies that are installed here, imported by name in the source
    (never a name computed at run time)."""
    mods: list[ModuleType] = []
    try:
        import portalocker
        mods.append(portalocker)
    except ImportError:
        pass
    try:
        import sortedcontainers
        mods.append(sortedcontainers)
    except ImportError:
        pass
    return mods


def _package_files() -> Iterator[tuple[Path, str]]:
    """(file, name in the archive) for ``store`` and its pure-Python dependencies."""
    import store
    roots = [Path(store.__file__).resolve().parent]   # the whole package, wherever this module sits
    for mod in _dependency_modules():
        if mod.__file__:
            roots.append(Path(mod.__file__).resolve().parent)
    for root in roots:
        for f in sorted(root.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed"):
                yield f, f"{root.name}/{f.relative_to(root).as_posix()}"


def ship_archive(directory: Path | None = None) -> str:
    """The path of a zip of ``store`` and its pure-Python dependencies, built only when no
    archive of the same content exists; old archives are pruned."""
    files = list(_package_files())
    h = hashlib.sha256()
    for f, name in files:
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    target_dir = directory or cache_dir()
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = target_dir / f"{PREFIX}{h.hexdigest()[:24]}.zip"
    if not path.is_file():
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".zip", dir=target_dir)
        try:
            with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
                for f, name in files:
                    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    zf.writestr(info, f.read_bytes())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    else:
        os.utime(path)                      # in use: keep it from the pruning below
    prune(target_dir, keep=path)
    return str(path)


def prune(directory: Path, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove archives unused for :data:`KEEP_S` from ``directory``, and the ``mqctl-store-*.zip``
    files earlier versions left in the temporary directory; returns what was removed."""
    now = time.time() if now is None else now
    removed = []
    for folder, keep_s in ((directory, KEEP_S), (Path(tempfile.gettempdir()), LEGACY_KEEP_S)):
        try:
            candidates = list(folder.glob(f"{PREFIX}*.zip"))
        except OSError:
            continue
        for f in candidates:
            try:
                st = f.lstat()
                if f == keep or st.st_uid != os.getuid() or now - st.st_mtime < keep_s:
                    continue
                f.unlink()
                removed.append(f)
            except OSError:
                continue
    return removed


def is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def ship_code_to(spark: Any) -> str:
    """Ship the archive to ``spark``'s executors and driver-side planners; returns its path."""
    if is_connect(spark):
        raise UsageError("register(spark, ship_code=True) does not work under Spark Connect: "
                         "the server plans the source in its own Python processes, which do "
                         "not see uploaded artifacts. Install mqctl on the Spark Connect "
                         "server (pip install 'mqctl[spark]') and call register(spark)")
    path = ship_archive()
    sc = spark.sparkContext
    sc.addPyFile(path)
    current = sc.environment.get("PYTHONPATH") or ""
    parts = [p for p in current.split(os.pathsep) if p]
    if path not in parts:
        sc.environment["PYTHONPATH"] = os.pathsep.join([path, *parts])
    return path


__all__ = ["ship_archive", "ship_code_to", "cache_dir", "prune", "is_connect"]
