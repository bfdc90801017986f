"""Linux's inotify, for :mod:`store.watch`.

``inotify_init1``, ``inotify_add_watch`` and ``inotify_rm_watch``: the standard library has no
binding, and the three calls are all we need; a dependency (``inotify_simple``, ``watchdog``)
would add an install and, for watchdog, a thread and 10+ ms of imports, for the same three
syscalls. ``statfs`` tells the file systems where inotify misses other machines' changes. The
calls are the C module's (``store/log/nativecheck.c``) where it was built, else libc's through
``ctypes`` (whose import costs a consumer's first turn 3-5 ms).
"""
from __future__ import annotations

import errno
import functools
import os
import struct
import sys
from pathlib import Path

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

# <sys/inotify.h>
IN_ACCESS = 0x001
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_MASK_ADD = 0x20000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000

# What a directory watch listens to. Not IN_ACCESS/IN_OPEN/IN_CLOSE_NOWRITE: readers (our own
# scans, lock probes that open read-only) must not wake anyone, or waiters would wake each
# other in a loop.
DIR_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
            | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
# What a directory watch listens to when all that is watched in it are files only ever replaced
# by a rename onto their name, or deleted (``store.watch``'s "replaced" kind: ``config/``'s
# ``consumerOffset.json`` and ``topics.epoch``). Every offset commit writes the journal and a
# lock file there, and a snapshot of the table two temporary files: with this mask the kernel
# queues only the renames of a snapshot (the ``.bak`` and the table), and none of the writes.
REPLACED_MASK = IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
EVENT = struct.Struct("iIII")

# statfs f_type of file systems whose inotify misses remote changes (linux/magic.h).
REMOTE_FS_MAGIC = {
    0x6969: "nfs", 0x517B: "smb", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x01021997: "9p",
    0x65735546: "fuse", 0x00C36400: "ceph", 0x5346414F: "afs", 0x0BD00BD0: "lustre",
    0x01161970: "gfs2", 0x7461636F: "ocfs2",
}


def is_remote_fs(path: str | Path) -> str | None:
    """The name of the network (or FUSE) file system ``path`` is on, or None if it is local or
    cannot be told. ``path`` must exist."""
    sys_calls = calls()
    if not sys_calls:
        return None
    return REMOTE_FS_MAGIC.get(sys_calls.fs_type(os.fsencode(path)))


class LibcCalls:
    """The calls of :func:`calls` through ``ctypes`` on libc (the C module not built)."""

    def __init__(self) -> None:
        import ctypes
        self._ctypes = ctypes
        libc = self._libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]

    def inotify_open(self) -> int:
        fd: int = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = self._ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def inotify_add(self, fd: int, path: bytes, mask: int) -> int:
        wd: int = self._libc.inotify_add_watch(fd, path, mask)
        return wd

    def inotify_rm(self, fd: int, wd: int) -> None:
        self._libc.inotify_rm_watch(fd, wd)

    def fs_type(self, path: bytes) -> int:
        buf = self._ctypes.create_string_buffer(256)   # struct statfs: f_type is the first word
        if self._libc.statfs(path, buf) != 0:
            return -1
        return int(self._ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF)


@functools.cache
def calls() -> Any:
    """``inotify_open``, ``inotify_add``, ``inotify_rm`` and ``fs_type`` (``nativecheck.c``
    says what each takes), or False where there are none (once per process: the answer does
    not change)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        from store.log import nativecheck
        if hasattr(nativecheck, "inotify_open"):   # (a build of an older source lacks them)
            return nativecheck
    except ImportError:
        pass
    try:
        return LibcCalls()
    except (OSError, AttributeError, ImportError):
        return False


def inotify_available() -> bool:
    """True if this system has inotify (Linux with a libc that exports it)."""
    return bool(calls())


class Instance:
    """One inotify descriptor and who watches what through it: a :class:`store.watch.Watcher`
    has one of its own, or shares its event loop's (``store/client/aio_shared.py``: the kernel
    allows 128 instances per user, not one per asyncio consumer). Watching a directory twice
    on one instance gives the same watch descriptor, so each is kept for the set of its
    owners and removed from the kernel when the last one lets go; :meth:`pump` reads what
    arrived and hands each event to the owners of its watch (``owner.event(wd, mask, name)``;
    a queue overflow goes to every owner, with ``wd`` -1)."""

    def __init__(self) -> None:
        sys_calls = calls()
        try:
            if not sys_calls:
                raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
            fd: int = sys_calls.inotify_open()
        except OSError as exc:
            raise OSError(exc.errno, f"inotify unavailable: {exc.strerror}") from None
        self.fd = fd
        self._owners: dict[int, set[Any]] = {}

    def add(self, directory: Path, owner: Any, mask: int = DIR_MASK) -> int:
        """Watch ``directory`` for ``owner``, for the events of ``mask``; its watch descriptor,
        or -1 (errno unread). The kernel keeps one mask per directory and instance: ``mask``
        is added to what it listens to already (for other owners, or other paths), never
        narrows it."""
        wd: int = calls().inotify_add(self.fd, os.fsencode(directory), mask | IN_MASK_ADD)
        if wd >= 0:
            self._owners.setdefault(wd, set()).add(owner)
        return wd

    def remove(self, wd: int, owner: Any) -> None:
        owners = self._owners.get(wd)
        if owners is None:
            return
        owners.discard(owner)
        if not owners:
            del self._owners[wd]
            if self.fd >= 0:
                calls().inotify_rm(self.fd, wd)

    def pump(self) -> None:
        """Read every event waiting (never blocks) and hand each to its watch's owners."""
        data = b""
        while self.fd >= 0:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not chunk:
                break
            data += chunk
        pos, n = 0, len(data)
        while pos + EVENT.size <= n:
            wd, mask, _cookie, length = EVENT.unpack_from(data, pos)
            name = os.fsdecode(data[pos + EVENT.size:pos + EVENT.size + length].rstrip(b"\0"))
            pos += EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                owners = set().union(*self._owners.values()) if self._owners else set()
                for owner in owners:
                    owner.event(-1, mask, name)
                continue
            for owner in list(self._owners.get(wd, ())):
                owner.event(wd, mask, name)
            if mask & IN_IGNORED:   # the kernel dropped the watch (its directory went away)
                self._owners.pop(wd, None)

    def close(self) -> None:
        """Drop every watch. Closing an inotify descriptor waits out an RCU grace period
        (10-20 ms): a thread of its own does it, off the caller's way."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            self._owners.clear()
            import threading
            threading.Thread(target=os.close, args=(fd,), name="inotify-close", daemon=True).start()
