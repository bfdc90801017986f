"""Linux's inotify, through ``ctypes`` on libc, for :mod:`store.watch`.

``inotify_init1``, ``inotify_add_watch`` and ``inotify_rm_watch``: the standard library has no
binding, and the three calls are all we need; a dependency (``inotify_simple``, ``watchdog``)
would add an install and, for watchdog, a thread and 10+ ms of imports, for the same three
syscalls. ``statfs`` tells the file systems where inotify misses other machines' changes.
"""
from __future__ import annotations

import functools
import os
import struct
import sys
from pathlib import Path
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
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000

# What a directory watch listens to. Not IN_ACCESS/IN_OPEN/IN_CLOSE_NOWRITE: readers (our own
# scans, lock probes that open read-only) must not wake anyone, or waiters would wake each
# other in a loop.
DIR_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
            | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
EVENT = struct.Struct("iIII")

# statfs f_type of file systems whose inotify misses remote changes (linux/magic.h).
REMOTE_FS_MAGIC = {
    0x6969: "nfs", 0x517B: "smb", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x01021997: "9p",
    0x65735546: "fuse", 0x00C36400: "ceph", 0x5346414F: "afs", 0x0BD00BD0: "lustre",
    0x01161970: "gfs2", 0x7461636F: "ocfs2",
}

@functools.cache
def load_libc() -> Any:
    """libc with the inotify calls' argument types set, or False where there is none (once
    per process: the answer does not change)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            return libc
        except (OSError, AttributeError, ImportError):
            pass
    return False


def inotify_available() -> bool:
    """True if this system has inotify (Linux with a libc that exports it)."""
    return bool(load_libc())


def is_remote_fs(path: str | Path) -> str | None:
    """The name of the network (or FUSE) file system ``path`` is on, or None if it is local or
    cannot be told. ``path`` must exist."""
    libc = load_libc()
    if not libc:
        return None
    import ctypes
    buf = ctypes.create_string_buffer(256)   # struct statfs: f_type is the first word
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    f_type = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    return REMOTE_FS_MAGIC.get(f_type)
