"""Wait for a store to change: inotify on Linux, polling elsewhere and on network file systems.

A waiting consumer should wake when something it cares about changes, not on a timer: a new batch (the writer
rewrites ``STORE/checkpoint`` after every batch), a member joining or leaving (``consumers/<group>/``), a queue
lock it waits for released (that lock file), an offset reset (``config/consumerOffset.json`` replaced) or a
topic created or resized (``config/topics.epoch`` replaced). :class:`Watcher` is that wait, and nothing else: it
says *that* something changed, and which of the watched paths; what changed is for the caller to read.

Usage::

    from store.watch import Watcher, consumer_paths
    with Watcher(consumer_paths(store.layout, group)) as w:
        while running:
            if not do_work():
                w.wait(0.5)          # True: something changed (or w.wake() was called)

API
---
``Watcher(paths=(), *, backend="auto", poll_min=0.002, poll_max=0.05, lazy=False)``
    ``backend``: ``"auto"`` (inotify where it works, else polling; ``MQCTL_WATCH=poll`` forces polling),
    ``"inotify"`` (error if unavailable) or ``"poll"``. ``lazy``: set up nothing until the first :meth:`wait`
    (or :meth:`fileno`, :attr:`backend`), which then returns True at once with every path in :attr:`changed`
    (what changed before the watches existed is unknown): a consumer that drains a backlog and exits (``-e``)
    never waits, nor pays for inotify, whose ``close`` alone takes 10-20 ms (an RCU grace period).
``watch(path)``
    A directory: any entry in it created, deleted, renamed, written, or closed after being opened for writing
    (so a lock holder that dies, even by ``kill -9``, wakes the waiter: the kernel closes its descriptors). A
    file (or a path whose name has a suffix, like ``checkpoint`` or ``*.json``, that does not exist yet): writes
    to it, and it being created, replaced (atomic rename) or deleted. ``kind="replaced"``: a file only ever
    replaced by a rename onto its name (an atomic write) or deleted, and only that is seen (the directory's
    watch then leaves out writes and creations: the temporary files and journal beside the file cost no
    wake-up). A path that does not exist yet is watched from its nearest existing ancestor and armed when it
    appears (which counts as a change).
``unwatch(path)``, ``paths``
``wait(timeout=None) -> bool``
    Block until a watched path changes, :meth:`wake` is called, or ``timeout`` seconds pass (``None``: no
    limit). True unless it timed out. :attr:`changed` then holds the watched paths seen changing (empty after a
    bare :meth:`wake`). Events that arrived between two waits are not lost: the next wait returns at once.
    :attr:`woken` then says whether a :meth:`wake` came too (with changes or without): a caller that waits on
    through changes it does not care about must not wait on through a wake.
``wake()`` (alias ``set()``; ``clear()`` is a no-op)
    From any thread (or a signal handler): make the current or next :meth:`wait` return True. With
    ``set``/``clear``/``wait(timeout)`` a Watcher stands in for the ``threading.Event`` a wait loop already
    uses. ``wait_woken(timeout)``: a wait for a wake alone (a thread of this process), setting up no watch.
``fileno()``
    A descriptor that becomes readable on a change or a wake (inotify backend), for callers that multiplex with
    ``select``; then call ``wait(0)`` to consume it.
``descriptors()``, ``polls``
    Every descriptor to register with an event loop (``loop.add_reader``: the inotify one and the wake pipe's),
    and whether some path is polled all the same (then wake every ``poll_max`` s to look): an asyncio consumer
    waits this way, holding no thread.
``share(instance, release)``, ``started``
    Before the first wait: watch through an inotify instance shared with other watchers (an event loop's, read
    by the loop: ``store/client/aio_shared.py``), woken through the wake pipe (or, when ``notify`` is set, by
    calling it in the reading thread: the loop's waiter is then told without a round trip through the pipe);
    ``close`` calls ``release``.
``backend``, ``close()`` (once no other thread calls :meth:`wake`, as after a handler pool ends); a context manager.

How
---
* inotify through ``ctypes`` on libc (:mod:`store.inotify`). One watch per *directory* (files are watched
  through their parent with a name filter, so an atomic replace, which gives the name a new inode, is still
  seen). The waiting is ``poll(2)`` on the inotify descriptor and a wake pipe: zero CPU while nothing happens.
* Polling: ``stat`` of every watched path (mtime, ctime, size, inode, link count) at an interval that starts at
  ``poll_min`` and doubles up to ``poll_max`` while nothing changes; a snapshot taken within ``RACY_NS`` of the mtime
  it shows counts as one more change once that window has passed (two writes in one tick of the file system's clock
  leave the same mtime). On NFS, ``stat`` answers from the client's attribute cache: mount with ``actimeo=0`` (or
  ``noac``) for changes made on other machines to show at once. Used for every path when inotify is missing (not
  Linux, ``inotify_init1`` fails, the per-user instance limit is reached) and, even with inotify, for paths on file
  systems where inotify misses other machines' (or FUSE servers') changes: NFS, SMB/CIFS, 9p, FUSE, Ceph, AFS, Lustre,
  GFS2, OCFS2 (``statfs`` f_type). Polling cannot see a ``flock`` released by a process that dies without writing
  (nothing on disk changes), nor a write inside a watched directory to an existing file (the directory's mtime does
  not move): watch such files themselves, and keep a periodic re-check (the consumer's rebalance interval) as the
  backstop.
"""
from __future__ import annotations

