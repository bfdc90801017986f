"""The store's write lock: one writer at a time, held for one batch (never per message).

An exclusive ``flock`` on the store directory itself, then an exclusive flock on
``STORE/lock`` (the lock portalocker takes on POSIX; ``flock.lock_exclusive`` takes it
without importing portalocker, which costs 25-80 ms of every command's start-up).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from store.errors import io_error
from store.flock import lock_exclusive, unlock

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


class WriteLock:
    """The store's exclusive write lock, re-entrant per Store handle: an exclusive flock on
    the store directory itself, then an exclusive flock on ``STORE/lock`` (the lock
    portalocker takes on POSIX; ``flock.lock_exclusive`` takes it without importing
    portalocker, which costs 25-80 ms of every command's start-up).

    The directory lock is what cannot be defeated by deleting ``STORE/lock`` while a writer
    holds it (a second writer would create a new file and lock that one); the file lock is
    kept so that writers of earlier versions, which take only it, still exclude and are
    excluded. Both are always taken in this order, so two writers cannot deadlock.

    A flock belongs to the open file description, so every thread of this handle would
    "hold" it at once: a thread-level re-entrant lock, taken first and held with the flocks,
    makes the threads of one process take turns too (a send beside a reader's repair)."""

    def __init__(self, root: Path, lock_file: Path) -> None:
        self.root = root
        self.lock_file = lock_file
        self.depth = 0   # (of the thread holding ``_turn``: only it changes it)
        self._turn = threading.RLock()
        self._dir_fd: int | None = None
        self._fh: Any = None
        self._dir_locked = False
        self._pid = os.getpid()

    def __enter__(self) -> None:
        if self._pid != os.getpid():
            # A forked child: its descriptors share the parent's open files, and a flock is
            # held per open file, so both would hold the lock and write over each other's
            # records. The child opens its own. It closes its copies of the parent's (never
            # unlocks them: that would release the parent's lock): a flock lives while any
            # descriptor of its open file does, so a kept copy would hold the store locked
            # for the child's lifetime after the parent is killed in a batch.
            self.close()
            self.depth, self._dir_locked = 0, False
            self._turn = threading.RLock()   # (a parent's thread may have held it at the fork)
            self._pid = os.getpid()
        self._turn.acquire()
        try:
            self._take_flocks()
        except BaseException:
            self._turn.release()
            raise
        self.depth += 1

    def _take_flocks(self) -> None:
        if self.depth == 0:
            import fcntl
            if self._dir_fd is None:
                try:
                    self._dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError as exc:
                    raise io_error(exc, f"open {self.root}") from exc
            dir_fd = self._dir_fd
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX)
                dir_locked = True
            except OSError:   # a file system without flock on directories: the file lock alone
                dir_locked = False
            try:
                if self._fh is None:
                    try:
                        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    except OSError as exc:
                        raise io_error(exc, f"open {self.lock_file}") from exc
                    self._fh = os.fdopen(fd, "r+b")
                lock_exclusive(self._fh)
            except BaseException:
                if dir_locked:
                    fcntl.flock(dir_fd, fcntl.LOCK_UN)
                raise
            self._dir_locked = dir_locked

    def __exit__(self, *exc: object) -> None:
        try:
            self.depth -= 1
            if self.depth == 0:
                import fcntl
                unlock(self._fh)
                if self._dir_locked and self._dir_fd is not None:
                    fcntl.flock(self._dir_fd, fcntl.LOCK_UN)
                    self._dir_locked = False
        finally:
            self._turn.release()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

