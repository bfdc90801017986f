"""Starting Spark for ``mqctl query`` and ``mqctl export``: quietly, or with one clear line.

PySpark is an optional extra, so nothing here is imported until a Spark command runs. The
JVM is launched by hand (``launch_gateway``) so that its stdout and stderr — the launcher's
banner, log4j's start-up lines, the incubator-module warning, the Python workers' output —
go to a private log file instead of the terminal. The log is deleted after a clean run and
named in the error line when Spark fails to start. ``MQCTL_DEBUG=1`` keeps Spark's output on
the terminal and its exceptions as tracebacks.

Every failure becomes a :class:`~store.errors.StoreError`, so the CLI boundary prints one
``mqctl: error: …`` line: a store error raised inside a Spark task keeps its class and exit
code (a damaged record is still exit 5), bad SQL is a usage error (exit 2), a view that does
not exist is "not found" (exit 3), anything else from Spark exits 1.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

from store import errors as E

from .errors import debug

INSTALL_HINT = "pip install 'mqctl[spark]' (PySpark >= 4.2 and pyarrow)"
_STORE_ERROR = re.compile(r"store\.errors\.([A-Za-z]+): ([^\n]*)")
_BY_CODE: dict[int, type[E.StoreError]] = {
    1: E.OperationError, 2: E.UsageError, 3: E.NotFoundError, 4: E.ConflictError, 5: E.DataError,
}


def require_pyspark() -> None:
    """Raise one clear line when PySpark (or pyarrow) cannot be imported."""
    try:
        import pyarrow  # noqa: F401
        import pyspark.sql  # noqa: F401
    except ImportError as exc:
        raise E.OperationError(f"Spark commands need PySpark, which is not available "
                               f"({exc}): {INSTALL_HINT}") from exc


def find_java() -> str:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise E.OperationError(f"JAVA_HOME={home} has no executable bin/java: Spark needs "
                               f"Java 17 or 21 (set JAVA_HOME, or put java on PATH)")
    java = shutil.which("java")
    if java is None:
        raise E.OperationError("Spark needs Java 17 or 21, and no java was found "
                               "(install a JDK, or set JAVA_HOME)")
    return java


def first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("An error occurred while calling"):
            return line.lstrip(": ")
    return text.strip() or "unknown error"


def to_store_error(exc: BaseException) -> E.StoreError:
    """The one-line store error for an exception that came out of Spark."""
    if isinstance(exc, E.StoreError):
        return exc
    text = str(exc)
    found = _STORE_ERROR.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(E, name, None)
        code = cls.exit_code if isinstance(cls, type) and issubclass(cls, E.StoreError) else 1
        return _BY_CODE.get(code, E.OperationError)(message)
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - only reached with PySpark installed
        AnalysisException = ()  # type: ignore[assignment]
    if isinstance(exc, AnalysisException):
        cond = _condition(exc)
        if cond == "TABLE_OR_VIEW_NOT_FOUND":
            sentence = first_line(text).split(". ")[0].rstrip(".")
            return E.TopicNotFoundError(f"{sentence} (every topic is a view: mqctl topic list)")
        return E.UsageError(f"SQL: {first_line(text)}")
    return E.OperationError(f"Spark: {first_line(text)}")


def _condition(exc: BaseException) -> str | None:
    for getter in ("getCondition", "getErrorClass"):
        fn = getattr(exc, getter, None)
        if fn is not None:
            try:
                return fn()
            except Exception:  # noqa: BLE001 - an accessor that fails tells us nothing
                return None
    return None


class SparkRun:
    """One CLI Spark session and its private log; :meth:`close` stops both."""

    def __init__(self, spark: Any, log_path: Path | None) -> None:
        self.spark = spark
        self.log_path = log_path

    def close(self) -> None:
        try:
            self.spark.stop()
        finally:
            if self.log_path is not None:
                _unlink(self.log_path)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _log_tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    useful = [ln for ln in lines if "Exception" in ln or "Error" in ln or "error" in ln]
    return (useful or lines or [""])[-1][:300]


def start(master: str, extra: Mapping[str, str] | None = None) -> SparkRun:
    """Start a session for the CLI: local by default, quiet, the ``mqctl`` format registered."""
    require_pyspark()
    find_java()
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from store.spark import prepare_environment, register, session_conf

    prepare_environment(local=master.startswith("local"))
    conf = SparkConf(loadDefaults=False)
    for key, value in session_conf(master, "ERROR" if debug() else "OFF", extra).items():
        conf.set(key, value)
    log_path: Path | None = None
    popen: dict[str, Any] = {}
    if not debug():
        fd, name = tempfile.mkstemp(prefix="mqctl-spark-", suffix=".log")
        log_path = Path(name)
        popen = {"stdout": fd, "stderr": fd}
    try:
        gateway = launch_gateway(conf, popen_kwargs=popen)
        sc = SparkContext(conf=conf, gateway=gateway)
    except Exception as exc:  # noqa: BLE001 - the JVM failing to start, in any of its ways
        if debug():
            raise
        tail = _log_tail(log_path)
        raise E.OperationError(f"Spark did not start: {tail or first_line(str(exc))}"
                               f"{f' (log: {log_path})' if log_path else ''}") from exc
    finally:
        if popen:
            os.close(popen["stdout"])
    if not debug():
        _silence_python_loggers()
    spark = SparkSession(sc)
    register(spark)
    return SparkRun(spark, log_path)


def _silence_python_loggers() -> None:
    """PySpark logs every analysis error as a JSON line on stderr before raising it; the
    CLI reports the error itself, in one line."""
    from pyspark.logger import PySparkLogger
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


@contextlib.contextmanager
def session(master: str, extra: Mapping[str, str] | None = None) -> Iterator[Any]:
    """``with session("local[2]") as spark:`` — Spark failures leave as store errors."""
    run = start(master, extra)
    try:
        yield run.spark
    except E.StoreError:
        raise
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as exc:  # noqa: BLE001 - py4j and pyspark raise many unrelated types
        if debug():
            raise
        raise to_store_error(exc) from exc
    finally:
        run.close()


def parse_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf KEY=VALUE`` items as a dict (exit 2 on a malformed one)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise E.UsageError(f"--conf {item!r}: expected KEY=VALUE, e.g. spark.driver.memory=2g")
        out[key.strip()] = value
    return out
