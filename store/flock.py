"""File locks and the small file helpers around them, shared by every module that locks files.

Owns the ``flock`` primitives (``fcntl.flock`` itself; portalocker only where there is no
``fcntl``, i.e. Windows) and nothing about
what a lock file means: queue locks (``qlocks.py``), consumer membership (``members.py``), the
offset and dedup files (``offsets.py``, ``dedup.py``) and the delay scheduler (``schedule.py``)
build their protocols on top of these.

* Locks are ``flock`` locks: they belong to an open file description, not to a process, so two
  descriptors opened by one process exclude each other, and the kernel drops a lock the moment
  its holder dies (even ``kill -9``).
* Descriptors are opened through :func:`fsutil.open_private` (mode 0600, close-on-exec, no
  symlink at the last step), so a child process never inherits (and outlives its parent with)
  a lock.
* Nothing here blocks without a deadline: :func:`try_flock` never waits and :func:`wait_flock`
  polls up to a timeout, so a holder that is stopped (SIGSTOP, a debugger) surfaces as
  ``LockHeldError`` instead of hanging every process of the store.
* A file that may be unlinked while locked is named again after locking (:func:`open_exclusive`,
  :func:`names_same_file`): whoever unlinks a lock file does so while holding its lock, so an
  opener that raced with the unlink notices it holds an orphan inode.
* Probes (:func:`probe_held`) take a *shared* lock and drop it at once, so two probes never
  mistake each other for a holder.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from store.errors import LockHeldError, StoreIOError, io_error
from store.fsutil import open_private

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- file-lock primitives ----------------------------------------------------------------------

try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: portalocker's msvcrt locks
    _fcntl = None  # type: ignore[assignment]


def _portalocker() -> Any:
    # Only without fcntl (Windows). portalocker costs 25-80 ms at import (it reads package
    # metadata, and imports redis-py when that is installed): never on a POSIX command path.
    import portalocker
    return portalocker


def _fileno(f: Any) -> int:
    return f if isinstance(f, int) else f.fileno()


def lock_exclusive(f: Any) -> None:
    """Block until ``f`` (a descriptor or a file object) holds an exclusive ``flock``.

    The same lock ``portalocker.lock(f, portalocker.LOCK_EX)`` takes on POSIX (portalocker's
    default locker there is ``fcntl.flock``), so processes using either exclude each other;
    EINTR is retried. For the store's write lock (``writelock.WriteLock``)."""
    if _fcntl is None:  # pragma: no cover
        pl = _portalocker()
        pl.lock(f, pl.LOCK_EX)
        return
    fd = _fileno(f)
    while True:
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX)
            return
        except InterruptedError:
            continue


def unlock(f: Any) -> None:
    """Drop the ``flock`` of ``f`` (a descriptor or a file object)."""
    if _fcntl is None:  # pragma: no cover
        _portalocker().unlock(f)
        return
    _fcntl.flock(_fileno(f), _fcntl.LOCK_UN)


def try_flock(fd: int, path: Path, *, shared: bool = False) -> bool:
    """Take an exclusive (or shared) lock on ``fd`` without waiting; False if it is held."""
    if _fcntl is None:  # pragma: no cover
        return _try_portalocker(fd, path, shared)
    try:
        _fcntl.flock(fd, (_fcntl.LOCK_SH if shared else _fcntl.LOCK_EX) | _fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except InterruptedError:
        return try_flock(fd, path, shared=shared)
    except OSError as exc:
        raise io_error(exc, f"lock {path}") from exc
    return True


def _try_portalocker(fd: int, path: Path, shared: bool) -> bool:  # pragma: no cover
    pl = _portalocker()
    kind = pl.LockFlags.SHARED if shared else pl.LockFlags.EXCLUSIVE
    try:
        pl.lock(fd, kind | pl.LockFlags.NON_BLOCKING)
    except pl.AlreadyLocked:
        return False
    except pl.LockException as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError):
            raise io_error(cause, f"lock {path}") from exc
        raise StoreIOError(f"cannot lock {path}: {exc}") from exc
    return True


