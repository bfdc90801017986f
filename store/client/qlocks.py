"""Queue locks: the broker's orderly-consumption lock table, kept as locked files.

RocketMQ's broker keeps ``group → queue → (clientId, lastUpdate)`` in memory and lets an entry
expire 60 s after its last renewal; clients renew every 20 s and stop consuming a queue 30 s
after their last successful renewal, so a client always gives up before the broker lets someone
else in (reference §6.1, §6.2). There is no broker here, so the table is a directory and the
truth about who holds a queue is an OS file lock (``flock`` through portalocker):

* the OS lock is taken non-blocking and exclusively on the queue's lock file and held, through
  one open file description, for as long as the consumer owns the queue;
* the moment the holder dies (even ``kill -9``) the kernel drops the lock, so a crashed holder
  never makes anyone wait for a lease;
* the lease only matters for a holder that is alive but stuck (stopped, swapped out, hung): when
  its record was not renewed for 60 s, a contender may *break* the lock (unlink the file, create
  and lock a new one); the stuck holder's :meth:`QueueLock.is_valid` then fails.

Files (under the store root)::

    locks/<group>/.mutex.lock            the group's mutex (group_mutex.py)
    locks/<group>/<topic>/<queueId>.lock one queue's lock file: the OS lock + the record

The record is written into the lock file itself by its holder (when it takes the lock and at
every renewal): one JSON object, a newline, then spaces up to the file's previous length (so a
rewrite is a single ``pwrite`` that never leaves an older, longer record's tail behind)::

    {"group": "G", "topic": "T", "queueId": 3, "clientId": "host@1234", "pid": 1234,
     "host": "host", "acquiredAt": 1700000000000, "renewedAt": 1700000020000,
     "expiresAt": 1700000080000}

Times are ms since the epoch; ``expiresAt = renewedAt + 60 s`` (the store-side lease). The
record is informational: the OS lock is the truth. A record that does not parse (torn read,
damage) reads as an unknown holder, never an expired one (garbage can not let a contender in),
and is rewritten at the next renewal. Records are not fsynced: after a machine crash no process
holds any lock, whatever the files say.

Path changes are serialised by the group's mutex (``store/client/group_mutex.py``): a lock file
is only unlinked or replaced, and every acquisition, renewal and release runs, under it
(``is_valid`` and ``locktable.list_locks`` never take it).

Probes (``locktable.list_locks``' ``alive``) take a *shared* non-blocking lock and drop it at once, so two
probes never mistake each other for a holder; one can make a concurrent ``try_acquire`` fail
once (consumers retry at the next rebalance).

Locks are ``flock`` locks, of an open file description, not of a process: two :class:`QueueLock`
objects of one process exclude each other; a handler never inherits one (close-on-exec), a forked
child closes its copies (``flock.keep``). Primitives (``try_flock``, ``open_exclusive``, ...): ``flock.py``.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from store.client.group_mutex import MUTEX_TIMEOUT, group_mutex
from store.client.leases import CLIENT_LEASE_MS, STORE_LEASE_MS
from store.errors import LockHeldError, StoreIOError, UsageError, io_error
from store.errors import warn as say_warning
from store.flock import (
    close_kept,
    file_id,
    keep,
    names_same_file,
    now_ms,
    open_exclusive,
    open_file,
    path_id,
    try_flock,
    unlink_if_exists,
)
from store.fsutil import ensure_dir
from store.layout import Layout
from store.names import validate_any_topic, validate_client_id, validate_group

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

# (the leases, and what scales them for tests: leases.py)

_MAX_RECORD = 64 * 1024


# -- records ---------------------------------------------------------------------------------

def read_record(fd: int) -> dict[str, Any] | None:
    """The record in an open lock file, or None if it is missing or garbage."""
    try:
        raw = os.pread(fd, _MAX_RECORD, 0)
        obj = json.loads(raw.decode("utf-8").strip())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def int_or_none(value: Any) -> int | None:   # (a record's field; also the lock table's, locktable.py)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def str_or_none(value: Any) -> str | None:   # (a record's field; also the lock table's)
    return value if isinstance(value, str) else None


def _record_expired(record: dict[str, Any] | None, at_ms: int) -> bool:
    expires = int_or_none((record or {}).get("expiresAt"))
    return expires is not None and expires < at_ms


def _write_record(fd: int, path: Path, record: dict[str, Any]) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        size = os.fstat(fd).st_size
        # Pad to the old length instead of truncating: one pwrite, no moment with an empty file.
        os.pwrite(fd, data.ljust(size, b" "), 0)
    except OSError as exc:
        raise io_error(exc, f"write {path}") from exc


# -- one queue lock --------------------------------------------------------------------------

class QueueLock:
    """The lock one consumer holds on one queue of one group (orderly consumption).

    Usage: ``try_acquire()``; then ``renew()`` (or :func:`renew_all`) every 20 s while batches
    are handed out (RocketMQ's lockInterval), and at least every 40 s (well within the store
    lease) while idle; ``is_valid()``
    before handing out every batch; ``release()`` when the queue is dropped or at shutdown.
    As a context manager it only guarantees the release (acquiring can fail, so it is left to
    the caller). Thread-safe: a renewal timer may run beside the consuming thread.
    """

    def __init__(self, layout: Layout, group: str, topic: str, queue_id: int, client_id: str, *,
                 warn: Callable[[str], None] | None = None, lease_ms: int = STORE_LEASE_MS,
                 client_lease_ms: int = CLIENT_LEASE_MS,
                 mutex_timeout: float = MUTEX_TIMEOUT) -> None:
        if not isinstance(queue_id, int) or queue_id < 0:
            raise UsageError(f"invalid queue id {queue_id!r}")
        if not 0 < client_lease_ms < lease_ms:
            # The holder must stop before anyone may break in, as in RocketMQ (30 s < 60 s).
            raise UsageError("the client lease must be positive and shorter than the store lease")
        self.layout = layout
        self.group = validate_group(group)
        self.topic = validate_any_topic(topic)
        self.queue_id = queue_id
        self.client_id = validate_client_id(client_id)
        self.path = layout.queue_lock(group, topic, queue_id)
        self.lease_ms = lease_ms
        self.client_lease_ms = client_lease_ms
        self.mutex_timeout = mutex_timeout
        self.warn = warn or say_warning   # (the library's channel: store.errors)
        self._guard = threading.RLock()
        self._fd: int | None = None
        self._id: tuple[int, int] | None = None
        self._identity_at = 0   # when the path was last seen to name the locked file (ms)
        self.acquired_at: int | None = None
        self.renewed_at: int | None = None

    def __repr__(self) -> str:
        state = "held" if self._fd is not None else "not held"
        return f"QueueLock({self.group}/{self.topic}/{self.queue_id} by {self.client_id}: {state})"

    @property
    def held(self) -> bool:
        """True from a successful acquisition until release or a detected loss."""
        return self._fd is not None

    # -- acquisition

    def try_acquire(self) -> bool:
        """Take the queue without waiting; True if this client holds it now.

        A lock held by someone whose record expired (not renewed for the store lease) is broken
        and taken over. Holding it already counts as a renewal.
        """
        with self._guard:
            if self._fd is not None:
                return self.renew()
            try:
                with group_mutex(self.layout, self.group, self.mutex_timeout):
                    fd = self._acquire_locked()
                    if fd is None:
                        return False
                    # The record is written before the mutex is let go: until then the file
                    # may still carry a dead holder's expired record, which a contender would
                    # take as licence to break our brand-new lock.
                    self._take(fd)
                    return True
            except LockHeldError as exc:
                self.warn(f"cannot lock queue {self._name()}: {exc}")
                return False

    def _acquire_locked(self) -> int | None:
        # Called under the group mutex. A held lock is seen through a read-only descriptor
        # first: closing it tells no watcher of the file anything, where a failed attempt
        # through a writable one would (a member waiting for the queue watches the file, and
        # would be woken by its own attempts).
        ensure_dir(self.path.parent, durable=False)
        try:
            fd = open_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return open_exclusive(self.path)  # released (or never taken)
        try:
            record = read_record(fd)
            still_held = not try_flock(fd, self.path, shared=True)
        finally:
            os.close(fd)
        if still_held and not _record_expired(record, now_ms()):
            return None
        if still_held:
            rec = record or {}
            idle = (now_ms() - (int_or_none(rec.get("renewedAt")) or 0)) / 1000
            self.warn(f"breaking the lock on queue {self._name()}: held by {str_or_none(rec.get('clientId'))} "
                      f"(pid {int_or_none(rec.get('pid'))}) but not renewed for {idle:.1f} s")
            # The stuck holder keeps its OS lock on the old inode; unlinking the name is what
            # takes the queue away from it (its is_valid compares inodes).
            unlink_if_exists(self.path)
        return open_exclusive(self.path)

    def _take(self, fd: int) -> None:
        now = now_ms()
        self._fd, self._id = keep(fd, self._forget), file_id(os.fstat(fd))
        self._identity_at = 0
        self.acquired_at = self.renewed_at = now
        try:
            _write_record(fd, self.path, self._record(now))
        except StoreIOError:
            self._close()
            raise

    def _record(self, renewed_at: int) -> dict[str, Any]:
        return {
            "group": self.group, "topic": self.topic, "queueId": self.queue_id,
            "clientId": self.client_id, "pid": os.getpid(), "host": os.uname().nodename,
            "acquiredAt": self.acquired_at, "renewedAt": renewed_at,
            "expiresAt": renewed_at + self.lease_ms,
        }

    # -- while held

    def share_fd(self) -> int:
        """A ``dup`` of the held lock file's descriptor: the ``flock`` belongs to its open file
        description, so whoever holds the copy (a handler process) keeps the queue locked until it
        closes it or exits, even if this process dies first. The caller closes it."""
        with self._guard:
            if self._fd is None:
                raise OSError(f"queue lock {self._name()} is not held")
            return os.dup(self._fd)

    def renew(self) -> bool:
        """Extend the lease; False if the lock is lost (then the queue must be dropped).

        If the group's mutex stays busy the renewal is skipped with a warning and True is
        returned when the lock is still ours: the lease keeps running down, and ``is_valid``
        turns False on its own if renewals keep failing.
        """
        with self._guard:
            if self._fd is None:
                return False
            try:
                with group_mutex(self.layout, self.group, self.mutex_timeout):
                    return self._renew_locked()
            except LockHeldError as exc:
                self.warn(f"could not renew the lock on queue {self._name()}: {exc}")
                return self._check_identity()

    def renew_under_mutex(self) -> bool:
        """:meth:`renew` for a caller holding the group's mutex (:func:`renew_all`)."""
        with self._guard:
            return self._fd is not None and self._renew_locked()

    def still_named(self) -> bool:
        """Held, and its path still names the file it locked (no lease check: a renewal without the mutex)."""
        with self._guard:
            return self._fd is not None and self._check_identity()

    def _renew_locked(self) -> bool:
        if not self._check_identity():
            return False
        now = now_ms()
        if self._fd is None:
            return False
        _write_record(self._fd, self.path, self._record(now))
        self.renewed_at = now
        return True

    def is_valid(self, identity_age_ms: int = 0) -> bool:
        """May the holder hand out a batch now? Call before every batch.

        True only while this object holds the OS lock, the path still names the file it locked
        (a deleted or replaced file is reported through ``warn`` and ends the ownership), and
        the last renewal is younger than the client lease. ``identity_age_ms``: trust a path
        check that young (a concurrent consumer hands out one message per batch and need not
        stat the lock file for each; an orderly one checks every batch).
        """
        with self._guard:
            if self._fd is None:
                return False
            now = now_ms()
            if identity_age_ms <= 0 or now - self._identity_at > identity_age_ms:
                if not self._check_identity():
                    return False
                self._identity_at = now
            return self.renewed_at is not None and now < self.renewed_at + self.client_lease_ms

    def _check_identity(self) -> bool:
        # A lock whose file was unlinked (mqctl unlock --force) or replaced (broken as stuck)
        # is no longer the queue's lock: someone else may hold the new file right now.
        current = path_id(self.path)
        if current == self._id:
            return True
        how = "deleted" if current is None else "replaced by another process"
        self.warn(f"lost the lock on queue {self._name()}: {self.path} was {how}")
        self._close()
        return False

    # -- giving it up

    def release(self) -> None:
        """Give the queue up and remove its lock file. Safe to call when not held."""
        with self._guard:
            if self._fd is None:
                return
            try:
                with group_mutex(self.layout, self.group, self.mutex_timeout):
                    if names_same_file(self._fd, self.path):
                        unlink_if_exists(self.path)  # while still holding the OS lock
            except LockHeldError as exc:
                # Closing still drops the OS lock; the file stays behind as a stale entry.
                self.warn(f"released queue {self._name()} without removing its file: {exc}")
            finally:
                self._close()

    def release_under_mutex(self) -> None:
        """:meth:`release` for a caller holding the group's mutex (:func:`release_all`)."""
        with self._guard:
            if self._fd is None:
                return
            try:
                if names_same_file(self._fd, self.path):
                    unlink_if_exists(self.path)  # while still holding the OS lock
            finally:
                self._close()

    def _close(self) -> None:
        if self._fd is not None:
            close_kept(self._fd)
        self._fd = self._id = None

    def _forget(self) -> None:   # (a forked child: the parent's lock, not to release; flock.keep)
        self._fd, self._id, self._guard = None, None, threading.RLock()   # (held by a parent's thread?)

    def _name(self) -> str:
        return f"{self.topic}:{self.queue_id} of group {self.group}"

    def __enter__(self) -> QueueLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def renew_all(locks: list[QueueLock]) -> list[QueueLock]:
    """Renew a member's locks (of one group) under one take of the group's mutex; returns
    those found lost. A busy mutex: as :meth:`QueueLock.renew`, a warning, the lost ones."""
    if not locks:
        return []
    first = locks[0]
    try:
        with group_mutex(first.layout, first.group, first.mutex_timeout):
            return [lock for lock in locks if not lock.renew_under_mutex()]
    except LockHeldError as exc:
        first.warn(f"could not renew the queue locks of group {first.group}: {exc}")
        return [lock for lock in locks if not lock.still_named()]


def release_all(locks: list[QueueLock]) -> None:
    """Release a member's locks (of one group) under one take of the group's mutex, each as
    :meth:`QueueLock.release` (a member leaving: one take, not one per queue). A busy mutex:
    as :meth:`QueueLock.release`, a warning, and each closed with its file left behind."""
    held = [lock for lock in locks if lock.held]
    if not held:
        return
    first = held[0]
    try:
        with group_mutex(first.layout, first.group, first.mutex_timeout):
            for lock in held:
                lock.release_under_mutex()
    except LockHeldError as exc:
        first.warn(f"released the queues of group {first.group} without removing their files: {exc}")
    finally:
        for lock in held:
            with lock._guard:
                lock._close()   # (what a failure above left held: closing drops the OS lock)