import os
import select
import time
from pathlib import Path

from store.inotify import DIR_MASK, IN_DELETE_SELF, IN_IGNORED, IN_MOVE_SELF, REPLACED_MASK, Instance, is_remote_fs

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

__all__ = ["Watcher", "consumer_paths"]

def consumer_paths(layout: Any, group: str) -> list[tuple[Path, str]]:
    """What a waiting consumer of ``group`` watches, as ``(path, kind)`` pairs for
    :class:`Watcher`: new batches (the ``checkpoint`` file), members (``consumers/<group>/``),
    topics (``config/topics.epoch``, replaced on every topic change) and offsets
    (``config/consumerOffset.json``, replaced by a reset). Files, not ``config/`` itself, and
    watched as "replaced" (both are only ever written by an atomic rename): every offset
    commit also writes the journal, a lock file and temporary files there, which would wake
    every member of every group several times more. A member waiting for a queue lock watches
    that lock file too (the runtime adds it while it waits). ``layout`` is a :class:`store.layout.Layout`."""
    return [(layout.checkpoint, "file"), (layout.members_dir(group), "dir"),
            (layout.topics_epoch, "replaced"), (layout.consumer_offset_json, "replaced")]


# A stat snapshot taken this soon after the mtime it shows may miss a second write in the
# same clock tick of the file system (the mtime would not move): git's "racy clean" rule.
RACY_NS = 20_000_000


class _Snap:
    __slots__ = ("key", "taken_ns")

    def __init__(self, path: Path) -> None:
        self.taken_ns = time.time_ns()
        try:
            st = os.stat(path)
            self.key: tuple[int, ...] | None = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_nlink)
        except OSError:
            self.key = None

    def racy(self) -> bool:
        return self.key is not None and self.taken_ns - max(self.key[0], self.key[1]) < RACY_NS