def wait_flock(fd: int, path: Path, timeout: float, *, shared: bool = False) -> None:
    """Take ``flock`` on ``fd``, waiting at most ``timeout`` seconds (LockHeldError after).

    Polling rather than a blocking flock: a blocking call cannot be given a deadline, and a
    holder that is stopped (SIGSTOP, a debugger) must surface as "held elsewhere" instead of
    hanging every process of the store."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while not try_flock(fd, path, shared=shared):
        if time.monotonic() >= deadline:
            raise LockHeldError(f"{path} has been held by another process for over "
                                f"{timeout:g} s (a stopped process?)")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


# -- locks a forked child must not keep ----------------------------------------------------------

_KEPT: dict[int, Callable[[], None] | None] = {}


def keep(fd: int, forget: Callable[[], None] | None = None) -> int:
    """Note that ``fd`` holds a lock of this process until :func:`close_kept` closes it.

    A child forked meanwhile (``os.fork``, multiprocessing's fork start; a handler started by
    ``subprocess`` gets no copy: close-on-exec) closes its copy at once, after ``forget`` tells
    the lock's owner in the child (a member, a queue lock) that it holds nothing. A flock lives
    while any descriptor of its open file does: a kept copy would hold the lock for the child's
    lifetime after the parent died, and the child could release it (unlink its file) on the
    parent's behalf. The copy is closed, never unlocked: unlocking would release the parent's
    lock too. ``forget`` runs in the child right after the fork: it only drops references."""
    _KEPT[fd] = forget
    return fd


def close_kept(fd: int) -> None:
    """Close ``fd``, which :func:`keep` noted (releasing its lock, as a crash would). Noted no
    more, it was closed at a fork: this is the child, going on past the fork in the block that
    held the lock, and the number may be a file of its own by now, which is left open."""
    if _KEPT.pop(fd, _CLOSED) is not _CLOSED:
        os.close(fd)


_CLOSED = object()


def _close_inherited() -> None:
    kept = list(_KEPT.items())
    _KEPT.clear()
    for fd, forget in kept:
        if forget is not None:
            forget()
        try:
            os.close(fd)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


def file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def path_id(path: Path) -> tuple[int, int] | None:
    """The (device, inode) that ``path`` names now, or None if it names nothing."""
    try:
        return file_id(os.stat(path, follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise io_error(exc, f"stat {path}") from exc


def names_same_file(fd: int, path: Path) -> bool:
    """True if ``path`` still names the file open as ``fd`` (not unlinked, not replaced)."""
    return path_id(path) == file_id(os.fstat(fd))


def open_exclusive(path: Path) -> int | None:
    """Open ``path`` (created if missing) and lock it exclusively without waiting.

    Returns the descriptor holding the lock, or None if another open file description holds
    it. The lock is re-checked against the path after it is taken: whoever unlinks a lock file
    does so while holding its lock, so an opener that raced with the unlink ends up holding an
    orphan inode, notices, and opens the new file instead.
    """
    for _ in range(16):
        fd = open_file(path, os.O_RDWR | os.O_CREAT)
        try:
            if not try_flock(fd, path):
                os.close(fd)
                return None
        except BaseException:
            os.close(fd)
            raise
        if names_same_file(fd, path):
            return fd
        os.close(fd)
    raise LockHeldError(f"cannot lock {path}: it keeps being replaced")


def probe_held(path: Path) -> bool | None:
    """True if a process holds an exclusive lock on ``path``, False if none does, None if the
    file does not exist. Takes and drops a shared lock, so probes never block each other."""
    try:
        fd = keep(open_file(path, os.O_RDONLY))
    except FileNotFoundError:
        return None
    try:
        return not try_flock(fd, path, shared=True)
    finally:
        close_kept(fd)  # closing drops the shared lock if we got it


# -- files -------------------------------------------------------------------------------------

def open_file(path: Path, flags: int) -> int:
    """:func:`fsutil.open_private`; FileNotFoundError as is, any other OSError as StoreIOError."""
    try:
        return open_private(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise io_error(exc, f"open {path}") from exc


def unlink_if_exists(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise io_error(exc, f"remove {path}") from exc


def list_dir(path: Path) -> list[str]:
    """Names in ``path``; [] if it does not exist."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise io_error(exc, f"list {path}") from exc
