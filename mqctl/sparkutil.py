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
from typing import Any, Callable, Iterator, Mapping, cast

from mqctl.errors import debug
from mqctl.output import BrokenPipe
from store import errors as E

INSTALL_HINT = "pip install 'mqctl[spark]' (PySpark >= 4.2 and pyarrow)"


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
        java_path = Path(home) / "bin" / "java"
        if java_path.is_file() and os.access(java_path, os.X_OK):
            return str(java_path)
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
    from store.spark import store_error
    carried = store_error(exc)
    if carried is not None:
        return carried
    text = str(exc)
    analysis_exception: tuple[type[BaseException], ...] = ()
    try:
        from pyspark.errors import AnalysisException
        analysis_exception = (AnalysisException,)
    except ImportError:  # pragma: no cover - only reached with PySpark installed
        pass
    cond = _condition(exc)
    if cond == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" or "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in text:
        return E.UsageError(save_mode_hint(text))
    if isinstance(exc, analysis_exception):
        if cond == "TABLE_OR_VIEW_NOT_FOUND":
            sentence = first_line(text).split(". ")[0].rstrip(".")
            return E.TopicNotFoundError(f"{sentence} (every topic is a view: mqctl topic list)")
        return E.UsageError(f"SQL: {first_line(text)}")
    return E.OperationError(f"Spark: {first_line(text)}")


def save_mode_hint(text: str) -> str:
    """Spark refuses its default save mode (errorifexists) for a Python data source before
    any mqctl code runs; say what to write instead."""
    mode = re.search(r"in the (\w+) mode", text)
    return (f"Spark cannot write to mqctl in {mode.group(1) if mode else 'this'} mode "
            f'(the default when no mode is given): use df.write.format("mqctl").mode("append")')


def _condition(exc: BaseException) -> str | None:
    for getter in ("getCondition", "getErrorClass"):
        fn = getattr(exc, getter, None)
        if fn is not None:
            try:
                cond: str | None = fn()
                return cond
            except Exception:  # noqa: BLE001 - an accessor that fails tells us nothing
                return None
    return None


class SparkRun:
    """One CLI Spark session, its private log and its progress bar; :meth:`close` stops
    them (the log is kept, and named, when the run failed)."""

    def __init__(self, spark: Any, log_path: Path | None, progress: Progress | None = None) -> None:
        self.spark = spark
        self.log_path = log_path
        self.progress = progress

    def close(self, keep_log: bool = False) -> None:
        try:
            if self.progress is not None:
                self.progress.stop()
            self.spark.stop()
        finally:
            if self.log_path is not None and not keep_log:
                _unlink(self.log_path)


class Progress:
    """A rich progress bar on stderr while Spark works: "starting Spark" while the JVM starts,
    then the finished and total tasks of the running stages, polled every ``interval``
    seconds by a daemon thread (``sc`` set by :meth:`attach`). The bar disappears when done.

    Only what goes through ``sys.stderr`` is shown above the bar; stdout is left alone (it
    carries the rows)."""

    def __init__(self, sc: Any = None, interval: float = 0.5, stream: Any = None,
                 force_terminal: bool | None = None) -> None:
        import sys
        import threading

        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar
        self.sc = sc
        self.interval = interval
        self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), transient=True, auto_refresh=False,
                        console=Console(file=stream or sys.stderr, force_terminal=force_terminal),
                        redirect_stdout=False, redirect_stderr=stream is None)
        self._task = self._bar.add_task("starting Spark", total=None)
        self._bar.start()
        self._stopped = False
        _RUNNING.append(self)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqctl-progress", daemon=True)
        self._thread.start()

    def attach(self, sc: Any) -> None:
        self.sc = sc

    def snapshot(self) -> tuple[str, int | None, int | None]:
        """(label, tasks done, tasks in all) of the running stages; the counts are None
        while the JVM starts or no stage runs."""
        if self.sc is None:
            return "starting Spark", None, None
        tracker = self.sc.statusTracker()
        ids, done, total = [], 0, 0
        for sid in sorted(tracker.getActiveStageIds()):
            info = tracker.getStageInfo(sid)
            if info is not None:
                ids.append(str(sid))
                done += info.numCompletedTasks
                total += info.numTasks
        if not ids:
            return "spark", None, None
        return f"spark stage{'s' if len(ids) > 1 else ''} {','.join(ids)}", done, total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                label, done, total = self.snapshot()
            except Exception:  # noqa: BLE001 - the session is stopping
                return
            self._bar.update(self._task, description=label, completed=done or 0, total=total)
            self._bar.refresh()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        _RUNNING.remove(self)
        self._stop.set()
        self._thread.join(timeout=2)
        self._bar.stop()


_RUNNING: list[Progress] = []