class Watcher:
    """Waits until watched files or directories change (see the module docstring)."""

    def __init__(self, paths: Iterable[str | Path | tuple[str | Path, str]] = (), *, backend: str = "auto",
                 poll_min: float = 0.002, poll_max: float = 0.05, lazy: bool = False) -> None:
        if backend not in ("auto", "inotify", "poll"):
            raise ValueError(f"backend must be auto, inotify or poll, not {backend!r}")
        if backend == "auto" and os.environ.get("MQCTL_WATCH", "").lower() == "poll":
            backend = "poll"
        self.poll_min, self.poll_max, self._interval = poll_min, poll_max, poll_min
        self.changed: set[Path] = set()
        self.woken = False   # the last wait saw a wake() (see wait)
        self._inst: Instance | None = None        # inotify: our own, or shared (see share)
        self._release: Callable[[], None] | None = None   # set when shared: let go of it
        self._seen: set[Path] = set()              # paths events named since the last look
        self._lost: set[int] = set()               # wds whose directory went away
        self._closed = False
        # logical watches: path -> ("dir", None) | ("file" or "replaced", name); where armed
        self._kinds: dict[Path, tuple[str, str | None]] = {}
        self._armed: dict[Path, int] = {}          # path -> wd (inotify)
        self._pending: dict[Path, int] = {}        # not existing yet -> wd of the ancestor
        self._wds: dict[int, Path] = {}            # wd -> watched directory
        self._polled: dict[Path, _Snap] = {}
        self._dirty = False                        # a change seen outside wait (arming)
        self._pumping = False                      # our own look reads the shared instance
        self.notify: Callable[[], None] | None = None   # shared: told of events others read
        self._backend = "poll"
        self._poller = select.poll()
        self._rpipe, self._wpipe = os.pipe()
        for fd in (self._rpipe, self._wpipe):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        self._want = backend
        self._started = False
        for p in paths:
            if isinstance(p, tuple):
                self.watch(p[0], kind=p[1])
            else:
                self.watch(p)
        if not lazy:
            self._start()

    def share(self, instance: Instance, release: Callable[[], None]) -> None:
        """Watch through ``instance``, an inotify instance others watch through too (an event
        loop's, whose reader pumps it: ``store/client/aio_shared.py``),
        instead of one of our own; ``release`` is called once by :meth:`close`. Events for our
        paths then wake us through the wake pipe. Only before the watches are set up."""
        if self._started or self._closed or self._want == "poll":
            release()
            return
        self._inst, self._release = instance, release

    def _start(self) -> None:
        """Set up the kernel's watches (or the polling snapshots) of every path watched."""
        self._started = True
        if self._inst is None and self._want != "poll":
            try:
                self._inst = Instance()
            except OSError:
                if self._want == "inotify":
                    self._close_pipes()
                    raise
        self._backend = "inotify" if self._inst is not None else "poll"
        self._poller.register(self._rpipe, select.POLLIN)
        if self._inst is not None and self._release is None:
            self._poller.register(self._inst.fd, select.POLLIN)
        for p in self._kinds:
            self._arm(p)

    @property
    def started(self) -> bool:
        """Whether the watches are set up (by a first wait, :meth:`fileno` or :attr:`backend`)."""
        return self._started

    @property
    def backend(self) -> str:
        """``"inotify"`` or ``"poll"`` (a lazy watcher sets up its watches to know)."""
        if not self._started:
            self._start()
        return self._backend

    # -- the watch set ---------------------------------------------------------------------
    @property
    def paths(self) -> list[Path]:
        return list(self._kinds)

    def watch(self, path: str | Path, *, kind: str | None = None) -> None:
        """Watch ``path``: ``kind`` ``"dir"`` (its entries), ``"file"`` (that name, through
        its parent directory) or ``"replaced"`` (that name replaced or deleted, see the module
        docstring); by default what the path is now, a directory if it does not exist yet."""
        p = Path(path)
        if p in self._kinds:
            return
        if kind is None:
            kind = "file" if p.exists() and not p.is_dir() else "dir"
        if kind not in ("dir", "file", "replaced"):
            raise ValueError(f"kind must be dir, file or replaced, not {kind!r}")
        self._kinds[p] = ("dir", None) if kind == "dir" else (kind, p.name)
        if self._started:
            self._arm(p)

    def unwatch(self, path: str | Path) -> None:
        p = Path(path)
        self._kinds.pop(p, None)
        self._polled.pop(p, None)
        self._pending.pop(p, None)
        wd = self._armed.pop(p, None)
        if wd is not None:
            self._release_wd(wd)

    def _dir_of(self, p: Path) -> Path:
        kind, _ = self._kinds[p]
        return p if kind == "dir" else p.parent

    def _arm(self, p: Path) -> bool:
        """Arm ``p``: an inotify watch on its directory, or polling. False if it (its
        directory) does not exist yet: then its nearest existing ancestor is watched."""
        target = self._dir_of(p)
        if self._inst is None or is_remote_fs(target if target.exists() else _existing_ancestor(target)):
            self._polled[p] = _Snap(p)
            return True
        mask = REPLACED_MASK if self._kinds[p][0] == "replaced" else DIR_MASK
        for _ in range(8):
            wd = self._add_wd(target, mask)
            if wd >= 0:
                self._armed[p] = wd
                self._pending.pop(p, None)
                return True
            anc = _existing_ancestor(target)
            awd = self._add_wd(anc)
            if awd < 0:   # cannot watch at all (permissions, the watch limit): poll it
                self._polled[p] = _Snap(p)
                return True
            if not target.is_dir():   # else it appeared meanwhile: watch it after all
                self._pending[p] = awd
                return False
            self._release_wd(awd)
        self._polled[p] = _Snap(p)
        return True

    def _add_wd(self, d: Path, mask: int = DIR_MASK) -> int:
        assert self._inst is not None
        wd = self._inst.add(d, self, mask)
        if wd >= 0:
            self._wds[wd] = d
        return wd

    def _release_wd(self, wd: int) -> None:
        if wd in self._armed.values() or wd in self._pending.values():
            return
        self._wds.pop(wd, None)
        if self._inst is not None:
            self._inst.remove(wd, self)

    # -- waiting -------------------------------------------------------------------------------
    def wake(self) -> None:
        """Make the current (or next) :meth:`wait` return True. Thread- and signal-safe."""
        fd = self._wpipe
        if fd < 0:
            return   # closed
        try:
            os.write(fd, b"\0")
        except (BlockingIOError, OSError):
            pass   # the pipe is full (already woken) or closed

    # ``threading.Event`` spelling, so a Watcher can replace the Event a wait loop already
    # uses (``self.wake.set()`` from other threads, ``self.wake.wait(t)`` in the loop).
    set = wake

    def clear(self) -> None:
        """Nothing to do: :meth:`wait` consumes wakes and changes itself."""

    def fileno(self) -> int:
        if not self._started:
            self._start()
        return self._inst.fd if self._inst is not None and self._release is None else self._rpipe

    def descriptors(self) -> tuple[int, ...]:
        """Every descriptor that becomes readable on a change or a :meth:`wake`, for an event
        loop's readers (then call ``wait(0)`` to read what changed). Paths that are polled
        (see :attr:`polls`) change without one: look with ``wait(0)`` every ``poll_max`` s."""
        if not self._started:
            self._start()
        own = self._inst is not None and self._release is None
        return (self._rpipe, self._inst.fd) if own and self._inst is not None else (self._rpipe,)

    @property
    def polls(self) -> bool:
        """Whether some path is polled (no inotify for it): a change then wakes no descriptor."""
        return bool(self._polled)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a change, a :meth:`wake` or ``timeout`` s; True unless it timed out."""
        self.changed = set()
        self.woken = False
        if not self._started:
            # What changed before the watches existed cannot be known: say everything did,
            # so the caller looks once more now that a change from here on wakes it.
            self._start()
            self.changed = set(self._kinds)
            return True
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if self._dirty:
            self._dirty = False
            return True
        looked = False   # (a wait(0) still looks once: what is pending is read, not left)
        while True:
            if self._polled and self._poll_once():
                self._interval = self.poll_min
                return True
            if self._release is not None:   # shared: what the loop's reader has not read yet
                self._take_events()
                if self._pending:
                    self._retry_pending()
                if self.changed:
                    return True
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining == 0 and looked:
                return False
            looked = True
            slice_s = remaining
            if self._polled:
                slice_s = self._interval if remaining is None else min(self._interval, remaining)
            ready = self._poller.poll(None if slice_s is None else max(0, int(slice_s * 1000 + 0.999)))
            woke = False
            for fd, _ in ready:
                if fd == self._rpipe:
                    _drain(self._rpipe)
                    woke = self.woken = True
                else:
                    self._take_events()
            if self._release is not None:
                self._take_events()
            if self._pending:
                self._retry_pending()
            if woke or self.changed:
                if self.changed:
                    self._interval = self.poll_min
                return True
            if self._polled and not ready:
                self._interval = min(self._interval * 2, self.poll_max)

    def wait_woken(self, timeout: float | None) -> bool:
        """Wait for a :meth:`wake` alone: True if woken (a lazy watcher's next wait says every path changed)."""
        self.changed, self.woken = set(), False
        if self._rpipe >= 0:   # (poll, not select: the pipe may be above FD_SETSIZE)
            one = select.poll()
            one.register(self._rpipe, select.POLLIN)
            if one.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999))):
                _drain(self._rpipe)
                self.woken = True
        return self.woken

    def _poll_once(self) -> bool:
        for p, old in list(self._polled.items()):
            new = _Snap(p)
            if new.key != old.key:
                self._polled[p] = new
                self.changed.add(p)
            elif old.racy() and not new.racy():
                # the old snapshot could not tell a write in its clock tick: count one change
                self._polled[p] = new
                self.changed.add(p)
        return bool(self.changed)

    def _retry_pending(self) -> None:
        for p in list(self._pending):
            old_wd = self._pending[p]
            if self._arm(p):
                self.changed.add(p)   # it appeared: what is in it now is news to the caller
                self._release_wd(old_wd)

    def event(self, wd: int, mask: int, name: str) -> None:
        """An inotify event on our watches (``wd`` -1: queue overflow, anything may have changed)."""
        before = len(self._seen)
        if wd < 0:
            self._seen.update(self._kinds)
        else:
            if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                self._lost.add(wd)
            self._seen.update(self._match(wd, name, mask))
        if self._release is not None and not self._pumping and (
                (before == 0 and self._seen) or wd in self._lost or wd in self._pending.values()):
            # shared: the loop's reader (or another watcher's look) read it for us; our wait
            # looks now. Once: what is seen stays seen until that look. Not when we read it
            # ourselves: our wait takes it at once, and a wake left in the pipe would end the
            # next wait for nothing (an idle member's own lease renewals cost it two turns).
            if self.notify is not None:
                self.notify()   # (the event loop's waiter, told directly: no pipe round trip)
            else:
                self.wake()

    def _take_events(self) -> None:
        """Read what the instance has (for us and, shared, the other owners), then take what
        was seen into :attr:`changed` and watch again what went away."""
        if self._inst is not None:
            self._pumping = True
            try:
                self._inst.pump()
            finally:
                self._pumping = False
        self.changed |= self._seen
        self._seen = set()
        lost, self._lost = self._lost, set()
        for wd in lost:   # the directory went away (or moved): watch for it to come back
            self._wds.pop(wd, None)
            for p in [p for p, w in self._armed.items() if w == wd]:
                del self._armed[p]
                self.changed.add(p)
                self._arm(p)
            for p in [p for p, w in self._pending.items() if w == wd]:
                del self._pending[p]
                self._arm(p)

    def _match(self, wd: int, name: str, mask: int) -> list[Path]:
        hit = []
        for p, w in self._armed.items():
            if w != wd:
                continue
            kind, fname = self._kinds[p]
            if kind == "dir" or name == fname or (not name and mask & (IN_DELETE_SELF | IN_MOVE_SELF)):
                hit.append(p)
        # a pending path's ancestor changed: maybe the path appeared (checked by the caller)
        return hit

    # -- closing -------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        inst, self._inst = self._inst, None
        if inst is not None and self._release is not None:
            for wd in list(self._wds):   # our watches on the shared instance, not the others'
                inst.remove(wd, self)
            release, self._release = self._release, None
            release()
        elif inst is not None:
            inst.close()   # (off the caller's way: closing waits out an RCU grace period)
        elif self._release is not None:
            self._release()
        self._close_pipes()

    def _close_pipes(self) -> None:
        fds = (self._rpipe, self._wpipe)
        self._rpipe = self._wpipe = -1   # wake() after close() is a no-op
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _existing_ancestor(p: Path) -> Path:
    for a in [p, *p.parents]:
        if a.is_dir():
            return a
    return Path("/")


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass
