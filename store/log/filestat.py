"""Looks at a file that a writer takes before every batch, without an ``os.stat_result``.

:func:`links_size` is ``(st_nlink, st_size)`` of ``os.fstat(fd)``: whether a file a writer
keeps open is still linked (recovery or a deletion replaces files by name) and how long it is.
:func:`stamp` is ``(st_ino, st_mtime_ns, st_size)`` of ``os.stat(path)``, None when it does
not exist: whether a config file changed since it was read. A single send took five of them;
an ``os.stat_result`` (19 fields, three of them nanosecond ints) cost ~1.5 µs of a ~2 µs
``os.fstat`` on a loaded machine. The functions below are their definitions; where the package
was built with ``nativecheck.c`` its ``links_size`` and ``stat_stamp`` make the same tuples
in C (tests/log/test_filestat.py compares them).

:func:`untimed` is ``(st_nlink, st_size, st_ino)`` of a descriptor or a path, asked of the
kernel without any timestamp (``statx``): the look at every file a ``--flush sync`` writer
overwrites, the writer's own and its readers'. On Linux >= 6.13 a look that asks for a
timestamp (``fstat``, ``stat``) makes the file's next write take a fine-grained one and dirty
its inode, and the ``fdatasync`` of an overwrite of a preallocated segment then waits for a
journal commit as an append's does (commitlog.py). Without the C module: ``os.fstat`` /
``os.stat``, correct but not untimed.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable


def links_size_py(fd: int) -> tuple[int, int]:
    """``(st_nlink, st_size)`` of ``os.fstat(fd)`` (OSError as it raises)."""
    st = os.fstat(fd)
    return st.st_nlink, st.st_size


def stamp_py(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """``(st_ino, st_mtime_ns, st_size)`` of ``os.stat(path)``; None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def untimed_py(target: int | str | os.PathLike[str]) -> tuple[int, int, int]:
    """``(st_nlink, st_size, st_ino)`` of ``os.fstat(target)`` (an int) or ``os.stat(target)``."""
    st = os.fstat(target) if isinstance(target, int) else os.stat(target)
    return st.st_nlink, st.st_size, st.st_ino


links_size: Callable[[int], tuple[int, int]] = links_size_py
stamp: Callable[[str | os.PathLike[str]], tuple[int, int, int] | None] = stamp_py
untimed: Callable[[int | str | os.PathLike[str]], tuple[int, int, int]] = untimed_py
try:
    from store.log import nativecheck
    # (a build of an older source lacks them: the Python ones then)
    links_size = getattr(nativecheck, "links_size", links_size_py)
    stamp = getattr(nativecheck, "stat_stamp", stamp_py)
    untimed = getattr(nativecheck, "untimed_stat", untimed_py)
except ImportError:
    pass