def output_starts() -> None:
    """Rows are about to be printed: stop the bar if stdout is a terminal too (the bar is
    drawn there, and would garble the rows)."""
    import sys

    from mqctl.output import animation_allowed
    if _RUNNING and animation_allowed(sys.stdout):
        for p in list(_RUNNING):
            p.stop()


def progress_wanted() -> bool:
    """The bar shows on a terminal only, never in CI or on a dumb terminal
    (:func:`mqctl.output.animation_allowed`); ``MQCTL_PROGRESS=0`` turns it off, ``=1``
    forces it (drawn as on a terminal wherever stderr goes)."""
    import sys

    from mqctl.output import animation_allowed
    if _progress_forced() is not None:
        return bool(_progress_forced())
    return animation_allowed(sys.stderr)


def _progress_forced() -> bool | None:
    forced = os.environ.get("MQCTL_PROGRESS")
    return None if forced is None else forced not in ("", "0")


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
    # WARN: warnings and errors reach the log (a private file, kept when the run fails).
    for key, value in session_conf(master, "WARN", extra).items():
        conf.set(key, value)
    log_path: Path | None = None
    popen: dict[str, Any] = {}
    if not debug():
        fd, name = tempfile.mkstemp(prefix="mqctl-spark-", suffix=".log")
        log_path = Path(name)
        popen = {"stdout": fd, "stderr": fd}
        # appended to by the JVM and by py4j's log lines (see _divert_py4j_log) alike
        _set_append(fd)
        _divert_py4j_log(log_path)
    progress = Progress(force_terminal=_progress_forced() or None) if progress_wanted() else None
    try:
        gateway = cast(Callable[..., Any], launch_gateway)(conf, popen_kwargs=popen)   # untyped in pyspark
        sc = SparkContext(conf=conf, gateway=gateway)
    except BaseException as exc:
        if progress is not None:
            progress.stop()
        if not isinstance(exc, Exception):   # Ctrl-C or SIGTERM while the JVM starts: no log kept
            if log_path is not None:
                _unlink(log_path)
            raise
        if debug():   # the JVM failing to start, in any of its ways
            raise
        tail = _log_tail(log_path)
        raise E.OperationError(f"Spark did not start: {tail or first_line(str(exc))}"
                               f"{f' (log: {log_path})' if log_path else ''}") from exc
    finally:
        if popen:
            os.close(popen["stdout"])
    if not debug():
        _silence_python_loggers()
    if progress is not None:
        progress.attach(sc)
    run = SparkRun(SparkSession(sc), log_path, progress)
    try:
        register(run.spark)
    except BaseException:
        run.close()
        raise
    return run


def _set_append(fd: int) -> None:
    import fcntl
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)


def _divert_py4j_log(path: Path) -> None:
    """py4j's log records go to the run's Spark log, never to the terminal.

    py4j logs through the root logger too (``logging.exception("KeyboardInterrupt while
    sending command.")``), which prints them with their tracebacks on stderr: on every Ctrl-C
    during a Spark call (for the call it cut short, and for PySpark's ``cancelAllJobs`` after
    it), and when the JVM goes away. Such a failure still reaches the CLI as the exception py4j
    raises: one ``mqctl: error:`` line (the log kept and named unless it was an interruption)."""
    import logging

    class ToLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                with open(path, "a", encoding="utf-8", errors="replace") as log:
                    log.write(f"py4j: {self.format(record)}\n")
            except OSError:
                pass

    to_log = ToLog(logging.WARNING)
    to_log.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def not_py4j(record: logging.LogRecord) -> bool:
        if "/py4j/" in record.pathname.replace(os.sep, "/"):
            to_log.handle(record)
            return False
        return True

    logging.getLogger().addFilter(not_py4j)
    py4j = logging.getLogger("py4j")
    py4j.propagate = False
    py4j.addHandler(to_log)


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
    failed = False
    try:
        yield run.spark
    except E.StoreError:
        raise
    except (KeyboardInterrupt, BrokenPipeError, BrokenPipe):
        raise   # (the CLI's boundary: exit 130, or 141 in silence for a closed stdout)
    except Exception as exc:  # noqa: BLE001 - py4j and pyspark raise many unrelated types
        if debug():
            raise
        err = to_store_error(exc)
        if isinstance(err, E.OperationError) and run.log_path is not None:
            failed = True
            err = type(err)(f"{err.message} (Spark log: {run.log_path})")
        raise err from exc
    finally:
        run.close(keep_log=failed)


def parse_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf KEY=VALUE`` items as a dict (exit 2 on a malformed one)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise E.UsageError(f"--conf {item!r}: expected KEY=VALUE, e.g. spark.driver.memory=2g")
        out[key.strip()] = value
    return out
