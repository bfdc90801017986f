"""A consumer group's mutex: the one lock that serialises changes to the group's queue lock
files (``store/client/qlocks.py``).

File (under the store root)::

    locks/<group>/.mutex.lock            empty, never deleted: only its ``flock`` matters

A lock file is only ever unlinked or replaced while the group's mutex (an exclusive ``flock``
on ``.mutex.lock``) is held, and every acquisition takes the OS lock under that same mutex and
then checks that the path still names the locked file. That makes "is it held? is its record
expired? replace it" one atomic step with respect to every other acquirer, breaker, renewal and
release, so two contenders can never both break the same stuck holder, and a renewal can never
slip between a breaker's check and its replace (a renewal also runs under the mutex and, once
the file is replaced, reports the lock lost). A clean release unlinks its file (under the
mutex, still holding the OS lock) so the table only shows what is held or was left by a crash.
The mutex is held for a few system calls; waiting for it is bounded (``MUTEX_TIMEOUT``), so a
process stopped *inside* it delays the group's lock changes by that long and then they fail
softly (no acquisition, a deferred renewal) instead of hanging.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from store.flock import close_kept, keep, open_file, wait_flock
from store.fsutil import ensure_dir
from store.layout import Layout

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterator

MUTEX_TIMEOUT = 5.0       # seconds to wait for a group's mutex before giving up softly


@contextmanager
def group_mutex(layout: Layout, group: str, timeout: float = MUTEX_TIMEOUT) -> Iterator[None]:
    """Hold ``locks/<group>/.mutex.lock`` exclusively; LockHeldError after ``timeout`` s.

    The file is never deleted, so unlike a queue lock it needs no identity check.
    """
    path = layout.group_mutex(group)
    ensure_dir(path.parent, durable=False)
    fd = keep(open_file(path, os.O_RDWR | os.O_CREAT))   # (a child forked meanwhile closes its copy)
    try:
        wait_flock(fd, path, timeout)
        yield
    finally:
        close_kept(fd)
