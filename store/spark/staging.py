"""Staging of the ``mqctl`` Spark sink, and the sweep of what failed or killed jobs leave.

Every Spark write stages its rows under ``STORE/spark-staging/<job>/`` before the driver
publishes them. A job that commits or aborts removes its directory; one whose driver was
killed cannot, and a task that outlives its job's ``abort()`` could write into it. This module
finds and removes such leftovers. It imports neither PySpark nor pyarrow, so ``mqctl store
clean`` and ``mqctl store check`` can call :func:`sweep_staging` and :func:`stale_staging`
on machines without Spark.

Each job directory holds ``owner.json``: the host, boot id, pid and start time of the process
that owns the job (the driver's JVM when it can be found, else the Python process that
created the directory). A directory is **stale** when

* its owner ran on this host since its last boot and is gone (the driver was killed), or
* its owner is unknown or on another host and nothing in it changed for ``grace_s`` seconds
  (:data:`DEFAULT_GRACE_S`, one hour), or
* its owner is alive but nothing changed for :data:`LIVE_GRACE_S` (a day: a long-running
  driver, such as a Spark Connect server, whose job failed without cleaning up).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from store.layout import SPARK_STAGING, Layout

STAGING_DIR = SPARK_STAGING
OWNER_FILE = "owner.json"
DEFAULT_GRACE_S = 3600.0
LIVE_GRACE_S = 86400.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


# -- who owns a job ---------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(command name, parent pid, start time in clock ticks) from ``/proc/<pid>/stat``;
    None for a process that does not exist or has exited (a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    if lp < 0 or rp < 0:
        return None
    fields = raw[rp + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    try:
        return raw[lp + 1:rp], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def owner_identity() -> dict[str, Any]:
    """The process a job belongs to: the nearest ``java`` ancestor (Spark's planner and task
    processes are children of Python daemons started by the JVM), else this process."""
    pid = os.getpid()
    found = pid
    cur = pid
    for _ in range(8):
        st = _proc_stat(cur)
        if st is None:
            break
        if st[0] == "java":
            found = cur
            break
        if st[1] <= 1:
            break
        cur = st[1]
    st = _proc_stat(found)
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": found,
            "start": st[2] if st else None, "created": time.time()}


def owner_alive(owner: dict[str, Any]) -> Optional[bool]:
    """True/False when the owner ran on this host since its last boot, else None (unknown)."""
    if owner.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if not boot or owner.get("boot") != boot:
        return False if boot and owner.get("boot") else None
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return None
    st = _proc_stat(pid)
    if st is None:
        if Path("/proc/self/stat").exists():
            return False                   # Linux: no such process, or a zombie
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    return owner.get("start") in (None, st[2])


def write_owner(job_dir: Path, owner: dict[str, Any] | None = None) -> None:
    """Record the owner of ``job_dir`` (created 0700 if missing): ``owner`` (an
    :func:`owner_identity` taken on the driver), else this process's; an existing record
    stays."""
    from store.fsutil import ensure_dir, open_private
    ensure_dir(job_dir)
    try:
        fd = open_private(job_dir / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as fh:
        json.dump(owner or owner_identity(), fh)


def read_owner(job_dir: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads((job_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


# -- finding and sweeping leftovers -----------------------------------------------------------

@dataclass(frozen=True)
class StagingDir:
    """One job directory under ``STORE/spark-staging/``."""

    path: Path
    files: int
    bytes: int
    idle_s: float          # seconds since anything in it last changed
    owner_alive: Optional[bool]
    stale: bool
    reason: str            # why it is stale (or why it is kept)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "spark-staging", "path": str(self.path), "files": self.files,
                "bytes": self.bytes, "idleMs": int(self.idle_s * 1000), "stale": self.stale,
                "reason": self.reason}

    def describe(self) -> str:
        return (f"{self.path}: {self.files} file{'s' if self.files != 1 else ''}, "
                f"{self.bytes} bytes, {self.reason}")


def _usage(job_dir: Path) -> tuple[int, int, float]:
    files = size = 0
    newest = 0.0
    try:
        newest = job_dir.stat().st_mtime
    except OSError:
        pass
    for dirpath, _dirs, names in os.walk(job_dir):
        for name in names:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                continue
            newest = max(newest, st.st_mtime)
            if name != OWNER_FILE:
                files += 1
                size += st.st_size
    return files, size, newest


def scan_staging(root: str | Path, grace_s: float = DEFAULT_GRACE_S,
                 now: float | None = None) -> list[StagingDir]:
    """Every job directory under ``STORE/spark-staging/`` with its state (nothing removed)."""
    base = Layout(Path(root)).spark_staging
    try:
        entries = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    now = time.time() if now is None else now
    out = []
    for job in entries:
        files, size, newest = _usage(job)
        idle = max(0.0, now - newest)
        owner = read_owner(job) or {}
        alive = owner_alive(owner) if owner else None
        if alive is False:
            stale, why = True, f"its driver (pid {owner.get('pid')}) is gone"
        elif alive is True:
            stale = idle > max(grace_s, LIVE_GRACE_S)
            why = f"its driver (pid {owner.get('pid')}) is running, idle {idle:.0f}s"
        else:
            stale = idle > grace_s
            why = (f"untouched for {idle:.0f}s, owner "
                   f"{'unknown' if not owner else 'on host ' + str(owner.get('host'))}")
        out.append(StagingDir(job, files, size, idle, alive, stale, why))
    return out


def stale_staging(root: str | Path, grace_s: float = DEFAULT_GRACE_S) -> list[StagingDir]:
    """The job directories a sweep would remove: what ``mqctl store check`` should report."""
    return [d for d in scan_staging(root, grace_s) if d.stale]


def sweep_staging(root: str | Path, grace_s: float = DEFAULT_GRACE_S) -> list[StagingDir]:
    """Remove stale job directories (and ``spark-staging/`` itself when it is left empty);
    returns what was removed. Safe to run while other jobs stage: a live job is kept."""
    removed = []
    for d in stale_staging(root, grace_s):
        shutil.rmtree(d.path, ignore_errors=True)
        if not d.path.exists():
            removed.append(d)
    remove_empty_staging_root(root)
    return removed


def remove_empty_staging_root(root: str | Path) -> None:
    try:
        Layout(Path(root)).spark_staging.rmdir()    # only when no other job is staging
    except OSError:
        pass


def remove_job_dirs(root: str | Path, rel_dirs: Any) -> None:
    for rel in set(rel_dirs):
        shutil.rmtree(Path(root) / rel, ignore_errors=True)
    remove_empty_staging_root(root)


__all__ = ["STAGING_DIR", "OWNER_FILE", "DEFAULT_GRACE_S", "LIVE_GRACE_S", "StagingDir",
           "owner_identity", "owner_alive", "write_owner", "read_owner", "scan_staging",
           "stale_staging", "sweep_staging", "remove_job_dirs", "remove_empty_staging_root"]
